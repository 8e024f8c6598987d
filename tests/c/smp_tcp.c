/* TCP sink and sender for the sampler's emulated-node tests.
 *   smp_tcp sink PORT            accept connections one after the other, read each to EOF
 *   smp_tcp send MS ADDR PORT... for MS milliseconds, connect to each ADDR in turn, send 128 KiB,
 *                                close; connection failures are retried (the path is lossy). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int sink(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 16) < 0) {
        perror("smp_tcp sink");
        return 1;
    }
    static char buf[65536];
    for (;;) {
        int c = accept(s, 0, 0);
        if (c < 0)
            continue;
        while (read(c, buf, sizeof buf) > 0)
            ;
        close(c);
    }
}

static int send_loop(long ms, int n, char **targets)
{
    static char buf[131072];
    long end = now_ms() + ms;
    int sent = 0;
    while (now_ms() < end) {
        for (int i = 0; i + 1 < n && now_ms() < end; i += 2) {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(targets[i + 1]))};
            inet_pton(AF_INET, targets[i], &a.sin_addr);
            int s = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
                size_t off = 0;
                while (off < sizeof buf) {
                    ssize_t w = write(s, buf + off, sizeof buf - off);
                    if (w <= 0)
                        break;
                    off += (size_t)w;
                }
                sent++;
            }
            close(s);
        }
    }
    printf("%d\n", sent);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "sink") == 0)
        return sink(atoi(argv[2]));
    if (argc >= 5 && strcmp(argv[1], "send") == 0)
        return send_loop(atol(argv[2]), argc - 3, argv + 3);
    fprintf(stderr, "usage: smp_tcp sink PORT | smp_tcp send MS ADDR PORT...\n");
    return 2;
}
