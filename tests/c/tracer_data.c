/* Fixtures of tests/tests/tracer_data.rs: calls that never return, a known call graph, calls
 * of known durations. Built with gcc -finstrument-functions; functions are noinline so their
 * call counts are exact at -O2.
 *
 *   tracer_data cancel N   N threads each block in level3 (called by level2 ← level1 ←
 *                          worker) and are cancelled there (deferred cancellation)
 *   tracer_data exit N     N threads call pthread_exit from level2 (level1 ← worker)
 *   tracer_data graph      main → ga (once); ga → gb (10×), ga → gc (5×); gb → gc (2× per gb
 *                          call); gc → leaf (3× per call); main → leaf (7×)
 *   tracer_data sleeps     nap_1ms: 40 calls of nanosleep(1 ms); nap_10ms: 15 calls of
 *                          nanosleep(10 ms); quick: 1000 calls that return at once
 *   tracer_data slow N P   N calls of work(): 20 µs of spinning each, P of every 1000 spin
 *                          2 ms instead (a fault that makes 0.1 % of the calls 100× slower) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile long sink;

/* ---- calls that never return ---- */
NOINLINE void level3(void) {
    for (;;) pause(); /* a cancellation point */
}
NOINLINE void level2(int exit_here) {
    if (exit_here) pthread_exit(NULL);
    level3();
}
NOINLINE void level1(int exit_here) { level2(exit_here); }
NOINLINE void *worker(void *arg) {
    level1(arg != NULL);
    return NULL;
}

static void threads(int n, int exit_here) {
    for (int i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, exit_here ? (void *)1 : NULL);
        if (!exit_here) {
            usleep(2000);
            pthread_cancel(t);
        }
        pthread_join(t, NULL);
    }
}

/* ---- a known call graph ---- */
NOINLINE void leaf(void) { sink++; }
NOINLINE void gc(void) {
    for (int i = 0; i < 3; i++) leaf();
}
NOINLINE void gb(void) {
    gc();
    gc();
}
NOINLINE void ga(void) {
    for (int i = 0; i < 10; i++) gb();
    for (int i = 0; i < 5; i++) gc();
}

/* ---- calls of known durations ---- */
static void sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
NOINLINE void nap_1ms(void) { sleep_ns(1000000L); }
NOINLINE void nap_10ms(void) { sleep_ns(10000000L); }
NOINLINE void quick(void) { sink++; }

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
/* Spins on the CPU clock of the thread, so time taken by other processes does not count. */
static long cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
NOINLINE void work(long ns) {
    long end = cpu_ns() + ns;
    while (cpu_ns() < end) sink++;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int n = argc > 2 ? atoi(argv[2]) : 10;
    if (!strcmp(mode, "cancel") || !strcmp(mode, "exit")) {
        threads(n, !strcmp(mode, "exit"));
        printf("threads %d\n", n);
    } else if (!strcmp(mode, "graph")) {
        ga();
        for (int i = 0; i < 7; i++) leaf();
        printf("sink %ld\n", sink);
    } else if (!strcmp(mode, "sleeps")) {
        for (int i = 0; i < 40; i++) nap_1ms();
        for (int i = 0; i < 15; i++) nap_10ms();
        for (int i = 0; i < 1000; i++) quick();
        printf("slept\n");
    } else if (!strcmp(mode, "slow")) {
        int per_mille = argc > 3 ? atoi(argv[3]) : 0;
        long t0 = now_ns();
        for (int i = 0; i < n; i++) work(i % 1000 < per_mille ? 2000000L : 20000L);
        printf("ms %ld\n", (now_ns() - t0) / 1000000L);
    } else {
        fprintf(stderr, "usage: tracer_data cancel|exit|graph|sleeps|slow N [P]\n");
        return 2;
    }
    return 0;
}
