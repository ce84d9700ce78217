/* The calls past the common ones, run on softoe against Linux peers
 * (crates/softoe-preload/tests/options.rs): recvmmsg, sendmmsg, splice,
 * epoll_pwait2, MSG_ERRQUEUE, sendfile from a socket. One line per result;
 * "FAIL ..." and exit 1 when something unexpected happens.
 *
 *   calls udp-recv PORT            a softoe UDP socket: epoll_pwait2, recvmmsg
 *   calls udp-send HOST PORT       sendmmsg of three datagrams to HOST
 *   calls tcp HOST PORT SCRATCH    a connection to HOST: recvmmsg, sendmmsg,
 *                                  splice both ways, the errors Linux gives
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *en(int e) {
    static char b[16];
    switch (e) {
    case EAGAIN: return "EAGAIN";
    case EINVAL: return "EINVAL";
    case ESPIPE: return "ESPIPE";
    case EBADF: return "EBADF";
    case ENOTCONN: return "ENOTCONN";
    default: snprintf(b, sizeof b, "E%d", e); return b;
    }
}

#define CHECK(x)                                                                   \
    do {                                                                           \
        if (!(x)) {                                                                \
            printf("FAIL %s (line %d, errno %s)\n", #x, __LINE__, en(errno));      \
            fflush(stdout);                                                        \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

/* The byte at stream position i, as the Python peers make it. */
static unsigned char pat(size_t i) { return (unsigned char)(i * 7 + (i >> 8)); }

static void res(const char *what, long r) {
    printf("%s %ld %s\n", what, r, r < 0 ? en(errno) : "-");
    fflush(stdout);
}

#define N 8
static struct mmsghdr m[N];
static char bufs[N][256];
static struct iovec iov[N];
static struct sockaddr_in from[N];

static void arm(void) {
    memset(m, 0, sizeof m);
    for (int i = 0; i < N; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = sizeof bufs[i];
        m[i].msg_hdr.msg_iov = &iov[i];
        m[i].msg_hdr.msg_iovlen = 1;
        m[i].msg_hdr.msg_name = &from[i];
        m[i].msg_hdr.msg_namelen = sizeof from[i];
    }
}

static int udp_recv(int port) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s}, out[4];
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    struct timespec idle = {0, 50 * 1000 * 1000}, bad = {0, 2000000000L};
    res("pwait2-idle", epoll_pwait2(ep, out, 4, &idle, NULL));
    res("pwait2-bad-timeout", epoll_pwait2(ep, out, 4, &bad, NULL));
    arm();
    res("mm-empty", recvmmsg(s, m, N, MSG_DONTWAIT, NULL));
    struct timespec neg = {-1, 0};
    res("mm-bad-timeout", recvmmsg(s, m, N, 0, &neg));
    printf("ready\n");
    fflush(stdout);
    /* No timeout: waits for the first datagram. */
    int r = epoll_pwait2(ep, out, 4, NULL, NULL);
    res("pwait2", r);
    CHECK(r == 1 && out[0].data.fd == s);
    usleep(300 * 1000); /* the others arrive */
    arm();
    struct timespec t = {5, 0};
    r = recvmmsg(s, m, N, MSG_WAITFORONE, &t);
    long left_ms = (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    printf("mm %d left-ms %ld\n", r, left_ms);
    for (int i = 0; i < r; i++)
        printf("msg %d %u %.*s %s\n", i, m[i].msg_len, (int)m[i].msg_len, bufs[i],
               inet_ntoa(from[i].sin_addr));
    /* Fewer slots than datagrams: two now, the rest at the next call. */
    printf("ready2\n");
    fflush(stdout);
    CHECK(epoll_pwait2(ep, out, 4, NULL, NULL) == 1);
    usleep(300 * 1000);
    arm();
    r = recvmmsg(s, m, 2, 0, NULL);
    printf("mm2 %d %.*s %.*s\n", r, (int)m[0].msg_len, bufs[0], (int)m[1].msg_len, bufs[1]);
    arm();
    r = recvmmsg(s, m, N, MSG_DONTWAIT, NULL);
    printf("mm3 %d %.*s\n", r, (int)m[0].msg_len, bufs[0]);
    fflush(stdout);
    return 0;
}

static int udp_send(const char *host, int port) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(s >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    CHECK(inet_pton(AF_INET, host, &to.sin_addr) == 1);
    const char *words[3] = {"one", "two", "three"};
    struct mmsghdr mm[3];
    struct iovec v[3];
    memset(mm, 0, sizeof mm);
    for (int i = 0; i < 3; i++) {
        v[i].iov_base = (void *)words[i];
        v[i].iov_len = strlen(words[i]);
        mm[i].msg_hdr.msg_iov = &v[i];
        mm[i].msg_hdr.msg_iovlen = 1;
        mm[i].msg_hdr.msg_name = &to;
        mm[i].msg_hdr.msg_namelen = sizeof to;
    }
    int r = sendmmsg(s, mm, 3, 0);
    printf("smm %d %u %u %u\n", r, mm[0].msg_len, mm[1].msg_len, mm[2].msg_len);
    fflush(stdout);
    return 0;
}

struct feed {
    int fd;
    size_t len;
    size_t got, bad;
};

/* Writes the pattern into a pipe, then closes it. */
static void *writer(void *p) {
    struct feed *f = p;
    static unsigned char chunk[65536];
    size_t at = 0;
    while (at < f->len) {
        size_t n = f->len - at < sizeof chunk ? f->len - at : sizeof chunk;
        for (size_t i = 0; i < n; i++) chunk[i] = pat(at + i);
        size_t off = 0;
        while (off < n) {
            ssize_t k = write(f->fd, chunk + off, n - off);
            if (k < 0) return NULL;
            off += (size_t)k;
        }
        at += n;
    }
    close(f->fd);
    return NULL;
}

/* Reads a pipe to its end and checks the pattern. */
static void *reader(void *p) {
    struct feed *f = p;
    static unsigned char buf[65536];
    for (;;) {
        ssize_t k = read(f->fd, buf, sizeof buf);
        if (k <= 0) break;
        for (ssize_t i = 0; i < k; i++)
            if (buf[i] != pat(f->got + (size_t)i)) f->bad++;
        f->got += (size_t)k;
    }
    return NULL;
}

static int tcp(const char *host, int port, const char *scratch) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(s >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    CHECK(inet_pton(AF_INET, host, &to.sin_addr) == 1);
    CHECK(connect(s, (struct sockaddr *)&to, sizeof to) == 0);

    /* The peer's "hello": waited for with epoll_pwait2, taken by recvmmsg. */
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s}, out[2];
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    struct timespec ten = {10, 0};
    res("tcp-pwait2", epoll_pwait2(ep, out, 2, &ten, NULL));
    usleep(100 * 1000);
    arm();
    int r = recvmmsg(s, m, 2, MSG_WAITFORONE, NULL);
    printf("tcp-mm %d %u %.*s\n", r, m[0].msg_len, (int)m[0].msg_len, bufs[0]);

    /* No error queue: EAGAIN, and nothing is consumed. */
    int on = 1;
    CHECK(setsockopt(s, IPPROTO_IP, IP_RECVERR, &on, sizeof on) == 0);
    char eq[16];
    res("errqueue-recv", recv(s, eq, sizeof eq, MSG_ERRQUEUE | MSG_DONTWAIT));
    struct msghdr eh = {0};
    struct iovec ei = {eq, sizeof eq};
    eh.msg_iov = &ei;
    eh.msg_iovlen = 1;
    res("errqueue-recvmsg", recvmsg(s, &eh, MSG_ERRQUEUE));

    /* sendmmsg on a stream: the bytes in order. */
    const char *words[3] = {"aaa", "bbbb", "ccccc"};
    struct mmsghdr mm[3];
    struct iovec v[3];
    memset(mm, 0, sizeof mm);
    for (int i = 0; i < 3; i++) {
        v[i].iov_base = (void *)words[i];
        v[i].iov_len = strlen(words[i]);
        mm[i].msg_hdr.msg_iov = &v[i];
        mm[i].msg_hdr.msg_iovlen = 1;
    }
    r = sendmmsg(s, mm, 3, 0);
    printf("tcp-smm %d %u %u %u\n", r, mm[0].msg_len, mm[1].msg_len, mm[2].msg_len);

    /* Linux's errors. */
    int other = socket(AF_INET, SOCK_STREAM, 0);
    int p[2];
    CHECK(pipe(p) == 0);
    int f = open(scratch, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(f >= 0);
    loff_t off = 0;
    res("splice-socket-socket", splice(s, NULL, other, NULL, 10, 0));
    res("splice-pipe-offset", splice(s, NULL, p[1], &off, 10, 0));
    res("splice-socket-offset", splice(s, &off, p[1], NULL, 10, 0));
    res("splice-file", splice(s, NULL, f, NULL, 10, 0));
    res("splice-len0", splice(p[0], NULL, s, NULL, 0, 0));
    res("splice-empty-nonblock", splice(p[0], NULL, s, NULL, 10, SPLICE_F_NONBLOCK));
    res("sendfile-from-socket", sendfile(f, s, NULL, 10));
    close(other);
    close(f);

    /* Pipe -> socket, 2 MiB: the first half to a blocking socket, the
     * second to a non-blocking one (only what it takes leaves the pipe). */
    struct feed wf = {.fd = p[1], .len = 2u << 20};
    pthread_t wt;
    CHECK(pthread_create(&wt, NULL, writer, &wf) == 0);
    size_t sent = 0, eagain = 0;
    while (sent < (1u << 20)) {
        ssize_t k = splice(p[0], NULL, s, NULL, 65536, 0);
        CHECK(k > 0);
        sent += (size_t)k;
    }
    CHECK(fcntl(s, F_SETFL, O_NONBLOCK) == 0);
    for (;;) {
        ssize_t k = splice(p[0], NULL, s, NULL, 1 << 20, 0);
        if (k < 0 && errno == EAGAIN) {
            eagain++;
            struct pollfd pf = {.fd = s, .events = POLLOUT};
            CHECK(poll(&pf, 1, 10000) == 1);
            continue;
        }
        CHECK(k >= 0);
        if (k == 0) break;
        sent += (size_t)k;
    }
    pthread_join(wt, NULL);
    close(p[0]);
    printf("splice-out %zu eagain %zu\n", sent, eagain);
    fflush(stdout);
    CHECK(shutdown(s, SHUT_WR) == 0);

    /* Socket -> pipe until the peer's end: 2 MiB of the pattern. */
    CHECK(fcntl(s, F_SETFL, 0) == 0);
    int q[2];
    CHECK(pipe(q) == 0);
    struct feed rf = {.fd = q[0]};
    pthread_t rt;
    CHECK(pthread_create(&rt, NULL, reader, &rf) == 0);
    size_t got = 0;
    for (;;) {
        ssize_t k = splice(s, NULL, q[1], NULL, 1 << 20, 0);
        CHECK(k >= 0);
        if (k == 0) break;
        got += (size_t)k;
    }
    close(q[1]);
    pthread_join(rt, NULL);
    printf("splice-in %zu %zu bad %zu\n", got, rf.got, rf.bad);
    fflush(stdout);
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "udp-recv")) return udp_recv(atoi(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "udp-send")) return udp_send(argv[2], atoi(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "tcp")) return tcp(argv[2], atoi(argv[3]), argv[4]);
    fprintf(stderr, "usage: calls udp-recv PORT | udp-send HOST PORT | tcp HOST PORT FILE\n");
    return 2;
}
