/* Many children that _exit at once, for the tracer's mass-exit test
 * (tests/tests/tracer_starved.rs).
 *
 *   mass_exit N
 *
 * The parent forks N children. Child i calls child_work() 1000 + i % 97 times, then blocks
 * until the parent closes the barrier pipe — after the last child was forked, so that all of
 * them leave at once — and calls _exit(0). The parent prints "child PID CALLS" per child and
 * "failed K" (children that did not exit 0). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define NOTRACE __attribute__((no_instrument_function))

static volatile long sink;

NOINLINE void child_work(long i) { sink += i; }

NOTRACE int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100;
    int barrier[2];
    if (pipe(barrier) != 0) return 2;
    pid_t *pids = calloc(n, sizeof *pids);
    long *calls = calloc(n, sizeof *calls);
    child_work(0);
    for (long i = 0; i < n; i++) {
        calls[i] = 1000 + i % 97;
        pid_t p = fork();
        if (p < 0) {
            perror("fork");
            return 2;
        }
        if (p == 0) {
            close(barrier[1]);
            for (long k = 0; k < calls[i]; k++) child_work(k);
            char c;
            while (read(barrier[0], &c, 1) > 0) {
            }
            _exit(0);
        }
        pids[i] = p;
    }
    close(barrier[0]);
    close(barrier[1]);
    long failed = 0;
    for (long i = 0; i < n; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
        printf("child %d %ld\n", pids[i], calls[i]);
    }
    printf("failed %ld\n", failed);
    return 0;
}
