/* kvdisk.c - the disk tier of the prefix cache: block files, their index, the writer thread.
 * Contracts and the file format are in include/attnd/kvdisk.h. */
#include "attnd/kvdisk.h"

#include "attnd/check.h"
#include "attnd/gguf.h"
#include "attnd/log.h"
#include "attnd/model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HDR KVDISK_HEADER_BYTES
#define QUEUE_MAX_BYTES (64u << 20) /* spills waiting for the writer; past it blocks are dropped */
#define OFF_CHECKSUM 136

static const unsigned char g_magic[8] = {'A', 'T', 'T', 'N', 'D', 'K', 'V', 0};
static int g_write_fault; /* tests: every write fails with -g_write_fault */

/* An indexed block: a file on disk, or (pending) a write still queued. */
struct ent {
    uint64_t hash;
    uint64_t bytes;
    bool pending;
    struct ent *hnext;          /* hash bucket chain */
    struct ent *older, *newer;  /* age list of written files (oldest deleted first) */
};

/* A queued spill: the whole file image, header filled by the writer. */
struct rec {
    struct rec *next;
    struct kvdisk_block b;
    unsigned char *buf; /* HDR + payload */
};

struct kvdisk {
    char *dir;
    uint64_t max_bytes, model_id;
    struct kvdisk_layout lay;
    size_t payload, file_bytes; /* payload bytes; HDR + payload */

    pthread_mutex_t mu;
    pthread_cond_t cv; /* the queue changed */
    struct ent **buckets;
    size_t mask, n_ent;
    struct ent *oldest, *newest;
    struct rec *qhead, *qtail;
    size_t q_bytes;
    bool busy, stop, thread_ok;
    pthread_t thread;

    struct io_uring rring, wring; /* reads (the caller's thread), writes (the writer's) */
    bool rring_ok, wring_ok;
    unsigned char *rbuf;          /* (file_bytes) the file being read */
    struct kvdisk_stats st;
    int errs_logged;
};

/* ------------------------------------------------------------------------------------------
 * Checksum and identity
 * ------------------------------------------------------------------------------------------ */

#define P1 0x9e3779b185ebca87ULL
#define P2 0xc2b2ae3d27d4eb4fULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

uint64_t kvdisk_checksum(uint64_t seed, const void *data, size_t n)
{
    /* four independent lanes of 8 bytes, each round a bijection of its lane for a fixed word and
     * of the word for a fixed lane: one changed word always changes the result */
    const unsigned char *p = data;
    uint64_t v0 = seed + P1 + P2, v1 = seed + P2, v2 = seed, v3 = seed - P1;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        memcpy(w, p + i, 32);
        v0 = rotl64(v0 + w[0] * P2, 31) * P1;
        v1 = rotl64(v1 + w[1] * P2, 31) * P1;
        v2 = rotl64(v2 + w[2] * P2, 31) * P1;
        v3 = rotl64(v3 + w[3] * P2, 31) * P1;
    }
    uint64_t h = fmix64(v0) ^ rotl64(fmix64(v1 + 1), 17) ^ rotl64(fmix64(v2 + 2), 31) ^ rotl64(fmix64(v3 + 3), 47);
    h ^= (uint64_t)n * P1;
    for (; i < n; i++) h = rotl64((h ^ p[i]) * P1, 23);
    return fmix64(h);
}

static uint64_t mix_u64(uint64_t h, uint64_t v) { return kvdisk_checksum(h, &v, sizeof v); }

uint64_t kvdisk_model_identity(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    uint64_t h = kvdisk_checksum(0x6b766469736b3031ULL, hp->arch_name, strnlen(hp->arch_name, sizeof hp->arch_name));
    const int64_t ints[] = {hp->n_vocab, hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv,
                            hp->head_dim, hp->n_rot, hp->rope_neox, hp->tied_output};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) h = mix_u64(h, (uint64_t)ints[i]);
    h = kvdisk_checksum(h, &hp->rms_eps, sizeof hp->rms_eps);
    h = kvdisk_checksum(h, &hp->rope_base, sizeof hp->rope_base);
    if (!m->gguf) return h;
    uint64_t base = gguf_data_offset(m->gguf);
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor *t = gguf_tensor(m->gguf, i);
        h = kvdisk_checksum(h, t->name, strlen(t->name));
        h = mix_u64(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < GGUF_MAX_DIMS; d++) h = mix_u64(h, t->ne[d]);
        h = mix_u64(mix_u64(h, t->type), t->nbytes);
        if (!m->arena || t->offset < base || t->offset - base > m->arena_size ||
            t->nbytes > m->arena_size - (t->offset - base))
            continue;
        /* a sample of the weights: two files of equal shapes and types differ here */
        const unsigned char *p = (const unsigned char *)m->arena + (t->offset - base);
        size_t n = t->nbytes < 64 ? (size_t)t->nbytes : 64;
        h = kvdisk_checksum(h, p, n);
        h = kvdisk_checksum(h, p + (t->nbytes - n) / 2, n);
        h = kvdisk_checksum(h, p + t->nbytes - n, n);
    }
    return h;
}

size_t kvdisk_payload_bytes(const struct kvdisk_layout *l)
{
    size_t es = l->type == TENSOR_F16 ? 2 : l->type == TENSOR_F32 ? 4 : 0;
    const int cap = 65536; /* kvcache.h's KV_MAX_DIM */
    if (!es || l->n_layer < 1 || l->n_layer > cap || l->n_head_kv < 1 || l->n_head_kv > cap || l->head_dim < 1 ||
        l->head_dim > cap)
        return 0;
    /* each factor <= 2^16: no overflow in 64 bits */
    return 2u * (size_t)l->n_layer * (size_t)l->n_head_kv * KVDISK_BLOCK_TOKENS * (size_t)l->head_dim * es;
}

void kvdisk_set_write_fault(int err) { g_write_fault = err; }

/* ------------------------------------------------------------------------------------------
 * Header
 * ------------------------------------------------------------------------------------------ */

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The checksum a file image (HDR + payload bytes) should carry. */
static uint64_t image_checksum(const unsigned char *img, size_t payload)
{
    unsigned char h[HDR];
    memcpy(h, img, HDR);
    put64(h + OFF_CHECKSUM, 0);
    return kvdisk_checksum(kvdisk_checksum(0, img + HDR, payload), h, HDR);
}

/* Fills the header of a file image whose payload is in place. */
static void header_fill(const struct kvdisk *d, const struct kvdisk_block *b, unsigned char *img)
{
    memset(img, 0, HDR);
    memcpy(img, g_magic, 8);
    put32(img + 8, KVDISK_VERSION);
    put32(img + 12, HDR);
    put64(img + 16, d->model_id);
    put32(img + 24, (uint32_t)d->lay.type);
    put32(img + 28, (uint32_t)d->lay.n_layer);
    put32(img + 32, (uint32_t)d->lay.n_head_kv);
    put32(img + 36, (uint32_t)d->lay.head_dim);
    put32(img + 40, KVDISK_BLOCK_TOKENS);
    put64(img + 48, b->hash);
    put64(img + 56, b->parent_hash);
    for (int i = 0; i < KVDISK_BLOCK_TOKENS; i++) put32(img + 64 + 4 * i, (uint32_t)b->tokens[i]);
    put64(img + 128, d->payload);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    put64(img + 144, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec); /* the age, for the budget */
    put64(img + OFF_CHECKSUM, image_checksum(img, d->payload));
}

/* NULL if the header (and the file's size) fit this model and layout, else why not. */
static const char *header_problem(const struct kvdisk *d, const unsigned char *h, uint64_t file_size)
{
    if (file_size < HDR) return "truncated (shorter than a header)";
    if (memcmp(h, g_magic, 8) != 0) return "not a KV block file (magic)";
    if (get32(h + 8) != KVDISK_VERSION || get32(h + 12) != HDR) return "another format version";
    if (get64(h + 16) != d->model_id) return "written for another model";
    if (get32(h + 24) != (uint32_t)d->lay.type || get32(h + 28) != (uint32_t)d->lay.n_layer ||
        get32(h + 32) != (uint32_t)d->lay.n_head_kv || get32(h + 36) != (uint32_t)d->lay.head_dim ||
        get32(h + 40) != KVDISK_BLOCK_TOKENS)
        return "another KV layout";
    if (get64(h + 128) != d->payload) return "payload size differs from the layout's";
    if (file_size != d->file_bytes) return "truncated or overlong";
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Index (callers hold mu)
 * ------------------------------------------------------------------------------------------ */

static struct ent **ent_slot(struct kvdisk *d, uint64_t hash)
{
    struct ent **p = &d->buckets[fmix64(hash) & d->mask];
    while (*p && (*p)->hash != hash) p = &(*p)->hnext;
    return p;
}

static struct ent *ent_find(struct kvdisk *d, uint64_t hash) { return *ent_slot(d, hash); }

/* Adds an entry (not yet on the age list); NULL when memory runs out. */
static struct ent *ent_add(struct kvdisk *d, uint64_t hash, bool pending)
{
    if (d->n_ent >= d->mask) { /* grow the table: keep chains short */
        size_t nb = (d->mask + 1) * 2;
        struct ent **b = calloc(nb, sizeof *b);
        if (b) {
            for (size_t i = 0; i <= d->mask; i++)
                for (struct ent *e = d->buckets[i], *n; e; e = n) {
                    n = e->hnext;
                    e->hnext = b[fmix64(e->hash) & (nb - 1)];
                    b[fmix64(e->hash) & (nb - 1)] = e;
                }
            free(d->buckets);
            d->buckets = b;
            d->mask = nb - 1;
        }
    }
    struct ent *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->hash = hash;
    e->pending = pending;
    struct ent **p = &d->buckets[fmix64(hash) & d->mask];
    e->hnext = *p;
    *p = e;
    d->n_ent++;
    return e;
}

static void age_append(struct kvdisk *d, struct ent *e)
{
    e->newer = NULL;
    e->older = d->newest;
    if (d->newest) d->newest->newer = e;
    else d->oldest = e;
    d->newest = e;
    d->st.files++;
    d->st.bytes += e->bytes;
}

/* Moves a written entry to the newest end of the age list: a block in use is deleted last. */
static void age_touch(struct kvdisk *d, struct ent *e)
{
    if (e->pending || d->newest == e) return;
    if (e->older) e->older->newer = e->newer;
    else d->oldest = e->newer;
    e->newer->older = e->older; /* e is not the newest, so it has a newer one */
    d->st.files--;
    d->st.bytes -= e->bytes;
    age_append(d, e);
}

/* Removes an entry from the index (and the age list when written) and frees it. */
static void ent_remove(struct kvdisk *d, struct ent *e)
{
    struct ent **p = ent_slot(d, e->hash);
    ATTND_CHECK(*p == e);
    *p = e->hnext;
    d->n_ent--;
    if (!e->pending) {
        if (e->older) e->older->newer = e->newer;
        else d->oldest = e->newer;
        if (e->newer) e->newer->older = e->older;
        else d->newest = e->older;
        d->st.files--;
        d->st.bytes -= e->bytes;
    }
    free(e);
}

static void block_path(const struct kvdisk *d, uint64_t hash, bool tmp, char *out, size_t n)
{
    snprintf(out, n, "%s/%s%016" PRIx64 ".kvb", d->dir, tmp ? ".tmp." : "", hash);
}

/* Deletes the oldest written files until `need` more bytes fit in the budget. */
static void make_room(struct kvdisk *d, uint64_t need)
{
    while (d->oldest && d->st.bytes + need > d->max_bytes) {
        char path[4096];
        block_path(d, d->oldest->hash, false, path, sizeof path);
        unlink(path);
        ent_remove(d, d->oldest);
        d->st.deleted++;
    }
}

/* ------------------------------------------------------------------------------------------
 * File I/O: io_uring, pread/pwrite where the ring is missing
 * ------------------------------------------------------------------------------------------ */

/* Writes or reads all n bytes at offset 0. Returns 0 or -errno (-EIO for a short read). */
static int file_io(struct io_uring *ring, bool ring_ok, int fd, unsigned char *buf, size_t n, bool wr)
{
    size_t done = 0;
    while (done < n) {
        int res;
        if (wr && g_write_fault) return -g_write_fault;
        if (ring_ok) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe) return -EBUSY;
            if (wr) io_uring_prep_write(sqe, fd, buf + done, (unsigned)(n - done), done);
            else io_uring_prep_read(sqe, fd, buf + done, (unsigned)(n - done), done);
            struct io_uring_cqe *cqe;
            int rc = io_uring_submit_and_wait(ring, 1);
            if (rc < 0 && rc != -EINTR) return rc;
            if ((rc = io_uring_wait_cqe(ring, &cqe)) < 0) return rc;
            res = cqe->res;
            io_uring_cqe_seen(ring, cqe);
        } else {
            ssize_t r = wr ? pwrite(fd, buf + done, n - done, (off_t)done) : pread(fd, buf + done, n - done, (off_t)done);
            res = r < 0 ? -errno : (int)r;
        }
        if (res == -EINTR || res == -EAGAIN) continue;
        if (res < 0) return res;
        if (res == 0) return -EIO;
        done += (size_t)res;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * The writer
 * ------------------------------------------------------------------------------------------ */

/* Writes one image as a temporary file and renames it in place. Returns 0 or -errno. */
static int write_image(struct kvdisk *d, uint64_t hash, unsigned char *img)
{
    char tmp[4096], fin[4096];
    block_path(d, hash, true, tmp, sizeof tmp);
    block_path(d, hash, false, fin, sizeof fin);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    int rc = file_io(&d->wring, d->wring_ok, fd, img, d->file_bytes, true);
    if (close(fd) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, fin) != 0) rc = -errno;
    if (rc != 0) unlink(tmp);
    return rc;
}

static void write_one(struct kvdisk *d, struct rec *r)
{
    header_fill(d, &r->b, r->buf);
    pthread_mutex_lock(&d->mu);
    bool skip = d->st.full;
    if (!skip) make_room(d, d->file_bytes);
    pthread_mutex_unlock(&d->mu);
    int rc = skip ? -ENOSPC : write_image(d, r->b.hash, r->buf);
    pthread_mutex_lock(&d->mu);
    struct ent *e = ent_find(d, r->b.hash);
    if (rc == 0 && e && e->pending) {
        e->pending = false;
        e->bytes = d->file_bytes;
        age_append(d, e);
        d->st.writes++;
        d->st.write_bytes += d->file_bytes;
    } else {
        if (e && e->pending) ent_remove(d, e);
        d->st.dropped++;
        if ((rc == -ENOSPC || rc == -EDQUOT) && !d->st.full) {
            d->st.full = true;
            log_warn("kv-disk: %s is full (%s): no more blocks are spilled there", d->dir, strerror(-rc));
        } else if (rc != 0 && !skip && d->errs_logged < 5) {
            d->errs_logged++;
            log_warn("kv-disk: writing a block to %s failed: %s", d->dir, strerror(-rc));
        }
    }
    pthread_mutex_unlock(&d->mu);
}

static void *writer_main(void *arg)
{
    struct kvdisk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->qhead && !d->stop) pthread_cond_wait(&d->cv, &d->mu);
        if (!d->qhead) break;
        struct rec *r = d->qhead;
        d->qhead = r->next;
        if (!d->qhead) d->qtail = NULL;
        d->busy = true;
        pthread_mutex_unlock(&d->mu);
        write_one(d, r);
        free(r->buf);
        free(r);
        pthread_mutex_lock(&d->mu);
        d->q_bytes -= d->file_bytes;
        d->busy = false;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

bool kvdisk_has(struct kvdisk *d, uint64_t hash)
{
    pthread_mutex_lock(&d->mu);
    bool has = ent_find(d, hash) != NULL;
    pthread_mutex_unlock(&d->mu);
    return has;
}

void *kvdisk_put_begin(struct kvdisk *d, uint64_t hash, bool wait)
{
    if (d->file_bytes > d->max_bytes) return NULL;
    pthread_mutex_lock(&d->mu);
    while (wait && !d->st.full && d->q_bytes + d->file_bytes > QUEUE_MAX_BYTES) pthread_cond_wait(&d->cv, &d->mu);
    unsigned char *buf = NULL;
    struct ent *have = ent_find(d, hash);
    if (have) { /* already kept: evicted again, so still in use; its file is renewed */
        if (!have->pending) {
            age_touch(d, have);
            char path[4096];
            block_path(d, hash, false, path, sizeof path);
            utimensat(AT_FDCWD, path, NULL, 0);
        }
        goto out;
    }
    if (d->st.full) goto out;
    if (d->q_bytes + d->file_bytes > QUEUE_MAX_BYTES) {
        d->st.dropped++;
        goto out;
    }
    buf = malloc(d->file_bytes);
    if (!buf || !ent_add(d, hash, true)) {
        free(buf);
        buf = NULL;
        goto out;
    }
    d->q_bytes += d->file_bytes;
out:
    pthread_mutex_unlock(&d->mu);
    return buf ? buf + HDR : NULL;
}

void kvdisk_put_end(struct kvdisk *d, const struct kvdisk_block *b, void *payload)
{
    struct rec *r = malloc(sizeof *r);
    pthread_mutex_lock(&d->mu);
    if (!r) { /* forget the queued entry: the block is simply not spilled */
        struct ent *e = ent_find(d, b->hash);
        if (e && e->pending) ent_remove(d, e);
        d->q_bytes -= d->file_bytes;
        d->st.dropped++;
        pthread_mutex_unlock(&d->mu);
        free((unsigned char *)payload - HDR);
        return;
    }
    r->next = NULL;
    r->b = *b;
    r->buf = (unsigned char *)payload - HDR;
    if (d->qtail) d->qtail->next = r;
    else d->qhead = r;
    d->qtail = r;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void kvdisk_flush(struct kvdisk *d)
{
    pthread_mutex_lock(&d->mu);
    while ((d->qhead || d->busy) && d->thread_ok) pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

/* ------------------------------------------------------------------------------------------
 * Reading back
 * ------------------------------------------------------------------------------------------ */

/* Forgets a refused file, and deletes it unless it is another model's or layout's (which a
 * replica sharing the directory may have put there since the scan). */
static void refuse(struct kvdisk *d, uint64_t hash, const char *path, const char *why, bool keep)
{
    log_warn("kv-disk: %s refused: %s; the block is recomputed", path, why);
    pthread_mutex_lock(&d->mu);
    struct ent *e = ent_find(d, hash);
    if (e && !e->pending) ent_remove(d, e);
    d->st.rejected++;
    pthread_mutex_unlock(&d->mu);
    if (!keep) unlink(path);
}

/* Why the image in d->rbuf is not block `want`, or NULL. */
static const char *image_problem(const struct kvdisk *d, const struct kvdisk_block *want, uint64_t size)
{
    const unsigned char *h = d->rbuf;
    const char *why = header_problem(d, h, size);
    if (why) return why;
    if (get64(h + OFF_CHECKSUM) != image_checksum(h, d->payload)) return "checksum mismatch (corrupt)";
    if (get64(h + 48) != want->hash || get64(h + 56) != want->parent_hash) return "block or parent hash differs";
    for (int i = 0; i < KVDISK_BLOCK_TOKENS; i++)
        if ((int32_t)get32(h + 64 + 4 * i) != want->tokens[i]) return "token ids differ";
    return NULL;
}

attnd_status kvdisk_get(struct kvdisk *d, const struct kvdisk_block *want, void *payload)
{
    pthread_mutex_lock(&d->mu);
    struct ent *e = ent_find(d, want->hash);
    bool have = e && !e->pending;
    pthread_mutex_unlock(&d->mu);
    if (!have) return ATTND_ERR_NOTFOUND;
    double t0 = check_now_s();
    char path[4096];
    block_path(d, want->hash, false, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        refuse(d, want->hash, path, strerror(errno), true);
        return ATTND_ERR_IO;
    }
    struct stat sb;
    uint64_t size = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    int rc = size == d->file_bytes ? file_io(&d->rring, d->rring_ok, fd, d->rbuf, d->file_bytes, false) : 0;
    if (rc == 0) futimens(fd, NULL); /* used: the budget deletes it last (the age at the next start) */
    close(fd);
    if (rc < 0) {
        refuse(d, want->hash, path, strerror(-rc), true);
        return ATTND_ERR_IO;
    }
    const char *why = size != d->file_bytes ? "truncated or overlong" : image_problem(d, want, size);
    if (why) {
        bool foreign = size == d->file_bytes && header_problem(d, d->rbuf, size) != NULL;
        refuse(d, want->hash, path, why, foreign);
        return ATTND_ERR_FORMAT;
    }
    memcpy(payload, d->rbuf + HDR, d->payload);
    pthread_mutex_lock(&d->mu);
    if ((e = ent_find(d, want->hash))) age_touch(d, e);
    d->st.reads++;
    d->st.read_bytes += d->file_bytes;
    d->st.read_seconds += check_now_s() - t0;
    pthread_mutex_unlock(&d->mu);
    return ATTND_OK;
}

void kvdisk_get_stats(struct kvdisk *d, struct kvdisk_stats *out)
{
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    pthread_mutex_unlock(&d->mu);
}

/* ------------------------------------------------------------------------------------------
 * Open: the directory scan
 * ------------------------------------------------------------------------------------------ */

struct found {
    uint64_t hash;
    uint64_t used_ns;    /* the file's modification time: written, or last restored or evicted again */
    uint64_t written_ns; /* the header's write time: breaks ties of coarse file times */
};

static int found_cmp(const void *a, const void *b)
{
    const struct found *x = a, *y = b;
    if (x->used_ns != y->used_ns) return x->used_ns < y->used_ns ? -1 : 1;
    return x->written_ns < y->written_ns ? -1 : x->written_ns > y->written_ns;
}

/* Checks one directory entry's header; true (and *f filled) if it is a usable block file. */
static bool scan_one(struct kvdisk *d, const char *name, struct found *f)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    size_t len = strlen(name);
    if (strncmp(name, ".tmp.", 5) == 0) { /* a write cut short by a crash */
        unlink(path);
        return false;
    }
    if (len < 4 || strcmp(name + len - 4, ".kvb") != 0) return false;
    char *end = NULL;
    uint64_t h = strtoull(name, &end, 16);
    if (len != 20 || end != name + 16) {
        log_warn("kv-disk: %s ignored: not named <hash>.kvb", path);
        return false;
    }
    unsigned char hdr[HDR];
    const char *why = NULL;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) why = strerror(errno);
    else if (sb.st_size >= (off_t)HDR && pread(fd, hdr, HDR, 0) != (ssize_t)HDR) why = "unreadable header";
    if (fd >= 0) close(fd);
    if (!why) why = header_problem(d, hdr, (uint64_t)sb.st_size);
    if (!why && get64(hdr + 48) != h) why = "its name is not its block hash";
    if (why) {
        log_warn("kv-disk: %s ignored: %s", path, why);
        d->st.rejected++;
        return false;
    }
    f->hash = h;
    f->written_ns = get64(hdr + 144);
    f->used_ns = (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec;
    return true;
}

/* Indexes the usable files, oldest first, then trims to the budget. */
static attnd_status scan_dir(struct kvdisk *d, char *err, size_t errlen)
{
    DIR *dp = opendir(d->dir);
    if (!dp) {
        snprintf(err, errlen, "kv-disk: cannot read %s: %s", d->dir, strerror(errno));
        return ATTND_ERR_IO;
    }
    struct found *fs = NULL;
    size_t n = 0, cap = 0;
    attnd_status st = ATTND_OK;
    for (struct dirent *de; (de = readdir(dp));) {
        struct found f;
        if (!scan_one(d, de->d_name, &f)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            struct found *nf = realloc(fs, cap * sizeof *fs);
            if (!nf) {
                st = ATTND_ERR_NOMEM;
                break;
            }
            fs = nf;
        }
        fs[n++] = f;
    }
    closedir(dp);
    if (n) qsort(fs, n, sizeof *fs, found_cmp);
    for (size_t i = 0; i < n && !st; i++) {
        struct ent *e = ent_add(d, fs[i].hash, false);
        if (!e) st = ATTND_ERR_NOMEM;
        else e->bytes = d->file_bytes, age_append(d, e);
    }
    free(fs);
    if (st) snprintf(err, errlen, "kv-disk: out of memory indexing %s", d->dir);
    else make_room(d, 0);
    return st;
}

attnd_status kvdisk_open(const struct kvdisk_opts *o, struct kvdisk **out, char *err, size_t errlen)
{
    *out = NULL;
    size_t payload = o && o->dir && *o->dir ? kvdisk_payload_bytes(&o->layout) : 0;
    if (!payload || o->max_bytes < HDR + payload) {
        snprintf(err, errlen, "kv-disk: %s", !payload ? "a directory and a valid KV layout are needed"
                                                      : "the byte budget holds not even one block file");
        return ATTND_ERR_INVALID;
    }
    if (mkdir(o->dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "kv-disk: cannot create %s: %s", o->dir, strerror(errno));
        return ATTND_ERR_IO;
    }
    struct kvdisk *d = calloc(1, sizeof *d);
    if (!d) return ATTND_ERR_NOMEM;
    d->dir = strdup(o->dir);
    d->max_bytes = o->max_bytes, d->model_id = o->model_id, d->lay = o->layout;
    d->payload = payload, d->file_bytes = HDR + payload;
    d->mask = 255;
    d->buckets = calloc(d->mask + 1, sizeof *d->buckets);
    d->rbuf = malloc(d->file_bytes);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    const char *no = getenv("ATTND_NO_IO_URING");
    bool use_ring = !(no && *no && strcmp(no, "0"));
    d->rring_ok = use_ring && io_uring_queue_init(4, &d->rring, 0) == 0;
    d->wring_ok = use_ring && io_uring_queue_init(4, &d->wring, 0) == 0;
    attnd_status st = d->dir && d->buckets && d->rbuf ? scan_dir(d, err, errlen) : ATTND_ERR_NOMEM;
    if (!st && pthread_create(&d->thread, NULL, writer_main, d) != 0) st = ATTND_ERR_NOMEM;
    if (st) {
        if (st == ATTND_ERR_NOMEM) snprintf(err, errlen, "kv-disk: out of memory");
        kvdisk_close(d);
        return st;
    }
    d->thread_ok = true;
    *out = d;
    return ATTND_OK;
}

attnd_status kvdisk_open_model(const char *dir, uint64_t max_bytes, const struct model *m,
                               enum tensor_type kv_type, struct kvdisk **out)
{
    struct kvdisk_opts o = {.dir = dir, .max_bytes = max_bytes, .model_id = kvdisk_model_identity(m),
                            .layout = {kv_type, m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim}};
    char err[512];
    attnd_status st = kvdisk_open(&o, out, err, sizeof err);
    if (st) {
        log_error("%s", err);
        return st;
    }
    log_info("kv-disk: %s: %" PRIu64 " block files (%.1f MiB) of model %016" PRIx64 " found, %" PRIu64
             " ignored; budget %.1f MiB, %zu bytes per block", dir, (*out)->st.files,
             (double)(*out)->st.bytes / 1048576.0, o.model_id, (*out)->st.rejected, (double)max_bytes / 1048576.0,
             (*out)->file_bytes);
    return ATTND_OK;
}

void kvdisk_close(struct kvdisk *d)
{
    if (!d) return;
    if (d->thread_ok) {
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
        const struct kvdisk_stats *s = &d->st;
        log_info("kv-disk: %" PRIu64 " blocks written, %" PRIu64 " restored (%.1f MB in %.3f s, %.0f MB/s), %" PRIu64
                 " refused, %" PRIu64 " dropped, %" PRIu64 " deleted for the budget", s->writes, s->reads,
                 (double)s->read_bytes / 1e6, s->read_seconds,
                 s->read_seconds > 0 ? (double)s->read_bytes / 1e6 / s->read_seconds : 0.0, s->rejected, s->dropped,
                 s->deleted);
    }
    for (struct rec *r = d->qhead, *n; r; r = n) {
        n = r->next;
        free(r->buf);
        free(r);
    }
    if (d->buckets)
        for (size_t i = 0; i <= d->mask; i++)
            for (struct ent *e = d->buckets[i], *n; e; e = n) {
                n = e->hnext;
                free(e);
            }
    if (d->rring_ok) io_uring_queue_exit(&d->rring);
    if (d->wring_ok) io_uring_queue_exit(&d->wring);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d->buckets);
    free(d->rbuf);
    free(d->dir);
    free(d);
}
