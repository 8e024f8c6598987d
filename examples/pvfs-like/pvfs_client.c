/* pvfs_client: a client of the PVFS-like file service, modelled on seed 000's workloads.
 *
 *   write (ddw): write a file sequentially in records of nservers x chunk bytes; each record
 *                sends one chunk to every server at once and waits for all of them (PVFS's
 *                striping: 4 MiB per server per request in seed 000);
 *   read  (ddr): read the file back the same way (run `write` first with the same --name);
 *   meta  (postmark-like): a pool of small files (< 64 KiB, so each lives on one server) and
 *                transactions of create+write / remove, read / append, stat.
 *
 * The file wraps around at --file-size, so a run is bounded by --total bytes, --transactions, or
 * --duration seconds, whichever comes first. On exit it prints one line:
 *   mode=write bytes=N ops=N elapsed_s=F MBps=F
 *
 * Usage: pvfs_client --servers IP:PORT[,IP:PORT...] --mode write|read|meta [--name NAME]
 *        [--chunk BYTES] [--file-size BYTES] [--total BYTES] [--duration S]
 *        [--transactions N] [--files N] [--seed N] [--rate BYTES_PER_S]
 *
 * --rate caps write/read at that many payload bytes per second over the run (0: as fast as the
 * servers go). Uncapped, every server's disk is saturated and small differences between them
 * persist (the slowest one sets the pace of every record); a capped client leaves headroom, as
 * a service that is not always at its limit has.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

#define MAX_SERVERS 64

struct server {
    int fd;
    /* the request in flight */
    struct req_hdr req;
    const char *payload;
    size_t payload_len;
    char *rbuf;
    size_t sent, want_data, got_hdr, got_data;
    struct resp_hdr resp;
    int busy;
};

static struct server servers[MAX_SERVERS];
static int nservers;
static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fail(const char *what)
{
    fprintf(stderr, "pvfs_client: %s: %s\n", what, errno ? strerror(errno) : "protocol error");
    exit(1);
}

static int connect_to(const char *spec)
{
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host) {
        fprintf(stderr, "pvfs_client: bad server address %s (want IP:PORT)\n", spec);
        exit(2);
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "pvfs_client: bad server address %s\n", spec);
        exit(2);
    }
    int fd = -1;
    /* Servers may still be starting: retry for a few seconds. */
    for (int attempt = 0; attempt < 100; attempt++) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            fail("socket");
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            break;
        close(fd);
        fd = -1;
        usleep(50000);
    }
    if (fd < 0)
        fail(spec);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void start_request(struct server *s, uint32_t op, uint64_t handle, uint64_t off,
                          uint32_t len, const char *payload, size_t payload_len, char *rbuf)
{
    s->req = (struct req_hdr){.magic = PROTO_MAGIC, .op = op, .handle = handle, .offset = off,
                              .len = len, .namelen = op == OP_CREATE ? (uint32_t)payload_len : 0};
    s->payload = payload;
    s->payload_len = payload_len;
    s->rbuf = rbuf;
    s->sent = s->got_hdr = s->got_data = 0;
    s->want_data = op == OP_READ ? len : 0;
    s->busy = 1;
}

/* Drives all busy servers' requests to completion (non-blocking sockets, poll). */
static void run_requests(void)
{
    struct pollfd pfds[MAX_SERVERS];
    for (;;) {
        int active = 0;
        for (int i = 0; i < nservers; i++) {
            struct server *s = &servers[i];
            pfds[i].fd = s->busy ? s->fd : -1;
            size_t total_out = sizeof s->req + s->payload_len;
            pfds[i].events = s->sent < total_out ? POLLOUT : POLLIN;
            pfds[i].revents = 0;
            active += s->busy;
        }
        if (!active)
            return;
        int rc = poll(pfds, (nfds_t)nservers, 30000);
        if (rc < 0 && errno == EINTR)
            continue; /* a stop request: finish the record in flight, then stop */
        if (rc <= 0)
            fail("poll (a server did not answer for 30 s)");
        for (int i = 0; i < nservers; i++) {
            struct server *s = &servers[i];
            if (!s->busy || !pfds[i].revents)
                continue;
            size_t total_out = sizeof s->req + s->payload_len;
            if (s->sent < total_out) {
                ssize_t n;
                if (s->sent < sizeof s->req)
                    n = send(s->fd, (char *)&s->req + s->sent, sizeof s->req - s->sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
                else
                    n = send(s->fd, s->payload + (s->sent - sizeof s->req),
                             total_out - s->sent, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN)
                    fail("send");
                if (n > 0)
                    s->sent += (size_t)n;
                continue;
            }
            ssize_t n;
            if (s->got_hdr < sizeof s->resp)
                n = recv(s->fd, (char *)&s->resp + s->got_hdr, sizeof s->resp - s->got_hdr,
                         MSG_DONTWAIT);
            else
                n = recv(s->fd, s->rbuf + s->got_data, s->want_data - s->got_data, MSG_DONTWAIT);
            if (n == 0) {
                errno = 0;
                fail("server closed the connection");
            }
            if (n < 0) {
                if (errno == EAGAIN)
                    continue;
                fail("recv");
            }
            if (s->got_hdr < sizeof s->resp)
                s->got_hdr += (size_t)n;
            else
                s->got_data += (size_t)n;
            if (s->got_hdr == sizeof s->resp) {
                if (s->resp.magic != PROTO_MAGIC) {
                    errno = 0;
                    fail("bad response");
                }
                if (s->resp.status < 0 && s->req.op != OP_STAT) {
                    errno = -s->resp.status;
                    fail("server error");
                }
                if (s->resp.status < 0)
                    s->want_data = 0;
                if (s->got_data == s->want_data)
                    s->busy = 0;
            }
        }
    }
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (uint64_t)v;
}

/* --rate: payload bytes per second (0: no cap). */
static double rate_bps;

/* Sleeps until `moved` bytes since `t0` are within the --rate cap. */
static void pace(uint64_t moved, double t0)
{
    if (rate_bps <= 0)
        return;
    double ahead = t0 + (double)moved / rate_bps - now_s();
    while (ahead > 0 && !stopping) {
        double step = ahead < 0.2 ? ahead : 0.2; /* stay responsive to SIGTERM */
        struct timespec ts = {(time_t)step, (long)((step - (double)(time_t)step) * 1e9)};
        nanosleep(&ts, NULL);
        ahead -= step;
    }
}

/* Large sequential striped I/O (ddw / ddr). Returns bytes moved. */
static uint64_t run_stream(int write_mode, const char *name, uint64_t chunk, uint64_t file_size,
                           uint64_t total, double deadline, uint64_t *ops)
{
    uint64_t handle = name_hash(name) | 1;
    uint64_t per_server = file_size / (uint64_t)nservers / chunk * chunk;
    if (per_server < chunk)
        per_server = chunk;
    char *buf;
    if (posix_memalign((void **)&buf, PROTO_ALIGN, chunk * (uint64_t)nservers) != 0)
        fail("memory");
    memset(buf, write_mode ? 'w' : 0, chunk * (uint64_t)nservers);
    uint64_t moved = 0, off = 0;
    double t0 = now_s();
    while (!stopping && moved < total && now_s() < deadline) {
        pace(moved, t0);
        for (int i = 0; i < nservers; i++) {
            char *b = buf + (uint64_t)i * chunk;
            if (write_mode)
                start_request(&servers[i], OP_WRITE, handle, off, (uint32_t)chunk, b, chunk, NULL);
            else
                start_request(&servers[i], OP_READ, handle, off, (uint32_t)chunk, NULL, 0, b);
        }
        run_requests();
        moved += chunk * (uint64_t)nservers;
        *ops += (uint64_t)nservers;
        off += chunk;
        if (off >= per_server)
            off = 0;
    }
    free(buf);
    return moved;
}

struct small_file {
    uint64_t handle;
    int server;
    uint32_t size;
    int live;
};

static void one_request(int srv, uint32_t op, uint64_t handle, uint64_t off, uint32_t len,
                        const char *payload, size_t payload_len, char *rbuf)
{
    start_request(&servers[srv], op, handle, off, len, payload, payload_len, rbuf);
    run_requests();
}

static void meta_new_file(struct small_file *f, const char *client, int idx, uint64_t gen,
                          char *buf)
{
    char name[128];
    snprintf(name, sizeof name, "%s/f%d.%llu", client, idx, (unsigned long long)gen);
    f->server = (int)(name_hash(name) % (uint64_t)nservers);
    one_request(f->server, OP_CREATE, 0, 0, 0, name, strlen(name), NULL);
    f->handle = servers[f->server].resp.handle;
    f->size = (uint32_t)(512 + rng() % (16 * 1024 - 512)); /* PostMark's 512 B .. 16 KiB */
    one_request(f->server, OP_WRITE, f->handle, 0, f->size, buf, f->size, NULL);
    f->live = 1;
}

/* PostMark-like small-file, metadata-heavy transactions. Returns bytes moved. */
static uint64_t run_meta(const char *client, int nfiles, uint64_t transactions, double deadline,
                         uint64_t *ops)
{
    char *buf, *rbuf;
    if (posix_memalign((void **)&buf, PROTO_ALIGN, 64 * 1024) != 0 ||
        posix_memalign((void **)&rbuf, PROTO_ALIGN, 64 * 1024) != 0)
        fail("memory");
    memset(buf, 'p', 64 * 1024);
    struct small_file *files = calloc((size_t)nfiles, sizeof *files);
    uint64_t moved = 0, gen = 0;
    for (int i = 0; i < nfiles && !stopping; i++) {
        meta_new_file(&files[i], client, i, gen++, buf);
        moved += files[i].size;
        *ops += 2;
    }
    for (uint64_t t = 0; t < transactions && !stopping && now_s() < deadline; t++) {
        struct small_file *f = &files[rng() % (uint64_t)nfiles];
        int idx = (int)(f - files);
        /* PostMark: each transaction is a create-or-delete and a read-or-append. */
        if (rng() % 2) {
            if (f->live) {
                one_request(f->server, OP_REMOVE, f->handle, 0, 0, NULL, 0, NULL);
                f->live = 0;
            } else {
                meta_new_file(f, client, idx, gen++, buf);
                moved += f->size;
                (*ops)++;
            }
        } else {
            one_request(f->server, OP_STAT, f->handle, 0, 0, NULL, 0, NULL);
            (*ops)++;
        }
        (*ops)++;
        struct small_file *g = &files[rng() % (uint64_t)nfiles];
        if (!g->live)
            continue;
        if (rng() % 2) {
            one_request(g->server, OP_READ, g->handle, 0, g->size, NULL, 0, rbuf);
        } else {
            uint32_t add = (uint32_t)(512 + rng() % 4096);
            if (g->size + add > 48 * 1024)
                add = 0;
            g->size += add;
            /* append = rewrite the file's last aligned block(s) */
            uint64_t off = (g->size - add) / PROTO_ALIGN * PROTO_ALIGN;
            one_request(g->server, OP_WRITE, g->handle, off, (uint32_t)(g->size - off), buf,
                        g->size - off, NULL);
        }
        moved += g->size;
        (*ops)++;
    }
    for (int i = 0; i < nfiles; i++)
        if (files[i].live)
            one_request(files[i].server, OP_REMOVE, files[i].handle, 0, 0, NULL, 0, NULL);
    free(files);
    free(buf);
    free(rbuf);
    return moved;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pvfs_client --servers IP:PORT[,IP:PORT...] --mode write|read|meta\n"
            "       [--name NAME] [--chunk BYTES] [--file-size BYTES] [--total BYTES]\n"
            "       [--duration S] [--transactions N] [--files N] [--seed N]\n"
            "       [--rate BYTES_PER_S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    char *server_list = NULL;
    const char *mode = NULL, *name = "client0";
    uint64_t chunk = 256 * 1024, file_size = 64ull << 20, total = UINT64_MAX;
    uint64_t transactions = UINT64_MAX;
    double duration = 1e12;
    int nfiles = 200;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--servers"))
            server_list = strdup(v);
        else if (!strcmp(k, "--mode"))
            mode = v;
        else if (!strcmp(k, "--name"))
            name = v;
        else if (!strcmp(k, "--chunk"))
            chunk = parse_size(v);
        else if (!strcmp(k, "--file-size"))
            file_size = parse_size(v);
        else if (!strcmp(k, "--total"))
            total = parse_size(v);
        else if (!strcmp(k, "--duration"))
            duration = atof(v);
        else if (!strcmp(k, "--transactions"))
            transactions = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--files"))
            nfiles = atoi(v);
        else if (!strcmp(k, "--rate"))
            rate_bps = atof(v);
        else if (!strcmp(k, "--seed"))
            rng_state ^= strtoull(v, NULL, 10) * 0x9E3779B97F4A7C15ull;
        else
            usage();
    }
    if (!server_list || !mode || chunk == 0 || chunk % PROTO_ALIGN || chunk > PROTO_MAX_LEN ||
        nfiles <= 0)
        usage();
    rng_state ^= name_hash(name);
    for (char *tok = strtok(server_list, ","); tok; tok = strtok(NULL, ",")) {
        if (nservers == MAX_SERVERS)
            usage();
        servers[nservers++].fd = connect_to(tok);
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    double t0 = now_s(), deadline = t0 + duration;
    uint64_t ops = 0, bytes;
    if (!strcmp(mode, "write"))
        bytes = run_stream(1, name, chunk, file_size, total, deadline, &ops);
    else if (!strcmp(mode, "read"))
        bytes = run_stream(0, name, chunk, file_size, total, deadline, &ops);
    else if (!strcmp(mode, "meta"))
        bytes = run_meta(name, nfiles, transactions, deadline, &ops);
    else
        usage();
    double el = now_s() - t0;
    printf("mode=%s bytes=%llu ops=%llu elapsed_s=%.3f MBps=%.2f\n", mode,
           (unsigned long long)bytes, (unsigned long long)ops, el,
           el > 0 ? (double)bytes / el / 1e6 : 0.0);
    return 0;
}
