/* sched.h - the request scheduler: owns the paged KV cache, the forward context and one
 * worker thread that runs every request with continuous batching (each step mixes the decode
 * tokens of running requests with chunks of waiting prompts, one forward pass per step), and
 * answers attention-map queries. Requests are admitted in turns between their owners (a tenant, a
 * client address: sched_request.owner): the owner served longest ago goes next, each owner's own
 * requests in arrival order, and an owner holding more than its share of the running set gives
 * its newest request back (pre-empted) when another owner waits with less. A paused request
 * (sched_pause) computes nothing and keeps its KV until the pool needs the blocks. Events of a
 * request are delivered through its callback, on the scheduler thread, in order:
 * zero or more SCHED_EV_TOKEN, then exactly one SCHED_EV_DONE (or SCHED_EV_ERROR).
 * After that last event the scheduler never touches the request's user data again.
 *
 * All functions are thread-safe unless noted.
 */
#ifndef ATTND_SCHED_H
#define ATTND_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/forward.h"
#include "attnd/sampler.h"
#include "attnd/status.h"
#include "attnd/stopstr.h"
#include "attnd/tensor.h"

struct gram;
struct iv_set;
struct kvev;
struct kvdisk;
struct model;
struct tokenizer;
struct sched;

#define SCHED_MAX_LOGPROBS 20
#define SCHED_MAX_STOPS 16

struct sched_opts {
    int n_threads;      /* compute threads (0: online CPUs) */
    int n_ctx;          /* context (prompt + generated) per request, tokens (0: min(model ctx, 4096)) */
    int max_queue;      /* waiting requests before sched_submit() refuses (0: 64) */
    int max_running;    /* requests batched together in one step (0: 32) */
    int n_batch;        /* token budget of one step: decode tokens + prompt chunks (0: 256) */
    enum tensor_type kv_type; /* KV cache element type: TENSOR_F32 (0) or TENSOR_F16; `attnd serve`
                                 picks F32 for F32-weight models and F16 otherwise */
    size_t kv_blocks;   /* KV pool size in 16-token blocks (0: from kv_mib) */
    size_t kv_mib;      /* KV pool size in MiB when kv_blocks is 0 (0: 256); never less than one
                           full context */
    enum fwd_backend backend; /* where the steps run (forward.h); 0 = FWD_BACKEND_CPU */
    int vk_device;      /* fwd_opts.vk_device: 0 = the best Vulkan device, N = index N - 1 */
    struct kvev *kv_events; /* NULL, or where the prefix cache reports its blocks (kvevents.h);
                               not owned: destroy it after the scheduler */
    struct kvdisk *kv_disk; /* NULL, or the prefix cache's disk tier (kvdisk.h, opened for this
                               model and kv_type); not owned: close it after the scheduler */
    int max_running_per_owner; /* running plus paused requests of one owner (0: max_running) */
    int max_queued_per_owner;  /* waiting requests of one owner before sched_submit() answers
                                  ATTND_ERR_BUSY (0: max_queue) */
    int stall_timeout_ms;      /* a paused request neither resumed nor paused again for this long
                                  is cancelled (0: 30000) */
    int speculative;           /* enum spec_mode (spec.h): SPEC_OFF (0) or SPEC_LOOKUP, the drafter of
                                  requests that do not choose (sched_request.speculative) */
    int spec_max_seqs;         /* speculation runs in steps of at most this many decoding requests
                                  (more: the step is compute-bound, drafts would cost more than they
                                  save) (0: 4) */
};

/* One generation request. sched_submit() copies everything it needs. */
struct sched_request {
    const int32_t *prompt;      /* token ids, n_prompt >= 1, each < n_vocab */
    size_t n_prompt;
    int max_tokens;             /* >= 0 tokens to generate */
    struct sampler_params sampling;
    const char *const *stops;   /* stop strings (NUL-terminated), n_stops <= SCHED_MAX_STOPS */
    int n_stops;
    bool ignore_eos;            /* keep generating past end-of-generation tokens */
    int logprobs;               /* 0..SCHED_MAX_LOGPROBS top alternatives per generated token */
    const struct iv_set *iv;    /* NULL, or interventions (intervene.h, made for this model), copied:
                                   applied to this request's rows only; its KV blocks are shared
                                   only with requests of identical interventions (none for
                                   head_mean). Needs the CPU backend (else ATTND_ERR_INVALID). */
    const struct gram *grammar; /* NULL, or the output is held to this grammar (grammar.h: from
                                   gbnf_parse / jsg_compile), retained until the request ends */
    uint64_t owner;             /* who asked (any key: a tenant, a client address): the unit of turns
                                   and of the per-owner limits of sched_opts */
    int speculative;            /* 0: sched_opts.speculative; 1: prompt lookup; -1: none. Lossless
                                   (the output is the same as without); never with interventions */
};

enum sched_event_kind { SCHED_EV_TOKEN = 0, SCHED_EV_DONE = 1, SCHED_EV_ERROR = 2 };

struct sched_event {
    enum sched_event_kind kind;
    uint64_t id;                /* the request's id */
    /* SCHED_EV_TOKEN: one generated token */
    int token;
    const char *text;           /* text now safe to show: whole UTF-8 characters, stop strings
                                   withheld (may be empty; may be longer than this token's own
                                   text when earlier bytes were held back). Valid during the
                                   callback only. */
    size_t text_len;
    float logprob;              /* log-probability of token (0 unless the request asked for logprobs) */
    int n_top;                  /* top alternatives: the request's logprobs, at most n_vocab */
    const int *top_ids;
    const float *top_logprobs;
    /* SCHED_EV_DONE */
    const char *finish_reason;  /* "stop", "length" or "cancelled" */
    const char *final_text;     /* bytes released at the end (flushed detokenizer/stop matcher) */
    size_t final_text_len;
    int prompt_tokens, completion_tokens;
    int cached_tokens;          /* prompt tokens found in the prefix cache (not computed) at admission */
    double queue_ms, prompt_ms, generation_ms;
    int drafted_tokens, accepted_tokens; /* speculative decoding: tokens drafted and verified, and
                                            of those accepted (each saved a step) */
    /* SCHED_EV_ERROR (ATTND_ERR_NUMERIC: NaN/Inf logits, the model is broken) */
    attnd_status status;
    const char *message;
};

/* Called on the scheduler thread; must not block for long and must not call sched_* functions
 * except sched_cancel(). */
typedef void (*sched_cb)(void *ud, const struct sched_event *ev);

/* Starts the worker thread. m and tok must outlive the scheduler. */
attnd_status sched_create(const struct model *m, const struct tokenizer *tok, const struct sched_opts *opts,
                          struct sched **out);
/* Cancels queued requests (each gets DONE with "cancelled"), lets the running one finish within
 * grace_ms (then cancels it), joins the thread and frees everything. sched_destroy(NULL) is a
 * no-op. */
void sched_destroy(struct sched *s, int grace_ms);

/* Queues a request. Returns ATTND_OK and its id; ATTND_ERR_INVALID (bad fields: message in err),
 * ATTND_ERR_RANGE (prompt + max_tokens exceed the context: message in err), ATTND_ERR_NOMEM,
 * ATTND_ERR_BUSY when its owner already has max_queued_per_owner requests waiting, or
 * ATTND_ERR_UNSUPPORTED when the queue is full or the scheduler is shutting down. */
attnd_status sched_submit(struct sched *s, const struct sched_request *r, sched_cb cb, void *ud, uint64_t *id,
                          char *err, size_t errlen);
/* Asks the request to stop; it ends with DONE "cancelled" at the next token boundary (or at once
 * if still queued). Unknown or finished ids are ignored. May be called from a callback. */
void sched_cancel(struct sched *s, uint64_t id);
/* Pauses (paused true) or resumes a request: a paused one is left out of every step (no compute),
 * keeps its KV blocks until the pool needs them (then it is recomputed when resumed, as after a
 * pre-emption), keeps its owner's running slot but not a slot of the running set, and is cancelled
 * (DONE "cancelled") once it has been paused for stall_timeout_ms without a new sched_pause(true),
 * which restarts that clock. Unknown or finished ids are ignored. May be called from a callback. */
void sched_pause(struct sched *s, uint64_t id, bool paused);
/* Stops accepting new requests (sched_submit answers ATTND_ERR_UNSUPPORTED). */
void sched_drain(struct sched *s);
/* Waits until no request is queued or running, at most timeout_ms; returns true if idle. */
bool sched_wait_idle(struct sched *s, int timeout_ms);

struct sched_stats {
    int queued;                 /* waiting requests */
    int running;                /* requests in the running set */
    int paused;                 /* paused requests (sched_pause), running or waiting */
    uint64_t stall_cancels;     /* paused requests cancelled after stall_timeout_ms */
    uint64_t fair_preemptions;  /* requests pre-empted to give another owner its turn */
    uint64_t kv_tokens_used;    /* tokens held by running requests */
    uint64_t kv_tokens_capacity;
    uint64_t kv_bytes_capacity;
    uint64_t kv_blocks_total, kv_blocks_used, kv_blocks_free, kv_blocks_cached;
    double kv_waste_pct;        /* memory of used blocks that holds no token */
    uint64_t prefix_lookup_tokens, prefix_hit_tokens; /* prompt tokens looked up / found cached */
    uint64_t preemptions;
    uint64_t steps, batch_tokens_total;
    uint64_t last_batch_tokens, last_batch_seqs;
    uint64_t kv_events_dropped; /* KV-cache event records dropped on a full queue (kvevents.h) */
    uint64_t spec_drafted, spec_accepted; /* speculative decoding: tokens drafted, and accepted */
    uint64_t spec_steps;        /* verification steps (a sequence's step that checked a draft) */
};
void sched_get_stats(struct sched *s, struct sched_stats *st);
/* The compute backend in use ("cpu" or "vulkan") and its device's name. Thread-safe. */
const char *sched_backend(const struct sched *s);
const char *sched_device(const struct sched *s);
/* fwd_kernels of the scheduler's context: 1 and *out filled on the cpu backend, else 0. */
int sched_kernels(const struct sched *s, struct fwd_kernels *out);
int sched_n_ctx(const struct sched *s);

/* Attention map of one layer and query head over tokens[0..n): recomputes the forward pass
 * over the tokens (the same code and numbers as generation) and writes the causal softmax
 * weights row by row into weights (row i has i+1 entries, n(n+1)/2 floats in all).
 * If values != NULL it also receives the value vectors of the head's KV group (n x head_dim),
 * and if output != NULL the head's attention output (n x head_dim) as the forward pass computed
 * it, so a caller can check output == weights · values. Runs on the scheduler thread between
 * requests; blocks the caller until done. Returns ATTND_ERR_INVALID for a bad layer/head,
 * ATTND_ERR_RANGE if n exceeds the context. */
attnd_status sched_attention(struct sched *s, const int32_t *tokens, size_t n, int layer, int head, float *weights,
                             float *values, float *output);

/* Logit lens at position pos of tokens[0..n): the residual stream after each layer, passed
 * through the final RMSNorm and the output layer, as the top_k (1..SCHED_MAX_LOGPROBS)
 * next-token probabilities per layer, layer-major: ids[l * top_k + i], probs[...] sorted by
 * probability. The last layer's entry is the model's real next-token distribution after
 * tokens[0..pos]. Runs on the scheduler thread between steps; blocks the caller. Returns
 * ATTND_ERR_INVALID for a bad pos, top_k or token id, ATTND_ERR_RANGE if n exceeds the
 * context, ATTND_ERR_NOMEM. */
attnd_status sched_logit_lens(struct sched *s, const int32_t *tokens, size_t n, int pos, int top_k, int *ids,
                              float *probs);

/* One block of the prefix cache (GET /debug/kv-blocks). */
struct sched_kv_block {
    uint64_t hash, parent_hash; /* kv_hash_block chain; parent_hash is the root for a first block */
    int32_t block;              /* physical block id */
    int32_t parent;             /* its parent's block id, -1 for a sequence's first block */
    int32_t ref;                /* sequences holding it (0: cached, evictable) */
};
/* The blocks now in the prefix cache, read on the scheduler thread between steps: the first cap
 * into out, their number into *n (may exceed cap). Blocks the caller until done. Returns
 * ATTND_ERR_UNSUPPORTED once the scheduler stops. */
attnd_status sched_kv_blocks(struct sched *s, struct sched_kv_block *out, size_t cap, size_t *n);

#endif
