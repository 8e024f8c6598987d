/* Marks layer-boundary I/O events through include/culprit.h and does C-library I/O that
 * CULPRIT_IO=1 records (tests/tests/layers.rs checks what the runtime wrote). Built without
 * -finstrument-functions: layer events alone make the runtime trace a program.
 *
 * Usage: layers MODE FILE
 *   marks   THREADS N   each of THREADS threads marks N requests at "top" (4 events each) and
 *                       N at "bottom" (ISSUE + COMPLETE); prints what the calls returned
 *   libc    -           pread/pwrite/preadv/read on FILE, read/write on a pipe, errors; checks
 *                       that errno is kept; prints the counts
 *   aio     N           N aio_read of FILE outstanding at once, then aio_suspend + aio_return
 *   burst   N           N marks at once in one thread (more than a thread's buffer holds)
 *   signals SECS        marks in a loop while SIGALRM handlers mark too, for SECS seconds
 *   held    N           pread on FILE in a loop while a signal handler holds the thread for
 *                       300 ms now and then, until N preads were held inside (the runtime
 *                       stamps a call's ISSUE when it starts and pushes it when it returns,
 *                       drains in between); prints how many calls were held. The handler
 *                       holds only a signal that came while the loop was in pread: one that
 *                       came between two calls holds no call (counted by wall time, such
 *                       holds made the test fail when no held call was seen by the runtime)
 */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "culprit.h"

/* Built without -lculprit_rt (-DLAYERS_WEAK), the program finds the API in the runtime that
 * LD_PRELOAD injects, as the header suggests for programs that must also run without it. */
#ifdef LAYERS_WEAK
#pragma weak culprit_io_layer
#pragma weak culprit_io_admit
#pragma weak culprit_io_issue
#pragma weak culprit_io_complete
#pragma weak culprit_io_callback
#endif

static int top, bottom;
static long per_thread;
static const char *path;

static void fail(const char *what)
{
    fprintf(stderr, "layers: %s\n", what);
    exit(1);
}

static void *marker(void *arg)
{
    long base = (long)arg * 1000000;
    long ok = 0;
    for (long i = 0; i < per_thread; i++) {
        uint64_t req = (uint64_t)(base + i);
        uint64_t off = (uint64_t)i * 65536;
        ok += culprit_io_admit(top, req, CULPRIT_IO_READ, 9, off, 65536) == 0;
        ok += culprit_io_issue(top, req, CULPRIT_IO_READ, 9, off, 65536) == 0;
        ok += culprit_io_issue(bottom, req, CULPRIT_IO_READ, 9, off, 65536) == 0;
        ok += culprit_io_complete(bottom, req, CULPRIT_IO_READ, 9, off, 65536) == 0;
        ok += culprit_io_complete(top, req, CULPRIT_IO_READ, 9, off, 65536) == 0;
        ok += culprit_io_callback(top, req, CULPRIT_IO_READ, 9, off, 65536) == 0;
    }
    return (void *)ok;
}

static int marks(int threads, long n)
{
    per_thread = n;
    pthread_t t[64];
    long ok = 0;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, marker, (void *)(long)i) != 0)
            fail("pthread_create");
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        ok += (long)r;
    }
    printf("marked %ld bad-layer %d %d\n", ok,
           culprit_io_admit(63, 1, CULPRIT_IO_READ, 0, 0, 1),
           culprit_io_admit(-1, 1, CULPRIT_IO_READ, 0, 0, 1));
    return 0;
}

#define EXPECT_ERRNO(call, want)                                                                  \
    do {                                                                                       \
        errno = 0;                                                                             \
        (void)(call);                                                                          \
        if (errno != (want)) {                                                                 \
            fprintf(stderr, "layers: %s: errno %d, want %d\n", #call, errno, (want));          \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static int libc_calls(void)
{
    char buf[8192];
    memset(buf, 'x', sizeof buf);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        fail("open");
    /* 3 pwrite + 4 pread + 1 preadv + 1 pwritev + 2 read = 11 calls on the file. */
    for (int i = 0; i < 3; i++)
        if (pwrite(fd, buf, 4096, (off_t)i * 4096) != 4096)
            fail("pwrite");
    for (int i = 0; i < 4; i++) {
        errno = 1234; /* a successful call leaves errno alone */
        if (pread(fd, buf, 4096, (off_t)i * 4096) < 0 || errno != 1234)
            fail("pread / errno kept on success");
    }
    struct iovec iov[2] = {{buf, 1000}, {buf + 1000, 1000}};
    if (preadv(fd, iov, 2, 0) != 2000)
        fail("preadv");
    if (pwritev(fd, iov, 2, 20000) != 2000)
        fail("pwritev");
    lseek(fd, 0, SEEK_SET);
    if (read(fd, buf, 100) != 100 || read(fd, buf, 100) != 100)
        fail("read");
    /* Errors keep the C library's errno: a read past EOF is fine, these are not. */
    EXPECT_ERRNO(pread(fd, buf, 10, -1), EINVAL);
    EXPECT_ERRNO(read(-5, buf, 1), EBADF);
    EXPECT_ERRNO(pwrite(12345, buf, 1, 0), EBADF);
    /* A pipe is not a file: not recorded. */
    int p[2];
    if (pipe(p) != 0)
        fail("pipe");
    for (int i = 0; i < 5; i++) {
        if (write(p[1], "abc", 3) != 3 || read(p[0], buf, 3) != 3)
            fail("pipe io");
    }
    /* The pipe's numbers now name a file (dup2 over one): recorded again. */
    if (dup2(fd, p[0]) != p[0])
        fail("dup2");
    if (pread(p[0], buf, 512, 0) != 512)
        fail("pread dup");
    close(p[0]);
    close(p[1]);
    close(fd);
    printf("libc ok\n");
    return 0;
}

static int aio(int n)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        fail("open");
    static char data[65536];
    for (int i = 0; i < n; i++)
        if (pwrite(fd, data, sizeof data, (off_t)i * 65536) != (ssize_t)sizeof data)
            fail("pwrite");
    struct aiocb *cbs = calloc((size_t)n, sizeof *cbs);
    char *bufs = malloc((size_t)n * 65536);
    for (int i = 0; i < n; i++) {
        cbs[i].aio_fildes = fd;
        cbs[i].aio_offset = (off_t)i * 65536;
        cbs[i].aio_buf = bufs + (size_t)i * 65536;
        cbs[i].aio_nbytes = 65536;
        if (aio_read(&cbs[i]) != 0)
            fail("aio_read");
    }
    long done = 0;
    for (int i = 0; i < n; i++) {
        const struct aiocb *one[1] = {&cbs[i]};
        while (aio_error(&cbs[i]) == EINPROGRESS)
            aio_suspend(one, 1, NULL);
        if (aio_return(&cbs[i]) == 65536)
            done++;
    }
    printf("aio done %ld\n", done);
    close(fd);
    return 0;
}

static int burst(long n)
{
    long ok = 0, dropped = 0;
    for (long i = 0; i < n; i++) {
        int r = culprit_io_issue(bottom, (uint64_t)i, CULPRIT_IO_WRITE, 1, 0, 1);
        ok += r == 0;
        dropped += r == -3;
    }
    printf("burst ok %ld dropped %ld\n", ok, dropped);
    return 0;
}

static volatile long handler_ok, handler_dropped;

static void on_alarm(int sig)
{
    (void)sig;
    int e = errno;
    int r = culprit_io_admit(top, 7, CULPRIT_IO_READ, 1, 0, 1);
    if (r == 0)
        handler_ok++;
    else if (r == -3)
        handler_dropped++;
    errno = e;
}

static int signals(int secs)
{
    struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 500}, {0, 500}};
    setitimer(ITIMER_REAL, &it, NULL);
    long ok = 0, dropped = 0;
    time_t end = time(NULL) + secs;
    while (time(NULL) < end) {
        for (int i = 0; i < 1000; i++) {
            int r = culprit_io_complete(bottom, (uint64_t)i, CULPRIT_IO_READ, 1, 0, 1);
            ok += r == 0;
            dropped += r == -3;
        }
        usleep(2000); /* leave the flusher time to drain */
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("signals ok %ld dropped %ld handler_ok %ld handler_dropped %ld\n", ok, dropped,
           handler_ok, handler_dropped);
    return 0;
}

static volatile sig_atomic_t holds;
static volatile sig_atomic_t looping = 1;
static volatile sig_atomic_t in_call;
static volatile sig_atomic_t held_in_call;
static pthread_t holder_target;

static void on_hold(int sig)
{
    (void)sig;
    int e = errno;
    if (in_call) {
        struct timespec ts = {0, 300000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        held_in_call++;
    }
    holds++;
    errno = e;
}

/* Signals the pread loop every 2 ms, one signal per hold. */
static void *holder(void *arg)
{
    (void)arg;
    while (looping) {
        sig_atomic_t seen = holds;
        usleep(2000);
        pthread_kill(holder_target, SIGUSR1);
        while (looping && holds == seen)
            usleep(1000);
    }
    return NULL;
}

static int held(int n)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        fail("open");
    static char buf[4096];
    if (pwrite(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf)
        fail("pwrite");
    struct sigaction sa = {.sa_handler = on_hold, .sa_flags = SA_RESTART};
    sigaction(SIGUSR1, &sa, NULL);
    holder_target = pthread_self();
    pthread_t t;
    if (pthread_create(&t, NULL, holder, NULL) != 0)
        fail("pthread_create");
    for (long i = 0; held_in_call < n && i < 10000000; i++) {
        in_call = 1;
        ssize_t r = pread(fd, buf, sizeof buf, 0);
        in_call = 0;
        if (r != (ssize_t)sizeof buf)
            fail("pread");
    }
    looping = 0;
    pthread_join(t, NULL);
    close(fd);
    printf("held %d\n", (int)held_in_call);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        fail("usage: layers MODE ARG [ARG]");
    top = culprit_io_layer("top");
    bottom = culprit_io_layer("bottom");
    printf("layers %d %d again %d bad %d %d\n", top, bottom, culprit_io_layer("top"),
           culprit_io_layer(""), culprit_io_layer(NULL));
    const char *mode = argv[1];
    path = getenv("LAYERS_FILE") ? getenv("LAYERS_FILE") : "/tmp/culprit-layers-test";
    if (!strcmp(mode, "marks") && argc == 4)
        return marks(atoi(argv[2]), atol(argv[3]));
    if (!strcmp(mode, "libc"))
        return libc_calls();
    if (!strcmp(mode, "aio"))
        return aio(atoi(argv[2]));
    if (!strcmp(mode, "burst"))
        return burst(atol(argv[2]));
    if (!strcmp(mode, "signals"))
        return signals(atoi(argv[2]));
    if (!strcmp(mode, "held"))
        return held(atoi(argv[2]));
    fail("unknown mode");
    return 2;
}
