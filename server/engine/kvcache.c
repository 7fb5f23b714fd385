/* kvcache.c - the paged KV cache: block pool, reference counts, LRU of cached blocks and the
 * prefix-cache index. Contracts are in include/attnd/kvcache.h. */
#include "attnd/kvcache.h"

#include "attnd/check.h"
#include "attnd/kvdisk.h"
#include "attnd/kvevents.h"
#include "kernels/cpu/cpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------------------------------
 * Data
 * ------------------------------------------------------------------------------------------ */

enum { LIST_NONE = 0, LIST_FREE = 1, LIST_LRU = 2 };

/* Metadata of one physical block. A block is exactly one of:
 *   free    ref == 0, !registered, on the free list
 *   used    ref  > 0, not on any list (registered or not)
 *   cached  ref == 0,  registered, on the LRU list (head = least recently used) */
struct kv_block {
    uint64_t hash;          /* registered: kv_hash_block(parent_hash, tokens) */
    uint64_t parent_hash;   /* registered: the parent's hash; for a first block its key's root
                               (KV_HASH_ROOT without a key) */
    uint64_t gen;           /* bumped whenever the block's content identity ends (free, evict) */
    uint64_t parent_gen;    /* registered: parent's gen when this block was registered */
    int32_t parent;         /* registered: parent block id, -1 for a first block */
    int32_t ref;            /* sequences whose table holds this block */
    int32_t prev, next;     /* free list (next only) or LRU list links, -1 ends */
    int32_t hnext;          /* next block in the same index bucket, -1 ends */
    uint8_t fill;           /* slots holding a token, 0..KV_BLOCK_SIZE */
    uint8_t list;           /* LIST_* */
    bool registered;        /* in the prefix-cache index */
    int32_t tokens[KV_BLOCK_SIZE]; /* registered: the token ids */
};

struct kv_seq {
    struct kv_cache *c;
    struct kv_seq *prev, *next;  /* the cache's list of live sequences */
    int32_t *table;              /* (max_blocks) physical block ids, n_table valid */
    uint64_t *hashes;            /* (max_blocks) chained hash of each full block */
    int32_t *tokens;             /* (max_tokens) token ids, n_tokens valid */
    size_t max_tokens, max_blocks;
    size_t n_tokens;             /* reserved slots == tokens given */
    size_t n_computed;           /* committed: K/V of [0, n_computed) are written */
    size_t n_table;              /* entries in table == kv_blocks_for_tokens(n_tokens) */
    size_t n_reg;                /* leading table entries that are registered blocks */
    uint64_t root;               /* the parent hash of its first block: KV_HASH_ROOT, or keyed
                                    (kv_seq_create_keyed) */
};

struct kv_cache {
    struct kv_opts opts;
    size_t n_blocks;
    size_t elem_size;            /* 2 (F16) or 4 (F32) */
    size_t block_stride;         /* bytes per block in one layer's K (or V) pool */
    size_t pool_bytes;           /* bytes of one layer's K (or V) pool */
    unsigned char *mem;          /* [layer][K, V][block][kv_head][16][head_dim], or NULL */
    size_t mem_bytes;

    struct kv_block *blocks;     /* (n_blocks) */
    int32_t *buckets;            /* (n_buckets) prefix-cache index: hash & mask -> block chain */
    size_t bucket_mask;

    int32_t free_head;           /* free list (a stack) */
    int32_t lru_head, lru_tail;  /* cached blocks, head evicted first */
    size_t n_free, n_used, n_cached;

    struct kv_seq *seqs;         /* live sequences, newest first */
    size_t n_seqs;

    uint64_t lookups, lookup_blocks, hit_blocks, evictions, dedups, disk_hits;
    unsigned char *disk_buf;     /* (kv_bytes_per_block) a block read from the disk tier, or NULL
                                    when the cache has no usable disk tier */
};

/* ------------------------------------------------------------------------------------------
 * Helpers without a cache
 * ------------------------------------------------------------------------------------------ */

static size_t elem_size_of(enum tensor_type t)
{
    if (t == TENSOR_F16) return 2;
    if (t == TENSOR_F32) return 4;
    return 0;
}

static bool dim_ok(int d) { return d >= 1 && d <= KV_MAX_DIM; }

/* a * b into *out; false on overflow. */
static bool mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

struct kv_opts kv_opts_default(int n_layer, int n_head_kv, int head_dim, size_t n_blocks)
{
    struct kv_opts o;
    memset(&o, 0, sizeof o);
    o.n_layer = n_layer;
    o.n_head_kv = n_head_kv;
    o.head_dim = head_dim;
    o.type = TENSOR_F16;
    o.n_blocks = n_blocks;
    o.no_storage = false;
    o.hash_mask = 0;
    return o;
}

size_t kv_bytes_per_block(int n_layer, int n_head_kv, int head_dim, enum tensor_type type)
{
    size_t es = elem_size_of(type);
    if (!es || !dim_ok(n_layer) || !dim_ok(n_head_kv) || !dim_ok(head_dim)) return 0;
    /* each factor <= 2^16, so the product <= 2 * 2^48 * 16 * 4: fits in 64 bits */
    size_t b = 0;
    if (!mul_ok(2u * (size_t)n_layer * (size_t)n_head_kv, (size_t)KV_BLOCK_SIZE * (size_t)head_dim * es, &b))
        return 0;
    return b;
}

attnd_status kv_blocks_from_mib(size_t mib, int n_layer, int n_head_kv, int head_dim, enum tensor_type type,
                                size_t *n_blocks)
{
    if (!n_blocks) return ATTND_ERR_INVALID;
    size_t per = kv_bytes_per_block(n_layer, n_head_kv, head_dim, type);
    if (!per) return ATTND_ERR_INVALID;
    size_t n;
    if (mib > (SIZE_MAX >> 20)) n = KV_MAX_BLOCKS; /* more memory than can be addressed: cap */
    else n = (mib << 20) / per;
    if (n > KV_MAX_BLOCKS) n = KV_MAX_BLOCKS;
    if (n == 0) return ATTND_ERR_RANGE;
    *n_blocks = n;
    return ATTND_OK;
}

size_t kv_blocks_for_tokens(size_t n_tokens)
{
    return n_tokens / KV_BLOCK_SIZE + (n_tokens % KV_BLOCK_SIZE != 0);
}

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens)
{
    /* Two token ids per 64-bit word; each round is a bijection of the state for a fixed word
     * and of the word for a fixed state, so equal-length inputs that differ in one word never
     * collide in that round. */
    uint64_t h = mix64(parent ^ 0x243f6a8885a308d3ULL);
    for (int i = 0; i < KV_BLOCK_SIZE; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32);
        h = mix64(h ^ (w * 0x9e3779b97f4a7c15ULL)) + 0x632be59bd9b4e019ULL;
    }
    return mix64(h ^ KV_BLOCK_SIZE);
}

/* The hash this cache uses: kv_hash_block, cut by the tests-only mask. */
static uint64_t cache_hash(const struct kv_cache *c, uint64_t parent, const int32_t *tokens)
{
    uint64_t h = kv_hash_block(parent, tokens);
    return c->opts.hash_mask ? h & c->opts.hash_mask : h;
}

/* ------------------------------------------------------------------------------------------
 * Lists, index, reference counts
 * ------------------------------------------------------------------------------------------ */

static void free_push(struct kv_cache *c, int32_t b)
{
    struct kv_block *k = &c->blocks[b];
    k->list = LIST_FREE;
    k->prev = -1;
    k->next = c->free_head;
    c->free_head = b;
    c->n_free++;
}

static int32_t free_pop(struct kv_cache *c)
{
    int32_t b = c->free_head;
    ATTND_CHECK(b >= 0 && c->blocks[b].list == LIST_FREE);
    c->free_head = c->blocks[b].next;
    c->blocks[b].list = LIST_NONE;
    c->blocks[b].next = -1;
    c->n_free--;
    return b;
}

static void lru_append(struct kv_cache *c, int32_t b)
{
    struct kv_block *k = &c->blocks[b];
    k->list = LIST_LRU;
    k->next = -1;
    k->prev = c->lru_tail;
    if (c->lru_tail >= 0) c->blocks[c->lru_tail].next = b;
    else c->lru_head = b;
    c->lru_tail = b;
    c->n_cached++;
}

static void lru_remove(struct kv_cache *c, int32_t b)
{
    struct kv_block *k = &c->blocks[b];
    ATTND_CHECK(k->list == LIST_LRU);
    if (k->prev >= 0) c->blocks[k->prev].next = k->next;
    else c->lru_head = k->next;
    if (k->next >= 0) c->blocks[k->next].prev = k->prev;
    else c->lru_tail = k->prev;
    k->prev = k->next = -1;
    k->list = LIST_NONE;
    c->n_cached--;
}

static void index_insert(struct kv_cache *c, int32_t b)
{
    size_t i = (size_t)c->blocks[b].hash & c->bucket_mask;
    c->blocks[b].hnext = c->buckets[i];
    c->buckets[i] = b;
}

static void index_remove(struct kv_cache *c, int32_t b)
{
    int32_t *p = &c->buckets[(size_t)c->blocks[b].hash & c->bucket_mask];
    while (*p != b) {
        ATTND_CHECK(*p >= 0); /* a registered block is always in its bucket */
        p = &c->blocks[*p].hnext;
    }
    *p = c->blocks[b].hnext;
    c->blocks[b].hnext = -1;
}

/* The registered block with this hash, parent (the exact block, still holding the content
 * it had when the child was registered) and token ids, or -1. */
static int32_t index_find(const struct kv_cache *c, uint64_t hash, int32_t parent, uint64_t root,
                          const int32_t *tokens)
{
    uint64_t pgen = parent >= 0 ? c->blocks[parent].gen : 0;
    for (int32_t b = c->buckets[(size_t)hash & c->bucket_mask]; b >= 0; b = c->blocks[b].hnext) {
        const struct kv_block *k = &c->blocks[b];
        if (k->hash != hash || k->parent != parent) continue;
        if (parent < 0 && k->parent_hash != root) continue; /* a first block of another key */
        if (parent >= 0 && k->parent_gen != pgen) continue;
        if (memcmp(k->tokens, tokens, sizeof k->tokens) != 0) continue;
        return b;
    }
    return -1;
}

/* Takes a block for writing: from the free list, else evicts the least recently used cached
 * block. The caller has checked that one exists. */
static void block_spill(struct kv_cache *c, int32_t b, bool wait);

static int32_t block_alloc(struct kv_cache *c)
{
    int32_t b;
    if (c->free_head >= 0) {
        b = free_pop(c);
    } else {
        b = c->lru_head;
        ATTND_CHECK(b >= 0);
        lru_remove(c, b);
        index_remove(c, b);
        block_spill(c, b, false); /* to the disk tier, if there is one: copied out, written later */
        kvev_block_removed(c->opts.events, c->blocks[b].hash);
        c->blocks[b].registered = false;
        c->blocks[b].gen++; /* children registered under this block no longer match it */
        c->evictions++;
    }
    struct kv_block *k = &c->blocks[b];
    ATTND_CHECK(k->ref == 0 && !k->registered);
    k->ref = 1;
    k->fill = 0;
    c->n_used++;
    return b;
}

/* One more reference to a registered block (a prefix-cache hit). */
static void block_ref(struct kv_cache *c, int32_t b)
{
    struct kv_block *k = &c->blocks[b];
    ATTND_CHECK(k->registered);
    if (k->ref == 0) {
        lru_remove(c, b);
        c->n_used++;
    }
    k->ref++;
}

/* One reference fewer; at zero a registered block becomes the most recently used cached
 * block and any other block goes back to the free list. */
static void block_unref(struct kv_cache *c, int32_t b)
{
    struct kv_block *k = &c->blocks[b];
    ATTND_CHECK(k->ref > 0 && k->list == LIST_NONE);
    if (--k->ref > 0) return;
    c->n_used--;
    if (k->registered) {
        lru_append(c, b);
    } else {
        k->fill = 0;
        k->gen++;
        free_push(c, b);
    }
}

/* ------------------------------------------------------------------------------------------
 * The disk tier (kvdisk.h): a block's payload is, per layer, its K then its V
 * ------------------------------------------------------------------------------------------ */

_Static_assert(KVDISK_BLOCK_TOKENS == KV_BLOCK_SIZE, "a disk block is a pool block");

/* Copies block b's K/V of every layer to buf (out) or from it. */
static void block_copy(struct kv_cache *c, int32_t b, unsigned char *buf, bool out)
{
    size_t off = (size_t)b * c->block_stride;
    for (int l = 0; l < c->opts.n_layer; l++) {
        unsigned char *k = (unsigned char *)kv_k_base(c, l) + off, *v = (unsigned char *)kv_v_base(c, l) + off;
        unsigned char *bk = buf + 2u * (size_t)l * c->block_stride, *bv = bk + c->block_stride;
        if (out) {
            memcpy(bk, k, c->block_stride);
            memcpy(bv, v, c->block_stride);
        } else {
            memcpy(k, bk, c->block_stride);
            memcpy(v, bv, c->block_stride);
        }
    }
}

/* Queues registered block b for the disk tier unless it is there already. wait: block until
 * the writer's queue has room (kv_destroy's flush), else a full queue drops it. */
static void block_spill(struct kv_cache *c, int32_t b, bool wait)
{
    const struct kv_block *k = &c->blocks[b];
    if (!c->disk_buf || !k->registered) return;
    unsigned char *p = kvdisk_put_begin(c->opts.disk, k->hash, wait);
    if (!p) return;
    block_copy(c, b, p, true);
    struct kvdisk_block db = {.hash = k->hash, .parent_hash = k->parent_hash};
    memcpy(db.tokens, k->tokens, sizeof db.tokens);
    kvdisk_put_end(c->opts.disk, &db, p);
}

/* A prompt block missing from the pool, read from the disk tier into a new block (reference
 * 1) and registered under the given hash, parent hash and parent block; -1 if the disk has no
 * valid file for it or no block can be had. */
static int32_t block_restore(struct kv_cache *c, uint64_t hash, uint64_t parent_hash, int32_t parent,
                             const int32_t *tokens, bool first)
{
    if (!c->disk_buf || !kv_can_allocate(c, 1) || !kvdisk_has(c->opts.disk, hash)) return -1;
    struct kvdisk_block want = {.hash = hash, .parent_hash = parent_hash};
    memcpy(want.tokens, tokens, sizeof want.tokens);
    if (kvdisk_get(c->opts.disk, &want, c->disk_buf) != ATTND_OK) return -1;
    int32_t b = block_alloc(c);
    block_copy(c, b, c->disk_buf, false);
    struct kv_block *k = &c->blocks[b];
    k->fill = KV_BLOCK_SIZE;
    k->hash = hash;
    k->parent_hash = parent_hash;
    k->parent = parent;
    k->parent_gen = parent >= 0 ? c->blocks[parent].gen : 0;
    memcpy(k->tokens, tokens, sizeof k->tokens);
    k->registered = true;
    index_insert(c, b);
    kvev_block_stored(c->opts.events, hash, !first || parent_hash != KV_HASH_ROOT, parent_hash, k->tokens);
    c->disk_hits++;
    return b;
}

/* ------------------------------------------------------------------------------------------
 * The cache
 * ------------------------------------------------------------------------------------------ */

attnd_status kv_create(const struct kv_opts *opts, struct kv_cache **out)
{
    if (!opts || !out) return ATTND_ERR_INVALID;
    size_t es = elem_size_of(opts->type);
    if (!es || !dim_ok(opts->n_layer) || !dim_ok(opts->n_head_kv) || !dim_ok(opts->head_dim))
        return ATTND_ERR_INVALID;
    if (opts->n_blocks == 0 || opts->n_blocks > KV_MAX_BLOCKS) return ATTND_ERR_RANGE;

    size_t stride = (size_t)opts->n_head_kv * KV_BLOCK_SIZE * (size_t)opts->head_dim * es; /* <= 2^38 */
    size_t pool = 0, total = 0;
    if (!mul_ok(stride, opts->n_blocks, &pool) || !mul_ok(pool, 2u * (size_t)opts->n_layer, &total))
        return ATTND_ERR_RANGE;

    struct kv_cache *c = calloc(1, sizeof *c);
    if (!c) return ATTND_ERR_NOMEM;
    c->opts = *opts;
    c->n_blocks = opts->n_blocks;
    c->elem_size = es;
    c->block_stride = stride;
    c->pool_bytes = pool;
    c->free_head = c->lru_head = c->lru_tail = -1;

    size_t nb = 16;
    while (nb < c->n_blocks) nb <<= 1;
    c->bucket_mask = nb - 1;
    c->blocks = calloc(c->n_blocks, sizeof *c->blocks);
    c->buckets = malloc(nb * sizeof *c->buckets);
    if (!c->blocks || !c->buckets) goto nomem;
    for (size_t i = 0; i < nb; i++) c->buckets[i] = -1;

    if (!opts->no_storage) {
        void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) goto nomem;
        /* attention walks scattered 4 KiB-sized blocks: huge pages spare it a TLB miss per tile
         * (only a hint; where transparent huge pages are off this does nothing) */
        if (total >= (2u << 20)) madvise(m, total, MADV_HUGEPAGE);
        c->mem = m;
        c->mem_bytes = total;
        if (opts->disk && !opts->hash_mask) {
            c->disk_buf = malloc(stride * 2u * (size_t)opts->n_layer);
            if (!c->disk_buf) goto nomem;
        }
    }

    /* push in reverse so the first allocations take blocks 0, 1, 2, ... */
    for (size_t i = c->n_blocks; i-- > 0;) {
        struct kv_block *k = &c->blocks[i];
        k->parent = -1;
        k->hnext = -1;
        free_push(c, (int32_t)i);
    }
    kvev_all_cleared(c->opts.events); /* starts empty: a subscriber holding an earlier run's view resets */
    *out = c;
    return ATTND_OK;

nomem:
    if (c->mem) munmap(c->mem, c->mem_bytes);
    free(c->blocks);
    free(c->buckets);
    free(c);
    return ATTND_ERR_NOMEM;
}

static void seq_free(struct kv_seq *s)
{
    free(s->table);
    free(s->hashes);
    free(s->tokens);
    free(s);
}

void kv_destroy(struct kv_cache *c)
{
    if (!c) return;
    /* What the pool still holds goes to the disk tier, so that a restart finds it: least recently
     * used first, so that a budget too small for all of it keeps the most recent (the tier deletes
     * its oldest files first). */
    for (int32_t b = c->disk_buf ? c->lru_head : -1; b >= 0; b = c->blocks[b].next) block_spill(c, b, true);
    for (size_t i = 0; c->disk_buf && i < c->n_blocks; i++)
        if (c->blocks[i].ref > 0) block_spill(c, (int32_t)i, true);
    free(c->disk_buf);
    kvev_all_cleared(c->opts.events);
    while (c->seqs) {
        struct kv_seq *s = c->seqs;
        c->seqs = s->next;
        seq_free(s);
    }
    if (c->mem) munmap(c->mem, c->mem_bytes);
    free(c->blocks);
    free(c->buckets);
    free(c);
}

void *kv_k_base(struct kv_cache *c, int layer)
{
    ATTND_CHECK(c && layer >= 0 && layer < c->opts.n_layer);
    return c->mem ? c->mem + (2u * (size_t)layer) * c->pool_bytes : NULL;
}

void *kv_v_base(struct kv_cache *c, int layer)
{
    ATTND_CHECK(c && layer >= 0 && layer < c->opts.n_layer);
    return c->mem ? c->mem + (2u * (size_t)layer + 1u) * c->pool_bytes : NULL;
}

size_t kv_block_stride(const struct kv_cache *c) { return c->block_stride; }
enum tensor_type kv_type(const struct kv_cache *c) { return c->opts.type; }
size_t kv_n_blocks(const struct kv_cache *c) { return c->n_blocks; }
size_t kv_free_blocks(const struct kv_cache *c) { return c->n_free + c->n_cached; }
bool kv_can_allocate(const struct kv_cache *c, size_t n_blocks) { return n_blocks <= kv_free_blocks(c); }

attnd_status kv_check_fits(const struct kv_cache *c, size_t n_tokens)
{
    return kv_blocks_for_tokens(n_tokens) <= c->n_blocks ? ATTND_OK : ATTND_ERR_RANGE;
}

/* ------------------------------------------------------------------------------------------
 * Sequences
 * ------------------------------------------------------------------------------------------ */

static bool tokens_ok(const int32_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0) return false;
    return true;
}

/* The root of a key's hash chains: KV_HASH_ROOT for key 0, never KV_HASH_ROOT otherwise. */
static uint64_t key_root(uint64_t key)
{
    if (!key) return KV_HASH_ROOT;
    uint64_t r = mix64(KV_HASH_ROOT ^ mix64(key));
    return r == KV_HASH_ROOT ? r + 1 : r;
}

attnd_status kv_seq_create(struct kv_cache *c, const int32_t *prompt, size_t n_prompt, size_t max_tokens,
                           struct kv_seq **out, size_t *n_cached)
{
    return kv_seq_create_keyed(c, 0, prompt, n_prompt, max_tokens, out, n_cached);
}

attnd_status kv_seq_create_keyed(struct kv_cache *c, uint64_t key, const int32_t *prompt, size_t n_prompt,
                                 size_t max_tokens, struct kv_seq **out, size_t *n_cached)
{
    if (!c || !out || !n_cached || (n_prompt && !prompt)) return ATTND_ERR_INVALID;
    if (max_tokens == 0 || max_tokens < n_prompt) return ATTND_ERR_INVALID;
    if (!tokens_ok(prompt, n_prompt)) return ATTND_ERR_INVALID;
    if (kv_check_fits(c, max_tokens) != ATTND_OK) return ATTND_ERR_RANGE;

    struct kv_seq *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    s->c = c;
    s->root = key_root(key);
    s->max_tokens = max_tokens;
    s->max_blocks = kv_blocks_for_tokens(max_tokens); /* <= n_blocks <= 2^30 */
    s->table = malloc(s->max_blocks * sizeof *s->table);
    s->hashes = malloc(s->max_blocks * sizeof *s->hashes);
    s->tokens = malloc(max_tokens * sizeof *s->tokens);
    if (!s->table || !s->hashes || !s->tokens) {
        seq_free(s);
        return ATTND_ERR_NOMEM;
    }

    /* Reuse leading full blocks, leaving at least the last prompt token to compute. */
    size_t n_look = n_prompt ? (n_prompt - 1) / KV_BLOCK_SIZE : 0;
    uint64_t h = s->root;
    int32_t parent = -1;
    size_t k = 0;
    for (; k < n_look; k++) {
        const int32_t *t = prompt + k * KV_BLOCK_SIZE;
        uint64_t hk = cache_hash(c, h, t);
        int32_t b = index_find(c, hk, parent, s->root, t);
        if (b >= 0) block_ref(c, b);
        else if ((b = block_restore(c, hk, h, parent, t, k == 0)) < 0) break;
        s->table[k] = b;
        s->hashes[k] = hk;
        parent = b;
        h = hk;
    }
    s->n_table = s->n_reg = k;
    s->n_tokens = s->n_computed = k * KV_BLOCK_SIZE;
    if (s->n_tokens) memcpy(s->tokens, prompt, s->n_tokens * sizeof *s->tokens);

    c->lookups++;
    c->lookup_blocks += n_look;
    c->hit_blocks += k;

    s->prev = NULL;
    s->next = c->seqs;
    if (c->seqs) c->seqs->prev = s;
    c->seqs = s;
    c->n_seqs++;

    *out = s;
    *n_cached = s->n_tokens;
    return ATTND_OK;
}

void kv_seq_destroy(struct kv_seq *s)
{
    if (!s) return;
    struct kv_cache *c = s->c;
    for (size_t i = s->n_table; i-- > 0;) block_unref(c, s->table[i]);
    if (s->prev) s->prev->next = s->next;
    else c->seqs = s->next;
    if (s->next) s->next->prev = s->prev;
    c->n_seqs--;
    seq_free(s);
}

size_t kv_seq_blocks_needed(const struct kv_seq *s, size_t n)
{
    if (n > SIZE_MAX - s->n_tokens) return SIZE_MAX;
    return kv_blocks_for_tokens(s->n_tokens + n) - s->n_table;
}

attnd_status kv_seq_append(struct kv_seq *s, const int32_t *tokens, size_t n)
{
    if (!s) return ATTND_ERR_INVALID;
    if (n == 0) return ATTND_OK;
    if (!tokens || !tokens_ok(tokens, n)) return ATTND_ERR_INVALID;
    if (n > s->max_tokens - s->n_tokens) return ATTND_ERR_RANGE;
    struct kv_cache *c = s->c;
    size_t need = kv_seq_blocks_needed(s, n);
    if (!kv_can_allocate(c, need)) return ATTND_ERR_NOMEM; /* nothing changed */

    for (size_t i = 0; i < need; i++) s->table[s->n_table++] = block_alloc(c);
    for (size_t i = 0; i < n; i++) {
        size_t pos = s->n_tokens++;
        size_t bi = pos / KV_BLOCK_SIZE;
        s->tokens[pos] = tokens[i];
        struct kv_block *k = &c->blocks[s->table[bi]];
        ATTND_CHECK(k->ref == 1 && !k->registered && k->fill == pos % KV_BLOCK_SIZE);
        k->fill++;
        if (k->fill == KV_BLOCK_SIZE) {
            uint64_t parent = bi ? s->hashes[bi - 1] : s->root;
            s->hashes[bi] = cache_hash(c, parent, s->tokens + bi * KV_BLOCK_SIZE);
        }
    }
    return ATTND_OK;
}

attnd_status kv_seq_commit(struct kv_seq *s, size_t n_computed)
{
    if (!s) return ATTND_ERR_INVALID;
    if (n_computed > s->n_tokens) return ATTND_ERR_RANGE;
    if (n_computed <= s->n_computed) return ATTND_OK;
    struct kv_cache *c = s->c;
    s->n_computed = n_computed;
    size_t full = n_computed / KV_BLOCK_SIZE;
    for (size_t i = s->n_reg; i < full; i++) {
        int32_t b = s->table[i];
        int32_t parent = i ? s->table[i - 1] : -1;
        const int32_t *t = s->tokens + i * KV_BLOCK_SIZE;
        int32_t e = index_find(c, s->hashes[i], parent, s->root, t);
        if (e >= 0) {
            /* An identical block is already cached (computed by another sequence in the same
             * step): share it and free ours. Both hold the same K/V. */
            block_ref(c, e);
            s->table[i] = e;
            block_unref(c, b);
            c->dedups++;
            continue;
        }
        struct kv_block *k = &c->blocks[b];
        ATTND_CHECK(k->ref == 1 && !k->registered && k->fill == KV_BLOCK_SIZE);
        k->hash = s->hashes[i];
        k->parent_hash = i ? s->hashes[i - 1] : s->root;
        k->parent = parent;
        k->parent_gen = parent >= 0 ? c->blocks[parent].gen : 0;
        memcpy(k->tokens, t, sizeof k->tokens);
        k->registered = true;
        index_insert(c, b);
        kvev_block_stored(c->opts.events, k->hash, i > 0 || k->parent_hash != KV_HASH_ROOT, k->parent_hash, k->tokens);
    }
    if (full > s->n_reg) s->n_reg = full;
    return ATTND_OK;
}

attnd_status kv_seq_truncate(struct kv_seq *s, size_t n_tokens)
{
    if (!s) return ATTND_ERR_INVALID;
    if (n_tokens < s->n_computed || n_tokens > s->n_tokens) return ATTND_ERR_RANGE;
    struct kv_cache *c = s->c;
    const size_t keep = kv_blocks_for_tokens(n_tokens);
    while (s->n_table > keep) block_unref(c, s->table[--s->n_table]); /* never registered: freed */
    s->n_tokens = n_tokens;
    if (keep && n_tokens % KV_BLOCK_SIZE) c->blocks[s->table[keep - 1]].fill = (uint8_t)(n_tokens % KV_BLOCK_SIZE);
    return ATTND_OK;
}

void kv_write(struct kv_seq *s, int layer, size_t pos, const float *k, const float *v)
{
    ATTND_CHECK(s && k && v);
    struct kv_cache *c = s->c;
    ATTND_CHECK(c->mem && layer >= 0 && layer < c->opts.n_layer);
    ATTND_CHECK(pos >= s->n_computed && pos < s->n_tokens);
    int32_t b = s->table[pos / KV_BLOCK_SIZE];
    ATTND_CHECK(c->blocks[b].ref == 1 && !c->blocks[b].registered); /* never write a shared block */

    size_t hd = (size_t)c->opts.head_dim, slot = pos % KV_BLOCK_SIZE;
    unsigned char *kb = (unsigned char *)kv_k_base(c, layer) + (size_t)b * c->block_stride;
    unsigned char *vb = (unsigned char *)kv_v_base(c, layer) + (size_t)b * c->block_stride;
    for (int h = 0; h < c->opts.n_head_kv; h++) {
        size_t off = ((size_t)h * KV_BLOCK_SIZE + slot) * hd * c->elem_size;
        const float *ks = k + (size_t)h * hd, *vs = v + (size_t)h * hd;
        if (c->opts.type == TENSOR_F16) {
            cpu_f32_to_f16_row(ks, (uint16_t *)(void *)(kb + off), hd);
            cpu_f32_to_f16_row(vs, (uint16_t *)(void *)(vb + off), hd);
        } else {
            memcpy(kb + off, ks, hd * sizeof(float));
            memcpy(vb + off, vs, hd * sizeof(float));
        }
    }
}

size_t kv_seq_len(const struct kv_seq *s) { return s->n_tokens; }
size_t kv_seq_n_computed(const struct kv_seq *s) { return s->n_computed; }
size_t kv_seq_max_tokens(const struct kv_seq *s) { return s->max_tokens; }
const int32_t *kv_seq_tokens(const struct kv_seq *s) { return s->tokens; }
const int32_t *kv_seq_block_table(const struct kv_seq *s) { return s->table; }
size_t kv_seq_n_blocks(const struct kv_seq *s) { return s->n_table; }

/* ------------------------------------------------------------------------------------------
 * Statistics and introspection
 * ------------------------------------------------------------------------------------------ */

void kv_get_stats(const struct kv_cache *c, struct kv_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n_blocks = c->n_blocks;
    out->used = c->n_used;
    out->free = c->n_free;
    out->cached = c->n_cached;
    out->n_seqs = c->n_seqs;
    out->lookups = c->lookups;
    out->lookup_blocks = c->lookup_blocks;
    out->hit_blocks = c->hit_blocks;
    out->lookup_tokens = c->lookup_blocks * KV_BLOCK_SIZE;
    out->hit_tokens = c->hit_blocks * KV_BLOCK_SIZE;
    out->evictions = c->evictions;
    out->dedups = c->dedups;
    out->disk_hit_blocks = c->disk_hits;
    for (size_t i = 0; i < c->n_blocks; i++)
        if (c->blocks[i].ref > 0) out->tokens_stored += c->blocks[i].fill;
    for (const struct kv_seq *s = c->seqs; s; s = s->next) out->tokens_logical += s->n_tokens;
    out->token_capacity = (uint64_t)c->n_used * KV_BLOCK_SIZE;
    if (out->token_capacity)
        out->waste_pct = 100.0 * (double)(out->token_capacity - out->tokens_stored) / (double)out->token_capacity;
}

attnd_status kv_block_get_info(const struct kv_cache *c, int32_t b, struct kv_block_info *out)
{
    if (!c || !out || b < 0 || (size_t)b >= c->n_blocks) return ATTND_ERR_RANGE;
    const struct kv_block *k = &c->blocks[b];
    memset(out, 0, sizeof *out);
    out->state = k->ref > 0 ? KV_BLOCK_USED : k->registered ? KV_BLOCK_CACHED : KV_BLOCK_FREE;
    out->ref = k->ref;
    out->fill = k->fill;
    out->registered = k->registered;
    out->parent = -1;
    if (k->registered) {
        out->hash = k->hash;
        out->parent_hash = k->parent_hash;
        out->parent = k->parent;
        out->parent_live = k->parent < 0 ||
                           (c->blocks[k->parent].registered && c->blocks[k->parent].gen == k->parent_gen);
        memcpy(out->tokens, k->tokens, sizeof out->tokens);
    }
    return ATTND_OK;
}

/* kv_validate's steps: each returns ATTND_OK or ATTND_ERR_INTERNAL with a message in err. */
#define FAIL(...)                                                                             \
    do {                                                                                      \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__);                                \
        return ATTND_ERR_INTERNAL;                                                            \
    } while (0)

/* The free list and the LRU list: links, counters, and each block's state on them (seen bit 0). */
static attnd_status check_lists(const struct kv_cache *c, uint8_t *seen, char *err, size_t errlen)
{
    const size_t n = c->n_blocks;
    /* free list */
    size_t cnt = 0;
    for (int32_t b = c->free_head; b >= 0; b = c->blocks[b].next) {
        if ((size_t)b >= n || seen[b] || ++cnt > n) FAIL("free list corrupt at block %d", (int)b);
        seen[b] |= 1;
        const struct kv_block *k = &c->blocks[b];
        if (k->list != LIST_FREE || k->ref != 0 || k->registered || k->fill != 0)
            FAIL("free block %d: list %d ref %d registered %d fill %d", (int)b, k->list, (int)k->ref,
                 (int)k->registered, (int)k->fill);
    }
    if (cnt != c->n_free) FAIL("free list holds %zu blocks, counter says %zu", cnt, c->n_free);

    /* LRU list */
    cnt = 0;
    int32_t prev = -1;
    for (int32_t b = c->lru_head; b >= 0; prev = b, b = c->blocks[b].next) {
        if ((size_t)b >= n || seen[b] || ++cnt > n) FAIL("LRU list corrupt at block %d", (int)b);
        seen[b] |= 1;
        const struct kv_block *k = &c->blocks[b];
        if (k->prev != prev) FAIL("LRU back link of block %d", (int)b);
        if (k->list != LIST_LRU || k->ref != 0 || !k->registered || k->fill != KV_BLOCK_SIZE)
            FAIL("cached block %d: list %d ref %d registered %d fill %d", (int)b, k->list, (int)k->ref,
                 (int)k->registered, (int)k->fill);
    }
    if (prev != c->lru_tail) FAIL("LRU tail is %d, walk ends at %d", (int)c->lru_tail, (int)prev);
    if (cnt != c->n_cached) FAIL("LRU holds %zu blocks, counter says %zu", cnt, c->n_cached);

    return ATTND_OK;
}

/* One sequence's block table: entries, fills, hashes, registration (refs counted per block). */
static attnd_status check_seq_table(const struct kv_cache *c, const struct kv_seq *s, int32_t *refs, char *err,
                                    size_t errlen)
{
    const size_t n = c->n_blocks;
    uint64_t h = s->root;
    for (size_t i = 0; i < s->n_table; i++) {
        int32_t b = s->table[i];
        if (b < 0 || (size_t)b >= n) FAIL("table entry %zu = %d", i, (int)b);
        refs[b]++;
        for (size_t j = 0; j < i; j++)
            if (s->table[j] == b) FAIL("block %d twice in one table", (int)b);
        const struct kv_block *k = &c->blocks[b];
        size_t fill = s->n_tokens - i * KV_BLOCK_SIZE;
        if (fill > KV_BLOCK_SIZE) fill = KV_BLOCK_SIZE;
        if (k->fill != fill) FAIL("block %d fill %d, sequence has %zu tokens there", (int)b, k->fill, fill);
        if (fill == KV_BLOCK_SIZE) {
            uint64_t want = cache_hash(c, h, s->tokens + i * KV_BLOCK_SIZE);
            if (s->hashes[i] != want) FAIL("sequence hash of block %zu", i);
            h = want;
        }
        if (i < s->n_reg) {
            if (!k->registered || k->hash != s->hashes[i] ||
                k->parent != (i ? s->table[i - 1] : -1) ||
                memcmp(k->tokens, s->tokens + i * KV_BLOCK_SIZE, sizeof k->tokens) != 0)
                FAIL("registered block %d does not match its sequence", (int)b);
        } else if (k->registered || k->ref != 1) {
            FAIL("uncommitted block %d: registered %d ref %d", (int)b, (int)k->registered, (int)k->ref);
        }
    }
    return ATTND_OK;
}

/* The sequence list and every sequence's counts and table. */
static attnd_status check_seqs(const struct kv_cache *c, int32_t *refs, char *err, size_t errlen)
{
    size_t cnt = 0;
    const struct kv_seq *sp = NULL;
    for (const struct kv_seq *s = c->seqs; s; sp = s, s = s->next) {
        if (++cnt > c->n_seqs) FAIL("sequence list longer than %zu", c->n_seqs);
        if (s->prev != sp || s->c != c) FAIL("sequence links");
        if (s->n_tokens > s->max_tokens || s->n_computed > s->n_tokens ||
            s->n_table != kv_blocks_for_tokens(s->n_tokens) || s->n_reg != s->n_computed / KV_BLOCK_SIZE)
            FAIL("sequence counts: tokens %zu computed %zu max %zu table %zu registered %zu", s->n_tokens,
                 s->n_computed, s->max_tokens, s->n_table, s->n_reg);
        attnd_status st = check_seq_table(c, s, refs, err, errlen);
        if (st) return st;
    }
    if (cnt != c->n_seqs) FAIL("sequence list holds %zu, counter says %zu", cnt, c->n_seqs);
    return ATTND_OK;
}

/* The prefix index: every bucket's chain holds registered blocks of that bucket (seen bit 1). */
static attnd_status check_index(const struct kv_cache *c, uint8_t *seen, char *err, size_t errlen)
{
    const size_t n = c->n_blocks;
    for (size_t i = 0; i <= c->bucket_mask; i++) {
        size_t steps = 0;
        for (int32_t b = c->buckets[i]; b >= 0; b = c->blocks[b].hnext) {
            if ((size_t)b >= n || (seen[b] & 2) || ++steps > n) FAIL("index bucket %zu corrupt", i);
            seen[b] |= 2;
            const struct kv_block *k = &c->blocks[b];
            if (!k->registered || (k->hash & c->bucket_mask) != i) FAIL("block %d in wrong bucket", (int)b);
        }
    }

    return ATTND_OK;
}

/* Every block against what the walks above found, and the counters' sum. */
static attnd_status check_blocks(const struct kv_cache *c, const int32_t *refs, const uint8_t *seen, char *err,
                                 size_t errlen)
{
    const size_t n = c->n_blocks;
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        const struct kv_block *k = &c->blocks[i];
        if (k->ref != refs[i]) FAIL("block %zu ref %d, tables hold it %d times", i, (int)k->ref, (int)refs[i]);
        if (k->ref > 0) {
            used++;
            if (k->list != LIST_NONE || (seen[i] & 1)) FAIL("used block %zu on a list", i);
        } else if (!(seen[i] & 1)) {
            FAIL("block %zu with ref 0 is on no list", i);
        }
        if (k->registered != ((seen[i] & 2) != 0)) FAIL("block %zu registered %d, indexed %d", i,
                                                         (int)k->registered, (seen[i] & 2) != 0);
        if (k->registered) {
            if (k->hash != cache_hash(c, k->parent_hash, k->tokens)) FAIL("block %zu hash mismatch", i);
            if (k->fill != KV_BLOCK_SIZE) FAIL("registered block %zu not full", i);
            if (k->parent >= 0 && (size_t)k->parent >= n) FAIL("block %zu parent %d", i, (int)k->parent);
            /* a first block's parent_hash is its key's root (KV_HASH_ROOT unkeyed): the hash check
             * above covers it */
            bool live = k->parent < 0 ||
                        (c->blocks[k->parent].registered && c->blocks[k->parent].gen == k->parent_gen);
            if (live && k->parent >= 0 && c->blocks[k->parent].hash != k->parent_hash)
                FAIL("block %zu parent hash differs from its live parent's", i);
            /* A cached child always sits before its parent in the LRU (sequences release
             * tail first, and any use of a child also uses its parent), so a parent is never
             * evicted while a child is registered: no orphans. */
            if (!live) FAIL("registered block %zu has an evicted parent", i);
        }
    }
    if (used != c->n_used) FAIL("%zu used blocks, counter says %zu", used, c->n_used);
    if (c->n_used + c->n_free + c->n_cached != n)
        FAIL("used %zu + free %zu + cached %zu != %zu", c->n_used, c->n_free, c->n_cached, n);

    return ATTND_OK;
}
#undef FAIL

attnd_status kv_validate(const struct kv_cache *c, char *err, size_t errlen)
{
    int32_t *refs = calloc(c->n_blocks, sizeof *refs); /* references counted from the tables */
    uint8_t *seen = calloc(c->n_blocks, 1);            /* bit 0 on a list, bit 1 in the index */
    if (!refs || !seen) {
        free(refs);
        free(seen);
        return ATTND_ERR_NOMEM;
    }
    if (err && errlen) err[0] = '\0';
    attnd_status rc = check_lists(c, seen, err, errlen);
    if (!rc) rc = check_seqs(c, refs, err, errlen);
    if (!rc) rc = check_index(c, seen, err, errlen);
    if (!rc) rc = check_blocks(c, refs, seen, err, errlen);
    free(refs);
    free(seen);
    return rc;
}
