/* A server-like loop over two layers it marks itself (seed 003's ADMIT, ISSUE, COMPLETE,
 * CALLBACK): "request-queue" above "disk". Each request reads 4 KiB of FILE with pread (the C
 * library's layer below, when CULPRIT_IO=1) inside the disk layer; a slowed node's disk takes
 * DELAY_US more per request from FROM seconds on (a real sleep of the process, as a slow device
 * would block it).
 *
 *   layered_io FILE SECONDS DELAY_US FROM
 */
#define _GNU_SOURCE
#include <culprit.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: layered_io FILE SECONDS DELAY_US FROM\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    long delay_us = atol(argv[3]);
    double from = atof(argv[4]);
    int fd = open(argv[1], O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    static char buf[4096];
    for (int i = 0; i < 256; i++) {
        if (pwrite(fd, buf, sizeof buf, (off_t)i * 4096) != (ssize_t)sizeof buf) {
            perror("pwrite");
            return 1;
        }
    }
    int queue = culprit_io_layer("request-queue");
    int disk = culprit_io_layer("disk");
    if (queue < 0 || disk < 0) {
        fprintf(stderr, "culprit_io_layer: %d %d\n", queue, disk);
        return 1;
    }
    double start = now(), end = start + seconds;
    uint64_t req = 0;
    while (now() < end) {
        req++;
        uint64_t off = (req % 256) * 4096;
        culprit_io_admit(queue, req, CULPRIT_IO_READ, 1, off, 4096);
        culprit_io_issue(queue, req, CULPRIT_IO_READ, 1, off, 4096);
        culprit_io_admit(disk, req, CULPRIT_IO_READ, 1, off, 4096);
        culprit_io_issue(disk, req, CULPRIT_IO_READ, 1, off, 4096);
        ssize_t n = pread(fd, buf, sizeof buf, (off_t)off);
        if (n < 0) {
            perror("pread");
            return 1;
        }
        if (delay_us > 0 && now() >= start + from)
            sleep_us(delay_us);
        culprit_io_complete(disk, req, CULPRIT_IO_READ, 1, off, (uint64_t)n);
        culprit_io_callback(disk, req, CULPRIT_IO_READ, 1, off, (uint64_t)n);
        culprit_io_complete(queue, req, CULPRIT_IO_READ, 1, off, (uint64_t)n);
        culprit_io_callback(queue, req, CULPRIT_IO_READ, 1, off, (uint64_t)n);
        sleep_us(1000); /* think time: a request per millisecond or so */
    }
    printf("%llu requests\n", (unsigned long long)req);
    close(fd);
    return 0;
}
