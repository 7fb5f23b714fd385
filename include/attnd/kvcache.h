/* kvcache.h - the paged KV cache: one pool of fixed-size blocks shared by every request,
 * per-sequence block tables, reference counts and a prefix cache.
 *
 * Memory layout (what the attention kernels read). For each layer L there is a K pool and a
 * V pool, each laid out as
 *     [block][kv_head][KV_BLOCK_SIZE][head_dim]      element type F16 (default) or F32
 * so the element (block b, head h, slot s, dim d) of layer L's K lives at
 *     (char *)kv_k_base(c, L) + b * kv_block_stride(c)
 *                             + ((h * KV_BLOCK_SIZE + s) * head_dim + d) * element size.
 * Token position p of a sequence lives in physical block table[p / 16], slot p % 16, where
 * table = kv_seq_block_table(s) (int32 physical block ids). Slots past a sequence's length
 * hold stale data (possibly NaN): kernels mask them.
 *
 * Life of a sequence (one request):
 *   1. kv_seq_create(prompt): reuses every leading FULL block of the prompt already in the
 *      prefix cache (at most (n_prompt - 1) / 16 blocks, so at least one prompt token is
 *      left to compute and the engine gets logits) and reports how many prompt tokens are
 *      already computed (n_cached, a multiple of 16). The sequence starts with those tokens.
 *   2. kv_seq_append(tokens): reserves slots for the next tokens (the rest of the prompt in
 *      chunks, then each sampled token) and records their ids. All or nothing: on a full pool
 *      it returns ATTND_ERR_NOMEM and changes nothing, so the scheduler can pre-empt the
 *      newest request (kv_seq_destroy) and retry.
 *   3. The engine computes and writes K/V of the appended positions (kv_write or directly
 *      through the pointers above), then calls kv_seq_commit(): blocks that are now full AND
 *      computed enter the prefix cache. Registration waits for the commit (not the append)
 *      so that a request admitted in the same step never reuses a block whose K/V has not
 *      been written yet. The block hash itself is computed when the 16th token id arrives.
 *   4. kv_seq_destroy(): references are dropped. Blocks in the prefix cache stay there with
 *      reference count 0 ("cached"), findable by later prompts, and are evicted least
 *      recently used first when a block is needed; blocks never registered go straight
 *      back to the free list.
 *
 * Prefix cache key: a full block's hash is chained, h = kv_hash_block(parent's h, its 16
 * token ids) with KV_HASH_ROOT (or a key's root: kv_seq_create_keyed) for the first block. A hash hit is only used after the 16
 * token ids AND the parent (the exact physical block matched one step earlier, still holding
 * the same content) compare equal, so a 64-bit collision can never splice wrong K/V into a
 * sequence. If a committed block duplicates one already cached (two identical prompts
 * computed in the same step), the sequence switches to the cached block and frees its own.
 *
 * Invariant (why no copy-on-write is needed): a sequence only writes positions at or after
 * its committed length; those lie in blocks it allocated itself, which have reference count
 * 1 and are not in the prefix cache. Blocks in the prefix cache (the only ones ever shared)
 * are full and committed and are never written again. kv_write checks this.
 *
 * Thread safety: none. The cache and its sequences belong to one thread (the scheduler's);
 * the memory pools may be read by compute threads while that thread does not change them.
 * Nothing here prints, logs or exits.
 */
#ifndef ATTND_KVCACHE_H
#define ATTND_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"
#include "attnd/tensor.h"

#define KV_BLOCK_SIZE 16                         /* tokens per block */
#define KV_HASH_ROOT 0x6a09e667f3bcc908ULL      /* parent hash of a sequence's first block */
#define KV_MAX_BLOCKS (1u << 30)                 /* hard cap on the pool size, blocks */
#define KV_MAX_DIM 65536                         /* cap on n_layer, n_head_kv and head_dim */

struct kv_cache; /* opaque: the pool, its block metadata and the prefix cache */
struct kv_seq;   /* opaque: one sequence (request) and its block table */
struct kvev;     /* kvevents.h: the KV-cache event publisher */
struct kvdisk;   /* kvdisk.h: the disk tier */

struct kv_opts {
    int n_layer;             /* transformer layers, 1..KV_MAX_DIM */
    int n_head_kv;           /* KV heads per layer, 1..KV_MAX_DIM */
    int head_dim;            /* elements per head, 1..KV_MAX_DIM */
    enum tensor_type type;   /* TENSOR_F16 (the default) or TENSOR_F32 */
    size_t n_blocks;         /* pool size in blocks (1..KV_MAX_BLOCKS); see kv_blocks_from_mib */
    bool no_storage;         /* true: bookkeeping only, no K/V memory (the K/V live elsewhere,
                                e.g. on a GPU); kv_k_base/kv_v_base return NULL */
    uint64_t hash_mask;      /* tests only: 0 (the default) uses the full 64-bit hash; otherwise
                                block hashes are ANDed with it, to force collisions */
    struct kvev *events;     /* NULL (the default), or where blocks entering and leaving the
                                prefix cache are reported (kvevents.h); not owned */
    struct kvdisk *disk;     /* NULL (the default), or the disk tier (kvdisk.h; of this cache's
                                layout): evicted prefix blocks are spilled there, prompt blocks
                                missing from the pool are restored from it, and kv_destroy
                                spills every block still registered. Not owned: close it after
                                kv_destroy. Unused without storage or with a hash_mask. */
};

/* Options with type TENSOR_F16, no_storage false, hash_mask 0. Thread-safe. */
struct kv_opts kv_opts_default(int n_layer, int n_head_kv, int head_dim, size_t n_blocks);

/* Bytes one block takes over all layers, K and V together:
 * 2 * n_layer * n_head_kv * KV_BLOCK_SIZE * head_dim * element size. Returns 0 if an argument
 * is out of range (see struct kv_opts) or the type is not F16/F32. Thread-safe. */
size_t kv_bytes_per_block(int n_layer, int n_head_kv, int head_dim, enum tensor_type type);

/* Pool size in blocks that fits in `mib` MiB of K/V memory, capped at KV_MAX_BLOCKS, into
 * *n_blocks. Returns ATTND_ERR_INVALID for a bad dimension or type (or a NULL out pointer),
 * ATTND_ERR_RANGE if not even one block fits. Thread-safe. */
attnd_status kv_blocks_from_mib(size_t mib, int n_layer, int n_head_kv, int head_dim, enum tensor_type type,
                                size_t *n_blocks);

/* Blocks needed to hold n tokens: ceil(n / KV_BLOCK_SIZE). Thread-safe. */
size_t kv_blocks_for_tokens(size_t n_tokens);

/* The chained block hash (64-bit, well mixed): parent is the previous block's hash or
 * KV_HASH_ROOT; tokens holds KV_BLOCK_SIZE ids. Exposed so tests can recompute chains. */
uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens);

/* ------------------------------------------------------------------------------------------
 * The cache
 * ------------------------------------------------------------------------------------------ */

/* Creates a cache with opts->n_blocks blocks, all free, and (unless no_storage) one zeroed
 * anonymous mapping for the K and V pools of every layer. Returns ATTND_ERR_INVALID for a
 * bad option (NULL, a dimension out of range, a type other than F16/F32), ATTND_ERR_RANGE if
 * n_blocks is 0, above KV_MAX_BLOCKS or the pools' size overflows, ATTND_ERR_NOMEM if the
 * memory cannot be had. *out is set only on success; the caller owns it. */
attnd_status kv_create(const struct kv_opts *opts, struct kv_cache **out);

/* Frees the cache and every sequence still alive (their handles become invalid).
 * kv_destroy(NULL) is a no-op. */
void kv_destroy(struct kv_cache *c);

/* Base of layer L's K or V pool ([block][kv_head][16][head_dim]); NULL when the cache has no
 * storage. layer must be in [0, n_layer) (checked: a bad layer is a bug). */
void *kv_k_base(struct kv_cache *c, int layer);
void *kv_v_base(struct kv_cache *c, int layer);
/* Bytes between two consecutive blocks of one layer's K (or V) pool:
 * n_head_kv * KV_BLOCK_SIZE * head_dim * element size. */
size_t kv_block_stride(const struct kv_cache *c);
/* TENSOR_F16 or TENSOR_F32. */
enum tensor_type kv_type(const struct kv_cache *c);
/* Pool size in blocks. */
size_t kv_n_blocks(const struct kv_cache *c);

/* Blocks an allocation can take right now: free blocks plus cached (reference 0) ones,
 * which would be evicted. */
size_t kv_free_blocks(const struct kv_cache *c);
/* true if n_blocks blocks can be allocated right now (n_blocks <= kv_free_blocks). */
bool kv_can_allocate(const struct kv_cache *c, size_t n_blocks);
/* ATTND_OK if one sequence of n_tokens tokens (prompt + generated) fits in the whole pool,
 * i.e. could run once every other request is gone; ATTND_ERR_RANGE if it never can (the
 * caller answers the request with an error instead of queueing it forever). */
attnd_status kv_check_fits(const struct kv_cache *c, size_t n_tokens);

/* ------------------------------------------------------------------------------------------
 * Sequences
 * ------------------------------------------------------------------------------------------ */

/* Creates a sequence that may grow to max_tokens tokens (prompt + generated), with a copy
 * of the leading cached blocks of prompt[0..n_prompt) (reference counts +1). *n_cached gets
 * the number of prompt tokens already computed (a multiple of 16, at most n_prompt - 1, 0 if
 * n_prompt is 0); the caller appends prompt[*n_cached..] next. Takes no free block, except
 * with a disk tier: a prompt block found on disk (not in the pool) is read into a newly
 * allocated block (evicting as kv_seq_append does) while kv_can_allocate(c, 1) holds, and
 * registered as if computed; a file that fails its checks is skipped (the block recomputed).
 * Returns ATTND_ERR_INVALID for NULL pointers, max_tokens 0 or < n_prompt, or a negative
 * token id; ATTND_ERR_RANGE if max_tokens cannot fit in the pool (kv_check_fits);
 * ATTND_ERR_NOMEM if host memory runs out. Nothing changes on failure. prompt may be NULL
 * when n_prompt is 0. The sequence belongs to c and is freed by kv_seq_destroy or
 * kv_destroy. */
attnd_status kv_seq_create(struct kv_cache *c, const int32_t *prompt, size_t n_prompt, size_t max_tokens,
                           struct kv_seq **out, size_t *n_cached);
/* kv_seq_create under a key: the sequence's blocks are found by, and found for, sequences of the
 * same key only (key 0 is kv_seq_create's). The key is mixed into the root of the hash chain and
 * a first block is matched on it too, so blocks computed under different interventions (the key:
 * their fingerprint, intervene.h) never meet. */
attnd_status kv_seq_create_keyed(struct kv_cache *c, uint64_t key, const int32_t *prompt, size_t n_prompt,
                                 size_t max_tokens, struct kv_seq **out, size_t *n_cached);

/* Drops the sequence's references (last block first, so the tail of a cached prefix is
 * evicted before its head) and frees it. Use it to finish, cancel or pre-empt a request.
 * kv_seq_destroy(NULL) is a no-op. */
void kv_seq_destroy(struct kv_seq *s);

/* Reserves slots for n more tokens and records their ids, allocating blocks as needed
 * (evicting cached blocks, least recently used first, when the free list is empty).
 * Returns ATTND_OK; ATTND_ERR_NOMEM if the pool has too few blocks (nothing changes: the
 * scheduler pre-empts a request and retries); ATTND_ERR_RANGE if the sequence would pass
 * its max_tokens; ATTND_ERR_INVALID for a NULL pointer or a negative token id. n == 0 is
 * a no-op. Never allocates host memory. */
attnd_status kv_seq_append(struct kv_seq *s, const int32_t *tokens, size_t n);

/* Blocks kv_seq_append(s, ..., n) would allocate now (0 while the last block has room). */
size_t kv_seq_blocks_needed(const struct kv_seq *s, size_t n);

/* Declares that the K/V of positions [0, n_computed) are written. Full blocks inside that
 * range enter the prefix cache (or are swapped for an identical block already there).
 * n_computed must not exceed kv_seq_len(s); a value at or below the current committed
 * length is a no-op. Returns ATTND_ERR_RANGE (nothing changes) if n_computed > length. */
attnd_status kv_seq_commit(struct kv_seq *s, size_t n_computed);

/* Rolls the sequence back to its first n_tokens tokens (speculative decoding: the K/V of drafted
 * tokens the model did not accept). The positions dropped must be uncommitted: n_tokens in
 * [kv_seq_n_computed(s), kv_seq_len(s)], else ATTND_ERR_RANGE and nothing changes. Blocks past
 * the new length (allocated by this sequence, never in the prefix cache) go back to the free list;
 * the last block's slots past it hold stale data. */
attnd_status kv_seq_truncate(struct kv_seq *s, size_t n_tokens);

/* Writes one token's K and V (f32, layout [n_head_kv][head_dim], converted to the cache type)
 * at position pos of the sequence, for one layer. pos must be in [committed length, length)
 * and layer in [0, n_layer), and the cache must have storage: anything else is a caller bug
 * and trips ATTND_CHECK. */
void kv_write(struct kv_seq *s, int layer, size_t pos, const float *k, const float *v);

/* Tokens in the sequence (reserved slots), its committed length, its capacity. */
size_t kv_seq_len(const struct kv_seq *s);
size_t kv_seq_n_computed(const struct kv_seq *s);
size_t kv_seq_max_tokens(const struct kv_seq *s);
/* The token ids given so far (kv_seq_len of them). Valid until the sequence changes. */
const int32_t *kv_seq_tokens(const struct kv_seq *s);
/* The block table: kv_seq_n_blocks(s) physical block ids, entry i holding positions
 * [16 i, 16 i + 16). Valid until the next append, commit or destroy of this sequence. */
const int32_t *kv_seq_block_table(const struct kv_seq *s);
size_t kv_seq_n_blocks(const struct kv_seq *s);

/* ------------------------------------------------------------------------------------------
 * Statistics and introspection
 * ------------------------------------------------------------------------------------------ */

struct kv_stats {
    size_t n_blocks;             /* pool size */
    size_t used;                 /* blocks with reference count > 0 */
    size_t free;                 /* blocks on the free list (never registered, or evicted) */
    size_t cached;               /* reference count 0 but in the prefix cache (evictable) */
    size_t n_seqs;               /* live sequences */
    uint64_t lookups;            /* kv_seq_create calls */
    uint64_t lookup_blocks;      /* full prompt blocks looked up (at most (n_prompt-1)/16 each) */
    uint64_t hit_blocks;         /* of those, found and reused */
    uint64_t lookup_tokens;      /* lookup_blocks * 16 */
    uint64_t hit_tokens;         /* hit_blocks * 16: prompt tokens not recomputed */
    uint64_t evictions;          /* cached blocks evicted to satisfy an allocation */
    uint64_t dedups;             /* committed blocks swapped for an identical cached one */
    uint64_t disk_hit_blocks;    /* of hit_blocks, restored from the disk tier */
    uint64_t tokens_stored;      /* tokens held by used blocks (a shared block counts once) */
    uint64_t tokens_logical;     /* sum of sequence lengths (shared tokens count per sequence) */
    uint64_t token_capacity;     /* used * 16 */
    double waste_pct;            /* 100 * (capacity - stored) / capacity; 0 when nothing used */
};

/* Fills *out. O(n_blocks + live sequences): for metrics, not for every step. */
void kv_get_stats(const struct kv_cache *c, struct kv_stats *out);

enum kv_block_state { KV_BLOCK_FREE = 0, KV_BLOCK_USED = 1, KV_BLOCK_CACHED = 2 };

struct kv_block_info {
    enum kv_block_state state;
    int32_t ref;                     /* number of sequences whose table holds the block */
    int fill;                        /* slots holding a token, 0..16 */
    bool registered;                 /* in the prefix cache (hash, parent and tokens valid) */
    uint64_t hash;                   /* kv_hash_block(parent_hash, tokens) (& hash_mask if set) */
    uint64_t parent_hash;            /* KV_HASH_ROOT for a first block */
    int32_t parent;                  /* physical parent block, -1 for a first block */
    bool parent_live;                /* parent still holds the content this block chains to */
    int32_t tokens[KV_BLOCK_SIZE];
};

/* Describes block b for tests and debugging. ATTND_ERR_RANGE if b is not a block id. */
attnd_status kv_block_get_info(const struct kv_cache *c, int32_t b, struct kv_block_info *out);

/* Checks every internal invariant (lists, counters, reference counts against the live
 * sequences' tables, hash chains, the prefix-cache index). Returns ATTND_OK or
 * ATTND_ERR_INTERNAL with a one-line description in err (may be NULL). O(pool + tokens):
 * for tests. */
attnd_status kv_validate(const struct kv_cache *c, char *err, size_t errlen);

#endif
