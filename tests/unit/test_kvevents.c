/* test_kvevents.c - the KV-cache event publisher on loopback PUB and ROUTER sockets: option
 * checks, how records are grouped into events (a chain of stored blocks is one BlockStored, a run
 * of removals one BlockRemoved), each event's exact msgpack layout (vLLM's array_like form:
 * include/attnd/kvevents.h), sequence numbers and the replay ROUTER's answer and end marker.
 * Decoded with msgpack-c's unpacker, written against the header's schema. */
#include "attnd/kvevents.h"

#include <msgpack.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "testutil.h"

static bool is_str(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static uint64_t u64(const msgpack_object *o) { return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : ~0ull; }

/* Checks the batch in payload: events as kinds describe them ("S3": stored, 3 hashes, parent the
 * first hash - 1; "N1": stored, parent nil; "R2": removed, 2 hashes; "C": cleared), hashes counted
 * up from *next_hash, token t of block h being h * 16 + t. */
static void check_batch(const char *payload, size_t len, const char *const *kinds, int n_kinds, uint64_t *next_hash)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    T_CHECK(msgpack_unpack_next(&u, payload, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len, "one object");
    const msgpack_object *b = &u.data;
    T_CHECK(b->type == MSGPACK_OBJECT_ARRAY && b->via.array.size == 3, "batch = [ts, events, rank]");
    if (b->type != MSGPACK_OBJECT_ARRAY || b->via.array.size != 3) goto out;
    const msgpack_object *ts = &b->via.array.ptr[0], *ev = &b->via.array.ptr[1];
    T_CHECK(ts->type == MSGPACK_OBJECT_FLOAT64 && ts->via.f64 > 1.7e9, "ts in seconds since the epoch");
    T_CHECK(u64(&b->via.array.ptr[2]) == 0, "data_parallel_rank 0");
    T_CHECK(ev->type == MSGPACK_OBJECT_ARRAY && (int)ev->via.array.size == n_kinds, "%d events", n_kinds);
    for (int i = 0; i < n_kinds && ev->type == MSGPACK_OBJECT_ARRAY && i < (int)ev->via.array.size; i++) {
        const msgpack_object *e = &ev->via.array.ptr[i];
        const msgpack_object *f = e->via.array.ptr;
        unsigned n = (unsigned)(kinds[i][1] ? kinds[i][1] - '0' : 0), sz = e->via.array.size;
        if (kinds[i][0] == 'C') {
            T_CHECK(sz == 1 && is_str(&f[0], "AllBlocksCleared"), "event %d cleared", i);
            continue;
        }
        bool st = kinds[i][0] == 'S' || kinds[i][0] == 'N';
        T_CHECK(sz == (st ? 7u : 3u) && is_str(&f[0], st ? "BlockStored" : "BlockRemoved"), "event %d tag", i);
        if (sz != (st ? 7u : 3u)) continue;
        T_CHECK(f[1].type == MSGPACK_OBJECT_ARRAY && f[1].via.array.size == n, "event %d: %u hashes", i, n);
        for (unsigned k = 0; k < n && k < f[1].via.array.size; k++)
            T_CHECK(u64(&f[1].via.array.ptr[k]) == (*next_hash)++, "event %d hash %u", i, k);
        T_CHECK(is_str(&f[sz - 1], "GPU"), "medium");
        if (!st) continue;
        uint64_t first = *next_hash - n;
        T_CHECK(kinds[i][0] == 'N' ? f[2].type == MSGPACK_OBJECT_NIL : u64(&f[2]) == first - 1, "parent of %llu",
                (unsigned long long)first);
        T_CHECK(f[3].type == MSGPACK_OBJECT_ARRAY && f[3].via.array.size == n * KVEV_BLOCK_TOKENS, "token ids");
        for (unsigned k = 0; k < f[3].via.array.size; k++)
            T_CHECK(u64(&f[3].via.array.ptr[k]) == (first + k / 16) * 16 + k % 16, "token %u", k);
        T_CHECK(u64(&f[4]) == KVEV_BLOCK_TOKENS && f[5].type == MSGPACK_OBJECT_NIL, "block_size 16, lora_id nil");
    }
out:
    msgpack_unpacked_destroy(&u);
}

static void stored(struct kvev *e, uint64_t h, bool chained)
{
    int32_t t[KVEV_BLOCK_TOKENS];
    for (int i = 0; i < KVEV_BLOCK_TOKENS; i++) t[i] = (int32_t)(h * 16 + (uint64_t)i);
    kvev_block_stored(e, h, chained, h - 1, t);
}

/* Receives one message of n frames into bufs (each up to 64 KiB); returns the frame count. */
static int recv_frames(void *s, char bufs[][65536], int *lens, int n)
{
    int k = 0, more = 1;
    while (more) {
        int got = zmq_recv(s, k < n ? bufs[k] : bufs[n - 1], 65536, 0);
        if (got < 0) return -1;
        if (k < n) lens[k] = got;
        k++;
        size_t sz = sizeof more;
        zmq_getsockopt(s, ZMQ_RCVMORE, &more, &sz);
    }
    return k;
}

static char g_bufs[4][65536];

int main(void)
{
    struct kvev *e = NULL;
    struct kvev_opts o = kvev_opts_default();
    T_CHECK(kvev_create(&o, &e, NULL, 0) == ATTND_ERR_INVALID && !e, "no endpoint");
    o.endpoint = "tcp://127.0.0.1:0", o.flush_ms = 0;
    T_CHECK(kvev_create(&o, &e, NULL, 0) == ATTND_ERR_INVALID, "flush_ms 0");
    char err[256];
    o = kvev_opts_default();
    o.endpoint = "bogus://x";
    T_CHECK(kvev_create(&o, &e, err, sizeof err) == ATTND_ERR_IO && strstr(err, "bogus://x"), "bad endpoint: %s", err);
    kvev_block_removed(NULL, 1); /* NULL: no-ops */
    kvev_all_cleared(NULL);
    T_CHECK(kvev_dropped(NULL) == 0, "dropped(NULL)");
    kvev_destroy(NULL);

    o = kvev_opts_default();
    o.endpoint = "tcp://127.0.0.1:38517", o.replay_endpoint = "tcp://127.0.0.1:38518", o.topic = "kv@t@m";
    o.flush_ms = 200;
    if (kvev_create(&o, &e, err, sizeof err)) {
        fprintf(stderr, "skip: cannot bind the test ports: %s\n", err);
        return 77;
    }
    void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB), *dealer = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    int tmo = 5000;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_connect(sub, o.endpoint);
    zmq_connect(dealer, o.replay_endpoint);
    nanosleep(&(struct timespec){0, 300000000}, NULL); /* the subscription reaches the PUB */

    /* one flush: 100 <- 101 <- 102 chained, 103 not (parent 102 but has_parent false), removals
     * 104 105, a clear, then 106 chained to 105 (a stored run breaks at other kinds) */
    stored(e, 100, false), stored(e, 101, true), stored(e, 102, true), stored(e, 103, false);
    kvev_block_removed(e, 104), kvev_block_removed(e, 105), kvev_all_cleared(e), stored(e, 106, true);
    int lens[4];
    int nf = recv_frames(sub, g_bufs, lens, 4);
    T_CHECK(nf == 3 && lens[0] == 6 && !memcmp(g_bufs[0], "kv@t@m", 6) && lens[1] == 8, "frames %d", nf);
    static const uint8_t seq0[8] = {0};
    T_CHECK(nf == 3 && !memcmp(g_bufs[1], seq0, 8), "first seq 0");
    uint64_t next = 100;
    const char *kinds[] = {"N3", "N1", "R2", "C", "S1"};
    if (nf == 3) check_batch(g_bufs[2], (size_t)lens[2], kinds, 5, &next);

    kvev_block_removed(e, 7); /* seq 1 */
    nf = recv_frames(sub, g_bufs, lens, 4);
    T_CHECK(nf == 3 && lens[1] == 8 && (uint8_t)g_bufs[1][7] == 1, "second seq 1");

    /* replay from 1: batch 1, then the end marker */
    uint8_t start[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    zmq_send(dealer, "", 0, ZMQ_SNDMORE);
    zmq_send(dealer, start, 8, 0);
    nf = recv_frames(dealer, g_bufs, lens, 4);
    T_CHECK(nf == 3 && lens[0] == 0 && lens[1] == 8 && (uint8_t)g_bufs[1][7] == 1, "replayed seq 1");
    nf = recv_frames(dealer, g_bufs, lens, 4);
    static const uint8_t end[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    T_CHECK(nf == 3 && lens[1] == 8 && !memcmp(g_bufs[1], end, 8) && lens[2] == 0, "end marker");
    T_CHECK(kvev_dropped(e) == 0, "nothing dropped");

    kvev_destroy(e);
    zmq_close(sub);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
    printf("test_kvevents: %d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
