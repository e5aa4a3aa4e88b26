/* The real node's sandbox ("pause") container: PID 1 of each Pod's
 * sandbox holds the Pod's namespaces open, reaps the zombies it inherits
 * and exits on SIGINT or SIGTERM. Built static by scripts/images so the
 * image needs nothing but this file. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signo)
{
    (void)signo;
    _exit(0);
}

static void reap(int signo)
{
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void)
{
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};

    if (getpid() != 1)
        fprintf(stderr, "pause: not PID 1, still waiting\n");
    if (sigaction(SIGINT, &on_stop, NULL) < 0 || sigaction(SIGTERM, &on_stop, NULL) < 0 ||
        sigaction(SIGCHLD, &on_child, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;)
        pause();
}
