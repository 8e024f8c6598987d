/* Workloads of the layer-event benchmark (benches/layers/run). Each times its own loop and
 * prints "<events or calls> <wall ns> <cpu ns>" on stderr; between bursts that fit in a
 * thread's event buffer it asks the runtime to write what it has (culprit_flush, untimed), so
 * the loop measures recorded events, not dropped ones.
 *   none N        N iterations of the loop without marks (the baseline)
 *   marks N       N iterations, each marking ADMIT, ISSUE, COMPLETE, CALLBACK: 4N events
 *   pread N FILE  N preads of 4 KiB from FILE (page-cached), cycling over its first MiB
 * Built without -lculprit_rt: the API is declared weak and found in the preloaded runtime. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "culprit.h"

#pragma weak culprit_io_layer
#pragma weak culprit_io_admit
#pragma weak culprit_io_issue
#pragma weak culprit_io_complete
#pragma weak culprit_io_callback
#pragma weak culprit_flush

static volatile long sink;

static long clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

#define BURST 1024

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    long n = atol(argv[2]);
    int layer = culprit_io_layer ? culprit_io_layer("bench") : -1;
    int fd = -1;
    static char buf[4096];
    if (!strcmp(argv[1], "pread")) {
        if (argc < 4 || (fd = open(argv[3], O_RDONLY)) < 0)
            return 2;
    }
    long wall = 0, cpu = 0, events = 0;
    for (long done = 0; done < n; done += BURST) {
        long m = n - done < BURST ? n - done : BURST;
        long t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (!strcmp(argv[1], "none")) {
            for (long i = 0; i < m; i++)
                sink += i;
        } else if (!strcmp(argv[1], "marks")) {
            for (long i = 0; i < m; i++) {
                uint64_t req = (uint64_t)(done + i), off = req * 4096;
                culprit_io_admit(layer, req, CULPRIT_IO_READ, 1, off, 4096);
                culprit_io_issue(layer, req, CULPRIT_IO_READ, 1, off, 4096);
                culprit_io_complete(layer, req, CULPRIT_IO_READ, 1, off, 4096);
                culprit_io_callback(layer, req, CULPRIT_IO_READ, 1, off, 4096);
                sink += i;
            }
            events += 4 * m;
        } else if (!strcmp(argv[1], "pread")) {
            for (long i = 0; i < m; i++)
                sink += pread(fd, buf, sizeof buf, (off_t)((done + i) % 256) * 4096);
            events += m;
        } else {
            return 2;
        }
        cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall += clock_ns(CLOCK_MONOTONIC) - t0;
        if (culprit_flush)
            culprit_flush();
    }
    fprintf(stderr, "%ld %ld %ld\n", events ? events : n, wall, cpu);
    return 0;
}
