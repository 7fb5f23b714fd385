/* forward.c - the llama/qwen2 transformer forward pass on the CPU.
 *
 * One call evaluates a batch of T consecutive tokens of one sequence:
 *   1. x = token_embd[tokens]                                  // (T, d)
 *   2. per layer:
 *        h = RMSNorm(x) * attn_norm
 *        q, k, v = h·Wqᵀ(+bq), h·Wkᵀ(+bk), h·Wvᵀ(+bv)          // (T, H*hd) (T, Hkv*hd) x2
 *        RoPE(q, k) at positions n_past..n_past+T-1
 *        cache[k, v] at those positions
 *        a = causal GQA attention of q over the cache           // (T, H*hd)
 *        x += a·Woᵀ
 *        h = RMSNorm(x) * ffn_norm
 *        x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
 *   3. logits = RMSNorm(x) * output_norm · Woutᵀ                // (T or 1, V)
 * Matrix products and attention are split over the thread pool.
 */
#include "attnd/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/threadpool.h"

struct fwd_ctx {
    const struct model *m;
    struct tpool *pool;
    int n_ctx, n_batch, n_past;
    /* KV cache, f32: (layer, n_ctx, n_head_kv * head_dim) */
    float *k_cache, *v_cache;
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
    float *scores; /* (n_threads, n_ctx) attention scores per thread */
    double *rope_inv_freq; /* (n_rot / 2) */
    /* attention probe */
    int probe_layer;
    float *probe_q, *probe_att;
};

static size_t kv_width(const struct model *m) { return (size_t)m->hp.n_head_kv * m->hp.head_dim; }

void fwd_destroy(struct fwd_ctx *c)
{
    if (!c) return;
    tpool_destroy(c->pool);
    free(c->k_cache);
    free(c->v_cache);
    free(c->x);
    free(c->h);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->gate);
    free(c->up);
    free(c->prep);
    free(c->scores);
    free(c->rope_inv_freq);
    free(c);
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

attnd_status fwd_create(const struct model *m, const struct fwd_opts *opts, struct fwd_ctx **out)
{
    *out = NULL;
    struct fwd_opts o = opts ? *opts : (struct fwd_opts){0};
    const struct model_hparams *hp = &m->hp;
    if (o.n_ctx < 0 || o.n_threads < 0 || o.n_batch < 0 || o.n_threads > 256 || o.n_ctx > (1 << 22))
        return ATTND_ERR_INVALID;
    if (o.n_ctx == 0) o.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (o.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.n_threads = n > 0 && n < 256 ? (int)n : 1;
    }
    if (o.n_batch == 0) o.n_batch = 256;
    if (o.n_batch > o.n_ctx) o.n_batch = o.n_ctx;
    cpu_kernels_init();

    struct fwd_ctx *c = calloc(1, sizeof *c);
    if (!c) return ATTND_ERR_NOMEM;
    c->m = m;
    c->probe_layer = -1;
    c->n_ctx = o.n_ctx;
    c->n_batch = o.n_batch;
    attnd_status st = tpool_create(o.n_threads, &c->pool);
    if (st) goto fail;
    size_t B = (size_t)o.n_batch, d = (size_t)hp->n_embd, nq = (size_t)hp->n_head * hp->head_dim,
           nkv = kv_width(m), ff = (size_t)hp->n_ff;
    size_t cache = (size_t)hp->n_layer * (size_t)o.n_ctx * nkv;
    c->k_cache = calloc(cache, sizeof(float));
    c->v_cache = calloc(cache, sizeof(float));
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
    c->scores = malloc((size_t)o.n_threads * (size_t)o.n_ctx * sizeof(float));
    c->rope_inv_freq = malloc((size_t)(hp->n_rot / 2 + 1) * sizeof(double));
    if (!c->k_cache || !c->v_cache || !c->x || !c->h || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up ||
        !c->prep || !c->scores || !c->rope_inv_freq) {
        st = ATTND_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < hp->n_rot / 2; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (m->rope_freqs) f /= m->rope_freqs[i];
        c->rope_inv_freq[i] = f;
    }
    *out = c;
    return ATTND_OK;
fail:
    fwd_destroy(c);
    return st;
}

int fwd_n_past(const struct fwd_ctx *c) { return c->n_past; }
int fwd_n_ctx(const struct fwd_ctx *c) { return c->n_ctx; }
int fwd_n_threads(const struct fwd_ctx *c) { return tpool_size(c->pool); }

void fwd_truncate(struct fwd_ctx *c, int n_past)
{
    if (n_past >= 0 && n_past < c->n_past) c->n_past = n_past;
}

void fwd_set_probe(struct fwd_ctx *c, int layer, float *q_out, float *att_out)
{
    c->probe_layer = layer;
    c->probe_q = layer >= 0 ? q_out : NULL;
    c->probe_att = layer >= 0 ? att_out : NULL;
}

const float *fwd_cache_k(const struct fwd_ctx *c, int layer, int pos, int kv_head)
{
    size_t w = kv_width(c->m);
    return c->k_cache + ((size_t)layer * c->n_ctx + (size_t)pos) * w + (size_t)kv_head * c->m->hp.head_dim;
}

const float *fwd_cache_v(const struct fwd_ctx *c, int layer, int pos, int kv_head)
{
    size_t w = kv_width(c->m);
    return c->v_cache + ((size_t)layer * c->n_ctx + (size_t)pos) * w + (size_t)kv_head * c->m->hp.head_dim;
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

struct mm_job {
    const struct model_weight *w;
    const void *a;
    size_t a_row_bytes, n_tok;
    float *y;
    const float *bias;
};

static void mm_run(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    size_t r0, r1;
    split(j->w->n_out, 16, ith, nth, &r0, &r1);
    if (r0 >= r1) return;
    cpu_gemm(j->w->type, j->w->n_in, j->w->data, j->w->row_bytes, r0, r1, j->a, j->a_row_bytes, j->n_tok, j->y,
             j->w->n_out);
    if (j->bias)
        for (size_t t = 0; t < j->n_tok; t++)
            for (size_t r = r0; r < r1; r++) j->y[t * j->w->n_out + r] += j->bias[r];
}

/* y (n_tok, n_out) = prepared activations · Wᵀ (+ bias). */
static void matmul_prepared(struct fwd_ctx *c, const struct model_weight *w, size_t row_bytes, size_t n_tok, float *y,
                            const float *bias)
{
    struct mm_job j = {w, c->prep, row_bytes, n_tok, y, bias};
    tpool_run(c->pool, mm_run, &j);
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

struct attn_job {
    struct fwd_ctx *c;
    int layer, n_tok;
};

/* Softmax weights of one query over keys 0..n_keys-1 of KV head kh: w[p] = softmax(q·k_p·scale).
 * The one place these numbers are computed, for the forward pass and for /attention alike. */
static void attn_weights(const float *q, const float *kl, size_t kvw, int kh, int hd, int n_keys, float scale,
                         float *w)
{
    float mx = -INFINITY;
    for (int p = 0; p < n_keys; p++) {
        const float *k = kl + (size_t)p * kvw + (size_t)kh * hd;
        float s = 0;
        for (int i = 0; i < hd; i++) s += q[i] * k[i];
        s *= scale;
        w[p] = s;
        if (s > mx) mx = s;
    }
    double sum = 0;
    for (int p = 0; p < n_keys; p++) {
        w[p] = expf(w[p] - mx);
        sum += w[p];
    }
    float inv = (float)(1.0 / sum);
    for (int p = 0; p < n_keys; p++) w[p] *= inv;
}

/* Causal GQA attention for every (token, query head) pair of the batch. */
static void attn_run(void *arg, int ith, int nth)
{
    struct attn_job *j = arg;
    struct fwd_ctx *c = j->c;
    const struct model_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim, H = hp->n_head, group = hp->n_head / hp->n_head_kv;
    const size_t kvw = kv_width(c->m);
    const float scale = 1.0f / sqrtf((float)hd);
    float *sc = c->scores + (size_t)ith * c->n_ctx;
    const float *kl = c->k_cache + (size_t)j->layer * c->n_ctx * kvw;
    const float *vl = c->v_cache + (size_t)j->layer * c->n_ctx * kvw;
    size_t lo, hi;
    split((size_t)j->n_tok * H, 1, ith, nth, &lo, &hi);
    for (size_t w = lo; w < hi; w++) {
        int t = (int)(w / H), h = (int)(w % H), kh = h / group;
        int n_keys = c->n_past + t + 1;
        const float *q = c->q + (size_t)t * H * hd + (size_t)h * hd;
        attn_weights(q, kl, kvw, kh, hd, n_keys, scale, sc);
        float *o = c->att + (size_t)t * H * hd + (size_t)h * hd;
        for (int i = 0; i < hd; i++) o[i] = 0;
        for (int p = 0; p < n_keys; p++) {
            const float *v = vl + (size_t)p * kvw + (size_t)kh * hd;
            float wgt = sc[p];
            for (int i = 0; i < hd; i++) o[i] += wgt * v[i];
        }
    }
}

void fwd_attention_weights(const struct fwd_ctx *c, int layer, int head, const float *q, int n, float *weights)
{
    const struct model_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim, H = hp->n_head, kh = head / (hp->n_head / hp->n_head_kv);
    const size_t kvw = kv_width(c->m);
    const float *kl = c->k_cache + (size_t)layer * c->n_ctx * kvw;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        attn_weights(q + (size_t)i * H * hd + (size_t)head * hd, kl, kvw, kh, hd, i + 1, 1.0f / sqrtf((float)hd),
                     weights + off);
        off += (size_t)i + 1;
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* Runs one chunk of at most n_batch tokens. */
static void eval_chunk(struct fwd_ctx *c, const int32_t *tokens, int T, bool all_logits, float *logits)
{
    const struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    const size_t d = (size_t)hp->n_embd, hd = (size_t)hp->head_dim, nq = (size_t)hp->n_head * hd,
                 nkv = kv_width(m), ff = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;

    /* 1. embeddings */
    for (int t = 0; t < T; t++)
        cpu_dequant_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes,
                        c->x + (size_t)t * d, d);

    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        /* 2a. attention */
        for (int t = 0; t < T; t++) rmsnorm(c->h + (size_t)t * d, c->x + (size_t)t * d, L->attn_norm, d, hp->rms_eps);
        if (L->wq.type == L->wk.type && L->wq.type == L->wv.type) {
            size_t rb = prepare(c, L->wq.type, c->h, d, (size_t)T);
            matmul_prepared(c, &L->wq, rb, (size_t)T, c->q, L->bq);
            matmul_prepared(c, &L->wk, rb, (size_t)T, c->k, L->bk);
            matmul_prepared(c, &L->wv, rb, (size_t)T, c->v, L->bv);
        } else {
            matmul(c, &L->wq, c->h, (size_t)T, c->q, L->bq);
            matmul(c, &L->wk, c->h, (size_t)T, c->k, L->bk);
            matmul(c, &L->wv, c->h, (size_t)T, c->v, L->bv);
        }
        for (int t = 0; t < T; t++) {
            int pos = c->n_past + t;
            rope(c, c->q + (size_t)t * nq, hp->n_head, pos);
            rope(c, c->k + (size_t)t * nkv, hp->n_head_kv, pos);
            size_t off = ((size_t)l * c->n_ctx + (size_t)pos) * nkv;
            memcpy(c->k_cache + off, c->k + (size_t)t * nkv, nkv * sizeof(float));
            memcpy(c->v_cache + off, c->v + (size_t)t * nkv, nkv * sizeof(float));
            if (c->probe_q && l == c->probe_layer)
                memcpy(c->probe_q + (size_t)pos * nq, c->q + (size_t)t * nq, nq * sizeof(float));
        }
        struct attn_job aj = {c, l, T};
        tpool_run(c->pool, attn_run, &aj);
        if (c->probe_att && l == c->probe_layer)
            memcpy(c->probe_att + (size_t)c->n_past * nq, c->att, (size_t)T * nq * sizeof(float));
        matmul(c, &L->wo, c->att, (size_t)T, c->h, NULL);
        for (size_t i = 0; i < (size_t)T * d; i++) c->x[i] += c->h[i];

        /* 2b. MLP */
        for (int t = 0; t < T; t++) rmsnorm(c->h + (size_t)t * d, c->x + (size_t)t * d, L->ffn_norm, d, hp->rms_eps);
        if (L->w_gate.type == L->w_up.type) {
            size_t rb = prepare(c, L->w_gate.type, c->h, d, (size_t)T);
            matmul_prepared(c, &L->w_gate, rb, (size_t)T, c->gate, NULL);
            matmul_prepared(c, &L->w_up, rb, (size_t)T, c->up, NULL);
        } else {
            matmul(c, &L->w_gate, c->h, (size_t)T, c->gate, NULL);
            matmul(c, &L->w_up, c->h, (size_t)T, c->up, NULL);
        }
        for (size_t i = 0; i < (size_t)T * ff; i++) c->gate[i] = silu(c->gate[i]) * c->up[i];
        matmul(c, &L->w_down, c->gate, (size_t)T, c->h, NULL);
        for (size_t i = 0; i < (size_t)T * d; i++) c->x[i] += c->h[i];
    }

    /* 3. logits */
    if (logits) {
        int first = all_logits ? 0 : T - 1, n = T - first;
        for (int t = first; t < T; t++)
            rmsnorm(c->h + (size_t)(t - first) * d, c->x + (size_t)t * d, m->output_norm, d, hp->rms_eps);
        matmul(c, &m->output, c->h, (size_t)n, logits, NULL);
        (void)V;
    }
    c->n_past += T;
}

attnd_status fwd_eval(struct fwd_ctx *c, const int32_t *tokens, int n, bool all_logits, float *logits)
{
    if (n <= 0) return ATTND_ERR_INVALID;
    if (n > c->n_ctx - c->n_past) return ATTND_ERR_RANGE;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->hp.n_vocab) return ATTND_ERR_INVALID;
    size_t V = (size_t)c->m->hp.n_vocab;
    for (int done = 0; done < n;) {
        int T = n - done < c->n_batch ? n - done : c->n_batch;
        bool last = done + T == n;
        float *lg = NULL;
        if (logits && all_logits) lg = logits + (size_t)done * V;
        else if (logits && last) lg = logits;
        eval_chunk(c, tokens + done, T, all_logits, lg);
        done += T;
    }
    return ATTND_OK;
}
