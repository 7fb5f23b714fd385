/* forward.h - the transformer forward pass over the paged KV cache, on the backend chosen at
 * fwd_create (the SIMD CPU kernels or a Vulkan device; see enum fwd_backend).
 *
 * fwd_eval_batch() runs one step for a batch of sequences at once: every sequence contributes
 * a run of new tokens (a prompt chunk or one decode token); the matrix products read each
 * weight once for all tokens of the step, and attention reads each sequence's keys and values
 * through its block table (FlashAttention-2 kernel).
 *
 * For single-sequence callers (score, run, tests, attention maps) a context also owns a private
 * KV cache and sequence: fwd_eval() appends tokens to it.
 *
 * A context is not thread-safe: one caller at a time. Several contexts may share one model. */
#ifndef ATTND_FORWARD_H
#define ATTND_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/fwd_kernels.h"
#include "attnd/fwd_seq.h"
#include "attnd/model.h"
#include "attnd/status.h"
#include "attnd/tensor.h"

struct kv_cache;
struct kv_seq;

/* Where the step runs. */
enum fwd_backend {
    FWD_BACKEND_CPU = 0, /* the SIMD CPU kernels (the default for library callers) */
    FWD_BACKEND_AUTO,    /* a Vulkan GPU (discrete or integrated) if one is usable, else the CPU
                            kernels; a CPU Vulkan device (lavapipe) is not chosen here: on the same
                            cores the CPU kernels are faster */
    FWD_BACKEND_VULKAN,  /* a Vulkan device (any type, lavapipe included); fwd_create fails with
                            ATTND_ERR_UNSUPPORTED and a reason (fwd_backend_error) if none works */
};

/* "cpu", "auto" or "vulkan" -> *out; -1 for anything else. */
int fwd_backend_parse(const char *s, enum fwd_backend *out);

struct fwd_opts {
    int n_ctx;                 /* private cache capacity in tokens (0: min(model's context_length, 4096));
                                  -1: no private cache (batch use only) */
    int n_threads;             /* worker threads including the caller (0: online CPUs) */
    int n_batch;               /* most tokens in one step; fwd_eval chunks longer inputs (0: 256) */
    enum tensor_type kv_type;  /* private cache element type: TENSOR_F32 (default) or TENSOR_F16 */
    enum fwd_backend backend;  /* default FWD_BACKEND_CPU */
    int vk_device;             /* 0: the best Vulkan device ($ATTND_VK_DEVICE overrides); N >= 1: the
                                  device at index N - 1 in vkEnumeratePhysicalDevices order */
};

struct fwd_ctx;

/* Creates a context for m (which must outlive it). Returns ATTND_ERR_NOMEM or
 * ATTND_ERR_INVALID (bad options) on failure. */
attnd_status fwd_create(const struct model *m, const struct fwd_opts *opts, struct fwd_ctx **out);
/* fwd_destroy(NULL) is a no-op. */
void fwd_destroy(struct fwd_ctx *c);

/* Why the last fwd_create on this thread did not use Vulkan ("" if it did or was not asked to):
 * the fallback reason for FWD_BACKEND_AUTO, the error for FWD_BACKEND_VULKAN. */
const char *fwd_backend_error(void);
/* The backend in use: "cpu" or "vulkan". */
const char *fwd_backend_name(const struct fwd_ctx *c);
/* The device in use: the Vulkan device's name, or "cpu (<isa>)". */
const char *fwd_device_name(const struct fwd_ctx *c);
/* Vulkan validation-layer errors seen on the context's device (0 on the CPU or without the layer). */
unsigned fwd_validation_errors(const struct fwd_ctx *c);

/* Fills *out and returns 1 on the cpu backend; returns 0 (out untouched) on Vulkan. */
int fwd_kernels(const struct fwd_ctx *c, struct fwd_kernels *out);

/* Runs the model over every sequence's new tokens (at most n_batch in all), writes their K/V
 * into the cache and commits them (kv_seq_commit), and fills the requested logits. Returns
 * ATTND_ERR_INVALID for a token outside the vocabulary or more than n_batch tokens (nothing is
 * computed then). */
attnd_status fwd_eval_batch(struct fwd_ctx *c, struct kv_cache *kv, const struct fwd_seq *seqs, int n_seqs);

/* Private sequence: appends n tokens at positions [n_past, n_past + n) and runs them (chunked
 * by n_batch). logits: if all_logits, n rows of n_vocab floats (row i = distribution after
 * token i); otherwise one row for the last token; may be NULL. Returns ATTND_ERR_RANGE if the
 * cache would overflow, ATTND_ERR_INVALID for a token id outside the vocabulary (nothing is
 * changed in either case). */
attnd_status fwd_eval(struct fwd_ctx *c, const int32_t *tokens, int n, bool all_logits, float *logits);

/* Tokens in the private cache. */
int fwd_n_past(const struct fwd_ctx *c);
int fwd_n_ctx(const struct fwd_ctx *c);
/* Empties the private cache. */
void fwd_reset(struct fwd_ctx *c);
int fwd_n_threads(const struct fwd_ctx *c);
int fwd_n_batch(const struct fwd_ctx *c);

/* Attention probe (private sequence): while set, fwd_eval() stores, for one layer, each
 * evaluated token's post-RoPE query vectors (all heads) into q_out[pos * n_head * head_dim ...]
 * and the layer's attention output (before W_o) into att_out[pos * n_head * head_dim ...]
 * (either may be NULL; both caller-owned, n_ctx * n_head * head_dim floats). layer < 0 stops. */
void fwd_set_probe(struct fwd_ctx *c, int layer, float *q_out, float *att_out);
/* Causal attention weights softmax(q·kᵀ/√d) of query head `head` at `layer` for the queries q
 * (n rows of n_head * head_dim floats, as the probe stores them) against the private cache's
 * keys 0..i for row i. Writes n(n+1)/2 floats, row by row. */
void fwd_attention_weights(const struct fwd_ctx *c, int layer, int head, const float *q, int n, float *weights);
/* Residual-stream probe (private sequence): while out != NULL, fwd_eval() stores the residual
 * stream of the token at position pos after every layer into out[layer * n_embd ...]
 * (caller-owned, n_layer * n_embd floats). */
void fwd_set_resid_probe(struct fwd_ctx *c, int pos, float *out);
/* Applies the final RMSNorm and the output layer to n rows of residual stream x (n_embd
 * floats each), writing n rows of n_vocab logits. */
void fwd_project(struct fwd_ctx *c, const float *x, int n, float *logits);
/* The private cache's value vector of one layer, position and KV head, as f32 (head_dim floats). */
void fwd_cache_v(const struct fwd_ctx *c, int layer, int pos, int kv_head, float *out);

#endif
