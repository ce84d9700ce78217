/* A blocking connect and a signal, as the tests of connect.rs run it on
 * Linux and on softoe: the same trace from both.
 *
 *   intr ADDR PORT norestart   SIGALRM's handler has no SA_RESTART
 *   intr ADDR PORT restart     it has
 *
 * The listener at ADDR:PORT drops SYNs (its accept queue is full) until
 * the test makes room: after this program prints "wait" (norestart), or
 * a moment after "started" (restart). Each step prints one line.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;

static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

static void alarm_in(int ms) {
    struct itimerval t = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
    setitimer(ITIMER_REAL, &t, NULL);
}

static const char *result(int r) {
    static char buf[64];
    if (r == 0)
        return "0";
    snprintf(buf, sizeof buf, "%s", strerrorname_np(errno));
    return buf;
}

static void say(const char *what, const char *r) {
    printf("%s %s\n", what, r);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    int restart = strcmp(argv[3], "restart") == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, NULL);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &to.sin_addr);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (restart) {
        say("started", "-");
        alarm_in(300);
        int r = connect(s, (struct sockaddr *)&to, sizeof to);
        say("connect", result(r));
        say("interrupted", alarms > 0 ? "yes" : "no");
        say("again", result(connect(s, (struct sockaddr *)&to, sizeof to)));
        return 0;
    }
    alarm_in(300);
    say("connect", result(connect(s, (struct sockaddr *)&to, sizeof to)));
    /* Still connecting: a blocking connect waits again, and is
     * interrupted again. */
    alarm_in(300);
    say("blocking", result(connect(s, (struct sockaddr *)&to, sizeof to)));
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    say("nonblocking", result(connect(s, (struct sockaddr *)&to, sizeof to)));
    say("wait", "-");
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 3;
    struct pollfd p = {.fd = s, .events = POLLOUT};
    int n = poll(&p, 1, 20000);
    say("poll", n == 1 && (p.revents & POLLOUT) ? "POLLOUT" : "nothing");
    int err = -1;
    socklen_t len = sizeof err;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    say("so_error", err == 0 ? "0" : strerrorname_np(err));
    say("established", result(connect(s, (struct sockaddr *)&to, sizeof to)));
    say("later", result(connect(s, (struct sockaddr *)&to, sizeof to)));
    return 0;
}
