/* A request-serving program for seed 004's request analysis (tests/tests/requests.rs): worker
 * threads serve READ and WRITE requests; each request's storage part is handed off to the
 * worker's I/O helper thread (culprit_request_begin with the root id as parent, seed 004's
 * MID), so every request is one call tree over two threads.
 *
 *   requests NODE_INDEX REQUESTS WORKERS
 *
 * REQ_SLOW_READ=1 makes disk_read ten times slower (a slow disk path on this "node").
 * Prints "sampled S of N" (requests whose begin returned 1) on stdout. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <culprit.h>

#define REQ_READ 1
#define REQ_WRITE 2

static int slow_read;
static uint64_t node_base;
static int total;
static atomic_int next_req;
static atomic_int sampled;

__attribute__((no_instrument_function)) static void spin_us(long us)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

__attribute__((no_instrument_function)) static void sleep_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

__attribute__((noinline)) void parse_request(void) { spin_us(15); }
__attribute__((noinline)) void lookup_meta(void) { spin_us(10); }
__attribute__((noinline)) void disk_read(void) { sleep_us(slow_read ? 3000 : 300); }
__attribute__((noinline)) void disk_write(void) { sleep_us(300); }
__attribute__((noinline)) void checksum(void) { spin_us(15); }
__attribute__((noinline)) void send_reply(void) { spin_us(10); }

/* One worker's hand-off slot to its I/O helper. */
struct slot {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 idle, 1 work posted, 2 done, 3 quit */
    uint64_t root;
    int type;
};

__attribute__((noinline)) void io_part(struct slot *s)
{
    uint64_t part = s->root | 1;
    culprit_request_begin(part, (uint64_t)s->type, s->root);
    if (s->type == REQ_READ)
        disk_read();
    else
        disk_write();
    culprit_request_end(part);
}

static void *io_helper(void *arg)
{
    struct slot *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->state != 1 && s->state != 3)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->state == 3)
            break;
        pthread_mutex_unlock(&s->mu);
        io_part(s);
        pthread_mutex_lock(&s->mu);
        s->state = 2;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

__attribute__((noinline)) void hand_off(struct slot *s, uint64_t root, int type)
{
    pthread_mutex_lock(&s->mu);
    s->root = root;
    s->type = type;
    s->state = 1;
    pthread_cond_broadcast(&s->cv);
    while (s->state != 2)
        pthread_cond_wait(&s->cv, &s->mu);
    s->state = 0;
    pthread_mutex_unlock(&s->mu);
}

__attribute__((noinline)) void serve(struct slot *s, int k)
{
    int type = k % 2 ? REQ_WRITE : REQ_READ;
    uint64_t root = node_base | ((uint64_t)k << 1);
    if (culprit_request_begin(root, (uint64_t)type, 0) == 1)
        atomic_fetch_add(&sampled, 1);
    parse_request();
    lookup_meta();
    hand_off(s, root, type);
    if (type == REQ_READ)
        checksum();
    send_reply();
    culprit_request_end(root);
}

static void *worker(void *arg)
{
    (void)arg;
    struct slot s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
    pthread_t h;
    if (pthread_create(&h, NULL, io_helper, &s) != 0)
        abort();
    int k;
    while ((k = atomic_fetch_add(&next_req, 1)) < total)
        serve(&s, k);
    pthread_mutex_lock(&s.mu);
    s.state = 3;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    pthread_join(h, NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: requests NODE_INDEX REQUESTS WORKERS\n");
        return 2;
    }
    node_base = (uint64_t)(atoi(argv[1]) + 1) << 32;
    total = atoi(argv[2]);
    int workers = atoi(argv[3]);
    const char *slow = getenv("REQ_SLOW_READ");
    slow_read = slow && slow[0] == '1';
    pthread_t t[64];
    if (workers < 1 || workers > 64)
        return 2;
    for (int i = 0; i < workers; i++)
        if (pthread_create(&t[i], NULL, worker, NULL) != 0)
            return 1;
    for (int i = 0; i < workers; i++)
        pthread_join(t[i], NULL);
    printf("sampled %d of %d\n", atomic_load(&sampled), total);
    return 0;
}
