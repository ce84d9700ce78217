/*
 * Many sockets in epoll sets, few of them ready: `epoll_wait` must see each
 * readiness change, however many idle sockets share the set.
 *
 *   many HOST PORT N ROUNDS [CALLS]
 *
 * Connects N sockets to an echo server at HOST:PORT and registers them all
 * in three epoll sets: level-triggered (with a pipe, a kernel descriptor,
 * beside them), edge-triggered and one-shot. Each round a second thread
 * writes a byte on one socket (or the pipe, or both); its echo must be
 * reported by each set as that set's mode says, and by nothing else.
 * With CALLS, also times CALLS zero-timeout waits on the level-triggered
 * set while exactly one socket stays readable, and a blocking wait woken
 * by one echo (per round). Prints "ok" at the end, or "FAIL ..." and
 * exits 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...)                                                              \
    do {                                                                       \
        printf("FAIL line %d: ", __LINE__);                                    \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
        fflush(stdout);                                                        \
        exit(1);                                                               \
    } while (0)
#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c))                                                              \
            FAIL("%s (errno %d)", #c, errno);                                  \
    } while (0)

static int n, *fds, pipefd[2];
static sem_t go, done;
/* What the worker writes next: a socket index, -1 for none. */
static volatile int target_sock, target_pipe;
static const uint64_t PIPE_TAG = 1u << 30;

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        sem_wait(&go);
        if (target_sock == -2)
            return NULL;
        /* Let the main thread fall asleep in its wait first. */
        usleep(2000);
        if (target_sock >= 0)
            CHECK(write(fds[target_sock], "x", 1) == 1);
        if (target_pipe)
            CHECK(write(pipefd[1], "p", 1) == 1);
        sem_post(&done);
    }
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Waits on `ep` (up to `ms`) and checks it reports exactly `want` (socket
 * indices, or PIPE_TAG), each once. */
static void expect(const char *what, int ep, int ms, const uint64_t *want,
                   int nwant, int line) {
    struct epoll_event out[64];
    int r = epoll_wait(ep, out, 64, ms);
    if (r != nwant) {
        printf("FAIL line %d: %s: %d events, wanted %d:", line, what, r, nwant);
        for (int i = 0; i < r; i++)
            printf(" %llu/%x", (unsigned long long)out[i].data.u64,
                   out[i].events);
        printf("\n");
        fflush(stdout);
        exit(1);
    }
    for (int k = 0; k < nwant; k++) {
        int found = 0;
        for (int i = 0; i < r; i++)
            if (out[i].data.u64 == want[k] && (out[i].events & EPOLLIN))
                found++;
        if (found != 1)
            FAIL("line %d: %s: %llu reported %d times", line, what,
                 (unsigned long long)want[k], found);
    }
}
#define EXPECT(what, ep, ms, ...)                                              \
    do {                                                                       \
        uint64_t w_[] = {__VA_ARGS__};                                         \
        expect(what, ep, ms, w_, sizeof w_ / sizeof w_[0], __LINE__);          \
    } while (0)
#define EXPECT_NONE(what, ep) expect(what, ep, 0, NULL, 0, __LINE__)

/* Blocks on `ep` until socket `i`'s echo (and the pipe's byte, if `pipe`)
 * have both been reported, each once, and nothing else. */
static void wait_for(int ep, int i, int pipe) {
    int seen_sock = 0, seen_pipe = 0;
    double end = now_ns() + 10e9;
    while (!seen_sock || (pipe && !seen_pipe)) {
        if (now_ns() > end)
            FAIL("socket %d (%d) / pipe (%d) not reported in 10 s", i,
                 seen_sock, seen_pipe);
        struct epoll_event out[64];
        int r = epoll_wait(ep, out, 64, 1000);
        CHECK(r >= 0);
        for (int k = 0; k < r; k++) {
            if (out[k].data.u64 == (uint64_t)i && !seen_sock)
                seen_sock = 1;
            else if (out[k].data.u64 == PIPE_TAG && pipe && !seen_pipe)
                seen_pipe = 1;
            else if (out[k].data.u64 == (uint64_t)i ||
                     out[k].data.u64 == PIPE_TAG)
                ; /* level-triggered: reported again while we waited */
            else
                FAIL("socket %d waited for, %llu/%x reported", i,
                     (unsigned long long)out[k].data.u64, out[k].events);
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: many HOST PORT N ROUNDS [CALLS]\n");
        return 2;
    }
    n = atoi(argv[3]);
    int rounds = atoi(argv[4]);
    long calls = argc > 5 ? atol(argv[5]) : 0;
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < (rlim_t)n + 256) {
        rl.rlim_cur = rl.rlim_max;
        CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(atoi(argv[2]))};
    CHECK(inet_pton(AF_INET, argv[1], &to.sin_addr) == 1);
    fds = calloc(n, sizeof *fds);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fds[i] >= 0);
        if (connect(fds[i], (struct sockaddr *)&to, sizeof to) != 0)
            FAIL("connect %d: errno %d", i, errno);
        int one = 1;
        setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        CHECK(fcntl(fds[i], F_SETFL, O_NONBLOCK) == 0);
    }
    CHECK(pipe2(pipefd, O_NONBLOCK) == 0);
    int lt = epoll_create1(0), et = epoll_create1(0), os = epoll_create1(0);
    CHECK(lt >= 0 && et >= 0 && os >= 0);
    for (int i = 0; i < n; i++) {
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = i};
        CHECK(epoll_ctl(lt, EPOLL_CTL_ADD, fds[i], &e) == 0);
        e.events = EPOLLIN | EPOLLET;
        CHECK(epoll_ctl(et, EPOLL_CTL_ADD, fds[i], &e) == 0);
        e.events = EPOLLIN | EPOLLONESHOT;
        CHECK(epoll_ctl(os, EPOLL_CTL_ADD, fds[i], &e) == 0);
    }
    struct epoll_event pe = {.events = EPOLLIN, .data.u64 = PIPE_TAG};
    CHECK(epoll_ctl(lt, EPOLL_CTL_ADD, pipefd[0], &pe) == 0);
    EXPECT_NONE("idle lt", lt);
    EXPECT_NONE("idle et", et);
    EXPECT_NONE("idle oneshot", os);
    printf("connected %d\n", n);
    fflush(stdout);

    sem_init(&go, 0, 0);
    sem_init(&done, 0, 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, worker, NULL) == 0);
    double woken = 0;
    for (int r = 0; r < rounds; r++) {
        int i = (int)(((long)r * 7919 + 13) % n);
        /* Every fourth round the pipe alone, every fourth the pipe too. */
        int sock = r % 4 != 3, pipe = r % 4 >= 2;
        target_sock = sock ? i : -1;
        target_pipe = pipe;
        double t0 = now_ns();
        sem_post(&go);
        if (sock)
            wait_for(lt, i, pipe);
        else
            EXPECT("pipe alone", lt, 10000, PIPE_TAG);
        woken += now_ns() - t0;
        sem_wait(&done);
        /* Let the connection settle (the peer's ACK, space freed): any
         * move of the socket's slot is an edge, and the checks below want
         * the echo's alone. */
        if (sock)
            usleep(10000);
        char b[8];
        if (pipe) {
            /* Both came (above): the pipe stays readable until read. */
            if (sock)
                EXPECT("lt again", lt, 0, (uint64_t)i, PIPE_TAG);
            else
                EXPECT("lt again", lt, 0, PIPE_TAG);
            CHECK(read(pipefd[0], b, sizeof b) == 1);
        }
        if (!sock) {
            EXPECT_NONE("lt after the pipe", lt);
            EXPECT_NONE("et without a socket", et);
            EXPECT_NONE("oneshot without a socket", os);
            continue;
        }
        /* Level-triggered: reported again while unread. */
        EXPECT("lt again", lt, 0, (uint64_t)i);
        EXPECT("lt third", lt, 0, (uint64_t)i);
        /* Edge-triggered: once. */
        EXPECT("et", et, 0, (uint64_t)i);
        EXPECT_NONE("et again", et);
        /* One-shot: once, then once more after re-arming. */
        EXPECT("oneshot", os, 0, (uint64_t)i);
        EXPECT_NONE("oneshot fired", os);
        struct epoll_event e = {.events = EPOLLIN | EPOLLONESHOT,
                                .data.u64 = i};
        CHECK(epoll_ctl(os, EPOLL_CTL_MOD, fds[i], &e) == 0);
        EXPECT("oneshot re-armed", os, 0, (uint64_t)i);
        CHECK(epoll_ctl(os, EPOLL_CTL_MOD, fds[i], &e) == 0);
        /* Read it: nothing is ready any more. */
        CHECK(read(fds[i], b, sizeof b) == 1);
        EXPECT_NONE("lt after read", lt);
        EXPECT_NONE("et after read", et);
        EXPECT_NONE("oneshot after read", os);
    }
    printf("rounds %d woken %.1f us\n", rounds, woken / rounds / 1e3);
    fflush(stdout);

    if (calls > 0) {
        /* One socket stays readable; every other is idle. */
        int i = n / 2;
        target_sock = i;
        target_pipe = 0;
        sem_post(&go);
        wait_for(lt, i, 0);
        sem_wait(&done);
        struct epoll_event out[64];
        double t0 = now_ns();
        for (long c = 0; c < calls; c++) {
            int r = epoll_wait(lt, out, 64, 0);
            if (r != 1 || out[0].data.u64 != (uint64_t)i)
                FAIL("bench: %d events", r);
        }
        double per = (now_ns() - t0) / calls;
        printf("bench %d sockets: epoll_wait %.0f ns per call\n", n, per);
        fflush(stdout);
    }
    target_sock = -2;
    sem_post(&go);
    pthread_join(th, NULL);

    /* Across fork: a set indexed in the parent, waited on in the child
     * (which takes the connections into its own session), then in the
     * parent again (which takes one back). */
    int fe = epoll_create1(0), k = n < 4 ? n : 4;
    CHECK(fe >= 0);
    for (int i = 0; i < k; i++) {
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = i};
        CHECK(epoll_ctl(fe, EPOLL_CTL_ADD, fds[i], &e) == 0);
    }
    EXPECT_NONE("fork set idle", fe);
    int one = k - 1;
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        char b[8];
        CHECK(write(fds[one], "c", 1) == 1);
        EXPECT("child", fe, 10000, (uint64_t)one);
        EXPECT("child again", fe, 0, (uint64_t)one);
        CHECK(read(fds[one], b, sizeof b) == 1 && b[0] == 'c');
        EXPECT_NONE("child after read", fe);
        fflush(stdout);
        _exit(0);
    }
    int st;
    CHECK(waitpid(child, &st, 0) == child);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("the child failed (status %x)", st);
    /* The parent takes each back (its slot says the child had it) by
     * using it; each echo is reported, once the level-triggered way. */
    for (int i = 0; i < k; i++)
        CHECK(write(fds[i], "p", 1) == 1);
    int seen[4] = {0};
    for (int got = 0; got < k;) {
        struct epoll_event out[8];
        int r = epoll_wait(fe, out, 8, 10000);
        if (r <= 0)
            FAIL("parent after the child: %d events, %d of %d seen", r, got,
                 k);
        for (int e = 0; e < r; e++) {
            uint64_t i = out[e].data.u64;
            if (i >= (uint64_t)k || out[e].events != EPOLLIN)
                FAIL("parent after the child: %llu/%x",
                     (unsigned long long)i, out[e].events);
            if (!seen[i]++)
                got++;
        }
    }
    for (int i = 0; i < k; i++) {
        char b[8];
        CHECK(read(fds[i], b, sizeof b) == 1 && b[0] == 'p');
    }
    EXPECT_NONE("parent after reads", fe);
    printf("fork ok\n");
    printf("ok\n");
    return 0;
}
