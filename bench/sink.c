// A fast loopback webhook receiver for `bench/run forward` (built by bench.py with `cc -O2`):
// HTTP/1.1 on 127.0.0.1, one epoll thread, answers every request `204 No Content` (keep-alive
// unless the client sends `Connection: close`), counts requests, connections and distinct
// `webhook-id`s. No signature check: it must not be the bottleneck.
//
//   sink PORT STATS_FILE
//
// Prints "ready" on stdout once listening; on SIGTERM/SIGINT writes its counts to STATS_FILE
// (JSON) and exits.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 65536
#define BUF 65536
#define SET_BITS 22

static const char answer[] = "HTTP/1.1 204 No Content\r\n\r\n";
static const char answer_close[] = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";

struct conn {
    char *buf;
    size_t len;
};
static struct conn conns[MAX_FD];
static volatile sig_atomic_t stopping = 0;
static unsigned long long requests = 0, connections = 0, distinct = 0, duplicates = 0;
static double first_at = 0, last_at = 0;
static uint64_t *ids;  // open addressing set of 64-bit FNV-1a hashes of webhook-ids (0 = empty)

static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void remember(const char *id, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)id[i]) * 1099511628211ULL;
    if (h == 0) h = 1;
    size_t mask = (1u << SET_BITS) - 1, k = h & mask;
    while (ids[k] != 0) {
        if (ids[k] == h) {
            duplicates++;
            return;
        }
        k = (k + 1) & mask;
    }
    if (distinct < mask / 2) {
        ids[k] = h;
        distinct++;
    }
}

static int header_is(const char *line, size_t n, const char *name) {
    size_t m = strlen(name);
    return n >= m && strncasecmp(line, name, m) == 0;
}

static void drop(int epfd, int fd) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    conns[fd].len = 0;
}

// Answers every complete request in the buffer; returns 0 when the connection was closed.
static int serve(int epfd, int fd) {
    struct conn *c = &conns[fd];
    size_t off = 0;
    for (;;) {
        char *start = c->buf + off;
        size_t avail = c->len - off;
        char *end = memmem(start, avail, "\r\n\r\n", 4);
        if (!end) break;
        size_t head = (size_t)(end - start), length = 0;
        int close_after = 0;
        const char *line = memchr(start, '\n', head);
        while (line && line < end) {
            line++;
            const char *eol = memchr(line, '\r', (size_t)(end + 2 - line));
            size_t n = eol ? (size_t)(eol - line) : 0;
            if (header_is(line, n, "content-length:")) {
                length = strtoul(line + 15, NULL, 10);
            } else if (header_is(line, n, "webhook-id:")) {
                const char *v = line + 11;
                while (v < line + n && *v == ' ') v++;
                remember(v, (size_t)(line + n - v));
            } else if (header_is(line, n, "connection:")) {
                close_after = memmem(line, n, "close", 5) != NULL;
            }
            line = memchr(line, '\n', (size_t)(end + 2 - line));
        }
        if (avail < head + 4 + length) break;
        off += head + 4 + length;
        double t = now();
        if (!requests) first_at = t;
        last_at = t;
        requests++;
        const char *a = close_after ? answer_close : answer;
        size_t an = close_after ? sizeof(answer_close) - 1 : sizeof(answer) - 1;
        if (write(fd, a, an) != (ssize_t)an || close_after) {
            drop(epfd, fd);
            return 0;
        }
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: sink PORT STATS_FILE\n");
        return 2;
    }
    ids = calloc((size_t)1 << SET_BITS, sizeof(uint64_t));
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(ls, 4096) != 0) {
        perror("sink: bind/listen");
        return 1;
    }
    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, events[256];
    epoll_ctl(epfd, EPOLL_CTL_ADD, ls, &ev);
    printf("ready\n");
    fflush(stdout);
    while (!stopping) {
        int n = epoll_wait(epfd, events, 256, 100);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == ls) {
                int cfd;
                while ((cfd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (cfd >= MAX_FD) {
                        close(cfd);
                        continue;
                    }
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    if (!conns[cfd].buf) conns[cfd].buf = malloc(BUF);
                    conns[cfd].len = 0;
                    connections++;
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, cfd, &cev);
                }
                continue;
            }
            struct conn *c = &conns[fd];
            ssize_t r = read(fd, c->buf + c->len, BUF - c->len);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                drop(epfd, fd);
                continue;
            }
            c->len += (size_t)r;
            if (serve(epfd, fd) && c->len == BUF) drop(epfd, fd);  // a request larger than the buffer
        }
    }
    FILE *f = fopen(argv[2], "w");
    if (f) {
        fprintf(f,
                "{\"requests\": %llu, \"connections\": %llu, \"distinct_ids\": %llu, \"duplicate_ids\": %llu, "
                "\"first\": %.6f, \"last\": %.6f}\n",
                requests, connections, distinct, duplicates, first_at, last_at);
        fclose(f);
    }
    return 0;
}
