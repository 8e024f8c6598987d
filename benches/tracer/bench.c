/* Workloads of the tracer benchmark (benches/tracer/run): each times its own loop and prints
 * "<calls> <wall ns> <cpu ns>" on stderr, so process start-up, the runtime's set-up and its
 * final flush are not counted. CPU time is the looping thread's own (CLOCK_THREAD_CPUTIME_ID):
 * on a shared machine it leaves out the time the thread waited for a CPU.
 *   fib N        recursive fib(N): fib_calls(N) instrumented calls
 *   leaf N       a tight loop calling a tiny leaf N times (N + 1 calls)
 *   leaf2 N      the leaf loop in 2 threads, N calls each; prints the slower thread's time */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile long sink;

__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) void tiny_leaf(long i) { sink += i; }
__attribute__((noinline)) void leaf_loop(long n) {
    for (long i = 0; i < n; i++) tiny_leaf(i);
}

__attribute__((no_instrument_function)) static long clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}
#define now_ns() clock_ns(CLOCK_MONOTONIC)
#define cpu_ns() clock_ns(CLOCK_THREAD_CPUTIME_ID)

static long per_thread;
static long thread_ns[2][2];
__attribute__((no_instrument_function)) static void *worker(void *arg) {
    long *out = arg;
    long t0 = now_ns(), c0 = cpu_ns();
    leaf_loop(per_thread);
    out[1] = cpu_ns() - c0;
    out[0] = now_ns() - t0;
    return NULL;
}

__attribute__((no_instrument_function)) int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long n = atol(argv[2]);
    long calls, t0 = now_ns(), c0 = cpu_ns(), ns, cpu;
    if (!strcmp(argv[1], "fib")) {
        sink = fib((int)n);
        cpu = cpu_ns() - c0;
        ns = now_ns() - t0;
        long a = 0, b = 1;
        for (long i = 0; i <= n; i++) {
            long c = a + b;
            a = b;
            b = c;
        }
        calls = 2 * a - 1;
    } else if (!strcmp(argv[1], "leaf")) {
        leaf_loop(n);
        cpu = cpu_ns() - c0;
        ns = now_ns() - t0;
        calls = n + 1;
    } else if (!strcmp(argv[1], "leaf2")) {
        pthread_t t[2];
        per_thread = n;
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, &thread_ns[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        ns = thread_ns[0][0] > thread_ns[1][0] ? thread_ns[0][0] : thread_ns[1][0];
        cpu = thread_ns[0][1] > thread_ns[1][1] ? thread_ns[0][1] : thread_ns[1][1];
        calls = n + 1; /* per thread */
    } else {
        return 2;
    }
    fprintf(stderr, "%ld %ld %ld\n", calls, ns, cpu);
    return 0;
}
