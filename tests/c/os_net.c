/* TCP traffic at a known rate for the OS-metrics tests.
 *   os_net sink PORT                      accept connections, read each to EOF
 *   os_net send ADDR PORT RATE SECS HOLD  one connection: RATE bytes/s for SECS seconds, then
 *                                         keep it open (idle) for HOLD seconds */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *drain(void *arg)
{
    int c = (int)(long)arg;
    char buf[65536];
    while (read(c, buf, sizeof buf) > 0) {
    }
    close(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "sink") == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
        if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 16) < 0) {
            perror("os_net sink");
            return 1;
        }
        for (;;) {
            int c = accept(s, NULL, NULL);
            if (c < 0)
                continue;
            pthread_t t;
            pthread_create(&t, NULL, drain, (void *)(long)c);
            pthread_detach(t);
        }
    }
    if (argc >= 7 && strcmp(argv[1], "send") == 0) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        double rate = atof(argv[4]), secs = atof(argv[5]), hold = atof(argv[6]);
        int s = -1;
        for (int i = 0; i < 100; i++) {
            s = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(s, (struct sockaddr *)&a, sizeof a) == 0)
                break;
            close(s);
            s = -1;
            usleep(50000);
        }
        if (s < 0) {
            perror("os_net connect");
            return 1;
        }
        static char buf[16384];
        memset(buf, 0x33, sizeof buf);
        double t0 = now();
        long long sent = 0;
        while (now() - t0 < secs) {
            if (write(s, buf, sizeof buf) != (ssize_t)sizeof buf) {
                perror("os_net write");
                return 1;
            }
            sent += sizeof buf;
            double wait = t0 + sent / rate - now();
            if (wait > 0)
                usleep((useconds_t)(wait * 1e6));
        }
        printf("%lld\n", sent);
        fflush(stdout);
        usleep((useconds_t)(hold * 1e6));
        close(s);
        return 0;
    }
    fprintf(stderr, "usage: os_net sink PORT | os_net send ADDR PORT RATE SECS HOLD\n");
    return 2;
}
