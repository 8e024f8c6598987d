/* A known call path for the sampler's call-chain test (tests/tests/sampler_chains.rs), built at
 * -O0 -fno-omit-frame-pointer so that every function keeps a frame pointer (gcc leaves leaf
 * functions without a frame at -O2 even then, and their caller drops out of the chain).
 *
 *   smp_chain MS   waits for a line on stdin (the sampler is started), then
 *                  main → outer → middle → inner spins for MS ms of its CPU time, then
 *                  main → syscalls → writer writes 1 byte to /dev/null, MS ms of CPU time long */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

/* The process's CPU time: on a loaded machine the work stays the same. */
static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void inner(long n) {
    for (long i = 0; i < n; i++) sink += i;
}
void middle(long n) { inner(n); }
void outer(long ms) {
    long end = now_ms() + ms;
    while (now_ms() < end) middle(200000);
}

void writer(int fd) {
    char c = 0;
    for (int i = 0; i < 1000; i++) (void)!write(fd, &c, 1);
}
void syscalls(long ms) {
    int fd = open("/dev/null", O_WRONLY);
    long end = now_ms() + ms;
    while (now_ms() < end) writer(fd);
    close(fd);
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    char line[8];
    if (!fgets(line, sizeof line, stdin)) return 1;
    outer(ms);
    syscalls(ms);
    return 0;
}
