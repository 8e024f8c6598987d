/* Uprobe fixture: noinline functions called a known number of times, from the main thread, a
 * second thread and a shared library (libufix_lib.so, ufix_lib.c). Built at -O2 with and without
 * -finstrument-functions, the uprobe counts of the plain build must equal the runtime's counts of
 * the instrumented one (tests/tests/uprobes.rs).
 *
 * Usage: ufix ROUNDS [PAUSE_MS]
 *   per round: middle 1, leaf_a 1, leaf_b 1 if round % 3 == 0, lib_work 1; every 100th round
 *   depth(10) (11 calls); the worker thread calls leaf_b ROUNDS times. With PAUSE_MS the main
 *   thread sleeps that long every 1000 rounds (a long-running server for the attach test).
 *   Prints a checksum that does not depend on timing. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

unsigned long lib_work(unsigned long x);

static volatile unsigned long sink;
static long rounds;

/* Inlined into its callers everywhere: no entry to probe (the test expects it listed so). */
static inline __attribute__((always_inline, no_instrument_function)) unsigned long
mix(unsigned long x)
{
    return x * 2654435761UL + 1;
}

__attribute__((noinline)) unsigned long leaf_a(unsigned long x)
{
    sink += mix(x);
    return sink;
}

__attribute__((noinline)) unsigned long leaf_b(unsigned long x)
{
    sink ^= mix(x) >> 3;
    return sink;
}

/* Written by the main thread only: `sink` is written by both threads, and a depth() that read
 * it back returned the worker's value whenever the worker wrote between the store and the load
 * (a preempted main thread on a loaded host), so the checksum depended on timing. */
static volatile unsigned long depth_sink;

/* Recursion GCC cannot turn into a loop (the volatile store after the call), so the plain and
 * the instrumented builds make the same calls. */
__attribute__((noinline)) unsigned long depth(unsigned n)
{
    if (n == 0)
        return 0;
    depth_sink = depth(n - 1) + 1;
    return depth_sink;
}

__attribute__((noinline)) void middle(unsigned long i)
{
    leaf_a(i);
    if (i % 3 == 0)
        leaf_b(i);
}

static unsigned long worker_sum;

static void *worker(void *arg)
{
    (void)arg;
    unsigned long s = 0;
    for (long i = 0; i < rounds; i++)
        s += mix(i) & 0xff, leaf_b(i);
    worker_sum = s;
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 1000;
    long pause_ms = argc > 2 ? atol(argv[2]) : 0;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 1;
    unsigned long check = 0;
    for (long r = 0; r < rounds; r++) {
        middle(r);
        check += lib_work(r);
        if (r % 100 == 0)
            check += depth(10);
        if (pause_ms && r % 1000 == 999)
            usleep(pause_ms * 1000);
    }
    pthread_join(t, NULL);
    printf("checksum %lu %lu\n", check, worker_sum);
    return 0;
}
