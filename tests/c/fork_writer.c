/* A server that forks a child to rewrite its log, as a key-value server does, for the
 * stuck-or-busy tests (tests/tests/verdicts.rs).
 *   fork_writer DIR SECS BYTES
 * The server handles requests (serve_request, ~1 ms each) for SECS seconds. Once DIR/go exists
 * it forks a child that rewrites its log: rewrite_log writes BYTES to DIR/log.<pid> in 64 KiB
 * O_DIRECT blocks (write_block, one write each), then exits; the server forks the next rewrite
 * when a child has ended and 3 s have passed since the last one began. At the end the server
 * kills a child still writing. On a node whose disk is throttled the child is inside rewrite_log for
 * a long time, while its write_block calls keep returning: busy, not stuck. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (64 * 1024)

static volatile long sink;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void write_block(int fd, void *buf)
{
    if (write(fd, buf, BLOCK) != BLOCK) {
        perror("write");
        _exit(1);
    }
}

__attribute__((noinline)) void rewrite_log(const char *dir, long long bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/log.%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0) {
        perror("open");
        _exit(1);
    }
    void *buf;
    if (posix_memalign(&buf, 4096, BLOCK) != 0)
        _exit(1);
    memset(buf, 'x', BLOCK);
    for (long long done = 0; done < bytes; done += BLOCK)
        write_block(fd, buf);
    close(fd);
    unlink(path);
}

__attribute__((noinline)) void serve_request(int n)
{
    for (int i = 0; i < 1000; i++)
        sink += i * n;
    usleep(1000);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: fork_writer DIR SECS BYTES\n");
        return 2;
    }
    const char *dir = argv[1];
    double secs = atof(argv[2]);
    long long bytes = atoll(argv[3]);
    char go[4096];
    snprintf(go, sizeof go, "%s/go", dir);
    struct stat st;
    pid_t child = 0;
    double end = now() + secs, forked_at = -1e9;
    for (int n = 0; now() < end; n++) {
        serve_request(n);
        if (child > 0 && waitpid(child, 0, WNOHANG) == child)
            child = 0;
        if (child == 0 && now() - forked_at >= 3 && stat(go, &st) == 0) {
            forked_at = now();
            child = fork();
            if (child == 0) {
                rewrite_log(dir, bytes);
                _exit(0);
            }
        }
    }
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, 0, 0);
    }
    return 0;
}
