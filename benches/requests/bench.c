/* Request-sampling benchmark (benches/requests/run): R requests, each a tree of traced calls
 * (handle → step → leaf, `calls` calls in all, `work` loop turns per leaf), optionally marked
 * with culprit_request_begin/_end. Prints ns per request spent inside the requests (wall
 * clock from before begin to after end: the sleeps between requests are left out), the
 * thread's CPU time per request (sleeps included), and the share of requests left out of the
 * first figure as preempted.
 *
 * Preempted requests: on a shared machine a request now and then loses the CPU for
 * milliseconds, a thousand times its length, and a handful of those decide the mean. A request
 * that took more than 20 times the median is left out (a sampled request takes 2-3 times an
 * unsampled one's: never near); the share left out is printed, and is the same in every
 * variant up to noise.
 *
 *   bench marks|none|mixed REQUESTS CALLS WORK [GAP_US]
 *
 * `mixed` measures marked and unmarked requests in one process, alternating in blocks of 100
 * requests so that whatever else the machine does weighs on both alike: it prints the mean of
 * the unmarked requests, the mean of the marked ones (begin/end at the runtime's
 * CULPRIT_REQUEST_SAMPLE, sampled or not), how many were sampled, and the share left out as
 * preempted (below). The overhead of marking at that sampling rate is their ratio.
 *
 * GAP_US: a sleep between requests (outside them), so that a thread's request rate is a
 * server's and not a tight loop's (the runtime's per-thread ring holds 100 ms of events). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((no_instrument_function)) static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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

/* Mean of v[0..n) without the values over 20 times the median; *left: the share left out, %. */
__attribute__((no_instrument_function)) static double trimmed_mean(const double *v, long n,
                                                                   double *left)
{
    if (n == 0) {
        *left = 0;
        return 0;
    }
    double *sorted = malloc(sizeof(double) * (size_t)n);
    if (!sorted)
        exit(1);
    memcpy(sorted, v, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(double), cmp_double);
    double cap = 20 * sorted[n / 2], sum = 0;
    long kept = 0;
    for (long i = 0; i < n; i++)
        if (v[i] <= cap) {
            sum += v[i];
            kept++;
        }
    free(sorted);
    *left = 100.0 * (double)(n - kept) / (double)n;
    return sum / (double)kept;
}

/* `mixed`: blocks of MIXED_BLOCK requests, unmarked and marked in turn. */
#define MIXED_BLOCK 100
__attribute__((no_instrument_function)) static int mixed(long n, int calls, int work,
                                                         struct timespec pause, long gap)
{
    double *t[2];
    long k[2] = {0, 0}, sampled = 0;
    for (int c = 0; c < 2; c++)
        if (!(t[c] = malloc(sizeof(double) * (size_t)n)))
            return 1;
    for (long r = 1; r <= n; r++) {
        int marked = (r / MIXED_BLOCK) % 2;
        double a = now(CLOCK_MONOTONIC);
        if (marked)
            sampled += culprit_request_begin((uint64_t)r, 1, 0) == 1;
        handle(calls, work);
        if (marked)
            culprit_request_end((uint64_t)r);
        t[marked][k[marked]++] = now(CLOCK_MONOTONIC) - a;
        if (gap)
            nanosleep(&pause, NULL);
    }
    double left[2], mean[2];
    for (int c = 0; c < 2; c++)
        mean[c] = trimmed_mean(t[c], k[c], &left[c]);
    printf("%.1f %.1f %ld %.3f\n", mean[0], mean[1], sampled, (left[0] + left[1]) / 2);
    return 0;
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
    if (strcmp(argv[1], "mixed") == 0)
        return culprit_request_begin && culprit_request_end ? mixed(n, calls, work, pause, gap) : 2;
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    double *took = malloc(sizeof(double) * (size_t)n);
    if (!took)
        return 1;
    for (long r = 1; r <= n; r++) {
        double a = now(CLOCK_MONOTONIC);
        if (marks)
            culprit_request_begin((uint64_t)r, 1, 0);
        handle(calls, work);
        if (marks)
            culprit_request_end((uint64_t)r);
        took[r - 1] = now(CLOCK_MONOTONIC) - a;
        if (gap)
            nanosleep(&pause, NULL);
    }
    double w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
    (void)w1;
    (void)w0;
    double left, inside = trimmed_mean(took, n, &left);
    printf("%.1f %.1f %.3f\n", inside, (c1 - c0) / n, left);
    return 0;
}
