/* Forks and execs a program COUNT times, one after the other, waiting for each.
 * Usage: smp_spawn COUNT PROGRAM [ARGS...]. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    long count = atol(argv[1]);
    for (long i = 0; i < count; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            execv(argv[2], argv + 2);
            _exit(127);
        }
        int st;
        if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    return 0;
}
