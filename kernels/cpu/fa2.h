/* fa2.h - FlashAttention-2 on the CPU over a paged KV cache.
 *
 * One call computes causal GQA attention for a batch of sequences (a scheduler step: prefill
 * chunks and decode tokens mixed) reading keys and values through each sequence's block table.
 * The (seq, seq) score matrix is never materialised: every query row keeps a running max m, a
 * running sum l and an unnormalised output O, updated once per 16-token K/V tile (the online
 * softmax of FlashAttention-2), and is divided by l at the end.
 *
 * Layouts:
 *   K and V pools of one layer   [n_blocks][n_head_kv][FA2_BLOCK][head_dim], F16 or F32
 *   block table of a sequence    int32 [ceil((pos0 + n_q) / FA2_BLOCK)]: logical block b
 *                                (tokens 16b..16b+15) lives in physical block table[b]
 *   queries q / output out       f32 [n_q][n_head][head_dim]
 *   GQA                          query head h reads KV head h / (n_head / n_head_kv)
 *   causal mask                  query row i sees keys 0 .. pos0 + i
 * Slots at or past a sequence's length (pos0 + n_q) may hold anything, NaN included: they are
 * masked, never multiplied by 0.
 *
 * Parallel use (a thread pool runs fn(arg, ith, nth) on every thread):
 *   1. fa2_run(a, ith, nth) on every thread: each thread takes a fixed, cost-balanced share of the
 *      work items (sequence, KV head, tile of query tokens or - for decode - a part of the KV
 *      length). No locks, no shared counters.
 *   2. if fa2_needs_reduce(a): after every thread finished step 1, fa2_reduce(a, ith, nth) on
 *      every thread combines the partial results of decode sequences split into parts
 *      (flash-decoding).
 * fa2_attend() does both on a struct tpool. All functions are thread-safe and keep no state;
 * the SIMD version (AVX-512, AVX2, or scalar) follows cpu_kernels_init()/cpu_kernels_set_isa().
 *
 * Argument errors (bad type, head counts, missing scratch, a block id outside the pool) are
 * caller bugs: they stop the program through ATTND_CHECK. Nothing here reads untrusted bytes. */
#ifndef ATTND_FA2_H
#define ATTND_FA2_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/tensor.h"

#define FA2_BLOCK 16         /* tokens per KV block (and per K/V tile) */
#define FA2_MAX_HEAD_DIM 256 /* head_dim must be in 1..FA2_MAX_HEAD_DIM */

struct tpool;

/* One sequence of the batch. */
struct fa2_seq {
    const float *q;             /* (n_q, n_head, head_dim) queries */
    float *out;                 /* (n_q, n_head, head_dim) output; may be the same memory as q */
    int n_q;                    /* query rows (tokens) of this step, >= 0; 1 for a decode step */
    int pos0;                   /* position of query row 0 = cached prefix length, >= 0 */
    const int32_t *block_table; /* (ceil((pos0 + n_q) / FA2_BLOCK)) physical block ids */
};

/* One layer's attention for a batch of sequences. */
struct fa2_args {
    int n_head;                 /* query heads, a multiple of n_head_kv */
    int n_head_kv;              /* KV heads, >= 1 */
    int head_dim;               /* 1..FA2_MAX_HEAD_DIM (multiples of 8 take the SIMD paths) */
    enum tensor_type kv_type;   /* TENSOR_F16 or TENSOR_F32 */
    const void *k, *v;          /* this layer's K and V pools, layout above */
    size_t block_stride;        /* bytes from one physical block to the next in k and v;
                                 * 0 = dense: n_head_kv * FA2_BLOCK * head_dim * element size */
    int n_blocks;               /* physical blocks in the pools (block ids are checked against it) */
    float scale;                /* score scale, usually 1/sqrt(head_dim) */
    const struct fa2_seq *seqs; /* (n_seqs) sequences */
    int n_seqs;
    int n_split;                /* >= 1: a decode sequence (n_q == 1) is split into up to n_split
                                 * parts of its KV length (never more parts than blocks). Use
                                 * about n_threads / (decode sequences * n_head_kv), at least 1. */
    float *scratch;             /* fa2_scratch_floats(a) floats for the partial results of split
                                 * sequences; may be NULL when that is 0 */
};

/* Floats of scratch the call needs: for each decode sequence split into p > 1 parts,
 * p * n_head * (head_dim + 2). 0 when nothing is split. Pure. */
size_t fa2_scratch_floats(const struct fa2_args *a);

/* 1 if some sequence is split, i.e. fa2_reduce() must run after fa2_run(). Pure. */
int fa2_needs_reduce(const struct fa2_args *a);

/* Computes thread ith's share (0 <= ith < nth) of the batch. Every thread of the job must be
 * called with the same a and nth. Output rows of unsplit sequences are final when every thread
 * has returned; split decode sequences then need fa2_reduce(). Reads q, k, v and the block
 * tables; writes only out and scratch. Uses about 70 KiB of the calling thread's stack. */
void fa2_run(const struct fa2_args *a, int ith, int nth);
/* The job kernels side by side. Each head size and phase (a job of several query tokens: prefill;
 * of one: decode) runs the one fa2_tune() measured fastest for it, or by rule the widest the ISA
 * cap allows (AVX2 needs head_dim % 8 == 0); a choice the cap no longer allows falls back to the
 * rule. */
enum fa2_variant { FA2_VAR_SCALAR, FA2_VAR_AVX2, FA2_VAR_AVX512, FA2_N_VARIANTS };
enum fa2_phase { FA2_PREFILL, FA2_DECODE, FA2_N_PHASES };
int fa2_variant_available(enum fa2_variant v, int head_dim);
enum fa2_variant fa2_variant_of(int head_dim, enum fa2_phase ph);
const char *fa2_variant_str(enum fa2_variant v);
/* The kernel fa2_run uses for heads of head_dim in phase ph: "scalar", "avx2" or "avx512". */
const char *fa2_variant_name(int head_dim, enum fa2_phase ph);
/* Times every available variant on one thread, on a 64-token prefill and on a decode token over
 * 512 keys of this head shape (F16 pool, best of 5 each; some milliseconds), and makes the fastest
 * at each the choice for that phase and head_dim (on the Xeon of the README, head_dim 64: the
 * AVX-512 kernel at prefill, the AVX2 one at decode). Once per head size and process. Thread-safe. */
void fa2_tune(int head_dim, int n_head, int n_head_kv);
/* Drops the measured choices (the rule again). For tests. */
void fa2_forget(void);

/* Second pass, only after fa2_run() finished on all threads: combines the partial results
 * (O, m, l) of split decode sequences into their out rows. A no-op when nothing is split. */
void fa2_reduce(const struct fa2_args *a, int ith, int nth);

/* Runs fa2_run and, if needed, fa2_reduce as jobs of pool (the caller's thread takes part).
 * Not re-entrant per pool, like tpool_run(). */
void fa2_attend(struct tpool *pool, const struct fa2_args *a);

/* Scalar reference, single-threaded: the same algorithm and work items in plain C, whatever
 * ISA is selected (also the portable fallback). Uses a->scratch like fa2_run + fa2_reduce. */
void fa2_ref(const struct fa2_args *a);

/* ------------------------------------------------------------------------------------------
 * Internal: the per-ISA job kernels fa2.c dispatches to (fa2_avx2.c, fa2_avx512.c). Not for
 * the engine.
 *
 * A job is a set of query rows that share one KV head - n_tok consecutive tokens times n_grp
 * consecutive query heads, row r = (token r / n_grp, head r % n_grp) - over key tiles
 * [kb0, kb1). Token t of the job sees keys 0 .. kend0 + t - 1 (absolute positions); the kernel
 * masks each tile against that and reads nothing past kend0 + n_tok - 1 into the result.
 * ------------------------------------------------------------------------------------------ */
struct fa2_job {
    int n_tok, n_grp, head_dim;
    const float *q;         /* row (t, g) at q + t * q_tok_stride + g * head_dim */
    size_t q_tok_stride;    /* floats */
    float *o;               /* row (t, g) at o + t * o_tok_stride + g * head_dim */
    size_t o_tok_stride;    /* floats */
    float *ml;              /* NULL: o gets the normalised output; else o gets the unnormalised
                             * O and ml[2r], ml[2r+1] the row's m and l (a decode part) */
    int kv_f16;             /* 1: F16 pools, 0: F32 */
    const unsigned char *k; /* pool base + this KV head's offset within a block */
    const unsigned char *v;
    size_t block_stride;    /* bytes */
    const int32_t *block_table;
    int kb0, kb1;           /* key tiles, kb0 < kb1, each with at least one visible key */
    int kend0;              /* keys visible to token 0 of the job */
    float scale;
};

#define FA2_MAX_ROWS 64        /* rows per job */
#define FA2_MAX_ROW_FLOATS 4096 /* rows * head_dim per job */

/* Each computes one job; head_dim % 8 == 0 for the AVX2 one. Thread-safe. */
void fa2_avx2_job(const struct fa2_job *j);
void fa2_avx512_job(const struct fa2_job *j);

#endif
