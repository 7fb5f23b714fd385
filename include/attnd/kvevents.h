/* kvevents.h - KV-cache events for prefix-aware routers, in vLLM's wire format.
 *
 * The prefix cache (kvcache.c) calls three cheap hooks: a block entered the cache, a block left
 * it, the whole cache was cleared. Each hook copies one fixed-size record into a bounded queue
 * under a lock and returns; it never blocks on the network and never allocates. A publisher
 * thread takes what is queued every flush_ms (sooner once max_events are waiting), packs it into
 * batches and sends each batch on a ZeroMQ PUB socket as a three-frame message
 *     [topic] [sequence number: 8 bytes, big-endian, from 0] [payload: msgpack]
 * and keeps the last replay_batches payloads for a ROUTER socket that replays them on request.
 * When the queue is full a hook drops its record and counts it (kvev_dropped): the scheduler
 * is never slowed by a slow or absent subscriber.
 *
 * Payload (vLLM's vllm/distributed/kv_events.py with msgspec's array_like encoding, the form of
 * vLLM 0.10-0.11 that llm-d's kv-cache manager and Dynamo's KV router decode; tagged events are
 * arrays whose first element is the class name, fields in declaration order):
 *     EventBatch       = [ts: float64 seconds since the epoch, events: [event...], data_parallel_rank: 0]
 *     BlockStored      = ["BlockStored", block_hashes: [uint64...], parent_block_hash: uint64 | nil,
 *                         token_ids: [int...] (16 per block, in order), block_size: 16,
 *                         lora_id: nil, medium: "GPU"]
 *     BlockRemoved     = ["BlockRemoved", block_hashes: [uint64...], medium: "GPU"]
 *     AllBlocksCleared = ["AllBlocksCleared"]
 * Consecutive stored blocks that chain (each one's parent is the previous one's hash) share one
 * BlockStored event, as vLLM sends them; consecutive removals share one BlockRemoved.
 * The block hash scheme is kv_hash_block (kvcache.h), documented in docs/GATEWAY.md.
 *
 * Replay (vLLM's protocol): a client (DEALER or REQ) sends [empty frame] [start seq: 8 bytes,
 * big-endian]; the ROUTER answers with one [empty] [seq] [payload] message for every kept batch
 * whose seq >= start, oldest first, then the end marker [empty] [-1 as 8 bytes] [empty frame].
 *
 * Thread safety: the hooks and kvev_dropped may be called from any thread; create and destroy
 * from one. Nothing here prints except one warning in the log when drops begin.
 */
#ifndef ATTND_KVEVENTS_H
#define ATTND_KVEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

#define KVEV_BLOCK_TOKENS 16 /* token ids per block record (== KV_BLOCK_SIZE) */

struct kvev; /* opaque: the queue, the publisher thread and its sockets */

struct kvev_opts {
    const char *endpoint;        /* PUB socket: "tcp://HOST:PORT" is bound; a leading '>' connects
                                    instead (">tcp://indexer:5557", czmq's convention). Required. */
    const char *replay_endpoint; /* ROUTER socket for replay, always bound; NULL: no replay */
    const char *topic;           /* first frame of every message; NULL or "" (vLLM's default) */
    int flush_ms;                /* longest wait before queued records go out, 1..10000 (default 10) */
    size_t max_events;           /* records per batch, 1..65536 (default 512) */
    size_t max_queued;           /* records queued before hooks drop, 16..1<<24 (default 65536) */
    size_t replay_batches;       /* batches kept for replay, 1..1<<20 (default 10000, vLLM's) */
};

/* Defaults for everything but the endpoints (set them). Thread-safe. */
struct kvev_opts kvev_opts_default(void);

/* Creates the sockets (binding or connecting them now, so a bad or busy address fails here) and
 * starts the publisher thread. Returns ATTND_ERR_INVALID for a missing endpoint or an option out
 * of range, ATTND_ERR_IO if a socket cannot be bound or connected (err says which and why),
 * ATTND_ERR_NOMEM. *out is set only on success; the caller owns it. err may be NULL. */
attnd_status kvev_create(const struct kvev_opts *opts, struct kvev **out, char *err, size_t errlen);

/* Sends what is still queued, stops the thread and closes the sockets (waiting at most 200 ms for
 * unsent messages). kvev_destroy(NULL) is a no-op. */
void kvev_destroy(struct kvev *e);

/* Hook: a full block entered the prefix cache. hash is its block hash; parent_hash its parent's
 * (sent as nil when has_parent is false: a sequence's first block under the plain root);
 * tokens holds KVEV_BLOCK_TOKENS ids. No-op when e is NULL. Never blocks on I/O. */
void kvev_block_stored(struct kvev *e, uint64_t hash, bool has_parent, uint64_t parent_hash, const int32_t *tokens);

/* Hook: the block with this hash left the prefix cache (evicted). No-op when e is NULL. */
void kvev_block_removed(struct kvev *e, uint64_t hash);

/* Hook: every block left the prefix cache (the cache was created empty or destroyed).
 * No-op when e is NULL. */
void kvev_all_cleared(struct kvev *e);

/* Records dropped because the queue was full, since creation; 0 for NULL. */
uint64_t kvev_dropped(const struct kvev *e);

#endif
