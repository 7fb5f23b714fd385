/* kvdisk.h - the second KV tier: prefix-cache blocks the pool evicts, kept on disk.
 *
 * Files. One file per block in the directory, named "<hash>.kvb" (the block's chained hash,
 * kv_hash_block, as 16 lower-case hex digits). A file is a 160-byte header then the payload
 * (little-endian throughout):
 *     0   magic "ATTNDKV\0"              8 bytes
 *     8   format version (1)             u32
 *     12  header bytes (160)             u32
 *     16  model identity                 u64  kvdisk_model_identity
 *     24  KV element type                u32  enum tensor_type: 0 F32, 1 F16
 *     28  layers, KV heads, head dim     u32 x 3
 *     40  block size (16)                u32
 *     44  reserved (0)                   u32
 *     48  block hash, parent hash        u64 x 2  (a first block's parent is its key's root)
 *     64  token ids                      i32 x 16
 *     128 payload bytes                  u64  kv_bytes_per_block of the layout
 *     136 checksum                       u64  kvdisk_checksum(header with this field 0,
 *                                             seeded by kvdisk_checksum(payload))
 *     144 written at                     u64  ns since the epoch (the age for the budget)
 *     152 reserved (0)                   8 bytes
 *     160 payload: for each layer, the block's K then its V, each in the pool's layout
 *         [kv_head][16][head_dim] (kvcache.h)
 * A file is written as ".tmp.<hash>.kvb" and renamed when complete, so a crash leaves no
 * half file under a block's name (stale .tmp files are deleted at open).
 *
 * Identity. kvdisk_model_identity hashes what makes K/V differ between models: the
 * architecture name and hyperparameters, every tensor's name, type and shape, and a sample of
 * every tensor's bytes (its first, middle and last 64 bytes). A different model, another
 * quantization of the same model, or the same shapes with other weights give another value.
 *
 * Budget. The files' bytes stay under max_bytes: the writer deletes the least recently used
 * files first. A file is used when it is written, restored, or its block is evicted from the pool
 * again; a use also sets the file's modification time, which orders the files at the next open
 * (ties broken by the write time in their headers). A disk that reports ENOSPC or EDQUOT stops
 * the spilling for the life of the handle (logged once); requests never see it.
 *
 * Threads. Writes run on the handle's own thread through io_uring (pwrite where io_uring is
 * unavailable): kvdisk_put_end only queues. kvdisk_get reads (io_uring) on the caller's thread
 * and must be called from one thread at a time (the scheduler's). kvdisk_has, kvdisk_put_* and
 * kvdisk_stats are thread-safe.
 */
#ifndef ATTND_KVDISK_H
#define ATTND_KVDISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"
#include "attnd/tensor.h"

#define KVDISK_VERSION 1u
#define KVDISK_HEADER_BYTES 160u
#define KVDISK_BLOCK_TOKENS 16 /* == KV_BLOCK_SIZE (kvcache.h) */

struct kvdisk;
struct model;

/* What a block's K/V look like; a file of another layout is never used. */
struct kvdisk_layout {
    enum tensor_type type; /* TENSOR_F16 or TENSOR_F32 */
    int n_layer, n_head_kv, head_dim;
};

struct kvdisk_opts {
    const char *dir;           /* created if missing (one level) */
    uint64_t max_bytes;        /* budget for the files, >= one block file */
    uint64_t model_id;         /* kvdisk_model_identity of the model served */
    struct kvdisk_layout layout;
};

/* One block's identity: its chained hash, its parent's hash and its token ids. */
struct kvdisk_block {
    uint64_t hash, parent_hash;
    int32_t tokens[KVDISK_BLOCK_TOKENS];
};

struct kvdisk_stats {
    uint64_t files, bytes;            /* on disk now (this model and layout) */
    uint64_t writes, write_bytes;     /* files written */
    uint64_t dropped;                 /* blocks not spilled: queue full, disk full, too big */
    uint64_t reads, read_bytes;       /* blocks restored */
    double read_seconds;              /* time spent in kvdisk_get's reads and checks */
    uint64_t rejected;                /* files refused: bad header, checksum, identity, tokens */
    uint64_t deleted;                 /* files deleted for the budget */
    bool full;                        /* ENOSPC/EDQUOT seen: spilling stopped */
};

/* The model's identity (see the top of this file). Thread-safe. */
uint64_t kvdisk_model_identity(const struct model *m);

/* A 64-bit checksum of n bytes, seeded. Thread-safe. */
uint64_t kvdisk_checksum(uint64_t seed, const void *data, size_t n);

/* Payload bytes of one block of this layout (kv_bytes_per_block's value), 0 for a bad layout. */
size_t kvdisk_payload_bytes(const struct kvdisk_layout *l);

/* Opens (creating) dir, indexes the files whose header matches this model and layout and
 * logs every other file it ignores, and starts the writer thread. Returns ATTND_ERR_INVALID
 * (bad options, message in err), ATTND_ERR_IO (the directory cannot be made or read) or
 * ATTND_ERR_NOMEM. The caller owns *out. */
attnd_status kvdisk_open(const struct kvdisk_opts *o, struct kvdisk **out, char *err, size_t errlen);

/* kvdisk_open for a loaded model: identity from m, layout from m and kv_type. Logs. */
attnd_status kvdisk_open_model(const char *dir, uint64_t max_bytes, const struct model *m,
                               enum tensor_type kv_type, struct kvdisk **out);

/* Writes what is queued, stops the thread, logs the totals, frees. NULL is a no-op. */
void kvdisk_close(struct kvdisk *d);

/* Waits until every queued block is written (or dropped). Thread-safe. */
void kvdisk_flush(struct kvdisk *d);

/* true if a file (or a queued write) for this block hash exists. Thread-safe. */
bool kvdisk_has(struct kvdisk *d, uint64_t hash);

/* Starts a spill: a buffer of kvdisk_payload_bytes for the caller to fill, or NULL when the
 * block is not wanted (already there or queued, spilling stopped, the queue full unless
 * wait). wait: block until the queue has room (for a shutdown flush). Thread-safe. */
void *kvdisk_put_begin(struct kvdisk *d, uint64_t hash, bool wait);
/* Queues the buffer from kvdisk_put_begin (ownership passes) for writing as block b. */
void kvdisk_put_end(struct kvdisk *d, const struct kvdisk_block *b, void *payload);

/* Reads block `want` (hash, parent hash and tokens must all match the file) into payload
 * (kvdisk_payload_bytes). Returns ATTND_OK; ATTND_ERR_NOTFOUND if no file is indexed;
 * ATTND_ERR_IO or ATTND_ERR_FORMAT when the file cannot be read or is refused (logged and
 * forgotten; deleted when damaged: wrong size, checksum, hashes or token ids, but kept when its
 * header names another model, layout or format). One thread at a time. */
attnd_status kvdisk_get(struct kvdisk *d, const struct kvdisk_block *want, void *payload);

/* Counters and sizes. Thread-safe. */
void kvdisk_get_stats(struct kvdisk *d, struct kvdisk_stats *out);

/* Tests only: make every write fail with -err (e.g. ENOSPC); 0 turns it off. */
void kvdisk_set_write_fault(int err);

#endif
