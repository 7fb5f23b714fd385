/* forward_cpu.c - the llama/qwen2/qwen3 transformer forward pass on the SIMD CPU kernels (the "cpu"
 * backend of forward_backend.h).
 *
 * One step evaluates T tokens drawn from one or more sequences (prompt chunks and decode
 * tokens mixed):
 *   1. x = token_embd[tokens]                                  // (T, d)          embed()
 *   2. per layer:                                                                 attention_block()
 *        h = RMSNorm(x) * attn_norm
 *        q, k, v = h·Wqᵀ(+bq), h·Wkᵀ(+bk), h·Wvᵀ(+bv)          // (T, H*hd) (T, Hkv*hd) x2
 *        (qwen3) per-head RMSNorm of q and k
 *        RoPE(q, k) at each token's position in its sequence
 *        k, v -> the paged KV cache (each sequence's block table)
 *        a = causal GQA FlashAttention-2 of q over each sequence's cache   // (T, H*hd)
 *        x += a·Woᵀ
 *        h = RMSNorm(x) * ffn_norm                                                mlp_block()
 *        x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
 *   3. logits = RMSNorm(x) * output_norm · Woutᵀ for the rows asked for   // (rows, V)   logits()
 * The matrix products read each weight once per step for all T tokens; products and attention
 * are split over the thread pool.
 *
 * Interventions and captures (intervene.h): a step holding a sequence with any runs each layer
 * as intervened_layer(), the same blocks with hooks between them (resid_pre, z, attn_out,
 * mlp_out, resid_post) that touch that sequence's rows only; a plain step pays one branch a layer.
 */
#include "server/engine/forward_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/check.h"
#include "attnd/intervene.h"
#include "attnd/kvcache.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_tune.h"
#include "kernels/cpu/fa2.h"
#include "kernels/cpu/threadpool.h"
#include "server/engine/rope.h"

struct fwd_cpu {
    const struct model *m;
    struct tpool *pool;
    int n_batch;
    double *rope_inv_freq; /* (n_rot / 2) rope_inv_freqs */
    /* scratch, sized for n_batch tokens */
    float *x;      /* (B, d) residual stream */
    float *h;      /* (B, max(d, nq)) normed input */
    float *q;      /* (B, nq) */
    float *k;      /* (B, nkv) */
    float *v;      /* (B, nkv) */
    float *att;    /* (B, nq) attention output */
    float *gate;   /* (B, ff) */
    float *up;     /* (B, ff) */
    float *rope_cs; /* (B, n_rot / 2, 2) each token's RoPE cos and sin, for every layer of a step */
    const float *pending; /* (B, d) a block's output not yet added to x (the next norm_prepare adds it) */
    void *prep;    /* (B, prepared row of max(d, ff, nq)) */
    void *prep2;   /* the same: where the gate/up job prepares W_down's activations (swapped with prep) */
    size_t prep_row_max;
    struct fa2_seq *fseqs; /* (B) at most one per token */
    int *tok_seq;          /* (B) each token's sequence in the step */
    float *fa2_scratch;
    size_t fa2_scratch_n;
    float *logits; /* (logit_rows, V) gathered logits of a multi-sequence step */
    bool iv_any;   /* the step holds a sequence with interventions (intervene.h) */
    float *iv_attn; /* (B, d) skip residual: those rows' attention output, made on first use */
    float **logit_to; /* (logit_rows) where each row goes */
    size_t logit_rows;
    char device[96]; /* "cpu (avx2)" */
    enum tensor_type types[FWD_KERNEL_TYPES]; /* the matrices' weight types, each once */
    int n_types;
};

static size_t kv_width(const struct model *m) { return (size_t)m->hp.n_head_kv * m->hp.head_dim; }

static void cpu_destroy(void *state)
{
    struct fwd_cpu *c = state;
    if (!c) return;
    tpool_destroy(c->pool);
    free(c->x);
    free(c->h);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->gate);
    free(c->up);
    free(c->rope_cs);
    free(c->prep);
    free(c->prep2);
    free(c->fseqs);
    free(c->tok_seq);
    free(c->fa2_scratch);
    free(c->logits);
    free(c->logit_to);
    free(c->iv_attn);
    free(c->rope_inv_freq);
    free(c);
}

static void add_type(struct fwd_cpu *c, enum tensor_type t)
{
    for (int i = 0; i < c->n_types; i++)
        if (c->types[i] == t) return;
    if (c->n_types < FWD_KERNEL_TYPES) c->types[c->n_types++] = t;
}

/* Chooses the kernels for the weight types of m's matrices (measured once per CPU, cpu_tune.h). */
static void tune_kernels(struct fwd_cpu *c, const struct model *m)
{
    add_type(c, m->output.type);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) add_type(c, ws[i]->type);
    }
    const enum cpu_tune_source src = cpu_tune(c->types, c->n_types, NULL);
    if (src != CPU_TUNE_RULES) fa2_tune(m->hp.head_dim, m->hp.n_head, m->hp.n_head_kv);
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static attnd_status cpu_create(const struct model *m, const struct fwd_backend_cfg *cfg, void **out, char *why,
                               size_t why_n)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    struct fwd_cpu *c = calloc(1, sizeof *c);
    if (!c) return ATTND_ERR_NOMEM;
    c->m = m;
    c->n_batch = cfg->n_batch;
    snprintf(c->device, sizeof c->device, "cpu (%s)", cpu_isa_name(cpu_kernels_init()));
    attnd_status st = tpool_create(cfg->n_threads, &c->pool);
    if (!st) st = rope_inv_freqs(m, &c->rope_inv_freq);
    size_t B = (size_t)cfg->n_batch, d = (size_t)hp->n_embd, nq = (size_t)hp->n_head * hp->head_dim,
           nkv = kv_width(m), ff = (size_t)hp->n_ff;
    c->x = malloc(B * d * sizeof(float));
    c->h = malloc(B * (d > nq ? d : nq) * sizeof(float));
    c->q = malloc(B * nq * sizeof(float));
    c->k = malloc(B * nkv * sizeof(float));
    c->v = malloc(B * nkv * sizeof(float));
    c->att = malloc(B * nq * sizeof(float));
    c->gate = malloc(B * ff * sizeof(float));
    c->up = malloc(B * ff * sizeof(float));
    c->rope_cs = malloc((B * (size_t)(hp->n_rot / 2) * 2 + 1) * sizeof(float));
    /* a prepared row is at most 4 bytes per element (f32) */
    c->prep_row_max = max3(d, ff, nq) * sizeof(float);
    c->prep = aligned_alloc(64, (B * c->prep_row_max + 63) / 64 * 64); /* whole vectors load from one line */
    c->prep2 = aligned_alloc(64, (B * c->prep_row_max + 63) / 64 * 64);
    c->fseqs = malloc(B * sizeof *c->fseqs);
    c->tok_seq = malloc(B * sizeof *c->tok_seq);
    if (!st && (!c->x || !c->h || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->rope_cs || !c->prep || !c->prep2 || !c->fseqs || !c->tok_seq))
        st = ATTND_ERR_NOMEM;
    if (st) {
        snprintf(why, why_n, "CPU backend: %s", attnd_status_str(st));
        cpu_destroy(c);
        return st;
    }
    tune_kernels(c, m);
    *out = c;
    return ATTND_OK;
}

static int cpu_kernels_report(const void *state, struct fwd_kernels *k)
{
    const struct fwd_cpu *c = state;
    memset(k, 0, sizeof *k);
    snprintf(k->cpu, sizeof k->cpu, "%s", cpu_tune_cpu_name());
    snprintf(k->isa, sizeof k->isa, "%s", cpu_isa_name(cpu_kernels_init()));
    snprintf(k->chosen_by, sizeof k->chosen_by, "%s", cpu_tune_source_name(cpu_tune_source()));
    snprintf(k->fa2_prefill, sizeof k->fa2_prefill, "%s", fa2_variant_name(c->m->hp.head_dim, FA2_PREFILL));
    snprintf(k->fa2_decode, sizeof k->fa2_decode, "%s", fa2_variant_name(c->m->hp.head_dim, FA2_DECODE));
    for (int f = 0; f < FWD_KERNEL_FAMILIES; f++) k->family[f] = cpu_family_name((enum cpu_family)f);
    for (int i = 0; i < c->n_types; i++) {
        snprintf(k->types[i].type, sizeof k->types[i].type, "%s", tensor_type_name(c->types[i]));
        for (int f = 0; f < FWD_KERNEL_FAMILIES; f++)
            snprintf(k->types[i].variant[f], sizeof k->types[i].variant[f], "%s",
                     cpu_variant_name(cpu_kernels_choice((enum cpu_family)f, c->types[i])));
    }
    k->n_types = c->n_types;
    return 1;
}

static const char *cpu_device_name(const void *state) { return ((const struct fwd_cpu *)state)->device; }
static unsigned cpu_validation_errors(const void *state) { return 0; }

static int cpu_n_threads(const void *state) { return tpool_size(((const struct fwd_cpu *)state)->pool); }

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
static size_t prepare(struct fwd_cpu *c, enum tensor_type wtype, const float *x, size_t n_in, size_t n_tok)
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
 * applies y0 = silu(y0) * y1 to the rows it computed of both and, with next_prep, prepares them
 * at once as the next matrix's activations (next_type's blocks, whole ones: the rows are split on
 * `align`), while they are in its cache, instead of in a pass of its own after a barrier. */
#define MM_MAX 3
struct mm_job {
    int n;
    const struct model_weight *w[MM_MAX];
    float *y[MM_MAX];
    const float *bias[MM_MAX];
    const void *a;
    size_t a_row_bytes, n_tok;
    int swiglu;
    float *const *rows_to; /* (n_tok) or NULL: each thread copies its rows of y[0]'s token t there too */
    size_t align;          /* rows are split in multiples of this (16, or next_type's block) */
    void *next_prep;       /* swiglu: (n_tok, next_row_bytes) y0 prepared for next_type, or NULL */
    enum tensor_type next_type;
    size_t next_row_bytes;
};

static void mm_run(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    for (int i = 0; i < j->n; i++) {
        const struct model_weight *w = j->w[i];
        size_t r0, r1;
        split(w->n_out, j->align, ith, nth, &r0, &r1);
        if (r0 >= r1) continue;
        cpu_gemm(w->type, w->n_in, w->data, w->row_bytes, r0, r1, j->a, j->a_row_bytes, j->n_tok, j->y[i], w->n_out);
        if (j->bias[i])
            for (size_t t = 0; t < j->n_tok; t++)
                cpu_add_row(j->y[i] + t * w->n_out + r0, j->bias[i] + r0, r1 - r0);
    }
    if (j->swiglu) {
        const size_t n_out = j->w[0]->n_out;
        size_t r0, r1;
        split(n_out, j->align, ith, nth, &r0, &r1);
        const size_t blk = tensor_block_elems(j->next_type), off = r0 / blk * tensor_block_bytes(j->next_type);
        for (size_t t = 0; t < j->n_tok && r0 < r1; t++) {
            cpu_swiglu_row(j->y[0] + t * n_out + r0, j->y[1] + t * n_out + r0, r1 - r0);
            if (j->next_prep)
                cpu_prepare_row(j->next_type, j->y[0] + t * n_out + r0, (char *)j->next_prep + t * j->next_row_bytes + off,
                                r1 - r0);
        }
    }
    if (j->rows_to) {
        const size_t n_out = j->w[0]->n_out;
        size_t r0, r1;
        split(n_out, j->align, ith, nth, &r0, &r1);
        for (size_t t = 0; t < j->n_tok && r0 < r1; t++)
            memcpy(j->rows_to[t] + r0, j->y[0] + t * n_out + r0, (r1 - r0) * sizeof(float));
    }
}

/* y[i] (n_tok, w[i]->n_out) = prepared activations · w[i]ᵀ (+ bias[i]) for i < n; see mm_job.
 * swiglu_for (gate, up; else NULL): y0 = silu(y0) * y1, the input of that matrix, whose activations
 * are then prepared in the same job into c->prep2 where its blocks are at most 32 wide (Q8_0 or
 * f32: 256-wide Q8_K blocks would split the rows unevenly over the threads). Returns the stride
 * of those prepared rows, or 0 where they were not prepared. */
static size_t matmul_prepared_n(struct fwd_cpu *c, int n, const struct model_weight *const *w, size_t row_bytes,
                                size_t n_tok, float *const *y, const float *const *bias,
                                const struct model_weight *swiglu_for, float *const *rows_to)
{
    const int swiglu = swiglu_for != NULL;
    ATTND_CHECK(n >= 1 && n <= MM_MAX && (!swiglu || (n == 2 && w[0]->n_out == w[1]->n_out)));
    struct mm_job j = {.n = n, .a = c->prep, .a_row_bytes = row_bytes, .n_tok = n_tok, .swiglu = swiglu,
                       .rows_to = rows_to, .align = 16};
    if (swiglu) {
        uint64_t rb = 0;
        j.next_type = cpu_vec_dot_type(swiglu_for->type);
        const size_t blk = tensor_block_elems(j.next_type);
        tensor_nbytes(j.next_type, w[0]->n_out, &rb);
        if (blk <= 32 && 32 % blk == 0 && w[0]->n_out % 32 == 0 && rb > 0 && rb <= c->prep_row_max)
            j.next_prep = c->prep2, j.next_row_bytes = (size_t)rb, j.align = 32;
    }
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
    return j.next_prep ? j.next_row_bytes : 0;
}

/* y (n_tok, n_out) = prepared activations · Wᵀ (+ bias). */
static void matmul_prepared(struct fwd_cpu *c, const struct model_weight *w, size_t row_bytes, size_t n_tok, float *y,
                            const float *bias)
{
    matmul_prepared_n(c, 1, &w, row_bytes, n_tok, &y, &bias, NULL, NULL);
}

static void matmul(struct fwd_cpu *c, const struct model_weight *w, const float *x, size_t n_tok, float *y,
                   const float *bias)
{
    size_t rb = prepare(c, w->type, x, w->n_in, n_tok);
    matmul_prepared(c, w, rb, n_tok, y, bias);
}

/* qwen3: RMSNorm of each of n_heads vectors (head_dim apart) with the per-head weights w; no-op
 * when w is NULL. */
static void head_norm(const struct fwd_cpu *c, float *v, int n_heads, const float *w)
{
    if (!w) return;
    const size_t hd = (size_t)c->m->hp.head_dim;
    for (int h = 0; h < n_heads; h++)
        cpu_rmsnorm_row(v + (size_t)h * hd, v + (size_t)h * hd, w, hd, c->m->hp.rms_eps);
}

/* Rotates the first n_rot dims of each of n_heads vectors (head_dim apart) by the token's cos/sin
 * pairs cs (rope_row). */
static void rope(const struct fwd_cpu *c, float *v, int n_heads, const float *cs)
{
    const struct model_hparams *hp = &c->m->hp;
    int half = hp->n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float cs_i = cs[2 * i], sn = cs[2 * i + 1];
        for (int h = 0; h < n_heads; h++) {
            float *p = v + (size_t)h * hp->head_dim;
            int a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + half : 2 * i + 1;
            float x0 = p[a], x1 = p[b];
            p[a] = x0 * cs_i - x1 * sn;
            p[b] = x0 * sn + x1 * cs_i;
        }
    }
}

/* ---- one step ------------------------------------------------------------------------------ */

/* The attention work list (one entry per sequence; the K/V pools are set per layer), its split
 * over the threads and scratch, and room for the gathered logits of a multi-sequence step. */
static attnd_status step_prepare(struct fwd_cpu *c, const struct fwd_step *s, struct fa2_args *fa)
{
    const struct model_hparams *hp = &c->m->hp;
    const size_t nq = (size_t)hp->n_head * hp->head_dim, V = (size_t)hp->n_vocab;
    int n_decode = 0;
    for (int i = 0, t = 0; i < s->n_seqs; t += s->seqs[i].n, i++) {
        for (int k = 0; k < s->seqs[i].n; k++) c->tok_seq[t + k] = i;
        c->fseqs[i] = (struct fa2_seq){.q = c->q + (size_t)t * nq, .out = c->att + (size_t)t * nq,
                                       .n_q = s->seqs[i].n, .pos0 = s->pos[t],
                                       .block_table = kv_seq_block_table(s->seqs[i].kv)};
        n_decode += s->seqs[i].n == 1;
    }
    *fa = (struct fa2_args){.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                            .kv_type = kv_type(s->kv), .block_stride = kv_block_stride(s->kv),
                            .n_blocks = (int)kv_n_blocks(s->kv), .scale = 1.0f / sqrtf((float)hp->head_dim),
                            .seqs = c->fseqs, .n_seqs = s->n_seqs};
    const int nth = tpool_size(c->pool);
    fa->n_split = n_decode ? (nth + n_decode * hp->n_head_kv - 1) / (n_decode * hp->n_head_kv) : 1;
    if (fa->n_split < 1) fa->n_split = 1;
    size_t need = fa2_scratch_floats(fa);
    if (need > c->fa2_scratch_n) {
        float *ns = realloc(c->fa2_scratch, need * sizeof(float));
        if (!ns) return ATTND_ERR_NOMEM;
        c->fa2_scratch = ns;
        c->fa2_scratch_n = need;
    }
    fa->scratch = c->fa2_scratch;
    const size_t half = (size_t)hp->n_rot / 2;
    for (int t = 0; t < s->n_tokens; t++) rope_row(c->rope_inv_freq, half, s->pos[t], c->rope_cs + (size_t)t * half * 2);
    if (c->iv_any && !c->iv_attn &&
        !(c->iv_attn = malloc((size_t)c->n_batch * (size_t)hp->n_embd * sizeof(float))))
        return ATTND_ERR_NOMEM;
    if (s->n_seqs > 1 && s->n_logit_rows > c->logit_rows) {
        float *nl = realloc(c->logits, s->n_logit_rows * V * sizeof(float));
        if (nl) c->logits = nl;
        float **nt = realloc(c->logit_to, s->n_logit_rows * sizeof *nt);
        if (nt) c->logit_to = nt;
        if (!nl || !nt) return ATTND_ERR_NOMEM;
        c->logit_rows = s->n_logit_rows;
    }
    return ATTND_OK;
}

/* 1. x = token_embd[tokens] */
static void embed(struct fwd_cpu *c, const struct fwd_step *s)
{
    const struct model_weight *e = &c->m->tok_embd;
    const size_t d = (size_t)c->m->hp.n_embd;
    for (int i = 0, t = 0; i < s->n_seqs; i++)
        for (int k = 0; k < s->seqs[i].n; k++, t++)
            cpu_dequant_row(e->type, (const char *)e->data + (size_t)s->seqs[i].tokens[k] * e->row_bytes,
                            c->x + (size_t)t * d, d);
}

static void rmsnorm_rows(const struct fwd_cpu *c, float *out, const float *x, const float *w, size_t n_rows)
{
    const size_t d = (size_t)c->m->hp.n_embd;
    for (size_t t = 0; t < n_rows; t++) cpu_rmsnorm_row(out + t * d, x + t * d, w, d, c->m->hp.rms_eps);
}

/* x += c->pending (a block's output, if any), h = RMSNorm(x) * w and, if prep, h prepared for
 * weights of type wtype, token by token: one pool job from 4 tokens up instead of two passes on
 * the main thread and a third on the pool. */
struct norm_job {
    struct fwd_cpu *c;
    const float *w;
    int prep;
    enum tensor_type wtype;
    size_t n_tok, row_bytes;
};

static void norm_run(void *arg, int ith, int nth)
{
    const struct norm_job *j = arg;
    struct fwd_cpu *c = j->c;
    const size_t d = (size_t)c->m->hp.n_embd;
    size_t t0, t1;
    split(j->n_tok, 1, ith, nth, &t0, &t1);
    for (size_t t = t0; t < t1; t++) {
        if (c->pending) cpu_add_row(c->x + t * d, c->pending + t * d, d); /* pending may be h: read first */
        cpu_rmsnorm_row(c->h + t * d, c->x + t * d, j->w, d, c->m->hp.rms_eps);
        if (j->prep) cpu_prepare_row(j->wtype, c->h + t * d, (char *)c->prep + t * j->row_bytes, d);
    }
}

/* Returns the prepared rows' stride (0 without prep). */
static size_t norm_prepare(struct fwd_cpu *c, const float *w, int prep, enum tensor_type wtype, size_t T)
{
    uint64_t rb = 0;
    if (prep) {
        tensor_nbytes(cpu_vec_dot_type(wtype), (size_t)c->m->hp.n_embd, &rb);
        ATTND_CHECK(rb > 0 && rb <= c->prep_row_max);
    }
    struct norm_job j = {c, w, prep, wtype, T, (size_t)rb};
    if (T >= 4) tpool_run(c->pool, norm_run, &j);
    else norm_run(&j, 0, 1);
    c->pending = NULL;
    return (size_t)rb;
}

/* x += c->pending now (before x is read as it is). */
static void flush_pending(struct fwd_cpu *c, size_t T)
{
    if (c->pending) cpu_add_row(c->x, c->pending, T * (size_t)c->m->hp.n_embd);
    c->pending = NULL;
}

/* 1 if q, k and v read the same prepared activations (one pool job for the three). */
static int qkv_shared(const struct model_layer *L) { return L->wq.type == L->wk.type && L->wq.type == L->wv.type; }

/* q, k, v = h·Wqᵀ(+bq), h·Wkᵀ(+bk), h·Wvᵀ(+bv); rb: the stride of h as norm_prepare prepared it for
 * the three (qkv_shared: one pool job), or 0 (each matrix prepares h itself). */
static void qkv(struct fwd_cpu *c, const struct model_layer *L, size_t T, size_t rb)
{
    if (rb) {
        const struct model_weight *w[3] = {&L->wq, &L->wk, &L->wv};
        float *y[3] = {c->q, c->k, c->v};
        const float *b[3] = {L->bq, L->bk, L->bv};
        matmul_prepared_n(c, 3, w, rb, T, y, b, NULL, NULL);
    } else {
        matmul(c, &L->wq, c->h, T, c->q, L->bq);
        matmul(c, &L->wk, c->h, T, c->k, L->bk);
        matmul(c, &L->wv, c->h, T, c->v, L->bv);
    }
}

/* (qwen3) the q/k head norms, then RoPE on q and k at each token's position; k and v into the
 * paged cache (each token its own slots); the query probe. Tokens split over the pool from 4 up. */
struct rope_job {
    struct fwd_cpu *c;
    const struct fwd_step *s;
    int l;
};

static void rope_store_tokens(struct fwd_cpu *c, const struct fwd_step *s, int l, size_t t0, size_t t1)
{
    const struct model_hparams *hp = &c->m->hp;
    const size_t nq = (size_t)hp->n_head * hp->head_dim, nkv = kv_width(c->m);
    const struct fwd_probe *pr = s->probe;
    for (size_t t = t0; t < t1; t++) {
        head_norm(c, c->q + t * nq, hp->n_head, c->m->layers[l].q_norm);
        head_norm(c, c->k + t * nkv, hp->n_head_kv, c->m->layers[l].k_norm);
        const float *cs = c->rope_cs + t * (size_t)(hp->n_rot / 2) * 2;
        rope(c, c->q + t * nq, hp->n_head, cs);
        rope(c, c->k + t * nkv, hp->n_head_kv, cs);
        kv_write(s->seqs[c->tok_seq[t]].kv, l, (size_t)s->pos[t], c->k + t * nkv, c->v + t * nkv);
        if (pr->q && l == pr->layer) memcpy(pr->q + (size_t)s->pos[t] * nq, c->q + t * nq, nq * sizeof(float));
    }
}

static void rope_run(void *arg, int ith, int nth)
{
    const struct rope_job *j = arg;
    size_t t0, t1;
    split((size_t)j->s->n_tokens, 1, ith, nth, &t0, &t1);
    rope_store_tokens(j->c, j->s, j->l, t0, t1);
}

static void rope_store(struct fwd_cpu *c, const struct fwd_step *s, int l)
{
    struct rope_job j = {c, s, l};
    if (s->n_tokens >= 4) tpool_run(c->pool, rope_run, &j);
    else rope_run(&j, 0, 1);
}

/* 2a. z = FA2(RoPE(q), RoPE(k), v) over each sequence's cache, q/k/v from RMSNorm(x) ... */
static void attention_z(struct fwd_cpu *c, const struct fwd_step *s, int l, struct fa2_args *fa)
{
    const struct model_layer *L = &c->m->layers[l];
    const size_t T = (size_t)s->n_tokens;
    qkv(c, L, T, norm_prepare(c, L->attn_norm, qkv_shared(L), L->wq.type, T));
    rope_store(c, s, l);
    fa->k = kv_k_base(s->kv, l);
    fa->v = kv_v_base(s->kv, l);
    fa2_attend(c->pool, fa);
}

/* ... x += z·Woᵀ (added by the next norm_prepare). */
static void attention_out(struct fwd_cpu *c, const struct fwd_step *s, int l)
{
    const size_t T = (size_t)s->n_tokens, nq = (size_t)c->m->hp.n_head * c->m->hp.head_dim;
    const struct fwd_probe *pr = s->probe;
    if (pr->att && l == pr->layer)
        for (size_t t = 0; t < T; t++)
            memcpy(pr->att + (size_t)s->pos[t] * nq, c->att + t * nq, nq * sizeof(float));
    matmul(c, &c->m->layers[l].wo, c->att, T, c->h, NULL);
    c->pending = c->h; /* x += h in the next norm_prepare */
}

static void attention_block(struct fwd_cpu *c, const struct fwd_step *s, int l, struct fa2_args *fa)
{
    attention_z(c, s, l, fa);
    attention_out(c, s, l);
}

/* 2b. x += W_down · (silu(W_gate·h) ⊙ W_up·h), h = RMSNorm(x). */
static void mlp_block(struct fwd_cpu *c, const struct model_layer *L, size_t T)
{
    const size_t ff = (size_t)c->m->hp.n_ff;
    const int shared = L->w_gate.type == L->w_up.type;
    const size_t rb = norm_prepare(c, L->ffn_norm, shared, L->w_gate.type, T);
    size_t rb_down = 0; /* W_down's activations prepared by the gate/up job: their stride */
    if (shared) { /* gate, up and the SwiGLU in one pool job */
        const struct model_weight *w[2] = {&L->w_gate, &L->w_up};
        float *y[2] = {c->gate, c->up};
        rb_down = matmul_prepared_n(c, 2, w, rb, T, y, NULL, &L->w_down, NULL);
    } else {
        matmul(c, &L->w_gate, c->h, T, c->gate, NULL);
        matmul(c, &L->w_up, c->h, T, c->up, NULL);
        cpu_swiglu_row(c->gate, c->up, T * ff);
    }
    if (rb_down) {
        void *t = c->prep;
        c->prep = c->prep2, c->prep2 = t;
        matmul_prepared(c, &L->w_down, rb_down, T, c->h, NULL);
    } else {
        matmul(c, &L->w_down, c->gate, T, c->h, NULL);
    }
    c->pending = c->h; /* x += h in the next norm_prepare */
}

/* ---- interventions (intervene.h) ------------------------------------------------------------ */

/* Hook point `at` of layer l for every sequence of the step whose interventions use it, on its
 * rows only. At IV_AT_ATTN_OUT / IV_AT_MLP_OUT the block's output is c->h (pending), x holds the
 * stream before it. */
static void iv_hook(struct fwd_cpu *c, const struct fwd_step *s, int l, unsigned at)
{
    const size_t d = (size_t)c->m->hp.n_embd, nq = (size_t)c->m->hp.n_head * c->m->hp.head_dim;
    bool any = false;
    for (int i = 0; i < s->n_seqs; i++) any |= (iv_layer_hooks(s->seqs[i].iv, l) & at) != 0;
    if (!any) return;
    if (at & (IV_AT_RESID_PRE | IV_AT_RESID_POST)) flush_pending(c, (size_t)s->n_tokens); /* x is the stream now */
    for (int i = 0, t = 0; i < s->n_seqs; t += s->seqs[i].n, i++) {
        struct iv_set *iv = s->seqs[i].iv;
        if (!(iv_layer_hooks(iv, l) & at)) continue;
        const int n = s->seqs[i].n;
        const size_t rows = (size_t)n * d * sizeof(float), r0 = (size_t)t * d;
        switch (at) {
        case IV_AT_RESID_PRE:
            iv_apply_resid_pre(iv, l, c->x + r0, s->pos + t, n);
            iv_capture(iv, IV_SITE_RESID_PRE, l, c->x + r0, d, s->pos + t, n);
            break;
        case IV_AT_Z:
            iv_apply_z(iv, l, c->att + (size_t)t * nq, nq, s->pos + t, n);
            iv_capture(iv, IV_SITE_Z, l, c->att + (size_t)t * nq, nq, s->pos + t, n);
            break;
        case IV_AT_ATTN_OUT:
            if (iv_skips(iv, l, IV_PART_ATTN)) memset(c->h + r0, 0, rows);
            if (iv_skips(iv, l, IV_PART_RESIDUAL)) memcpy(c->iv_attn + r0, c->h + r0, rows);
            iv_apply_patch(iv, IV_SITE_ATTN_OUT, l, c->h + r0, d, s->pos + t, n);
            iv_capture(iv, IV_SITE_ATTN_OUT, l, c->h + r0, d, s->pos + t, n);
            break;
        case IV_AT_MLP_OUT: /* x = resid_pre + attn_out here */
            if (iv_skips(iv, l, IV_PART_MLP)) memset(c->h + r0, 0, rows);
            if (iv_skips(iv, l, IV_PART_RESIDUAL)) memcpy(c->x + r0, c->iv_attn + r0, rows); /* + mlp_out next */
            iv_apply_patch(iv, IV_SITE_MLP_OUT, l, c->h + r0, d, s->pos + t, n);
            iv_capture(iv, IV_SITE_MLP_OUT, l, c->h + r0, d, s->pos + t, n);
            break;
        case IV_AT_RESID_POST:
            iv_apply_patch(iv, IV_SITE_RESID_POST, l, c->x + r0, d, s->pos + t, n);
            iv_capture(iv, IV_SITE_RESID_POST, l, c->x + r0, d, s->pos + t, n);
            break;
        }
    }
}

/* One layer of a step that holds interventions: the same blocks with the hooks between them. */
static void intervened_layer(struct fwd_cpu *c, const struct fwd_step *s, int l, struct fa2_args *fa)
{
    iv_hook(c, s, l, IV_AT_RESID_PRE);
    attention_z(c, s, l, fa);
    iv_hook(c, s, l, IV_AT_Z);
    attention_out(c, s, l);
    iv_hook(c, s, l, IV_AT_ATTN_OUT);
    mlp_block(c, &c->m->layers[l], (size_t)s->n_tokens);
    iv_hook(c, s, l, IV_AT_MLP_OUT);
    iv_hook(c, s, l, IV_AT_RESID_POST);
}

/* The residual-stream probe: the stream after layer l at the probed position. */
static void probe_resid(const struct fwd_cpu *c, const struct fwd_step *s, int l)
{
    const size_t d = (size_t)c->m->hp.n_embd;
    if (!s->probe->resid) return;
    for (int t = 0; t < s->n_tokens; t++)
        if (s->pos[t] == s->probe->resid_pos)
            memcpy(s->probe->resid + (size_t)l * d, c->x + (size_t)t * d, d * sizeof(float));
}

/* 3. logits = RMSNorm(x) * output_norm · Woutᵀ: the rows asked for gathered into one product. */
static void logits(struct fwd_cpu *c, const struct fwd_step *s)
{
    const struct model *m = c->m;
    const size_t d = (size_t)m->hp.n_embd, V = (size_t)m->hp.n_vocab;
    const struct fwd_seq *seqs = s->seqs;
    size_t r = 0;
    for (int i = 0, t = 0; i < s->n_seqs; t += seqs[i].n, i++) {
        if (!seqs[i].logits) continue;
        int first = seqs[i].all_logits ? 0 : seqs[i].n - 1;
        for (int k = first; k < seqs[i].n; k++, r++)
            cpu_rmsnorm_row(c->h + r * d, c->x + (size_t)(t + k) * d, m->output_norm, d, m->hp.rms_eps);
    }
    /* one sequence: straight into its buffer; several: into scratch, each thread copying its rows
     * out to the sequences' buffers while they are in its cache */
    float *dst = (s->n_seqs == 1) ? NULL : c->logits;
    for (int i = 0; i < s->n_seqs && !dst; i++)
        if (seqs[i].logits) dst = seqs[i].logits;
    if (dst != c->logits) {
        matmul(c, &m->output, c->h, s->n_logit_rows, dst, NULL);
        return;
    }
    r = 0;
    for (int i = 0; i < s->n_seqs; i++) {
        if (!seqs[i].logits) continue;
        size_t rows = seqs[i].all_logits ? (size_t)seqs[i].n : 1;
        for (size_t k = 0; k < rows; k++) c->logit_to[r++] = seqs[i].logits + k * V;
    }
    const struct model_weight *w = &m->output;
    const size_t rb = prepare(c, w->type, c->h, w->n_in, s->n_logit_rows);
    matmul_prepared_n(c, 1, &w, rb, s->n_logit_rows, &dst, NULL, NULL, c->logit_to);
}

static attnd_status cpu_eval_batch(void *state, const struct fwd_step *s)
{
    struct fwd_cpu *c = state;
    struct fa2_args fa;
    c->iv_any = false;
    for (int i = 0; i < s->n_seqs; i++) c->iv_any |= s->seqs[i].iv != NULL;
    attnd_status st = step_prepare(c, s, &fa);
    if (st) return st;
    embed(c, s);
    for (int l = 0; l < c->m->hp.n_layer; l++) {
        if (c->iv_any) { /* the one branch a plain step pays per layer */
            intervened_layer(c, s, l, &fa);
        } else {
            attention_block(c, s, l, &fa);
            mlp_block(c, &c->m->layers[l], (size_t)s->n_tokens);
        }
        if (s->probe->resid) flush_pending(c, (size_t)s->n_tokens);
        probe_resid(c, s, l);
    }
    flush_pending(c, (size_t)s->n_tokens);
    if (s->n_logit_rows) logits(c, s);
    for (int i = 0; i < s->n_seqs; i++) kv_seq_commit(s->seqs[i].kv, kv_seq_len(s->seqs[i].kv) - (size_t)s->seqs[i].n_draft);
    return ATTND_OK;
}

/* The logit lens' projection, in chunks of n_batch rows (the scratch h holds that many). */
static void cpu_project(void *state, const float *x, int n, float *out)
{
    struct fwd_cpu *c = state;
    const struct model *m = c->m;
    const size_t V = (size_t)m->hp.n_vocab;
    for (int done = 0; done < n;) {
        int k = n - done < c->n_batch ? n - done : c->n_batch;
        rmsnorm_rows(c, c->h, x + (size_t)done * m->hp.n_embd, m->output_norm, (size_t)k);
        matmul(c, &m->output, c->h, (size_t)k, out + (size_t)done * V, NULL);
        done += k;
    }
}

const struct fwd_backend_ops fwd_cpu_backend = {
    .name = "cpu",
    .create = cpu_create,
    .eval_batch = cpu_eval_batch,
    .destroy = cpu_destroy,
    .device_name = cpu_device_name,
    .validation_errors = cpu_validation_errors,
    .kernels = cpu_kernels_report,
    .n_threads = cpu_n_threads,
    .project = cpu_project,
};
