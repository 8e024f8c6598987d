/* pvfs_server: the I/O server daemon of the PVFS-like file service.
 *
 * Built with -finstrument-functions so culprit's runtime can trace it. It has the structure that
 * makes PVFS diagnosable (seed 000 §"Experimental set-up", §"Results"):
 *
 *   - one network thread runs net_poll_loop(): epoll over non-blocking sockets, one non-blocking
 *     recv per readable event (as PVFS's BMI/TCP does), sends when the socket is writable;
 *   - each connection carries a request state machine (sm_recv_header → sm_recv_payload →
 *     sm_dispatch → [I/O thread] → sm_complete → sm_send_response);
 *   - a pool of I/O threads does the blocking storage work with O_DIRECT on the server's own
 *     storage directory (io_pwrite, io_pread, meta_create, meta_remove, meta_stat), like PVFS's
 *     trove/dbpf threads with the Direct I/O method, and signals completions through an eventfd.
 *     With --thread-per-request a new thread does each request's storage work instead (as
 *     file-system servers that start a thread per I/O do: thread churn is the cost measured by
 *     benches/tracer/churn).
 *   - it marks its own I/O layers at their boundaries (seed 003, Lu & Shen: ADMIT, ISSUE,
 *     COMPLETE, CALLBACK of each request): "request" (the state machine, from a whole header to
 *     the response sent), "io-queue" (from io_submit to the completion pushed back) and "disk"
 *     (the storage work itself), so `culprit diagnose` can compare the layers across servers and
 *     name the lowest one that is anomalous.
 *
 * Usage: pvfs_server --dir DIR [--port N] [--bind ADDR] [--threads N] [--thread-per-request]
 * Stops on SIGTERM/SIGINT and prints its counters on stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

/* culprit's I/O layer marks (include/culprit.h of culprit; declared here so the server builds
 * from this directory alone). Weak: without the runtime they are null and nothing is marked. */
int culprit_io_layer(const char *name) __attribute__((weak));
int culprit_io_admit(int, uint64_t, int, uint64_t, uint64_t, uint64_t) __attribute__((weak));
int culprit_io_issue(int, uint64_t, int, uint64_t, uint64_t, uint64_t) __attribute__((weak));
int culprit_io_complete(int, uint64_t, int, uint64_t, uint64_t, uint64_t) __attribute__((weak));
int culprit_io_callback(int, uint64_t, int, uint64_t, uint64_t, uint64_t) __attribute__((weak));
#define CULPRIT_IO_OTHER 0
#define CULPRIT_IO_READ 1
#define CULPRIT_IO_WRITE 2
#define CULPRIT_IO_NO_OFFSET UINT64_MAX
/* culprit's request marks (seed 004): weak likewise. */
int culprit_request_begin(uint64_t id, uint64_t type, uint64_t parent) __attribute__((weak));
int culprit_request_end(uint64_t id) __attribute__((weak));

#define MAX_CONNS 1024
#define META_SLOTS 4096u

enum conn_state { ST_RECV_HEADER, ST_RECV_PAYLOAD, ST_WAIT_IO, ST_SEND_RESPONSE };

struct conn {
    int fd;
    enum conn_state state;
    struct req_hdr req;
    size_t hdr_got;
    char *buf; /* O_DIRECT-aligned payload buffer */
    size_t buf_cap;
    size_t payload_want;
    size_t payload_got;
    struct resp_hdr resp;
    size_t resp_sent;
    size_t data_len; /* READ payload bytes to send after the header */
    size_t data_sent;
    uint64_t req_id; /* culprit's request id of the request in flight (its parts: | 1, | 2) */
};

struct io_job {
    struct conn *conn;
    struct io_job *next;
};

static const char *storage_dir;
static int meta_fd = -1;
static int epfd = -1;
static int completion_efd = -1;
static volatile sig_atomic_t stopping;
static int thread_per_request;
static atomic_int requests_in_threads;

static pthread_mutex_t queue_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cv = PTHREAD_COND_INITIALIZER;
static struct io_job *queue_head, *queue_tail;
static int queue_closed;

static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static struct io_job *done_head;

static atomic_ullong stat_requests, stat_bytes_read, stat_bytes_written, stat_meta_ops;
static atomic_ullong stat_recv_calls, stat_send_calls;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static void die(const char *what)
{
    fprintf(stderr, "pvfs_server: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ---- I/O layer marks ------------------------------------------------------------------------ */

/* Layer ids, top-down; -1 when the runtime is absent. */
static int layer_request = -1, layer_queue = -1, layer_disk = -1;

static void layers_init(void) __attribute__((no_instrument_function));
static void layers_init(void)
{
    if (!culprit_io_layer)
        return;
    layer_request = culprit_io_layer("request");
    layer_queue = culprit_io_layer("io-queue");
    layer_disk = culprit_io_layer("disk");
}

typedef int (*io_mark_fn)(int, uint64_t, int, uint64_t, uint64_t, uint64_t);

/* Marks `c`'s request (its id is the connection: one request in flight per connection) at
 * `layer` with `fn`, one of culprit_io_admit & co. Not traced itself: the function profile
 * stays the server's. */
static void io_mark(io_mark_fn fn, int layer, const struct conn *c, uint64_t bytes)
    __attribute__((no_instrument_function));
static void io_mark(io_mark_fn fn, int layer, const struct conn *c, uint64_t bytes)
{
    if (!fn || layer < 0)
        return;
    const struct req_hdr *r = &c->req;
    int data = r->op == OP_READ || r->op == OP_WRITE;
    int op = r->op == OP_READ ? CULPRIT_IO_READ : r->op == OP_WRITE ? CULPRIT_IO_WRITE : CULPRIT_IO_OTHER;
    fn(layer, (uint64_t)(uintptr_t)c, op, r->handle, data ? r->offset : CULPRIT_IO_NO_OFFSET,
       data ? bytes : 0);
}

/* culprit's request marks (seed 004): a request is three parts on two threads — dispatch on
 * the network thread (the root, id `c->req_id`), the storage work on an I/O thread (id | 1)
 * and the response on the network thread (id | 2), the last two handed off with the root's
 * id as parent, so culprit sees one call tree per request. Ids are unique per host: the pid
 * and a counter. Not traced themselves. */
static void req_begin(const struct conn *c, uint64_t part) __attribute__((no_instrument_function));
static void req_begin(const struct conn *c, uint64_t part)
{
    if (culprit_request_begin)
        culprit_request_begin(c->req_id | part, c->req.op, part ? c->req_id : 0);
}

static void req_end(const struct conn *c, uint64_t part) __attribute__((no_instrument_function));
static void req_end(const struct conn *c, uint64_t part)
{
    if (culprit_request_end)
        culprit_request_end(c->req_id | part);
}

/* ---- storage (runs on I/O threads) ---------------------------------------------------------- */

static void io_handle_path(uint64_t handle, char *out, size_t n)
{
    snprintf(out, n, "%s/h%016llx", storage_dir, (unsigned long long)handle);
}

static int io_open_handle(uint64_t handle, int create)
{
    char path[4096];
    io_handle_path(handle, path, sizeof path);
    return open(path, O_RDWR | O_DIRECT | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
}

static int64_t io_pwrite(uint64_t handle, const char *buf, size_t len, uint64_t off)
{
    int fd = io_open_handle(handle, 1);
    if (fd < 0)
        return -errno;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            return -e;
        }
        done += (size_t)n;
    }
    close(fd);
    atomic_fetch_add(&stat_bytes_written, done);
    return (int64_t)done;
}

static int64_t io_pread(uint64_t handle, char *buf, size_t len, uint64_t off)
{
    int fd = io_open_handle(handle, 0);
    if (fd < 0)
        return -errno;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            return -e;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    /* A short read past the end of a stripe reads as zeros, like a sparse file. */
    memset(buf + done, 0, len - done);
    atomic_fetch_add(&stat_bytes_read, len);
    return (int64_t)len;
}

/* The metadata "database": one O_DIRECT block per handle slot in meta.db, written
 * synchronously, as PVFS's metadata operations go to its keyval store. */
static int meta_write_record(uint64_t handle, uint64_t size, int live)
{
    char *rec;
    if (posix_memalign((void **)&rec, PROTO_ALIGN, PROTO_ALIGN) != 0)
        return -ENOMEM;
    memset(rec, 0, PROTO_ALIGN);
    uint64_t fields[4] = {handle, size, (uint64_t)time(NULL), (uint64_t)live};
    memcpy(rec, fields, sizeof fields);
    ssize_t n = pwrite(meta_fd, rec, PROTO_ALIGN, (off_t)(handle % META_SLOTS) * PROTO_ALIGN);
    int rc = n == (ssize_t)PROTO_ALIGN ? 0 : -(errno ? errno : EIO);
    free(rec);
    return rc;
}

static int meta_read_record(uint64_t handle, uint64_t *size)
{
    char *rec;
    if (posix_memalign((void **)&rec, PROTO_ALIGN, PROTO_ALIGN) != 0)
        return -ENOMEM;
    ssize_t n = pread(meta_fd, rec, PROTO_ALIGN, (off_t)(handle % META_SLOTS) * PROTO_ALIGN);
    int rc = -ENOENT;
    if (n == (ssize_t)PROTO_ALIGN) {
        uint64_t fields[4];
        memcpy(fields, rec, sizeof fields);
        if (fields[0] == handle && fields[3]) {
            *size = fields[1];
            rc = 0;
        }
    }
    free(rec);
    return rc;
}

static uint64_t meta_hash_name(const char *name, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)name[i];
        h *= 1099511628211ull;
    }
    return h | 1;
}

static int64_t meta_create(const char *name, size_t n, uint64_t *handle)
{
    *handle = meta_hash_name(name, n);
    int fd = io_open_handle(*handle, 1);
    if (fd < 0)
        return -errno;
    close(fd);
    atomic_fetch_add(&stat_meta_ops, 1);
    return meta_write_record(*handle, 0, 1);
}

static int64_t meta_remove(uint64_t handle)
{
    char path[4096];
    io_handle_path(handle, path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT)
        return -errno;
    atomic_fetch_add(&stat_meta_ops, 1);
    return meta_write_record(handle, 0, 0);
}

static int64_t meta_stat(uint64_t handle, uint64_t *size)
{
    char path[4096];
    struct stat st;
    io_handle_path(handle, path, sizeof path);
    atomic_fetch_add(&stat_meta_ops, 1);
    int rc = meta_read_record(handle, size);
    if (rc == 0 && stat(path, &st) == 0)
        *size = (uint64_t)st.st_size;
    return rc;
}

/* Runs one request's storage work; fills the response. */
static void io_execute(struct conn *c)
{
    struct req_hdr *r = &c->req;
    int64_t rc = 0;
    uint64_t value = 0, handle = r->handle;
    req_begin(c, 1);
    io_mark(culprit_io_admit, layer_disk, c, r->len);
    io_mark(culprit_io_issue, layer_disk, c, r->len);
    switch (r->op) {
    case OP_WRITE:
        rc = io_pwrite(handle, c->buf, proto_round_up(r->len), r->offset);
        break;
    case OP_READ:
        rc = io_pread(handle, c->buf, proto_round_up(r->len), r->offset);
        value = r->len;
        break;
    case OP_CREATE:
        rc = meta_create(c->buf, r->namelen, &handle);
        break;
    case OP_REMOVE:
        rc = meta_remove(handle);
        break;
    case OP_STAT:
        rc = meta_stat(handle, &value);
        break;
    default:
        rc = -EINVAL;
    }
    c->resp.magic = PROTO_MAGIC;
    c->resp.status = rc < 0 ? (int32_t)rc : 0;
    c->resp.handle = handle;
    c->resp.value = rc < 0 ? 0 : value;
    c->data_len = (r->op == OP_READ && rc >= 0) ? r->len : 0;
    uint64_t done = rc < 0 ? 0 : r->len;
    io_mark(culprit_io_complete, layer_disk, c, done);
    io_mark(culprit_io_callback, layer_disk, c, done);
    req_end(c, 1);
}

static void io_complete_push(struct io_job *job)
{
    io_mark(culprit_io_complete, layer_queue, job->conn, job->conn->req.len);
    io_mark(culprit_io_callback, layer_queue, job->conn, job->conn->req.len);
    pthread_mutex_lock(&done_mu);
    job->next = done_head;
    done_head = job;
    pthread_mutex_unlock(&done_mu);
    uint64_t one = 1;
    if (write(completion_efd, &one, sizeof one) < 0 && errno != EAGAIN)
        perror("pvfs_server: eventfd write");
}

static struct io_job *io_queue_pop(void)
{
    pthread_mutex_lock(&queue_mu);
    while (!queue_head && !queue_closed)
        pthread_cond_wait(&queue_cv, &queue_mu);
    struct io_job *job = queue_head;
    if (job) {
        queue_head = job->next;
        if (!queue_head)
            queue_tail = NULL;
    }
    pthread_mutex_unlock(&queue_mu);
    return job;
}

static void io_queue_push(struct io_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&queue_mu);
    if (queue_tail)
        queue_tail->next = job;
    else
        queue_head = job;
    queue_tail = job;
    pthread_cond_signal(&queue_cv);
    pthread_mutex_unlock(&queue_mu);
}

/* --thread-per-request: one detached thread per request. */
static void *io_request_thread(void *arg)
{
    struct io_job *job = arg;
    io_mark(culprit_io_issue, layer_queue, job->conn, job->conn->req.len);
    io_execute(job->conn);
    io_complete_push(job);
    atomic_fetch_sub(&requests_in_threads, 1);
    return NULL;
}

static void io_submit(struct io_job *job)
{
    io_mark(culprit_io_admit, layer_queue, job->conn, job->conn->req.len);
    if (thread_per_request) {
        pthread_attr_t attr;
        pthread_t t;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        atomic_fetch_add(&requests_in_threads, 1);
        int rc = pthread_create(&t, &attr, io_request_thread, job);
        pthread_attr_destroy(&attr);
        if (rc == 0)
            return;
        atomic_fetch_sub(&requests_in_threads, 1);
    }
    io_queue_push(job);
}

static void *io_worker(void *arg)
{
    (void)arg;
    struct io_job *job;
    while ((job = io_queue_pop()) != NULL) {
        io_mark(culprit_io_issue, layer_queue, job->conn, job->conn->req.len);
        io_execute(job->conn);
        io_complete_push(job);
    }
    return NULL;
}

/* ---- network and request state machines (network thread) ---------------------------------- */

/* One non-blocking recv. Returns bytes, 0 on EOF, -1 when nothing is ready, -2 on error. */
static ssize_t net_recv(int fd, void *buf, size_t n)
{
    atomic_fetch_add(&stat_recv_calls, 1);
    ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
    if (r >= 0)
        return r;
    return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? -1 : -2;
}

/* One non-blocking send. Returns bytes, -1 when the socket is full, -2 on error. */
static ssize_t net_send(int fd, const void *buf, size_t n)
{
    atomic_fetch_add(&stat_send_calls, 1);
    ssize_t r = send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r >= 0)
        return r;
    return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? -1 : -2;
}

static void net_watch(struct conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        perror("pvfs_server: epoll_ctl");
}

static void net_close(struct conn *c)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->buf);
    free(c);
}

static int sm_reserve(struct conn *c, size_t want)
{
    size_t cap = proto_round_up((uint32_t)want);
    if (cap == 0)
        cap = PROTO_ALIGN;
    if (cap <= c->buf_cap)
        return 0;
    free(c->buf);
    c->buf = NULL;
    c->buf_cap = 0;
    if (posix_memalign((void **)&c->buf, PROTO_ALIGN, cap) != 0)
        return -1;
    c->buf_cap = cap;
    return 0;
}

static void sm_dispatch(struct conn *c)
{
    struct io_job *job = malloc(sizeof *job);
    if (!job) {
        net_close(c);
        return;
    }
    job->conn = c;
    static uint64_t next_req;
    c->req_id = (uint64_t)getpid() << 32 | (++next_req & 0x3fffffffu) << 2;
    req_begin(c, 0);
    c->state = ST_WAIT_IO;
    net_watch(c, 0); /* the client sends nothing more until it has our answer */
    atomic_fetch_add(&stat_requests, 1);
    io_mark(culprit_io_issue, layer_request, c, c->req.len);
    uint64_t id = c->req_id;
    io_submit(job);
    if (culprit_request_end)
        culprit_request_end(id); /* `c` belongs to the I/O thread now */
}

/* Returns 0 to keep the connection, -1 to close it. */
static int sm_start_request(struct conn *c)
{
    struct req_hdr *r = &c->req;
    if (r->magic != PROTO_MAGIC || r->len > PROTO_MAX_LEN || r->namelen > PROTO_MAX_NAME)
        return -1;
    if ((r->op == OP_WRITE || r->op == OP_READ) && r->offset % PROTO_ALIGN != 0)
        return -1;
    size_t need = r->op == OP_CREATE ? r->namelen : r->len;
    if (need == 0)
        need = 1;
    if (sm_reserve(c, need) != 0)
        return -1;
    io_mark(culprit_io_admit, layer_request, c, r->len);
    c->payload_got = 0;
    c->payload_want = r->op == OP_WRITE ? r->len : r->op == OP_CREATE ? r->namelen : 0;
    if (r->op == OP_WRITE)
        memset(c->buf + r->len, 0, proto_round_up(r->len) - r->len);
    if (c->payload_want > 0) {
        c->state = ST_RECV_PAYLOAD;
        return 0;
    }
    sm_dispatch(c);
    return 0;
}

static int sm_recv_header(struct conn *c)
{
    ssize_t n = net_recv(c->fd, (char *)&c->req + c->hdr_got, sizeof c->req - c->hdr_got);
    if (n == -1)
        return 0;
    if (n <= 0)
        return -1;
    c->hdr_got += (size_t)n;
    if (c->hdr_got < sizeof c->req)
        return 0;
    c->hdr_got = 0;
    return sm_start_request(c);
}

static int sm_recv_payload(struct conn *c)
{
    ssize_t n = net_recv(c->fd, c->buf + c->payload_got, c->payload_want - c->payload_got);
    if (n == -1)
        return 0;
    if (n <= 0)
        return -1;
    c->payload_got += (size_t)n;
    if (c->payload_got == c->payload_want)
        sm_dispatch(c);
    return 0;
}

static int sm_send_response(struct conn *c)
{
    while (c->resp_sent < sizeof c->resp) {
        ssize_t n = net_send(c->fd, (char *)&c->resp + c->resp_sent, sizeof c->resp - c->resp_sent);
        if (n == -1)
            return 0;
        if (n < 0)
            return -1;
        c->resp_sent += (size_t)n;
    }
    /* PVFS writes again whenever the socket has room: one send per writable event. */
    if (c->data_sent < c->data_len) {
        ssize_t n = net_send(c->fd, c->buf + c->data_sent, c->data_len - c->data_sent);
        if (n == -2)
            return -1;
        if (n > 0)
            c->data_sent += (size_t)n;
        if (c->data_sent < c->data_len)
            return 0;
    }
    io_mark(culprit_io_callback, layer_request, c, c->req.len);
    c->state = ST_RECV_HEADER;
    net_watch(c, EPOLLIN);
    return 0;
}

/* A request's storage work finished: start sending its response. */
static void sm_complete(struct conn *c)
{
    io_mark(culprit_io_complete, layer_request, c, c->req.len);
    req_begin(c, 2);
    uint64_t id = c->req_id | 2;
    c->state = ST_SEND_RESPONSE;
    c->resp_sent = 0;
    c->data_sent = 0;
    if (sm_send_response(c) != 0) {
        net_close(c);
    } else if (c->state == ST_SEND_RESPONSE) {
        net_watch(c, EPOLLOUT);
    }
    if (culprit_request_end)
        culprit_request_end(id);
}

static void io_completions_drain(void)
{
    uint64_t cnt;
    if (read(completion_efd, &cnt, sizeof cnt) < 0 && errno != EAGAIN)
        perror("pvfs_server: eventfd read");
    pthread_mutex_lock(&done_mu);
    struct io_job *job = done_head;
    done_head = NULL;
    pthread_mutex_unlock(&done_mu);
    while (job) {
        struct io_job *next = job->next;
        sm_complete(job->conn);
        free(job);
        job = next;
    }
}

static void net_accept(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->state = ST_RECV_HEADER;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(c);
        }
    }
}

static void sm_on_event(struct conn *c, uint32_t events)
{
    int rc = 0;
    if (events & (EPOLLERR | EPOLLHUP)) {
        rc = -1;
    } else if (c->state == ST_RECV_HEADER && (events & EPOLLIN)) {
        rc = sm_recv_header(c);
    } else if (c->state == ST_RECV_PAYLOAD && (events & EPOLLIN)) {
        rc = sm_recv_payload(c);
    } else if (c->state == ST_SEND_RESPONSE && (events & EPOLLOUT)) {
        rc = sm_send_response(c);
    }
    if (rc != 0 && c->state != ST_WAIT_IO)
        net_close(c);
}

static struct conn listen_tag, completion_tag;

static void net_poll_loop(int lfd)
{
    struct epoll_event evs[64];
    while (!stopping) {
        int n = epoll_wait(epfd, evs, 64, 200);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c == &listen_tag)
                net_accept(lfd);
            else if (c == &completion_tag)
                io_completions_drain();
            else
                sm_on_event(c, evs[i].events);
        }
    }
}

static int net_listen(const char *addr, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "pvfs_server: bad --bind address %s\n", addr);
        exit(2);
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        die("bind");
    if (listen(fd, 128) != 0)
        die("listen");
    return fd;
}

static void usage(void)
{
    fprintf(stderr, "usage: pvfs_server --dir DIR [--port N] [--bind ADDR] [--threads N] "
                    "[--thread-per-request]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *bind_addr = "0.0.0.0";
    int port = 3334, nthreads = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--thread-per-request")) {
            thread_per_request = 1;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--dir"))
            storage_dir = argv[++i];
        else if (!strcmp(argv[i], "--port"))
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bind"))
            bind_addr = argv[++i];
        else if (!strcmp(argv[i], "--threads"))
            nthreads = atoi(argv[++i]);
        else
            usage();
    }
    if (!storage_dir || port <= 0 || nthreads <= 0 || nthreads > 64)
        usage();
    mkdir(storage_dir, 0755);
    layers_init();
    char meta_path[4096];
    snprintf(meta_path, sizeof meta_path, "%s/meta.db", storage_dir);
    meta_fd = open(meta_path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    if (meta_fd < 0)
        die(meta_path);

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int lfd = net_listen(bind_addr, port);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    completion_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epfd < 0 || completion_efd < 0)
        die("epoll/eventfd");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.ptr = &completion_tag;
    epoll_ctl(epfd, EPOLL_CTL_ADD, completion_efd, &ev);

    pthread_t threads[64];
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&threads[i], NULL, io_worker, NULL) != 0)
            die("pthread_create");
    fprintf(stderr, "pvfs_server: listening on %s:%d, storage %s, %s\n", bind_addr, port,
            storage_dir, thread_per_request ? "a thread per request" : "a pool of I/O threads");

    net_poll_loop(lfd);

    pthread_mutex_lock(&queue_mu);
    queue_closed = 1;
    pthread_cond_broadcast(&queue_cv);
    pthread_mutex_unlock(&queue_mu);
    for (int i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);
    while (atomic_load(&requests_in_threads) > 0)
        usleep(1000);
    fprintf(stderr,
            "pvfs_server: requests=%llu bytes_written=%llu bytes_read=%llu meta_ops=%llu "
            "recv_calls=%llu send_calls=%llu\n",
            (unsigned long long)stat_requests, (unsigned long long)stat_bytes_written,
            (unsigned long long)stat_bytes_read, (unsigned long long)stat_meta_ops,
            (unsigned long long)stat_recv_calls, (unsigned long long)stat_send_calls);
    return 0;
}
