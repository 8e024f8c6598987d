/* A system-call-heavy loop (sampler tests: most of its samples are kernel functions).
 * Usage: smp_sys CALLS. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 100000;
    int fd = open("/dev/null", O_WRONLY);
    char buf[64] = {0};
    for (long i = 0; i < calls; i++) {
        syscall(SYS_getppid);
        if (write(fd, buf, sizeof buf) < 0)
            return 1;
    }
    close(fd);
    return 0;
}
