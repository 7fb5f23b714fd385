/* forward.c - the public forward-pass API (forward.h): options, the backend chosen once at
 * fwd_create, the private single-sequence cache, probes, and the host-side readers of the cache
 * (attention weights, value vectors).
 *
 * A step goes: fwd_eval (chunks a private sequence) -> fwd_eval_batch (checks the step, computes
 * positions) -> c->ops->eval_batch, the backend's one step (forward_cpu.c or forward_vk.c,
 * through the table in forward_backend.h). Everything else a caller asks of the backend
 * (threads, the logit lens' projection, device and kernel names) goes through that table too:
 * this file holds no backend's state and asks nothing of which backend it holds. */
#include "attnd/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/check.h"
#include "attnd/kvcache.h"
#include "attnd/log.h"
#include "kernels/cpu/cpu_kernels.h"
#include "server/engine/forward_backend.h"

struct fwd_ctx {
    const struct model *m;
    const struct fwd_backend_ops *ops; /* the backend every step goes to */
    void *be;                          /* its state */
    int n_batch;
    /* private cache and sequence (fwd_eval); NULL when created with n_ctx = -1 */
    struct kv_cache *kv;
    struct kv_seq *seq;
    int n_ctx;
    int32_t *pos; /* (n_batch) position of each token of a step in its sequence */
    struct fwd_probe probe;
};

static _Thread_local char g_backend_err[320];

const char *fwd_backend_error(void) { return g_backend_err; }
const char *fwd_backend_name(const struct fwd_ctx *c) { return c->ops->name; }
const char *fwd_device_name(const struct fwd_ctx *c) { return c->ops->device_name(c->be); }

int fwd_kernels(const struct fwd_ctx *c, struct fwd_kernels *out)
{
    return c->ops->kernels ? c->ops->kernels(c->be, out) : 0;
}
unsigned fwd_validation_errors(const struct fwd_ctx *c) { return c->ops->validation_errors(c->be); }

int fwd_backend_parse(const char *s, enum fwd_backend *out)
{
    static const char *const names[] = {"cpu", "auto", "vulkan"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (enum fwd_backend)i;
            return 0;
        }
    return -1;
}

void fwd_destroy(struct fwd_ctx *c)
{
    if (!c) return;
    if (c->ops) c->ops->destroy(c->be);
    kv_seq_destroy(c->seq);
    kv_destroy(c->kv);
    free(c->pos);
    free(c);
}

/* Checks o and fills in its defaults. Returns ATTND_ERR_INVALID for a field out of range. */
static attnd_status resolve_opts(const struct model_hparams *hp, struct fwd_opts *o)
{
    if (o->n_ctx < -1 || o->n_threads < 0 || o->n_batch < 0 || o->n_threads > 256 || o->n_ctx > (1 << 22) ||
        o->n_batch > (1 << 16) || (o->kv_type != TENSOR_F32 && o->kv_type != TENSOR_F16) ||
        (unsigned)o->backend > FWD_BACKEND_VULKAN || o->vk_device < 0 || o->vk_device > 64)
        return ATTND_ERR_INVALID;
    if (o->n_ctx == 0) o->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (o->n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = n > 0 && n < 256 ? (int)n : 1;
    }
    if (o->n_batch == 0) o->n_batch = 256;
    if (o->n_ctx > 0 && o->n_batch > o->n_ctx) o->n_batch = o->n_ctx;
    return ATTND_OK;
}

/* The private cache and its one sequence (n_ctx tokens). */
static attnd_status private_cache_create(struct fwd_ctx *c, const struct fwd_opts *o)
{
    const struct model_hparams *hp = &c->m->hp;
    struct kv_opts ko = kv_opts_default(hp->n_layer, hp->n_head_kv, hp->head_dim, kv_blocks_for_tokens((size_t)o->n_ctx));
    ko.type = o->kv_type;
    attnd_status st = kv_create(&ko, &c->kv);
    size_t cached;
    if (!st) st = kv_seq_create(c->kv, NULL, 0, (size_t)o->n_ctx, &c->seq, &cached);
    return st;
}

/* Picks the backend: the CPU kernels, or a Vulkan device when asked (auto falls back to the CPU
 * with the reason logged and kept in g_backend_err). The Vulkan backend gets the CPU backend's
 * table as its host, for the work it leaves to the CPU. */
static attnd_status backend_open(struct fwd_ctx *c, const struct fwd_opts *o)
{
    struct fwd_backend_cfg cfg = {.n_threads = o->n_threads, .n_batch = o->n_batch, .vk_device = o->vk_device - 1,
                                  .need_gpu = o->backend == FWD_BACKEND_AUTO, .host = &fwd_cpu_backend};
    char why[256] = "";
    attnd_status st;
    if (o->backend != FWD_BACKEND_CPU) {
        if (!(st = fwd_vk_backend.create(c->m, &cfg, &c->be, why, sizeof why))) {
            c->ops = &fwd_vk_backend;
            return ATTND_OK;
        }
        snprintf(g_backend_err, sizeof g_backend_err, "%s", why);
        if (o->backend == FWD_BACKEND_VULKAN) return st;
        log_info("backend auto: using the CPU kernels (%s)", why);
    }
    cfg.host = NULL;
    if (!(st = fwd_cpu_backend.create(c->m, &cfg, &c->be, why, sizeof why))) c->ops = &fwd_cpu_backend;
    return st;
}

attnd_status fwd_create(const struct model *m, const struct fwd_opts *opts, struct fwd_ctx **out)
{
    *out = NULL;
    struct fwd_opts o = opts ? *opts : (struct fwd_opts){0};
    g_backend_err[0] = 0;
    attnd_status st = resolve_opts(&m->hp, &o);
    if (st) return st;
    struct fwd_ctx *c = calloc(1, sizeof *c);
    if (!c) return ATTND_ERR_NOMEM;
    c->m = m;
    c->probe = (struct fwd_probe){.layer = -1, .resid_pos = -1};
    c->n_batch = o.n_batch;
    c->n_ctx = o.n_ctx > 0 ? o.n_ctx : 0;
    c->pos = malloc((size_t)o.n_batch * sizeof *c->pos);
    if (!c->pos) st = ATTND_ERR_NOMEM;
    if (!st && o.n_ctx > 0) st = private_cache_create(c, &o);
    if (!st) st = backend_open(c, &o);
    if (st) {
        fwd_destroy(c);
        return st;
    }
    *out = c;
    return ATTND_OK;
}

int fwd_n_past(const struct fwd_ctx *c) { return c->seq ? (int)kv_seq_len(c->seq) : 0; }
int fwd_n_ctx(const struct fwd_ctx *c) { return c->n_ctx; }
int fwd_n_threads(const struct fwd_ctx *c) { return c->ops->n_threads(c->be); }
int fwd_n_batch(const struct fwd_ctx *c) { return c->n_batch; }

void fwd_reset(struct fwd_ctx *c)
{
    if (!c->kv || !c->seq || kv_seq_len(c->seq) == 0) return;
    kv_seq_destroy(c->seq);
    c->seq = NULL;
    size_t cached;
    /* out of memory for the sequence's own arrays: fwd_eval() tries again (and fails cleanly) */
    if (kv_seq_create(c->kv, NULL, 0, (size_t)c->n_ctx, &c->seq, &cached)) c->seq = NULL;
}

void fwd_set_probe(struct fwd_ctx *c, int layer, float *q_out, float *att_out)
{
    c->probe.layer = layer;
    c->probe.q = layer >= 0 ? q_out : NULL;
    c->probe.att = layer >= 0 ? att_out : NULL;
}

void fwd_set_resid_probe(struct fwd_ctx *c, int pos, float *out)
{
    c->probe.resid_pos = out ? pos : -1;
    c->probe.resid = out;
}

/* ---- host reads of the private cache --------------------------------------------------------- */

/* Pointer to the K (or V) vector of one position and KV head in a paged pool. */
static const unsigned char *kv_at(const struct kv_cache *kv, const void *base, const int32_t *table, int pos, int kvh,
                                  int hd)
{
    size_t es = kv_type(kv) == TENSOR_F16 ? 2 : 4;
    return (const unsigned char *)base + (size_t)table[pos / KV_BLOCK_SIZE] * kv_block_stride(kv) +
           ((size_t)kvh * KV_BLOCK_SIZE + (size_t)(pos % KV_BLOCK_SIZE)) * (size_t)hd * es;
}

static void to_f32(enum tensor_type t, const unsigned char *src, float *dst, int n)
{
    if (t == TENSOR_F16) cpu_f16_to_f32_row((const uint16_t *)(const void *)src, dst, (size_t)n);
    else memcpy(dst, src, (size_t)n * sizeof(float));
}

void fwd_attention_weights(const struct fwd_ctx *c, int layer, int head, const float *q, int n, float *weights)
{
    const struct model_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim, H = hp->n_head, kh = head / (hp->n_head / hp->n_head_kv);
    const void *kb = kv_k_base(c->kv, layer);
    const int32_t *table = kv_seq_block_table(c->seq);
    float *krow = malloc((size_t)hd * sizeof(float));
    double *sc = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!krow || !sc) {
        free(krow);
        free(sc);
        memset(weights, 0, (size_t)n * (size_t)(n + 1) / 2 * sizeof(float));
        return;
    }
    const double scale = 1.0 / sqrt((double)hd);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const float *qi = q + (size_t)i * H * hd + (size_t)head * hd;
        double mx = -INFINITY, sum = 0;
        for (int p = 0; p <= i; p++) {
            to_f32(kv_type(c->kv), kv_at(c->kv, kb, table, p, kh, hd), krow, hd);
            double s = 0;
            for (int e = 0; e < hd; e++) s += (double)qi[e] * krow[e];
            sc[p] = s * scale;
            if (sc[p] > mx) mx = sc[p];
        }
        for (int p = 0; p <= i; p++) sum += (sc[p] = exp(sc[p] - mx));
        for (int p = 0; p <= i; p++) weights[off + (size_t)p] = (float)(sc[p] / sum);
        off += (size_t)i + 1;
    }
    free(krow);
    free(sc);
}

void fwd_cache_v(const struct fwd_ctx *c, int layer, int pos, int kv_head, float *out)
{
    const int hd = c->m->hp.head_dim;
    to_f32(kv_type(c->kv), kv_at(c->kv, kv_v_base(c->kv, layer), kv_seq_block_table(c->seq), pos, kv_head, hd), out,
           hd);
}

/* ---- one step -------------------------------------------------------------------------------- */

/* Checks every sequence's share of a step; *T and *n_rows get the token and logit-row counts. */
static attnd_status check_step(const struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, int *T,
                               size_t *n_rows)
{
    const int n_vocab = c->m->hp.n_vocab;
    *T = 0;
    *n_rows = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (seqs[i].n <= 0 || seqs[i].n > c->n_batch - *T) return ATTND_ERR_INVALID;
        if ((size_t)seqs[i].n > kv_seq_len(seqs[i].kv)) return ATTND_ERR_INVALID;
        if (seqs[i].n_draft < 0 || seqs[i].n_draft >= seqs[i].n) return ATTND_ERR_INVALID;
        for (int t = 0; t < seqs[i].n; t++)
            if (seqs[i].tokens[t] < 0 || seqs[i].tokens[t] >= n_vocab) return ATTND_ERR_INVALID;
        *T += seqs[i].n;
        if (seqs[i].logits) *n_rows += seqs[i].all_logits ? (size_t)seqs[i].n : 1;
    }
    return *T == 0 ? ATTND_ERR_INVALID : ATTND_OK;
}

attnd_status fwd_eval_batch(struct fwd_ctx *c, struct kv_cache *kv, const struct fwd_seq *seqs, int n_seqs)
{
    int T;
    size_t n_rows;
    attnd_status st = check_step(c, seqs, n_seqs, &T, &n_rows);
    if (st) return st;
    for (int i = 0, t = 0; i < n_seqs; i++) {
        const int pos0 = (int)kv_seq_len(seqs[i].kv) - seqs[i].n;
        for (int k = 0; k < seqs[i].n; k++, t++) c->pos[t] = pos0 + k;
    }
    const struct fwd_step step = {.kv = kv, .seqs = seqs, .n_seqs = n_seqs, .n_tokens = T, .pos = c->pos,
                                  .n_logit_rows = n_rows, .probe = &c->probe};
    return c->ops->eval_batch(c->be, &step);
}

void fwd_project(struct fwd_ctx *c, const float *x, int n, float *logits) { c->ops->project(c->be, x, n, logits); }

attnd_status fwd_eval(struct fwd_ctx *c, const int32_t *tokens, int n, bool all_logits, float *logits)
{
    if (!c->kv || n <= 0) return ATTND_ERR_INVALID;
    size_t cached;
    if (!c->seq && kv_seq_create(c->kv, NULL, 0, (size_t)c->n_ctx, &c->seq, &cached)) return ATTND_ERR_NOMEM;
    if (n > c->n_ctx - fwd_n_past(c)) return ATTND_ERR_RANGE;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->hp.n_vocab) return ATTND_ERR_INVALID;
    size_t V = (size_t)c->m->hp.n_vocab;
    for (int done = 0; done < n;) {
        int T = n - done < c->n_batch ? n - done : c->n_batch;
        bool last = done + T == n;
        struct fwd_seq fs = {.kv = c->seq, .tokens = tokens + done, .n = T, .all_logits = all_logits};
        if (logits && all_logits) fs.logits = logits + (size_t)done * V;
        else if (logits && last) fs.logits = logits;
        attnd_status st = kv_seq_append(c->seq, tokens + done, (size_t)T);
        if (st) return st == ATTND_ERR_NOMEM ? ATTND_ERR_RANGE : st;
        if ((st = fwd_eval_batch(c, c->kv, &fs, 1))) return st;
        done += T;
    }
    return ATTND_OK;
}
