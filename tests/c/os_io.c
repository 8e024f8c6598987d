/* O_DIRECT writer for the OS-metrics tests (O_DIRECT so that blkio throttling reaches it).
 *   os_io DIR RATE TOTAL [CHILDREN]
 * Waits until DIR/go exists, forks CHILDREN children, then each process writes TOTAL bytes to
 * its own DIR/data.<pid> in 64 KiB O_DIRECT blocks, at most RATE bytes per second, writes its
 * pid to DIR/done.<pid> and sleeps until killed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (64 * 1024)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: os_io DIR RATE TOTAL [CHILDREN]\n");
        return 2;
    }
    const char *dir = argv[1];
    double rate = atof(argv[2]);
    long long total = atoll(argv[3]);
    int children = argc > 4 ? atoi(argv[4]) : 0;
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/go", dir);
    while (stat(path, &st) != 0)
        usleep(10000);
    for (int i = 0; i < children; i++) {
        pid_t p = fork();
        if (p < 0) {
            perror("fork");
            return 1;
        }
        if (p == 0)
            break;
    }
    snprintf(path, sizeof path, "%s/data.%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0) {
        perror("open O_DIRECT");
        return 1;
    }
    void *buf;
    if (posix_memalign(&buf, 4096, BLOCK) != 0)
        return 1;
    memset(buf, 0x5a, BLOCK);
    double t0 = now();
    for (long long done = 0; done < total; done += BLOCK) {
        if (write(fd, buf, BLOCK) != BLOCK) {
            perror("write");
            return 1;
        }
        double due = t0 + (done + BLOCK) / rate;
        double wait = due - now();
        if (wait > 0)
            usleep((useconds_t)(wait * 1e6));
    }
    close(fd);
    snprintf(path, sizeof path, "%s/done.%d", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
    }
    for (;;)
        pause();
}
