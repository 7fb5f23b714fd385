/* kvevents.c - KV-cache events over ZeroMQ in vLLM's format. Contracts and the wire format are
 * in include/attnd/kvevents.h. */
#include "attnd/kvevents.h"

#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "attnd/log.h"

/* ------------------------------------------------------------------------------------------
 * Data
 * ------------------------------------------------------------------------------------------ */

enum rec_type { REC_STORED = 0, REC_REMOVED = 1, REC_CLEARED = 2 };

/* One hook call, copied into the queue as is (fixed size: the hooks never allocate). */
struct rec {
    uint8_t type;       /* enum rec_type */
    uint8_t has_parent; /* REC_STORED: parent_hash is sent (else nil) */
    uint64_t hash;      /* REC_STORED, REC_REMOVED */
    uint64_t parent_hash;
    int32_t tokens[KVEV_BLOCK_TOKENS]; /* REC_STORED */
};

/* A batch kept for replay. */
struct kept {
    uint64_t seq;
    char *payload; /* malloc'd msgpack bytes */
    size_t len;
};

struct kvev {
    struct kvev_opts o;
    char *topic;                 /* owned copy, "" for none */

    pthread_mutex_t mu;          /* guards q*, stopping */
    pthread_cond_t cv;           /* the publisher waits on it */
    struct rec *q;               /* (max_queued) ring of queued records */
    size_t q_head, q_len;
    int stopping;
    _Atomic uint64_t dropped;
    int warned;                  /* under mu: the drop warning was logged */

    /* publisher thread only, after create */
    void *ctx, *pub, *replay;
    struct rec *work;            /* (max_queued) records taken out of the ring */
    struct kept *kept;           /* (replay_batches) ring of sent batches */
    size_t kept_head, kept_len;
    uint64_t next_seq;
    pthread_t thread;
    int thread_started;
};

static const uint8_t END_SEQ[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}; /* -1, big-endian */

/* ------------------------------------------------------------------------------------------
 * Hooks (any thread)
 * ------------------------------------------------------------------------------------------ */

/* Appends r to the ring, or counts it dropped. Wakes the publisher when a batch is ready. */
static void enqueue(struct kvev *e, const struct rec *r)
{
    pthread_mutex_lock(&e->mu);
    if (e->q_len == e->o.max_queued) {
        atomic_fetch_add(&e->dropped, 1);
        if (!e->warned) {
            e->warned = 1;
            log_warn("kv events: queue full (%zu records), dropping events (attnd_kv_events_dropped_total)",
                     e->o.max_queued);
        }
    } else {
        e->q[(e->q_head + e->q_len) % e->o.max_queued] = *r;
        if (++e->q_len == e->o.max_events) pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

void kvev_block_stored(struct kvev *e, uint64_t hash, bool has_parent, uint64_t parent_hash, const int32_t *tokens)
{
    if (!e) return;
    struct rec r = {.type = REC_STORED, .has_parent = has_parent, .hash = hash, .parent_hash = parent_hash};
    memcpy(r.tokens, tokens, sizeof r.tokens);
    enqueue(e, &r);
}

void kvev_block_removed(struct kvev *e, uint64_t hash)
{
    if (!e) return;
    struct rec r = {.type = REC_REMOVED, .hash = hash};
    enqueue(e, &r);
}

void kvev_all_cleared(struct kvev *e)
{
    if (!e) return;
    struct rec r = {.type = REC_CLEARED};
    enqueue(e, &r);
}

uint64_t kvev_dropped(const struct kvev *e)
{
    return e ? atomic_load(&((struct kvev *)e)->dropped) : 0;
}

/* ------------------------------------------------------------------------------------------
 * Encoding
 * ------------------------------------------------------------------------------------------ */

static void pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* Records r[i..j) of one type that go into one event: a chain of stored blocks (each one's parent
 * is the previous one's hash) or a run of removals. Returns j. */
static size_t run_end(const struct rec *r, size_t i, size_t n)
{
    size_t j = i + 1;
    if (r[i].type == REC_CLEARED) return j;
    while (j < n && r[j].type == r[i].type &&
           (r[i].type == REC_REMOVED || (r[j].has_parent && r[j].parent_hash == r[j - 1].hash)))
        j++;
    return j;
}

/* One event from records r[i..j) (see run_end). */
static void pack_event(msgpack_packer *pk, const struct rec *r, size_t i, size_t j)
{
    if (r[i].type == REC_CLEARED) {
        msgpack_pack_array(pk, 1);
        pack_cstr(pk, "AllBlocksCleared");
        return;
    }
    bool stored = r[i].type == REC_STORED;
    msgpack_pack_array(pk, stored ? 7 : 3);
    pack_cstr(pk, stored ? "BlockStored" : "BlockRemoved");
    msgpack_pack_array(pk, (uint32_t)(j - i));
    for (size_t k = i; k < j; k++) msgpack_pack_uint64(pk, r[k].hash);
    if (stored) {
        if (r[i].has_parent) msgpack_pack_uint64(pk, r[i].parent_hash);
        else msgpack_pack_nil(pk);
        msgpack_pack_array(pk, (uint32_t)((j - i) * KVEV_BLOCK_TOKENS));
        for (size_t k = i; k < j; k++)
            for (int t = 0; t < KVEV_BLOCK_TOKENS; t++) msgpack_pack_int32(pk, r[k].tokens[t]);
        msgpack_pack_int32(pk, KVEV_BLOCK_TOKENS); /* block_size */
        msgpack_pack_nil(pk);                      /* lora_id */
    }
    pack_cstr(pk, "GPU"); /* medium: the primary tier (vLLM's MEDIUM_GPU), whatever the device */
}

/* The EventBatch of records r[0..n) into sb (initialised by the caller). */
static void pack_batch(msgpack_sbuffer *sb, const struct rec *r, size_t n)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    size_t n_events = 0;
    for (size_t i = 0; i < n; i = run_end(r, i, n)) n_events++;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    msgpack_pack_array(&pk, (uint32_t)n_events);
    for (size_t i = 0, j; i < n; i = j) {
        j = run_end(r, i, n);
        pack_event(&pk, r, i, j);
    }
    msgpack_pack_int32(&pk, 0); /* data_parallel_rank */
}

/* ------------------------------------------------------------------------------------------
 * Publisher thread
 * ------------------------------------------------------------------------------------------ */

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* Keeps (seq, payload) for replay, taking ownership of payload; the oldest goes when full. */
static void keep(struct kvev *e, uint64_t seq, char *payload, size_t len)
{
    size_t cap = e->o.replay_batches;
    if (e->kept_len == cap) {
        free(e->kept[e->kept_head].payload);
        e->kept_head = (e->kept_head + 1) % cap;
        e->kept_len--;
    }
    e->kept[(e->kept_head + e->kept_len) % cap] = (struct kept){.seq = seq, .payload = payload, .len = len};
    e->kept_len++;
}

/* Packs records r[0..n) as one batch, publishes it (PUB never blocks: past its high-water mark a
 * slow subscriber loses messages, and replay fills the gap) and keeps it for replay. */
static void send_batch(struct kvev *e, const struct rec *r, size_t n)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    pack_batch(&sb, r, n);
    if (!sb.data) return; /* out of memory: the batch is lost */
    uint8_t seq[8];
    uint64_t s = e->next_seq++;
    put_be64(seq, s);
    zmq_send(e->pub, e->topic, strlen(e->topic), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(e->pub, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(e->pub, sb.data, sb.size, ZMQ_DONTWAIT);
    if (e->replay) {
        keep(e, s, sb.data, sb.size); /* takes the buffer */
    } else {
        msgpack_sbuffer_destroy(&sb);
    }
}

#define PART_MAX 256 /* a ROUTER identity is at most 255 bytes */

/* Receives one multipart message from the ROUTER into parts (the first 4 frames kept, their full
 * sizes in lens, bytes past PART_MAX cut); returns the number of frames, 0 if none was waiting. */
static int recv_request(void *sock, uint8_t parts[4][PART_MAX], size_t lens[4])
{
    int n = 0, more = 0;
    do {
        uint8_t buf[PART_MAX];
        int got = zmq_recv(sock, buf, sizeof buf, n == 0 ? ZMQ_DONTWAIT : 0);
        if (got < 0) return n;
        if (n < 4) {
            size_t k = (size_t)got < sizeof buf ? (size_t)got : sizeof buf;
            memcpy(parts[n], buf, k);
            lens[n] = (size_t)got;
        }
        n++;
        size_t sz = sizeof more;
        if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz)) more = 0;
    } while (more);
    return n;
}

/* Answers the replay requests waiting on the ROUTER socket: [identity] [empty] [start seq]. */
static void serve_replay(struct kvev *e)
{
    uint8_t parts[4][PART_MAX];
    size_t lens[4];
    int n;
    while ((n = recv_request(e->replay, parts, lens)) > 0) {
        if (n != 3 || lens[0] > sizeof parts[0] || lens[1] != 0 || lens[2] != 8) continue; /* not ours */
        uint64_t start = 0;
        for (int i = 0; i < 8; i++) start = start << 8 | parts[2][i];
        for (size_t i = 0; i < e->kept_len; i++) {
            const struct kept *k = &e->kept[(e->kept_head + i) % e->o.replay_batches];
            if (k->seq < start) continue;
            uint8_t seq[8];
            put_be64(seq, k->seq);
            zmq_send(e->replay, parts[0], lens[0], ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(e->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(e->replay, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(e->replay, k->payload, k->len, ZMQ_DONTWAIT);
        }
        zmq_send(e->replay, parts[0], lens[0], ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(e->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(e->replay, END_SEQ, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(e->replay, "", 0, ZMQ_DONTWAIT);
    }
}

/* Waits up to flush_ms for records (less once max_events are queued), moves them into e->work
 * and returns how many; *stop is set when destroy asked and the ring is empty. */
static size_t take_queued(struct kvev *e, int *stop)
{
    pthread_mutex_lock(&e->mu);
    if (e->q_len < e->o.max_events && !e->stopping) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        long ns = dl.tv_nsec + (long)e->o.flush_ms * 1000000L;
        dl.tv_sec += ns / 1000000000L;
        dl.tv_nsec = ns % 1000000000L;
        while (e->q_len < e->o.max_events && !e->stopping)
            if (pthread_cond_timedwait(&e->cv, &e->mu, &dl) == ETIMEDOUT) break;
    }
    size_t n = e->q_len, cap = e->o.max_queued;
    for (size_t i = 0; i < n; i++) e->work[i] = e->q[(e->q_head + i) % cap];
    e->q_head = (e->q_head + n) % cap;
    e->q_len = 0;
    *stop = e->stopping;
    pthread_mutex_unlock(&e->mu);
    return n;
}

static void *publisher_main(void *arg)
{
    struct kvev *e = arg;
    for (;;) {
        int stop = 0;
        size_t n = take_queued(e, &stop);
        for (size_t i = 0; i < n; i += e->o.max_events) {
            size_t m = n - i < e->o.max_events ? n - i : e->o.max_events;
            send_batch(e, e->work + i, m);
        }
        if (e->replay) serve_replay(e);
        if (stop) break;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Lifecycle
 * ------------------------------------------------------------------------------------------ */

struct kvev_opts kvev_opts_default(void)
{
    return (struct kvev_opts){.flush_ms = 10, .max_events = 512, .max_queued = 65536, .replay_batches = 10000};
}

static bool opts_ok(const struct kvev_opts *o)
{
    return o->endpoint && o->endpoint[0] && o->flush_ms >= 1 && o->flush_ms <= 10000 && o->max_events >= 1 &&
           o->max_events <= 65536 && o->max_queued >= 16 && o->max_queued <= (1u << 24) &&
           o->max_events <= o->max_queued && o->replay_batches >= 1 && o->replay_batches <= (1u << 20);
}

/* Creates a socket of this type and binds it to endpoint (connects for a leading '>').
 * Returns NULL with err filled. */
static void *open_socket(void *ctx, int type, const char *endpoint, const char *what, char *err, size_t errlen)
{
    void *s = zmq_socket(ctx, type);
    if (!s) {
        if (err && errlen) snprintf(err, errlen, "kv events: cannot create the %s socket: %s", what, zmq_strerror(errno));
        return NULL;
    }
    int hwm = 100000, linger = 200; /* vLLM's high-water mark; at close, unsent messages get 200 ms */
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    bool conn = endpoint[0] == '>';
    int rc = conn ? zmq_connect(s, endpoint + 1) : zmq_bind(s, endpoint);
    if (rc) {
        if (err && errlen)
            snprintf(err, errlen, "kv events: cannot %s the %s socket to %s: %s", conn ? "connect" : "bind", what,
                     endpoint, zmq_strerror(errno));
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* Frees everything create made (the thread is not running). */
static void free_all(struct kvev *e)
{
    if (e->pub) zmq_close(e->pub);
    if (e->replay) zmq_close(e->replay);
    if (e->ctx) zmq_ctx_term(e->ctx);
    for (size_t i = 0; e->kept && i < e->kept_len; i++) free(e->kept[(e->kept_head + i) % e->o.replay_batches].payload);
    free(e->kept);
    free(e->q);
    free(e->work);
    free(e->topic);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

attnd_status kvev_create(const struct kvev_opts *opts, struct kvev **out, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (!opts || !out || !opts_ok(opts)) {
        if (err && errlen) snprintf(err, errlen, "kv events: missing endpoint or an option out of range");
        return ATTND_ERR_INVALID;
    }
    struct kvev *e = calloc(1, sizeof *e);
    if (!e) return ATTND_ERR_NOMEM;
    e->o = *opts;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_init(&e->dropped, 0);
    e->topic = strdup(opts->topic ? opts->topic : "");
    e->q = malloc(opts->max_queued * sizeof *e->q);
    e->work = malloc(opts->max_queued * sizeof *e->work);
    e->kept = opts->replay_endpoint ? calloc(opts->replay_batches, sizeof *e->kept) : NULL;
    if (!e->topic || !e->q || !e->work || (opts->replay_endpoint && !e->kept)) {
        free_all(e);
        return ATTND_ERR_NOMEM;
    }
    e->ctx = zmq_ctx_new();
    if (!e->ctx) {
        free_all(e);
        return ATTND_ERR_NOMEM;
    }
    e->pub = open_socket(e->ctx, ZMQ_PUB, opts->endpoint, "PUB", err, errlen);
    if (e->pub && opts->replay_endpoint)
        e->replay = open_socket(e->ctx, ZMQ_ROUTER, opts->replay_endpoint, "replay ROUTER", err, errlen);
    if (!e->pub || (opts->replay_endpoint && !e->replay)) {
        free_all(e);
        return ATTND_ERR_IO;
    }
    if (pthread_create(&e->thread, NULL, publisher_main, e)) {
        free_all(e);
        return ATTND_ERR_NOMEM;
    }
    e->thread_started = 1;
    *out = e;
    return ATTND_OK;
}

void kvev_destroy(struct kvev *e)
{
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL); /* it sends what was queued first */
    }
    free_all(e);
}
