/* A program for the tracer's end-to-end tests (tests/tests/tracer*.rs). Built with
 * gcc -finstrument-functions at -O0 and -O2, run linked with libculprit_rt.so or with it
 * LD_PRELOADed. Each mode exercises one behaviour; what it prints on stdout is checked to be
 * unchanged by tracing. Functions are noinline so their call counts are exact at -O2. */
#define _GNU_SOURCE
#include <dlfcn.h>
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

#define NOINLINE __attribute__((noinline))

static volatile long sink;

NOINLINE long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

NOINLINE void tiny_leaf(long i) { sink += i; }

/* Recursion deeper than the runtime's shadow stack. */
NOINLINE long down(int n) { return n == 0 ? 0 : 1 + down(n - 1) + (sink & 0); }

NOINLINE void leaf_loop(long n) {
    for (long i = 0; i < n; i++) tiny_leaf(i);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Blocks in nanosleep itself (no instrumented callee), so the 300 ms are its own. */
NOINLINE void sleeper(void) {
    struct timespec ts = {0, 300 * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

NOINLINE void spin_ms(long ms) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        sink++;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

NOINLINE void sleep_outer(void) {
    spin_ms(20);
    sleeper();
}

/* threads: each thread calls tiny_leaf `per` times through thread_body. */
static long per_thread;
NOINLINE void *thread_body(void *arg) {
    (void)arg;
    leaf_loop(per_thread);
    return NULL;
}

static void run_threads(int n, long per) {
    pthread_t t[64];
    per_thread = per;
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, thread_body, NULL);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

/* longjmp out of nested calls. */
static jmp_buf jb;
NOINLINE void deep3(int i) {
    if (i % 2 == 0) longjmp(jb, 1);
}
NOINLINE void deep2(int i) { deep3(i); }
NOINLINE void deep1(int i) { deep2(i); }
NOINLINE void jumper(int rounds) {
    for (int i = 0; i < rounds; i++) {
        if (setjmp(jb) == 0) deep1(i);
        tiny_leaf(i);
    }
}

/* A signal handler that calls instrumented functions while the main loop is in
 * instrumented code. */
static volatile sig_atomic_t handled;
NOINLINE void in_handler(void) { tiny_leaf(1); }
static void on_alarm(int sig) {
    (void)sig;
    in_handler();
    handled++;
}

NOINLINE void child_work(void) { leaf_loop(1000); }
NOINLINE void parent_work(void) { leaf_loop(2000); }

NOINLINE void daemon_work(void) { leaf_loop(3000); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fib";
    if (!strcmp(mode, "fib")) {
        int n = argc > 2 ? atoi(argv[2]) : 20;
        printf("fib(%d)=%ld\n", n, fib(n));
    } else if (!strcmp(mode, "deep")) {
        int n = argc > 2 ? atoi(argv[2]) : 3000;
        printf("depth %ld\n", down(n));
    } else if (!strcmp(mode, "leaf")) {
        long n = argc > 2 ? atol(argv[2]) : 1000;
        leaf_loop(n);
        printf("leaf %ld\n", n);
    } else if (!strcmp(mode, "sleep")) {
        sleep_outer();
        printf("slept\n");
    } else if (!strcmp(mode, "threads")) {
        int n = argc > 2 ? atoi(argv[2]) : 8;
        long per = argc > 3 ? atol(argv[3]) : 10000;
        run_threads(n, per);
        printf("threads %d\n", n);
    } else if (!strcmp(mode, "longjmp")) {
        int rounds = argc > 2 ? atoi(argv[2]) : 100;
        jumper(rounds);
        printf("jumped %d\n", rounds);
    } else if (!strcmp(mode, "signal")) {
        /* SIGALRM every 2 ms while spinning in instrumented code. */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 2000}, {0, 2000}};
        setitimer(ITIMER_REAL, &it, NULL);
        while (handled < 200) leaf_loop(1000);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
        printf("handled %d\n", handled >= 200);
    } else if (!strcmp(mode, "fork")) {
        pid_t p = fork();
        if (p == 0) {
            child_work();
            exit(0);
        }
        int st;
        waitpid(p, &st, 0);
        parent_work();
        printf("forked %d\n", WIFEXITED(st) && WEXITSTATUS(st) == 0);
    } else if (!strcmp(mode, "daemon")) {
        /* Double fork like a daemon; the grandchild writes its pid to argv[2] when done. */
        pid_t p = fork();
        if (p == 0) {
            if (fork() != 0) _exit(0);
            setsid();
            if (chdir("/") != 0) _exit(1);
            daemon_work();
            FILE *f = fopen(argv[2], "w");
            if (f) {
                fprintf(f, "%d\n", getpid());
                fclose(f);
            }
            exit(0);
        }
        waitpid(p, NULL, 0);
        printf("daemonized\n");
    } else if (!strcmp(mode, "dlopen")) {
        void *h = dlopen(argv[2], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        long (*plugin)(long) = (long (*)(long))dlsym(h, "plugin_work");
        long r = 0;
        for (int i = 0; i < 50; i++) r += plugin(i);
        printf("plugin %ld\n", r);
    } else if (!strcmp(mode, "run")) {
        /* Call tiny_leaf 1000 times every 10 ms for argv[2] ms, then exit (or be killed). */
        long ms = argc > 2 ? atol(argv[2]) : 3000;
        for (long t = 0; t < ms; t += 10) {
            leaf_loop(1000);
            sleep_ms(10);
        }
        printf("ran\n");
    } else if (!strcmp(mode, "exec")) {
        /* Do some work, then exec this program in "fib" mode. */
        leaf_loop(500);
        fflush(stdout);
        execl(argv[0], argv[0], "fib", argc > 2 ? argv[2] : "10", (char *)NULL);
        return 127;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
