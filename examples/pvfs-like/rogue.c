/* rogue: the rogue processes of the fault injector (seed 000 §"Fault injection").
 *
 *   rogue diskhog FILE [BLOCK]   write and read back FILE with O_DIRECT in BLOCK-byte
 *                                requests (default 1 MiB) forever, like seed 000's `dd` disk hog
 *   rogue cpuhog                 spin on the CPU
 *   rogue netsink PORT           accept TCP connections and discard what arrives (write-network
 *                                hog's sink on the faulty node; read-network-hog's third party)
 *   rogue netsource IP:PORT      connect and send zeros forever (write-network-hog's third party;
 *                                read-network-hog's source on the faulty node)
 *
 * Each mode sets its process name (diskhog, cpuhog, netsink, netsource) so sample profiles name
 * the rogue, as seed 000's show `dd` and `socat`. Runs until killed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define ALIGN 4096

static void die(const char *what)
{
    fprintf(stderr, "rogue: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Seed 000's hog was a `dd` reading the disk. Here a node's disk is a blkio throttle budget,
 * and reads and writes have separate budgets, so the hog reads *and* writes (1:1, like a copy
 * job) to contend with whichever the server does. The file wraps at 64 MiB. */
_Noreturn static void diskhog(const char *path, size_t block)
{
    const size_t size = 64u << 20;
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
    if (fd < 0)
        die(path);
    char *buf;
    if (block == 0 || block % ALIGN || posix_memalign((void **)&buf, ALIGN, block) != 0)
        die("block size (a multiple of 4096)");
    memset(buf, 0x5a, block);
    const size_t span = size - size % block;
    for (off_t off = 0;; off = (off_t)(((size_t)off + block) % span)) {
        if (pwrite(fd, buf, block, off) < 0 && errno != EINTR)
            die("pwrite");
        if (pread(fd, buf, block, off) < 0 && errno != EINTR)
            die("pread");
    }
}

static volatile uint64_t spin_sink;
_Noreturn static void cpuhog(void)
{
    for (uint64_t i = 0;; i++)
        spin_sink += i * i;
}

static void *netsink_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    static char buf[1 << 16];
    while (recv(fd, buf, sizeof buf, 0) > 0) {
    }
    close(fd);
    return NULL;
}

_Noreturn static void netsink(int port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 16) != 0)
        die("bind/listen");
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, netsink_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

static int netsource(const char *spec)
{
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host) {
        fprintf(stderr, "rogue: bad address %s (want IP:PORT)\n", spec);
        return 2;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "rogue: bad address %s\n", spec);
        return 2;
    }
    static char zeros[1 << 16];
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(fd);
            usleep(100000);
            continue;
        }
        while (send(fd, zeros, sizeof zeros, MSG_NOSIGNAL) > 0) {
        }
        close(fd);
    }
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "diskhog")) {
        prctl(PR_SET_NAME, "diskhog");
        diskhog(argv[2], argc >= 4 ? (size_t)atol(argv[3]) : (1u << 20));
    }
    if (argc >= 2 && !strcmp(argv[1], "cpuhog")) {
        prctl(PR_SET_NAME, "cpuhog");
        cpuhog();
    }
    if (argc >= 3 && !strcmp(argv[1], "netsink")) {
        prctl(PR_SET_NAME, "netsink");
        netsink(atoi(argv[2]));
    }
    if (argc >= 3 && !strcmp(argv[1], "netsource")) {
        prctl(PR_SET_NAME, "netsource");
        return netsource(argv[2]);
    }
    fprintf(stderr, "usage: rogue diskhog FILE [BLOCK] | cpuhog | netsink PORT | netsource IP:PORT\n");
    return 2;
}
