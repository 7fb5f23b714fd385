/* http_client.h - a raw HTTP exchange over loopback for tests and fuzz harnesses that run the
 * HTTP server in-process (tests/unit/test_faults.c, tests/fuzz/fuzz_http.c). */
#ifndef ATTND_TEST_HTTP_CLIENT_H
#define ATTND_TEST_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* The start of the last answer t_http_exchange read (NUL-terminated), for failure messages. */
static char t_http_last[512];

/* Sends the raw HTTP request req[0..len) to 127.0.0.1:port, reads the answer until the server
 * closes the connection (at most timeout_s of silence) and returns its status code: 0 if there
 * was no status line, -1 if the connection could not be made. half_close: shut our sending side
 * after the request (for raw requests that may not say "Connection: close"; libmicrohttpd may
 * then drop the connection as abandoned before it answers, so well-formed requests say
 * "Connection: close" and pass false). */
static inline int t_http_exchange(int port, const char *req, size_t len, int timeout_s, int half_close)
{
    t_http_last[0] = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    for (size_t off = 0; off < len;) {
        ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break; /* the server may answer early (413) and close */
        off += (size_t)w;
    }
    if (half_close) shutdown(fd, SHUT_WR);
    char head[16] = {0}, buf[4096];
    size_t got = 0;
    ssize_t r;
    /* EINTR: with SO_RCVTIMEO set, the kernel does not restart a recv interrupted by a signal or
     * by task work, it fails it; this thread shares a process with the daemon's threads */
    while ((r = recv(fd, buf, sizeof buf, 0)) > 0 || (r < 0 && errno == EINTR)) {
        if (r < 0) continue;
        for (ssize_t i = 0; i < r && got + (size_t)i < sizeof head - 1; i++) head[got + (size_t)i] = buf[i];
        for (ssize_t i = 0; i < r && got + (size_t)i < sizeof t_http_last - 1; i++) {
            t_http_last[got + (size_t)i] = buf[i];
            t_http_last[got + (size_t)i + 1] = 0;
        }
        got += (size_t)r;
    }
    if (r < 0) snprintf(t_http_last, sizeof t_http_last, "recv after %zu bytes: %s", got, strerror(errno));
    close(fd);
    return got >= 12 && !memcmp(head, "HTTP/1.", 7) ? atoi(head + 9) : 0;
}

#endif
