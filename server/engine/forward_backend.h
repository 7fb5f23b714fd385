/* forward_backend.h - private to server/engine: the interface a forward-pass backend implements.
 *
 * forward.c (the public fwd_ API) validates a step, computes each token's position and hands the
 * step to the backend chosen at fwd_create, through this table, once per step; it never asks
 * which backend it holds. Two implementations: forward_cpu.c (the SIMD CPU kernels) and
 * forward_vk.c (Vulkan compute shaders). Each computes the same thing (see forward_cpu.c):
 *   embed -> per layer [attention block, MLP block] -> logits for the rows asked for,
 * writes the new tokens' K/V into the paged cache and commits the sequences. A backend holds all
 * its state behind its void *; what the backends share lives in modules of their own (rope.h:
 * the RoPE angles), never in forward.c, and neither backend includes the other's header.
 *
 * A backend state is used by one thread at a time (the owning fwd_ctx's caller). */
#ifndef ATTND_FORWARD_BACKEND_H
#define ATTND_FORWARD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/fwd_kernels.h"
#include "attnd/fwd_seq.h"
#include "attnd/model.h"
#include "attnd/status.h"

struct kv_cache;

/* What a step copies out besides logits (the probes of forward.h); fields unset = off. */
struct fwd_probe {
    int layer;      /* attention probe layer, or -1 */
    float *q, *att; /* indexed by position: [pos * n_head * head_dim]; either may be NULL */
    int resid_pos;  /* residual-stream probe position, or -1 */
    float *resid;   /* [layer * n_embd], or NULL */
};

/* One step, already checked by fwd_eval_batch: every token is in the vocabulary, the tokens
 * number n_tokens <= n_batch, each sequence's n tokens are its last n appended. */
struct fwd_step {
    struct kv_cache *kv;
    const struct fwd_seq *seqs;
    int n_seqs;
    int n_tokens;                  /* T: the sum of seqs[i].n */
    const int32_t *pos;            /* (T) each token's position in its sequence */
    size_t n_logit_rows;           /* rows of logits asked for over all sequences */
    const struct fwd_probe *probe; /* never NULL */
};

struct fwd_backend_ops;

/* How to make a backend state. */
struct fwd_backend_cfg {
    int n_threads;  /* worker threads including the caller (>= 1) */
    int n_batch;    /* most tokens in one step (>= 1) */
    int vk_device;  /* -1: the best Vulkan device, else its enumeration index */
    bool need_gpu;  /* fail (ATTND_ERR_UNSUPPORTED) on a CPU Vulkan device */
    const struct fwd_backend_ops *host; /* a backend on the host CPU for the work a device backend
                                           leaves to it (project), made with this cfg less host;
                                           NULL when making that host backend itself */
};

struct fwd_backend_ops {
    const char *name; /* "cpu", "vulkan" */
    /* Makes a state for m (which outlives it). On failure *out is NULL and why (why_n bytes)
     * holds a one-line reason. */
    attnd_status (*create)(const struct model *m, const struct fwd_backend_cfg *cfg, void **out, char *why,
                           size_t why_n);
    /* Runs one step (see struct fwd_step), fills step->probe's buffers, and commits the
     * sequences on success. After a step with probe->layer >= 0 the host pools of kv (when kv has
     * storage) hold that layer's K/V, so fwd_attention_weights / fwd_cache_v read what the
     * backend computed. */
    attnd_status (*eval_batch)(void *state, const struct fwd_step *step);
    void (*destroy)(void *state); /* NULL: no-op */
    const char *(*device_name)(const void *state);
    unsigned (*validation_errors)(const void *state); /* Vulkan validation-layer errors so far */
    int (*kernels)(const void *state, struct fwd_kernels *out); /* NULL: not a CPU backend */
    int (*n_threads)(const void *state); /* host worker threads of the state (the caller included) */
    /* Final RMSNorm and output layer over n rows of residual stream x (n_embd floats each) into n
     * rows of n_vocab logits (the logit lens). */
    void (*project)(void *state, const float *x, int n, float *logits);
};

/* The implementations, chosen by forward.c: the SIMD CPU kernels (forward_cpu.c) and Vulkan
 * compute shaders (forward_vk.c, which needs cfg->host). */
extern const struct fwd_backend_ops fwd_cpu_backend;
extern const struct fwd_backend_ops fwd_vk_backend;

#endif
