/* A program for the tests of the tracer's cost budget, demotions and call-site patching
 * (tests/tests/budget.rs). Built with gcc -finstrument-functions at -O0 and -O2.
 *
 *   budget hot THREADS ROUNDS      THREADS threads each run ROUNDS rounds of `round`, which
 *                                  calls `mid` 100 times; `mid` calls the tiny `leaf` 50 times
 *                                  and `inl` (a static inline helper, inlined at -O2 and still
 *                                  instrumented) once. Prints the calls it made of each.
 *   budget late ROUNDS             `early` calls the inlined `inl` 1000 times, then ROUNDS rounds
 *                                  of `late_round`, which calls `late_mid` 100 times; `late_mid`
 *                                  calls `inl` 50 times: its own inlined copy, whose hook calls
 *                                  first run after the runtime saw 1000 calls of `inl`.
 *   budget serve SECONDS RATE      a rate-limited "server": every 10 ms tick it serves RATE
 *                                  requests (`serve_one` → `parse` + `mid`…), the same work per
 *                                  second on every node while it keeps up; idle time is spent in
 *                                  an uninstrumented wait, and main never returns (exit), so no
 *                                  traced function holds the idle time.
 *
 * `leaf` and `mid` are noinline, so their counts are exact at -O2. Test scaffolding (the wait,
 * the clock) is not instrumented. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))
#define NOTRACE __attribute__((no_instrument_function))

static volatile unsigned long sink;

NOINLINE void leaf(unsigned long i) { sink += i * 2654435761u; }

static inline unsigned long inl(unsigned long x) { return (x ^ (x >> 7)) * 31; }

NOINLINE void mid(unsigned long i) {
    for (unsigned long k = 0; k < 50; k++) leaf(i + k);
    sink += inl(i);
}

NOINLINE void round_(unsigned long r) {
    for (unsigned long i = 0; i < 100; i++) mid(r * 100 + i);
}

static long rounds;

NOINLINE void early(void) {
    for (unsigned long k = 0; k < 1000; k++) sink += inl(k);
}

NOINLINE void late_mid(unsigned long i) {
    for (unsigned long k = 0; k < 50; k++) sink += inl(i + k);
}

NOINLINE void late_round(unsigned long r) {
    for (unsigned long i = 0; i < 100; i++) late_mid(r * 100 + i);
}

NOINLINE void *worker(void *arg) {
    (void)arg;
    for (long r = 0; r < rounds; r++) round_((unsigned long)r);
    return NULL;
}

/* A request's own work, ~10 µs: enough that once `leaf` is demoted the 3 traced calls left
 * per request (serve_one, parse, mid) cost well under a 2 % budget, while the 53 of a request
 * with `leaf` traced cost well over it. */
NOINLINE void parse(unsigned long i) {
    for (int k = 0; k < 5000; k++) sink += (i * 31 + k) >> 3;
}

NOINLINE void serve_one(unsigned long i) {
    parse(i);
    mid(i);
}

NOTRACE static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

NOTRACE static void wait_until(long t) {
    struct timespec ts = {t / 1000000000L, t % 1000000000L};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

NOINLINE void tick(long rate, unsigned long *n) {
    for (long i = 0; i < rate; i++) serve_one((*n)++);
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "hot") == 0) {
        int threads = atoi(argv[2]);
        rounds = atol(argv[3]);
        pthread_t t[64];
        if (threads < 1 || threads > 64) return 2;
        for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
        long mids = threads * rounds * 100;
        printf("round=%ld mid=%ld leaf=%ld\n", threads * rounds, mids, mids * 50);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "late") == 0) {
        long n = atol(argv[2]);
        early();
        for (long r = 0; r < n; r++) late_round((unsigned long)r);
        printf("late_round=%ld late_mid=%ld\n", n, n * 100);
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "serve") == 0) {
        long secs = atol(argv[2]), rate = atol(argv[3]);
        unsigned long n = 0;
        long t = now_ns();
        long end = t + secs * 1000000000L;
        while (t < end) {
            tick(rate, &n);
            t += 10000000L;
            wait_until(t);
        }
        printf("served=%lu\n", n);
        fflush(stdout);
        exit(0);
    }
    fprintf(stderr, "usage: budget hot THREADS ROUNDS | budget late ROUNDS | budget serve SECONDS RATE\n");
    return 2;
}
