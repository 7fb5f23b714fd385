/* weights.c - bulk file reads for model loading: io_uring with a pread fallback. */
#include "attnd/weights.h"

#include "attnd/check.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (8u << 20) /* bytes per read request */
#define QUEUE_DEPTH 8    /* reads in flight */


static enum weights_fault g_fault;
static uint64_t g_fault_at;

void weights_set_fault(enum weights_fault mode, uint64_t at)
{
    g_fault = mode;
    g_fault_at = at;
}

/* What a read of `want` bytes at range offset `off` that returned res returns under the fault hook. */
static long long faulted(long long res, uint64_t off, size_t want)
{
    if (g_fault == WEIGHTS_FAULT_EIO && g_fault_at >= off && g_fault_at - off < want) return -EIO;
    if (g_fault == WEIGHTS_FAULT_SHORT && g_fault_at >= 1 && res > (long long)g_fault_at) return (long long)g_fault_at;
    return res;
}

static attnd_status read_pread(int fd, uint64_t off, uint64_t size, uint8_t *dst, char *err, size_t errlen)
{
    uint64_t done = 0;
    while (done < size) {
        size_t want = size - done > CHUNK ? CHUNK : (size_t)(size - done);
        ssize_t r = pread(fd, dst + done, want, (off_t)(off + done));
        if (r >= 0 && (r = (ssize_t)faulted(r, done, want)) < 0) errno = (int)-r, r = -1;
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r < 0) {
            snprintf(err, errlen, "read at offset %" PRIu64 " failed: %s", off + done, strerror(errno));
            return ATTND_ERR_IO;
        }
        if (r == 0) {
            snprintf(err, errlen, "unexpected end of file at offset %" PRIu64, off + done);
            return ATTND_ERR_IO;
        }
        done += (uint64_t)r;
    }
    return ATTND_OK;
}

/* One request: the remaining part of a chunk. user_data points at it. */
struct req {
    uint64_t off;  /* offset relative to the range start */
    uint32_t left; /* bytes still to read */
};

static void queue_read(struct io_uring *ring, int fd, uint64_t base, uint8_t *dst, struct req *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    /* the ring has QUEUE_DEPTH entries and at most QUEUE_DEPTH reads are ever outstanding */
    io_uring_prep_read(sqe, fd, dst + r->off, r->left, base + r->off);
    io_uring_sqe_set_data(sqe, r);
}

/* Returns ATTND_OK, ATTND_ERR_UNSUPPORTED (no io_uring: caller falls back) or ATTND_ERR_IO. */
static attnd_status read_uring(int fd, uint64_t off, uint64_t size, uint8_t *dst, char *err, size_t errlen)
{
    struct io_uring ring;
    int rc = io_uring_queue_init(QUEUE_DEPTH, &ring, 0);
    if (rc < 0) {
        snprintf(err, errlen, "io_uring unavailable: %s", strerror(-rc));
        return ATTND_ERR_UNSUPPORTED;
    }
    struct req reqs[QUEUE_DEPTH];
    attnd_status st = ATTND_OK;
    uint64_t next = 0; /* next unrequested byte */
    int inflight = 0;
    for (int i = 0; i < QUEUE_DEPTH && next < size; i++) {
        reqs[i].off = next;
        reqs[i].left = (uint32_t)(size - next > CHUNK ? CHUNK : size - next);
        next += reqs[i].left;
        queue_read(&ring, fd, off, dst, &reqs[i]);
        inflight++;
    }
    while (inflight > 0) {
        rc = io_uring_submit_and_wait(&ring, 1);
        if (rc < 0 && rc != -EINTR) {
            if (rc == -EPERM || rc == -ENOSYS) st = ATTND_ERR_UNSUPPORTED;
            else st = ATTND_ERR_IO;
            snprintf(err, errlen, "io_uring submit failed: %s", strerror(-rc));
            break;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            seen++;
            struct req *r = io_uring_cqe_get_data(cqe);
            int res = (int)faulted(cqe->res, r->off, r->left);
            if (res == -EAGAIN || res == -EINTR) {
                queue_read(&ring, fd, off, dst, r);
                continue;
            }
            if (res < 0 || res == 0) {
                if (st == ATTND_OK) {
                    st = (res == -EPERM || res == -ENOSYS || res == -EINVAL) ? ATTND_ERR_UNSUPPORTED : ATTND_ERR_IO;
                    snprintf(err, errlen, "read at offset %" PRIu64 " failed: %s", off + r->off,
                             res ? strerror(-res) : "unexpected end of file");
                }
                inflight--;
                continue;
            }
            r->off += (uint64_t)res;
            r->left -= (uint32_t)res;
            if (r->left > 0 && st == ATTND_OK) { /* short read: ask for the rest */
                queue_read(&ring, fd, off, dst, r);
                continue;
            }
            if (next < size && st == ATTND_OK) { /* reuse the slot for the next chunk */
                r->off = next;
                r->left = (uint32_t)(size - next > CHUNK ? CHUNK : size - next);
                next += r->left;
                queue_read(&ring, fd, off, dst, r);
                continue;
            }
            inflight--;
        }
        io_uring_cq_advance(&ring, seen);
        if (st != ATTND_OK && inflight > 0) {
            /* drain what is still in flight before the buffers go away */
            io_uring_submit(&ring);
            while (inflight > 0) {
                if (io_uring_wait_cqe(&ring, &cqe) < 0) break;
                io_uring_cqe_seen(&ring, cqe);
                inflight--;
            }
        }
    }
    io_uring_queue_exit(&ring);
    return st;
}

attnd_status weights_read(const char *path, uint64_t off, uint64_t size, void *dst, struct weights_stats *stats,
                          char *err, size_t errlen)
{
    char tmp[256];
    double t0 = check_now_s();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return ATTND_ERR_IO;
    }
    const char *method = "io_uring";
    attnd_status st = ATTND_ERR_UNSUPPORTED;
    const char *no = getenv("ATTND_NO_IO_URING");
    if (!(no && *no && strcmp(no, "0"))) st = read_uring(fd, off, size, dst, tmp, sizeof tmp);
    if (st == ATTND_ERR_UNSUPPORTED) {
        method = "pread";
        st = read_pread(fd, off, size, dst, tmp, sizeof tmp);
    }
    close(fd);
    if (st != ATTND_OK) {
        snprintf(err, errlen, "%s: %s", path, tmp);
        return ATTND_ERR_IO;
    }
    if (stats) {
        stats->method = method;
        stats->seconds = check_now_s() - t0;
        stats->bytes = size;
    }
    return ATTND_OK;
}

void *weights_alloc(size_t size)
{
    if (size == 0) size = 1;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (size >= (2u << 20)) madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

void weights_free(void *p, size_t size)
{
    if (p) munmap(p, size ? size : 1);
}
