/* A PVFS-like I/O server in miniature for the stack-snapshot tests: three worker threads
 * serve requests (handle_request -> dbpf_pwrite, ~1 ms each) for argv[1] seconds. With
 * argv[2] = "stuck", the second worker blocks forever in dbpf_pwrite after its first
 * requests (the others go on). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile long sink;
static int stuck_mode;

__attribute__((noinline)) void dbpf_pwrite(int worker, int n) {
    if (stuck_mode && worker == 1 && n > 20) {
        for (;;) pause();
    }
    for (int i = 0; i < 1000; i++) sink += i;
    usleep(1000);
}

__attribute__((noinline)) void handle_request(int worker, int n) { dbpf_pwrite(worker, n); }

static void *worker(void *arg) {
    int w = (int)(long)arg;
    for (int n = 0;; n++) handle_request(w, n);
    return 0;
}

int main(int argc, char **argv) {
    int secs = argc > 1 ? atoi(argv[1]) : 10;
    stuck_mode = argc > 2 && strcmp(argv[2], "stuck") == 0;
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, (void *)i);
    sleep(secs);
    return 0;
}
