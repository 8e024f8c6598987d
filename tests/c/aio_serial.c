/* Seed 003's AIO case (§4.2), small: a server-like loop keeps 16 reads of 64 KiB outstanding on
 * ONE descriptor of FILE for SECONDS, marking its own layer "request" (ADMIT when it submits a
 * read, CALLBACK when it has the data), in one of two ways:
 *
 *   aio   glibc's POSIX AIO (aio_read, aio_suspend, aio_return): glibc serves the requests of
 *         one descriptor with one helper thread, one pread at a time;
 *   pool  16 threads, each with one pread outstanding.
 *
 * Reads are O_DIRECT (when the file system allows it) at pseudo-random aligned offsets of a
 * 64 MiB file, so each one waits for the device. The file is written first if shorter. With
 * GOFILE, the reads start once that file exists (the sampler is ready).
 *
 *   aio_serial aio|pool FILE SECONDS [GOFILE]
 */
#define _GNU_SOURCE
#include <aio.h>
#include <culprit.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEPTH 16
#define REQ (64 * 1024)
#define FILE_SIZE (64L * 1024 * 1024)

static int fd;
static int layer;
static double end_at;
static uint64_t done_total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* xorshift: offsets spread over the file (no read-ahead to lean on). */
static off_t next_offset(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (off_t)(*s % (FILE_SIZE / REQ)) * REQ;
}

static void *aligned(void) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, REQ) != 0) {
        perror("posix_memalign");
        exit(1);
    }
    memset(p, 0, REQ);
    return p;
}

static int run_aio(void) {
    struct aiocb cbs[DEPTH];
    const struct aiocb *list[DEPTH];
    uint64_t seed = 88172645463325252ULL, id = 0, ids[DEPTH];
    memset(cbs, 0, sizeof cbs);
    for (int i = 0; i < DEPTH; i++) {
        cbs[i].aio_fildes = fd;
        cbs[i].aio_buf = aligned();
        cbs[i].aio_nbytes = REQ;
        list[i] = &cbs[i];
    }
    int live = 0;
    for (int i = 0; i < DEPTH; i++) {
        cbs[i].aio_offset = next_offset(&seed);
        ids[i] = ++id;
        culprit_io_admit(layer, ids[i], CULPRIT_IO_READ, 1, (uint64_t)cbs[i].aio_offset, REQ);
        if (aio_read(&cbs[i]) != 0) {
            perror("aio_read");
            return 1;
        }
        live++;
    }
    while (live > 0) {
        if (aio_suspend(list, DEPTH, NULL) != 0 && errno != EINTR) {
            perror("aio_suspend");
            return 1;
        }
        for (int i = 0; i < DEPTH; i++) {
            if (list[i] == NULL || aio_error(&cbs[i]) == EINPROGRESS)
                continue;
            ssize_t n = aio_return(&cbs[i]);
            if (n != REQ) {
                fprintf(stderr, "aio read: %zd\n", n);
                return 1;
            }
            culprit_io_callback(layer, ids[i], CULPRIT_IO_READ, 1, (uint64_t)cbs[i].aio_offset,
                                (uint64_t)n);
            done_total++;
            if (now() >= end_at) {
                list[i] = NULL;
                live--;
                continue;
            }
            cbs[i].aio_offset = next_offset(&seed);
            ids[i] = ++id;
            culprit_io_admit(layer, ids[i], CULPRIT_IO_READ, 1, (uint64_t)cbs[i].aio_offset, REQ);
            if (aio_read(&cbs[i]) != 0) {
                perror("aio_read");
                return 1;
            }
        }
    }
    return 0;
}

static void *worker(void *arg) {
    uint64_t seed = 88172645463325252ULL + (uintptr_t)arg * 7919, n_done = 0;
    uint64_t id = (uintptr_t)arg << 40;
    void *buf = aligned();
    while (now() < end_at) {
        off_t off = next_offset(&seed);
        id++;
        culprit_io_admit(layer, id, CULPRIT_IO_READ, 1, (uint64_t)off, REQ);
        ssize_t n = pread(fd, buf, REQ, off);
        if (n != REQ) {
            perror("pread");
            exit(1);
        }
        culprit_io_callback(layer, id, CULPRIT_IO_READ, 1, (uint64_t)off, (uint64_t)n);
        n_done++;
    }
    pthread_mutex_lock(&lock);
    done_total += n_done;
    pthread_mutex_unlock(&lock);
    free(buf);
    return NULL;
}

static int run_pool(void) {
    pthread_t t[DEPTH];
    for (uintptr_t i = 0; i < DEPTH; i++) {
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < DEPTH; i++)
        pthread_join(t[i], NULL);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5 || (strcmp(argv[1], "aio") != 0 && strcmp(argv[1], "pool") != 0)) {
        fprintf(stderr, "usage: aio_serial aio|pool FILE SECONDS [GOFILE]\n");
        return 2;
    }
    struct stat st;
    if (stat(argv[2], &st) != 0 || st.st_size < FILE_SIZE) {
        int w = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (w < 0) {
            perror("open for writing");
            return 1;
        }
        static char chunk[1 << 20];
        for (long i = 0; i < (long)sizeof chunk; i++)
            chunk[i] = (char)(i * 31);
        for (long off = 0; off < FILE_SIZE; off += sizeof chunk) {
            if (pwrite(w, chunk, sizeof chunk, off) != (ssize_t)sizeof chunk) {
                perror("pwrite");
                return 1;
            }
        }
        fsync(w);
        close(w);
    }
    int direct = 1;
    fd = open(argv[2], O_RDONLY | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
        direct = 0;
        fd = open(argv[2], O_RDONLY);
    }
    if (fd < 0) {
        perror("open");
        return 1;
    }
    layer = culprit_io_layer("request");
    if (argc == 5) {
        for (int i = 0; i < 6000 && access(argv[4], F_OK) != 0; i++)
            usleep(10000);
    }
    end_at = now() + atof(argv[3]);
    int rc = strcmp(argv[1], "aio") == 0 ? run_aio() : run_pool();
    printf("%s %s: %llu reads of %d KiB, %s\n", argv[1], rc == 0 ? "done" : "failed",
           (unsigned long long)done_total, REQ / 1024, direct ? "O_DIRECT" : "cached");
    close(fd);
    return rc;
}
