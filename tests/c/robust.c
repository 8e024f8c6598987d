/* Programs that do what real programs do and tracers get wrong (tests/tests/robust.rs).
 *
 *   robust siglj N      N timeouts: SIGALRM's handler siglongjmps out of whatever runs, hooks
 *                       included; then 20 x after(20)
 *   robust ljloop N     a server loop: N errors longjmp from 11 frames deep back to main's loop
 *                       (main never returns meanwhile), then 100 x handle() = fib(15) + i
 *   robust deeplj       recursion 3000 deep (beyond the shadow stack), longjmp to main, then
 *                       20 x after(20)
 *   robust cancel N     N threads spinning in instrumented code, cancelled asynchronously (the
 *                       cancellation lands inside hooks), then 4 threads x fib(20)
 *   robust vforkexit N  N vfork children that call exit() (not _exit), then 20 x after(20),
 *                       then 300 ms of sleep
 *   robust rawfork N    N children made by _Fork() (no atfork handlers) that call exit();
 *                       prints how long they took
 *   robust busy MS      fib(15) again and again for MS milliseconds (a server's steady work)
 *
 * Every mode prints one line to stdout; expected call counts are in the test.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
static long after(int n) { return n < 2 ? n : after(n - 1) + after(n - 2); }

static long twenty_afters(void) {
  long s = 0;
  for (int i = 0; i < 20; i++) s += after(20);
  return s;
}

/* siglj */
static sigjmp_buf alarm_env;
static void on_alarm(int s) { (void)s; siglongjmp(alarm_env, 1); }

static int siglj(int timeouts) {
  signal(SIGALRM, on_alarm);
  volatile int hit = 0;
  for (volatile int i = 0; i < timeouts; i++) {
    if (sigsetjmp(alarm_env, 1) == 0) {
      struct itimerval it = {{0, 0}, {0, 1000}};
      setitimer(ITIMER_REAL, &it, 0);
      for (;;) fib(22);
    }
    hit++;
  }
  printf("timeouts=%d s=%ld\n", hit, twenty_afters());
  return 0;
}

/* ljloop */
static jmp_buf loop_env;
static int fail_below(int n) {
  if (n == 0) longjmp(loop_env, 1);
  return fail_below(n - 1) + 1;
}
static long handle(int i) { return fib(15) + i; }

static int ljloop(int errors) {
  volatile int i = 0;
  volatile long s = 0;
  setjmp(loop_env);
  while (i < errors + 100) {
    int k = i++;
    if (k < errors) fail_below(10);
    s += handle(k);
  }
  printf("s=%ld\n", s);
  return 0;
}

/* deeplj */
static jmp_buf deep_env;
static int deep(int n) {
  if (n == 0) longjmp(deep_env, 1);
  return deep(n - 1) + 1;
}

static int deeplj(void) {
  if (setjmp(deep_env) == 0) deep(3000);
  printf("s=%ld\n", twenty_afters());
  return 0;
}

/* cancel */
static long spin(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) s += i ^ (s >> 3);
  return s;
}
static void *spinner(void *a) {
  (void)a;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, 0);
  for (;;) spin(10);
  return 0;
}
static void *worker(void *a) {
  *(long *)a = fib(20);
  return 0;
}

static int cancel(int n) {
  for (int i = 0; i < n; i++) {
    pthread_t t;
    pthread_create(&t, 0, spinner, 0);
    usleep(200);
    pthread_cancel(t);
    pthread_join(t, 0);
  }
  long r[4];
  pthread_t w[4];
  for (int i = 0; i < 4; i++) pthread_create(&w[i], 0, worker, &r[i]);
  for (int i = 0; i < 4; i++) pthread_join(w[i], 0);
  printf("r=%ld\n", r[0] + r[1] + r[2] + r[3]);
  return 0;
}

/* vforkexit */
static int child_work(void) { return (int)(fib(5) & 1); }

static int vforkexit(int n) {
  for (int i = 0; i < n; i++) {
    pid_t p = vfork();
    if (p == 0) exit(child_work()); /* wrong (should be _exit), but real programs do it */
    waitpid(p, 0, 0);
  }
  printf("s=%ld\n", twenty_afters());
  /* The children's exit() ran this process's atexit handlers (the list is shared memory), the
     runtime's included: the interval in progress at our exit is lost. Let it close first. */
  usleep(300000);
  return 0;
}

/* rawfork */
static int rawfork(int n) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; i++) {
    pid_t p = _Fork();
    if (p == 0) exit(child_work());
    waitpid(p, 0, 0);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("ms=%ld\n", (long)((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000));
  return 0;
}

/* busy */
static long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int busy(int ms) {
  long end = now_ms() + ms, rounds = 0;
  while (now_ms() < end) {
    fib(15);
    rounds++;
  }
  printf("rounds>0=%d\n", rounds > 0);
  return 0;
}

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  int n = argc > 2 ? atoi(argv[2]) : 0;
  if (!strcmp(m, "siglj")) return siglj(n);
  if (!strcmp(m, "ljloop")) return ljloop(n);
  if (!strcmp(m, "deeplj")) return deeplj();
  if (!strcmp(m, "cancel")) return cancel(n);
  if (!strcmp(m, "vforkexit")) return vforkexit(n);
  if (!strcmp(m, "rawfork")) return rawfork(n);
  if (!strcmp(m, "busy")) return busy(n);
  fprintf(stderr, "usage: robust siglj|ljloop|deeplj|cancel|vforkexit|rawfork|busy N\n");
  return 2;
}
