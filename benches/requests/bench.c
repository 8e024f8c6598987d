/* Request-sampling benchmark (benches/requests/run): R requests, each a tree of traced calls
 * (handle → step → leaf, `calls` calls in all, `work` loop turns per leaf), optionally marked
 * with culprit_request_begin/_end. Prints ns per request spent inside the requests (wall
 * clock from before begin to after end: the sleeps between requests are left out) and the
 * thread's CPU time per request (sleeps included).
 *
 *   bench marks|none REQUESTS CALLS WORK [GAP_US]
 *
 * GAP_US: a sleep between requests (outside them), so that a thread's request rate is a
 * server's and not a tight loop's (the runtime's per-thread ring holds 100 ms of events). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int culprit_request_begin(uint64_t id, uint64_t type, uint64_t parent) __attribute__((weak));
int culprit_request_end(uint64_t id) __attribute__((weak));

static volatile unsigned sink;

__attribute__((noinline)) void leaf(int w)
{
    for (int i = 0; i < w; i++)
        sink += (unsigned)i;
}

__attribute__((noinline)) void step(int w)
{
    leaf(w);
    leaf(w);
}

/* 1 + 3 per step: `calls` traced calls in all. */
__attribute__((noinline)) void handle(int calls, int w)
{
    for (int i = 0; i < (calls - 1) / 3; i++)
        step(w);
}

__attribute__((no_instrument_function)) static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6)
        return 2;
    long gap = argc == 6 ? atol(argv[5]) : 0;
    struct timespec pause = {gap / 1000000, (gap % 1000000) * 1000};
    int marks = strcmp(argv[1], "marks") == 0 && culprit_request_begin && culprit_request_end;
    long n = atol(argv[2]);
    int calls = atoi(argv[3]), work = atoi(argv[4]);
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    double inside = 0;
    for (long r = 1; r <= n; r++) {
        double a = now(CLOCK_MONOTONIC);
        if (marks)
            culprit_request_begin((uint64_t)r, 1, 0);
        handle(calls, work);
        if (marks)
            culprit_request_end((uint64_t)r);
        inside += now(CLOCK_MONOTONIC) - a;
        if (gap)
            nanosleep(&pause, NULL);
    }
    double w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
    (void)w1;
    (void)w0;
    printf("%.1f %.1f\n", inside / n, (c1 - c0) / n);
    return 0;
}
