/* forward.h - the transformer forward pass on the CPU, with a simple contiguous KV cache.
 *
 * A forward context owns one sequence's KV cache and scratch buffers, and a thread pool.
 * It is not thread-safe: one caller at a time. Several contexts may share one model. */
#ifndef ATTND_FORWARD_H
#define ATTND_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/model.h"
#include "attnd/status.h"

struct fwd_opts {
    int n_ctx;     /* KV cache capacity in tokens (0: min(model's context_length, 4096)) */
    int n_threads; /* worker threads including the caller (0: online CPUs) */
    int n_batch;   /* most tokens evaluated in one pass; longer inputs are chunked (0: 256) */
};

struct fwd_ctx;

/* Creates a context for m (which must outlive it). Returns ATTND_ERR_NOMEM or
 * ATTND_ERR_INVALID (bad options) on failure. */
attnd_status fwd_create(const struct model *m, const struct fwd_opts *opts, struct fwd_ctx **out);
/* fwd_destroy(NULL) is a no-op. */
void fwd_destroy(struct fwd_ctx *c);

/* Appends n tokens at positions [n_past, n_past + n) and runs the model over them.
 * logits: if all_logits, n rows of n_vocab floats (row i = distribution after token i);
 * otherwise one row for the last token. May be NULL (only fills the cache).
 * Returns ATTND_ERR_RANGE if the cache would overflow, ATTND_ERR_INVALID for a token id
 * outside the vocabulary (nothing is changed in either case). */
attnd_status fwd_eval(struct fwd_ctx *c, const int32_t *tokens, int n, bool all_logits, float *logits);

/* Tokens in the cache. */
int fwd_n_past(const struct fwd_ctx *c);
int fwd_n_ctx(const struct fwd_ctx *c);
/* Forgets positions >= n_past (0 clears the cache). */
void fwd_truncate(struct fwd_ctx *c, int n_past);
int fwd_n_threads(const struct fwd_ctx *c);

/* Attention probe: while set, fwd_eval() stores, for one layer, each evaluated token's
 * post-RoPE query vectors (all heads) into q_out[pos * n_head * head_dim ...] and the layer's
 * attention output (before W_o) into att_out[pos * n_head * head_dim ...] (either may be NULL;
 * both caller-owned, n_ctx * n_head * head_dim floats). layer < 0 stops probing. */
void fwd_set_probe(struct fwd_ctx *c, int layer, float *q_out, float *att_out);
/* Causal attention weights of query head `head` at `layer` for the queries q (n rows of
 * n_head * head_dim floats, as the probe stores them) against the cached keys 0..i for row i:
 * exactly the numbers the forward pass used. Writes n(n+1)/2 floats, row by row. The cache
 * must still hold those n positions. */
void fwd_attention_weights(const struct fwd_ctx *c, int layer, int head, const float *q, int n, float *weights);
/* The cached key and value vectors of one layer and KV head at pos (head_dim floats each). */
const float *fwd_cache_k(const struct fwd_ctx *c, int layer, int pos, int kv_head);
const float *fwd_cache_v(const struct fwd_ctx *c, int layer, int pos, int kv_head);

#endif
