/* Programs for the attacks and losses of tests/tests/security.rs.
 *
 *   security work N              N calls of leaf(); prints "ok"
 *   security prefork W N         forks W workers at once; each calls leaf() N times and
 *                                _exit(7)s; then the parent calls leaf() N times; prints "ok"
 *                                when every worker exited with 7
 *   security crash abort|segv N  N calls of leaf(), 300 ms idle, then abort() / a SIGSEGV
 *   security crashbound K        K x (leaf(), 1 ms sleep), then abort() at once
 *   security sigalrm MS          SIGALRM every 1 ms for MS ms; the (uninstrumented) handler
 *                                calls tick(); main calls leaf() meanwhile, mostly inside the
 *                                hooks; prints "handled=H" (handler runs)
 *   security fd2 VICTIM N        forks; the child becomes uid/gid 65534, closes 0-2, opens
 *                                VICTIM (it gets 0, dup'ed to 1 and 2), writes "child\n", calls
 *                                leaf() N times, waits 300 ms and exits; the parent calls
 *                                leaf() N times; prints "ok"
 *   security slow MS             every 1 ms: leaf() and wide() (64 distinct functions) for MS
 *                                ms; prints "leaf=C"
 *   security threads T           T threads one after another, each calls leaf() once; prints
 *                                "rss_growth_kb=K" (VmRSS after minus before)
 *   security clock MS            clock_gettime (the vDSO) in a loop for MS ms
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) static void leaf(void) { sink++; }
__attribute__((noinline)) static void tick(void) { sink++; }

#define W(n) __attribute__((noinline)) static int w##n(int x) { return x + n; }
#define W8(p) W(p##0) W(p##1) W(p##2) W(p##3) W(p##4) W(p##5) W(p##6) W(p##7)
W8(1) W8(2) W8(3) W8(4) W8(5) W8(6) W8(7) W8(8)
#define C(n) x = w##n(x);
#define C8(p) C(p##0) C(p##1) C(p##2) C(p##3) C(p##4) C(p##5) C(p##6) C(p##7)
__attribute__((noinline)) static int wide(int x) {
  C8(1) C8(2) C8(3) C8(4) C8(5) C8(6) C8(7) C8(8)
  return x;
}

__attribute__((no_instrument_function)) static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((no_instrument_function)) static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

static void calls(long n) {
  for (long i = 0; i < n; i++) leaf();
}

static int prefork(int workers, long n) {
  pid_t pids[256];
  for (int i = 0; i < workers && i < 256; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      calls(n);
      _exit(7);
    }
  }
  int ok = 1;
  for (int i = 0; i < workers && i < 256; i++) {
    int st = 0;
    waitpid(pids[i], &st, 0);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 7;
  }
  calls(n);
  printf(ok ? "ok\n" : "bad worker status\n");
  return 0;
}

static int crash(const char *how, long n) {
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none);
  calls(n);
  sleep_ms(300);
  if (strcmp(how, "segv") == 0) {
    *(volatile int *)0 = 1;
  }
  abort();
}

static int crashbound(long k) {
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none);
  for (long i = 0; i < k; i++) {
    leaf();
    sleep_ms(1);
  }
  abort();
}

static volatile sig_atomic_t handled;
__attribute__((no_instrument_function)) static void on_alarm(int s) {
  (void)s;
  handled++;
  tick();
}

static int sigalrm(long ms) {
  signal(SIGALRM, on_alarm);
  struct itimerval it = {{0, 1000}, {0, 1000}};
  setitimer(ITIMER_REAL, &it, 0);
  double end = now_s() + ms / 1000.0;
  while (now_s() < end) {
    for (int i = 0; i < 1000; i++) leaf();
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, 0);
  signal(SIGALRM, SIG_IGN);
  printf("handled=%d\n", (int)handled);
  return 0;
}

static int fd2(const char *victim, long n) {
  pid_t p = fork();
  if (p == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    close(0);
    close(1);
    close(2);
    int fd = open(victim, O_WRONLY | O_APPEND);
    if (fd != 0) _exit(4);
    dup2(0, 1);
    dup2(0, 2);
    if (write(1, "child\n", 6) != 6) _exit(5);
    calls(n);
    sleep_ms(300);
    exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  calls(n);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("child status %d\n", st);
    return 1;
  }
  printf("ok\n");
  return 0;
}

static int slow(long ms) {
  double end = now_s() + ms / 1000.0;
  long c = 0;
  while (now_s() < end) {
    leaf();
    c++;
    sink += wide(c);
    sleep_ms(1);
  }
  printf("leaf=%ld\n", c);
  return 0;
}

__attribute__((no_instrument_function)) static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f)) {
    if (sscanf(line, "VmRSS: %ld", &kb) == 1) break;
  }
  if (f) fclose(f);
  return kb;
}

static void *one_call(void *arg) {
  leaf();
  return arg;
}

static int threads(long n) {
  /* One thread first: its stack and the runtime's first block count as the baseline. */
  pthread_t t;
  pthread_create(&t, 0, one_call, 0);
  pthread_join(t, 0);
  long before = rss_kb();
  for (long i = 1; i < n; i++) {
    pthread_create(&t, 0, one_call, 0);
    pthread_join(t, 0);
  }
  printf("rss_growth_kb=%ld\n", rss_kb() - before);
  return 0;
}

static int clockspin(long ms) {
  double end = now_s() + ms / 1000.0;
  long c = 0;
  while (now_s() < end) c++;
  printf("spins=%ld\n", c);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *m = argv[1];
  if (!strcmp(m, "work")) {
    calls(atol(argv[2]));
    printf("ok\n");
    return 0;
  }
  if (!strcmp(m, "prefork") && argc > 3) return prefork(atoi(argv[2]), atol(argv[3]));
  if (!strcmp(m, "crash") && argc > 3) return crash(argv[2], atol(argv[3]));
  if (!strcmp(m, "crashbound")) return crashbound(atol(argv[2]));
  if (!strcmp(m, "sigalrm")) return sigalrm(atol(argv[2]));
  if (!strcmp(m, "fd2") && argc > 3) return fd2(argv[2], atol(argv[3]));
  if (!strcmp(m, "slow")) return slow(atol(argv[2]));
  if (!strcmp(m, "threads")) return threads(atol(argv[2]));
  if (!strcmp(m, "clock")) return clockspin(atol(argv[2]));
  return 2;
}
