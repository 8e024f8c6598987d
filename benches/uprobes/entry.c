/* Uprobe benchmark workload (benches/uprobes/run): a loop calling a noinline function whose first
 * instruction the kernel emulates at a uprobe (`push`, as in a prologue saving the frame pointer)
 * or must single-step (`mov`). Prints "<calls> <wall ns> <cpu ns>" on stderr like
 * benches/tracer/bench.c.
 *   entry push N | entry step N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile long sink;

__attribute__((noinline)) long push_first(long i)
{
    __asm__ volatile("push %%rbx\n\tpop %%rbx" ::: "memory");
    return i + 1;
}

__attribute__((noinline)) long step_first(long i)
{
    sink += i;
    return sink;
}

static long clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    long n = atol(argv[2]);
    int push = !strcmp(argv[1], "push");
    long t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < n; i++)
        sink += push ? push_first(i) : step_first(i);
    long cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0, ns = clock_ns(CLOCK_MONOTONIC) - t0;
    fprintf(stderr, "%ld %ld %ld\n", n, ns, cpu);
    return 0;
}
