/* forward.c - the llama/qwen2 transformer forward pass on the CPU.
 *
 * One step evaluates T tokens drawn from one or more sequences (prompt chunks and decode
 * tokens mixed):
 *   1. x = token_embd[tokens]                                  // (T, d)
 *   2. per layer:
 *        h = RMSNorm(x) * attn_norm
 *        q, k, v = h·Wqᵀ(+bq), h·Wkᵀ(+bk), h·Wvᵀ(+bv)          // (T, H*hd) (T, Hkv*hd) x2
 *        RoPE(q, k) at each token's position in its sequence
 *        k, v -> the paged KV cache (each sequence's block table)
 *        a = causal GQA FlashAttention-2 of q over each sequence's cache   // (T, H*hd)
 *        x += a·Woᵀ
 *        h = RMSNorm(x) * ffn_norm
 *        x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
 *   3. logits = RMSNorm(x) * output_norm · Woutᵀ for the rows asked for   // (rows, V)
 * The matrix products read each weight once per step for all T tokens; products and attention
 * are split over the thread pool.
 */
#include "attnd/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/check.h"
#include "attnd/kvcache.h"
#include "attnd/log.h"
#include "server/engine/forward_vk.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fa2.h"
#include "kernels/cpu/threadpool.h"

struct fwd_ctx {
    const struct model *m;
    struct tpool *pool;
    int n_batch;
    /* private cache and sequence (fwd_eval); NULL when created with n_ctx = -1 */
    struct kv_cache *kv;
    struct kv_seq *seq;
    int n_ctx;
    /* scratch, sized for n_batch tokens */
    float *x;      /* (B, d) residual stream */
    float *h;      /* (B, max(d, nq)) normed input */
    float *q;      /* (B, nq) */
    float *k;      /* (B, nkv) */
    float *v;      /* (B, nkv) */
    float *att;    /* (B, nq) attention output */
    float *gate;   /* (B, ff) */
    float *up;     /* (B, ff) */
    void *prep;    /* (B, prepared row of max(d, ff, nq)) */
    size_t prep_row_max;
    int32_t *pos;  /* (B) position of each token in its sequence */
    struct fa2_seq *fseqs; /* (B) at most one per token */
    float *fa2_scratch;
    size_t fa2_scratch_n;
    float *logits; /* (logit_rows, V) gathered logits of a multi-sequence step */
    size_t logit_rows;
    double *rope_inv_freq; /* (n_rot / 2) */
    /* attention probe */
    int probe_layer;
    float *probe_q, *probe_att;
    int resid_pos;     /* residual-stream probe: position, or -1 */
    float *resid_out;
    struct vkf *vk;    /* the Vulkan backend, or NULL: the CPU kernels */
    char device[96];   /* "cpu (avx2)" */
};

static _Thread_local char g_backend_err[320];

const char *fwd_backend_error(void) { return g_backend_err; }
const char *fwd_backend_name(const struct fwd_ctx *c) { return c->vk ? "vulkan" : "cpu"; }
const char *fwd_device_name(const struct fwd_ctx *c) { return c->vk ? vkf_device_name(c->vk) : c->device; }
unsigned fwd_validation_errors(const struct fwd_ctx *c) { return c->vk ? vkf_validation_errors(c->vk) : 0; }

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

static size_t kv_width(const struct model *m) { return (size_t)m->hp.n_head_kv * m->hp.head_dim; }

void fwd_destroy(struct fwd_ctx *c)
{
    if (!c) return;
    vkf_destroy(c->vk);
    tpool_destroy(c->pool);
    kv_seq_destroy(c->seq);
    kv_destroy(c->kv);
    free(c->x);
    free(c->h);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->gate);
    free(c->up);
    free(c->prep);
    free(c->pos);
    free(c->fseqs);
    free(c->fa2_scratch);
    free(c->logits);
    free(c->rope_inv_freq);
    free(c);
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

attnd_status fwd_create(const struct model *m, const struct fwd_opts *opts, struct fwd_ctx **out)
{
    *out = NULL;
    struct fwd_opts o = opts ? *opts : (struct fwd_opts){0};
    const struct model_hparams *hp = &m->hp;
    g_backend_err[0] = 0;
    if (o.n_ctx < -1 || o.n_threads < 0 || o.n_batch < 0 || o.n_threads > 256 || o.n_ctx > (1 << 22) ||
        o.n_batch > (1 << 16) || (o.kv_type != TENSOR_F32 && o.kv_type != TENSOR_F16) ||
        (unsigned)o.backend > FWD_BACKEND_VULKAN || o.vk_device < 0 || o.vk_device > 64)
        return ATTND_ERR_INVALID;
    if (o.n_ctx == 0) o.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (o.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.n_threads = n > 0 && n < 256 ? (int)n : 1;
    }
    if (o.n_batch == 0) o.n_batch = 256;
    if (o.n_ctx > 0 && o.n_batch > o.n_ctx) o.n_batch = o.n_ctx;
    cpu_kernels_init();

    struct fwd_ctx *c = calloc(1, sizeof *c);
    if (!c) return ATTND_ERR_NOMEM;
    c->m = m;
    c->probe_layer = -1;
    c->resid_pos = -1;
    c->n_batch = o.n_batch;
    c->n_ctx = o.n_ctx > 0 ? o.n_ctx : 0;
    attnd_status st = tpool_create(o.n_threads, &c->pool);
    if (st) goto fail;
    if (o.n_ctx > 0) {
        struct kv_opts ko = kv_opts_default(hp->n_layer, hp->n_head_kv, hp->head_dim,
                                            kv_blocks_for_tokens((size_t)o.n_ctx));
        ko.type = o.kv_type;
        if ((st = kv_create(&ko, &c->kv))) goto fail;
        size_t cached;
        if ((st = kv_seq_create(c->kv, NULL, 0, (size_t)o.n_ctx, &c->seq, &cached))) goto fail;
    }
    size_t B = (size_t)o.n_batch, d = (size_t)hp->n_embd, nq = (size_t)hp->n_head * hp->head_dim,
           nkv = kv_width(m), ff = (size_t)hp->n_ff;
    c->x = malloc(B * d * sizeof(float));
    c->h = malloc(B * (d > nq ? d : nq) * sizeof(float));
    c->q = malloc(B * nq * sizeof(float));
    c->k = malloc(B * nkv * sizeof(float));
    c->v = malloc(B * nkv * sizeof(float));
    c->att = malloc(B * nq * sizeof(float));
    c->gate = malloc(B * ff * sizeof(float));
    c->up = malloc(B * ff * sizeof(float));
    /* a prepared row is at most 4 bytes per element (f32) */
    c->prep_row_max = max3(d, ff, nq) * sizeof(float);
    c->prep = malloc(B * c->prep_row_max);
    c->pos = malloc(B * sizeof *c->pos);
    c->fseqs = malloc(B * sizeof *c->fseqs);
    c->rope_inv_freq = malloc((size_t)(hp->n_rot / 2 + 1) * sizeof(double));
    if (!c->x || !c->h || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->prep || !c->pos ||
        !c->fseqs || !c->rope_inv_freq) {
        st = ATTND_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < hp->n_rot / 2; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (m->rope_freqs) f /= m->rope_freqs[i];
        c->rope_inv_freq[i] = f;
    }
    snprintf(c->device, sizeof c->device, "cpu (%s)", cpu_isa_name(cpu_kernels_init()));
    if (o.backend != FWD_BACKEND_CPU) {
        const int dev = o.vk_device - 1; /* -1: the best device */
        char why[256];
        st = vkf_create(m, dev, o.n_batch, c->rope_inv_freq, o.backend == FWD_BACKEND_AUTO, &c->vk, why, sizeof why);
        if (st) {
            snprintf(g_backend_err, sizeof g_backend_err, "%s", why);
            if (o.backend == FWD_BACKEND_VULKAN) goto fail;
            log_info("backend auto: using the CPU kernels (%s)", why);
            st = ATTND_OK;
        }
    }
    *out = c;
    return ATTND_OK;
fail:
    fwd_destroy(c);
    return st;
}

int fwd_n_past(const struct fwd_ctx *c) { return c->seq ? (int)kv_seq_len(c->seq) : 0; }
int fwd_n_ctx(const struct fwd_ctx *c) { return c->n_ctx; }
int fwd_n_threads(const struct fwd_ctx *c) { return tpool_size(c->pool); }
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
    c->probe_layer = layer;
    c->probe_q = layer >= 0 ? q_out : NULL;
    c->probe_att = layer >= 0 ? att_out : NULL;
}

void fwd_set_resid_probe(struct fwd_ctx *c, int pos, float *out)
{
    c->resid_pos = out ? pos : -1;
    c->resid_out = out;
}

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

/* ---- parallel pieces -------------------------------------------------------------------- */

/* Splits [0, n) into nth nearly equal parts, aligned to `align` items. */
static void split(size_t n, size_t align, int ith, int nth, size_t *lo, size_t *hi)
{
    size_t chunks = (n + align - 1) / align;
    size_t per = chunks / (size_t)nth, rem = chunks % (size_t)nth;
    size_t a = (size_t)ith * per + ((size_t)ith < rem ? (size_t)ith : rem);
    size_t b = a + per + ((size_t)ith < rem ? 1 : 0);
    *lo = a * align < n ? a * align : n;
    *hi = b * align < n ? b * align : n;
}

struct prep_job {
    enum tensor_type wtype;
    const float *x;
    size_t n_in, n_tok, row_bytes;
    void *dst;
};

static void prep_run(void *arg, int ith, int nth)
{
    struct prep_job *j = arg;
    size_t lo, hi;
    split(j->n_tok, 1, ith, nth, &lo, &hi);
    for (size_t t = lo; t < hi; t++)
        cpu_prepare_row(j->wtype, j->x + t * j->n_in, (char *)j->dst + t * j->row_bytes, j->n_in);
}

/* Prepares n_tok rows of x (n_in wide) for weights of type wtype; returns the row stride. */
static size_t prepare(struct fwd_ctx *c, enum tensor_type wtype, const float *x, size_t n_in, size_t n_tok)
{
    uint64_t rb = 0;
    tensor_nbytes(cpu_vec_dot_type(wtype), n_in, &rb);
    ATTND_CHECK(rb > 0 && rb <= c->prep_row_max);
    struct prep_job j = {wtype, x, n_in, n_tok, (size_t)rb, c->prep};
    if (n_tok >= 4) tpool_run(c->pool, prep_run, &j);
    else prep_run(&j, 0, 1);
    return (size_t)rb;
}

/* Up to 3 matrices that read the same prepared activations (Q/K/V, gate/up) in one pool job:
 * each thread takes its share of every matrix's rows, so a step waits at one barrier instead of
 * one per matrix, and the small K/V products are split too. swiglu (gate, up): each thread then
 * applies y0 = silu(y0) * y1 to the rows it computed of both. */
#define MM_MAX 3
struct mm_job {
    int n;
    const struct model_weight *w[MM_MAX];
    float *y[MM_MAX];
    const float *bias[MM_MAX];
    const void *a;
    size_t a_row_bytes, n_tok;
    int swiglu;
};

static float silu(float x) { return x / (1.0f + expf(-x)); }

static void mm_run(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    for (int i = 0; i < j->n; i++) {
        const struct model_weight *w = j->w[i];
        size_t r0, r1;
        split(w->n_out, 16, ith, nth, &r0, &r1);
        if (r0 >= r1) continue;
        cpu_gemm(w->type, w->n_in, w->data, w->row_bytes, r0, r1, j->a, j->a_row_bytes, j->n_tok, j->y[i], w->n_out);
        if (j->bias[i])
            for (size_t t = 0; t < j->n_tok; t++)
                for (size_t r = r0; r < r1; r++) j->y[i][t * w->n_out + r] += j->bias[i][r];
    }
    if (j->swiglu) {
        const size_t n_out = j->w[0]->n_out;
        size_t r0, r1;
        split(n_out, 16, ith, nth, &r0, &r1);
        for (size_t t = 0; t < j->n_tok; t++) {
            float *g = j->y[0] + t * n_out;
            const float *u = j->y[1] + t * n_out;
            for (size_t r = r0; r < r1; r++) g[r] = silu(g[r]) * u[r];
        }
    }
}

/* y[i] (n_tok, w[i]->n_out) = prepared activations · w[i]ᵀ (+ bias[i]) for i < n; see mm_job. */
static void matmul_prepared_n(struct fwd_ctx *c, int n, const struct model_weight *const *w, size_t row_bytes,
                              size_t n_tok, float *const *y, const float *const *bias, int swiglu)
{
    ATTND_CHECK(n >= 1 && n <= MM_MAX && (!swiglu || (n == 2 && w[0]->n_out == w[1]->n_out)));
    struct mm_job j = {.n = n, .a = c->prep, .a_row_bytes = row_bytes, .n_tok = n_tok, .swiglu = swiglu};
    uint64_t macs = 0;
    for (int i = 0; i < n; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.bias[i] = bias ? bias[i] : NULL;
        macs += (uint64_t)w[i]->n_in * w[i]->n_out * n_tok;
    }
    /* below ~256K multiply-adds, waking the workers costs more than it saves */
    if (macs < (1u << 18)) mm_run(&j, 0, 1);
    else tpool_run(c->pool, mm_run, &j);
}

/* y (n_tok, n_out) = prepared activations · Wᵀ (+ bias). */
static void matmul_prepared(struct fwd_ctx *c, const struct model_weight *w, size_t row_bytes, size_t n_tok, float *y,
                            const float *bias)
{
    matmul_prepared_n(c, 1, &w, row_bytes, n_tok, &y, &bias, 0);
}

static void matmul(struct fwd_ctx *c, const struct model_weight *w, const float *x, size_t n_tok, float *y,
                   const float *bias)
{
    size_t rb = prepare(c, w->type, x, w->n_in, n_tok);
    matmul_prepared(c, w, rb, n_tok, y, bias);
}

static void rmsnorm(float *out, const float *x, const float *w, size_t n, float eps)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (size_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* Rotates the first n_rot dims of each of n_heads vectors (head_dim apart) at position pos. */
static void rope(const struct fwd_ctx *c, float *v, int n_heads, int pos)
{
    const struct model_hparams *hp = &c->m->hp;
    int half = hp->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)pos * c->rope_inv_freq[i];
        float cs = (float)cos(th), sn = (float)sin(th);
        for (int h = 0; h < n_heads; h++) {
            float *p = v + (size_t)h * hp->head_dim;
            int a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + half : 2 * i + 1;
            float x0 = p[a], x1 = p[b];
            p[a] = x0 * cs - x1 * sn;
            p[b] = x0 * sn + x1 * cs;
        }
    }
}

/* ---- one step ------------------------------------------------------------------------------ */

attnd_status fwd_eval_batch(struct fwd_ctx *c, struct kv_cache *kv, const struct fwd_seq *seqs, int n_seqs)
{
    const struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    const size_t d = (size_t)hp->n_embd, nq = (size_t)hp->n_head * hp->head_dim, nkv = kv_width(m),
                 ff = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    int T = 0;
    size_t n_rows = 0; /* logit rows */
    for (int i = 0; i < n_seqs; i++) {
        if (seqs[i].n <= 0 || seqs[i].n > c->n_batch - T) return ATTND_ERR_INVALID;
        if ((size_t)seqs[i].n > kv_seq_len(seqs[i].kv)) return ATTND_ERR_INVALID;
        for (int t = 0; t < seqs[i].n; t++)
            if (seqs[i].tokens[t] < 0 || seqs[i].tokens[t] >= hp->n_vocab) return ATTND_ERR_INVALID;
        T += seqs[i].n;
        if (seqs[i].logits) n_rows += seqs[i].all_logits ? (size_t)seqs[i].n : 1;
    }
    if (T == 0) return ATTND_ERR_INVALID;

    /* 1. embeddings, positions, attention work list */
    for (int i = 0, t = 0; i < n_seqs; i++) {
        int pos0 = (int)kv_seq_len(seqs[i].kv) - seqs[i].n;
        c->fseqs[i] = (struct fa2_seq){.q = c->q + (size_t)t * nq, .out = c->att + (size_t)t * nq, .n_q = seqs[i].n,
                                       .pos0 = pos0, .block_table = kv_seq_block_table(seqs[i].kv)};
        for (int k = 0; k < seqs[i].n; k++, t++) {
            c->pos[t] = pos0 + k;
            const struct model_weight *e = &m->tok_embd;
            if (!c->vk)
                cpu_dequant_row(e->type, (const char *)e->data + (size_t)seqs[i].tokens[k] * e->row_bytes,
                            c->x + (size_t)t * d, d);
        }
    }
    if (c->vk) {
        const struct vkf_probe pr = {.layer = c->probe_layer, .q = c->probe_q, .att = c->probe_att,
                                     .resid_pos = c->resid_pos, .resid = c->resid_out};
        return vkf_eval_batch(c->vk, kv, seqs, n_seqs, T, c->pos, &pr);
    }
    struct fa2_args fa = {.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                          .kv_type = kv_type(kv), .block_stride = kv_block_stride(kv),
                          .n_blocks = (int)kv_n_blocks(kv), .scale = 1.0f / sqrtf((float)hp->head_dim),
                          .seqs = c->fseqs, .n_seqs = n_seqs};
    int n_decode = 0;
    for (int i = 0; i < n_seqs; i++) n_decode += seqs[i].n == 1;
    int nth = tpool_size(c->pool);
    fa.n_split = n_decode ? (nth + n_decode * hp->n_head_kv - 1) / (n_decode * hp->n_head_kv) : 1;
    if (fa.n_split < 1) fa.n_split = 1;
    size_t need = fa2_scratch_floats(&fa);
    if (need > c->fa2_scratch_n) {
        float *ns = realloc(c->fa2_scratch, need * sizeof(float));
        if (!ns) return ATTND_ERR_NOMEM;
        c->fa2_scratch = ns;
        c->fa2_scratch_n = need;
    }
    fa.scratch = c->fa2_scratch;
    if (n_seqs > 1 && n_rows) {
        if (n_rows > c->logit_rows) {
            float *nl = realloc(c->logits, n_rows * V * sizeof(float));
            if (!nl) return ATTND_ERR_NOMEM;
            c->logits = nl;
            c->logit_rows = n_rows;
        }
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        /* 2a. attention */
        for (int t = 0; t < T; t++) rmsnorm(c->h + (size_t)t * d, c->x + (size_t)t * d, L->attn_norm, d, hp->rms_eps);
        if (L->wq.type == L->wk.type && L->wq.type == L->wv.type) {
            size_t rb = prepare(c, L->wq.type, c->h, d, (size_t)T);
            const struct model_weight *w[3] = {&L->wq, &L->wk, &L->wv};
            float *y[3] = {c->q, c->k, c->v};
            const float *b[3] = {L->bq, L->bk, L->bv};
            matmul_prepared_n(c, 3, w, rb, (size_t)T, y, b, 0);
        } else {
            matmul(c, &L->wq, c->h, (size_t)T, c->q, L->bq);
            matmul(c, &L->wk, c->h, (size_t)T, c->k, L->bk);
            matmul(c, &L->wv, c->h, (size_t)T, c->v, L->bv);
        }
        for (int i = 0, t = 0; i < n_seqs; i++)
            for (int k = 0; k < seqs[i].n; k++, t++) {
                rope(c, c->q + (size_t)t * nq, hp->n_head, c->pos[t]);
                rope(c, c->k + (size_t)t * nkv, hp->n_head_kv, c->pos[t]);
                kv_write(seqs[i].kv, l, (size_t)c->pos[t], c->k + (size_t)t * nkv, c->v + (size_t)t * nkv);
                if (c->probe_q && l == c->probe_layer)
                    memcpy(c->probe_q + (size_t)c->pos[t] * nq, c->q + (size_t)t * nq, nq * sizeof(float));
            }
        fa.k = kv_k_base(kv, l);
        fa.v = kv_v_base(kv, l);
        fa2_attend(c->pool, &fa);
        if (c->probe_att && l == c->probe_layer)
            for (int t = 0; t < T; t++)
                memcpy(c->probe_att + (size_t)c->pos[t] * nq, c->att + (size_t)t * nq, nq * sizeof(float));
        matmul(c, &L->wo, c->att, (size_t)T, c->h, NULL);
        for (size_t i = 0; i < (size_t)T * d; i++) c->x[i] += c->h[i];

        /* 2b. MLP */
        for (int t = 0; t < T; t++) rmsnorm(c->h + (size_t)t * d, c->x + (size_t)t * d, L->ffn_norm, d, hp->rms_eps);
        if (L->w_gate.type == L->w_up.type) { /* gate, up and the SwiGLU in one pool job */
            size_t rb = prepare(c, L->w_gate.type, c->h, d, (size_t)T);
            const struct model_weight *w[2] = {&L->w_gate, &L->w_up};
            float *y[2] = {c->gate, c->up};
            matmul_prepared_n(c, 2, w, rb, (size_t)T, y, NULL, 1);
        } else {
            matmul(c, &L->w_gate, c->h, (size_t)T, c->gate, NULL);
            matmul(c, &L->w_up, c->h, (size_t)T, c->up, NULL);
            for (size_t i = 0; i < (size_t)T * ff; i++) c->gate[i] = silu(c->gate[i]) * c->up[i];
        }
        matmul(c, &L->w_down, c->gate, (size_t)T, c->h, NULL);
        for (size_t i = 0; i < (size_t)T * d; i++) c->x[i] += c->h[i];
        if (c->resid_out)
            for (int t = 0; t < T; t++)
                if (c->pos[t] == c->resid_pos) memcpy(c->resid_out + (size_t)l * d, c->x + (size_t)t * d, d * sizeof(float));
    }

    /* 3. logits: gather the rows asked for, one product for all of them */
    if (n_rows) {
        size_t r = 0;
        for (int i = 0, t = 0; i < n_seqs; t += seqs[i].n, i++) {
            if (!seqs[i].logits) continue;
            int first = seqs[i].all_logits ? 0 : seqs[i].n - 1;
            for (int k = first; k < seqs[i].n; k++, r++)
                rmsnorm(c->h + r * d, c->x + (size_t)(t + k) * d, m->output_norm, d, hp->rms_eps);
        }
        /* one sequence: straight into its buffer; several: into scratch, then copied out */
        float *dst = (n_seqs == 1) ? NULL : c->logits;
        for (int i = 0; i < n_seqs && !dst; i++)
            if (seqs[i].logits) dst = seqs[i].logits;
        matmul(c, &m->output, c->h, n_rows, dst, NULL);
        if (dst == c->logits) {
            r = 0;
            for (int i = 0; i < n_seqs; i++) {
                if (!seqs[i].logits) continue;
                size_t rows = seqs[i].all_logits ? (size_t)seqs[i].n : 1;
                memcpy(seqs[i].logits, c->logits + r * V, rows * V * sizeof(float));
                r += rows;
            }
        }
    }
    for (int i = 0; i < n_seqs; i++) kv_seq_commit(seqs[i].kv, kv_seq_len(seqs[i].kv));
    return ATTND_OK;
}

void fwd_project(struct fwd_ctx *c, const float *x, int n, float *logits)
{
    const struct model *m = c->m;
    const size_t d = (size_t)m->hp.n_embd, V = (size_t)m->hp.n_vocab;
    for (int done = 0; done < n;) {
        int k = n - done < c->n_batch ? n - done : c->n_batch;
        for (int r = 0; r < k; r++)
            rmsnorm(c->h + (size_t)r * d, x + (size_t)(done + r) * d, m->output_norm, d, m->hp.rms_eps);
        matmul(c, &m->output, c->h, (size_t)k, logits + (size_t)done * V, NULL);
        done += k;
    }
}

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
