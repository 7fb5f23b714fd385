/* fa2.c - FlashAttention-2 over a paged KV cache: argument checks, work partitioning, the
 * flash-decoding reduce, ISA dispatch, and the scalar job kernel (the reference and the portable
 * fallback). The SIMD job kernels are in fa2_avx2.c and fa2_avx512.c; this file is built for
 * baseline x86-64 and never uses their instructions itself. See fa2.h for the contracts. */
#include "kernels/cpu/fa2.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/threadpool.h"

#include "attnd/check.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*fa2_job_fn)(const struct fa2_job *j);

/* ================================================================ scalar job kernel */

static inline float ld_f16(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return cpu_f16_to_f32(h);
}

/* Converts the first n rows of a K or V tile (rows of d elements) to f32. */
static void tile_to_f32(const unsigned char *src, int kv_f16, int n, int d, float *dst)
{
    if (kv_f16) {
        for (int i = 0; i < n * d; i++) dst[i] = ld_f16(src + 2 * (size_t)i);
    } else {
        memcpy(dst, src, (size_t)n * d * sizeof(float));
    }
}

/* Plain-C job: one row at a time, keys a tile at a time, the same online softmax as the SIMD
 * kernels. Only visible keys are ever converted or touched. */
static void scalar_job(const struct fa2_job *j)
{
    const int D = j->head_dim, G = j->n_grp, rows = j->n_tok * j->n_grp;
    float qs[FA2_MAX_ROW_FLOATS];   /* (rows, D) queries * scale */
    float m[FA2_MAX_ROWS], l[FA2_MAX_ROWS];
    float kt[FA2_BLOCK * FA2_MAX_HEAD_DIM], vt[FA2_BLOCK * FA2_MAX_HEAD_DIM]; /* (16, D) */
    float s[FA2_BLOCK];

    for (int r = 0; r < rows; r++) {
        const float *q = j->q + (size_t)(r / G) * j->q_tok_stride + (size_t)(r % G) * D;
        for (int d = 0; d < D; d++) qs[r * D + d] = q[d] * j->scale;
        m[r] = -FLT_MAX / 2;
        l[r] = 0.0f;
    }
    for (int r = 0; r < rows; r++) {
        float *o = j->o + (size_t)(r / G) * j->o_tok_stride + (size_t)(r % G) * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
    }
    const int kend_last = j->kend0 + j->n_tok - 1;
    for (int kb = j->kb0; kb < j->kb1; kb++) {
        const int key0 = kb * FA2_BLOCK;
        int nk = kend_last - key0; /* keys of this tile any row sees */
        if (nk > FA2_BLOCK) nk = FA2_BLOCK;
        const size_t boff = (size_t)j->block_table[kb] * j->block_stride;
        tile_to_f32(j->k + boff, j->kv_f16, nk, D, kt);
        tile_to_f32(j->v + boff, j->kv_f16, nk, D, vt);
        for (int r = 0; r < rows; r++) {
            int lim = j->kend0 + r / G - key0;
            if (lim > nk) lim = nk;
            if (lim <= 0) continue;
            const float *qr = qs + r * D;
            float mx = m[r];
            for (int k = 0; k < lim; k++) {
                float acc = 0.0f;
                for (int d = 0; d < D; d++) acc += qr[d] * kt[k * D + d];
                s[k] = acc;
                if (acc > mx) mx = acc;
            }
            float *o = j->o + (size_t)(r / G) * j->o_tok_stride + (size_t)(r % G) * D;
            const float alpha = expf(m[r] - mx);
            l[r] *= alpha;
            if (alpha != 1.0f)
                for (int d = 0; d < D; d++) o[d] *= alpha;
            for (int k = 0; k < lim; k++) {
                const float p = expf(s[k] - mx);
                l[r] += p;
                for (int d = 0; d < D; d++) o[d] += p * vt[k * D + d];
            }
            m[r] = mx;
        }
    }
    for (int r = 0; r < rows; r++) {
        float *o = j->o + (size_t)(r / G) * j->o_tok_stride + (size_t)(r % G) * D;
        if (j->ml) {
            j->ml[2 * r] = m[r];
            j->ml[2 * r + 1] = l[r];
        } else {
            const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            for (int d = 0; d < D; d++) o[d] = l[r] > 0.0f ? o[d] * inv : 0.0f;
        }
    }
}

/* ================================================================ planning */

/* Derived from the arguments once per call (every thread derives the same). */
struct plan {
    int group;          /* query heads per KV head */
    int gmax;           /* query heads per job (a group larger than the row cap is cut) */
    int n_hc;           /* head chunks per KV head */
    int tok_per_job;    /* query tokens per job of a non-split sequence */
    size_t head_bytes;  /* one KV head's slice of a block */
    size_t block_bytes; /* block stride */
};

static void plan_init(const struct fa2_args *a, struct plan *p)
{
    ATTND_CHECK(a->kv_type == TENSOR_F16 || a->kv_type == TENSOR_F32);
    ATTND_CHECK(a->n_head_kv >= 1 && a->n_head >= a->n_head_kv && a->n_head % a->n_head_kv == 0);
    ATTND_CHECK(a->head_dim >= 1 && a->head_dim <= FA2_MAX_HEAD_DIM);
    ATTND_CHECK(a->n_split >= 1 && a->n_seqs >= 0 && a->n_blocks >= 0);
    ATTND_CHECK(a->n_seqs == 0 || a->seqs != NULL);
    const size_t esz = a->kv_type == TENSOR_F16 ? 2 : 4;
    p->group = a->n_head / a->n_head_kv;
    int row_cap = FA2_MAX_ROW_FLOATS / a->head_dim;
    if (row_cap > FA2_MAX_ROWS) row_cap = FA2_MAX_ROWS;
    p->gmax = p->group < row_cap ? p->group : row_cap;
    p->n_hc = (p->group + p->gmax - 1) / p->gmax;
    p->tok_per_job = row_cap / p->gmax;
    p->head_bytes = (size_t)FA2_BLOCK * (size_t)a->head_dim * esz;
    p->block_bytes = a->block_stride ? a->block_stride : p->head_bytes * (size_t)a->n_head_kv;
    ATTND_CHECK(p->block_bytes >= p->head_bytes * (size_t)a->n_head_kv);
}

static inline int n_tiles(int n_keys) { return (n_keys + FA2_BLOCK - 1) / FA2_BLOCK; }

/* KV parts of sequence s: > 1 only for a decode step with n_split > 1 and several blocks. */
static int seq_parts(const struct fa2_args *a, const struct fa2_seq *s)
{
    if (s->n_q != 1 || a->n_split <= 1) return 1;
    const int nkb = n_tiles(s->pos0 + 1);
    return a->n_split < nkb ? a->n_split : nkb;
}

static size_t seq_scratch(const struct fa2_args *a, const struct fa2_seq *s)
{
    const int parts = seq_parts(a, s);
    return parts > 1 ? (size_t)parts * (size_t)a->n_head * ((size_t)a->head_dim + 2) : 0;
}

/* Floats: the sum of seq_scratch() over the batch. */
size_t fa2_scratch_floats(const struct fa2_args *a)
{
    size_t n = 0;
    for (int i = 0; i < a->n_seqs; i++) n += seq_scratch(a, &a->seqs[i]);
    return n;
}

/* 1 if any sequence of the batch is split into parts. */
int fa2_needs_reduce(const struct fa2_args *a)
{
    for (int i = 0; i < a->n_seqs; i++)
        if (seq_parts(a, &a->seqs[i]) > 1) return 1;
    return 0;
}

/* ================================================================ fa2_run */

/* Walks every work item in a fixed order (expensive items of a sequence first) and runs this
 * thread's ones. Static (fa2_run): pass 0 only adds up the costs; pass 1 runs the items whose
 * cost midpoint falls in thread ith's share of the total. Dynamic (fa2_attend): the thread runs
 * item number claim and then claims the next unclaimed number from the shared counter; claims
 * only grow, so one walk in order meets every claimed item. */
struct walk {
    const struct fa2_args *a;
    const struct plan *p;
    fa2_job_fn fn;
    int pass, ith, nth;
    int64_t cost;      /* running sum */
    int64_t total;
    atomic_int *next;  /* dynamic: the shared counter, else NULL */
    int claim, index;  /* dynamic: item this thread runs next; items walked so far */
};

/* 1 if this thread runs the item: static, its cost midpoint falls in this thread's share;
 * dynamic, it is the item this thread claimed. */
static int walk_item_mine(struct walk *w, const struct fa2_job *job)
{
    if (w->next) return w->index++ == w->claim;
    const int64_t rows = (int64_t)job->n_tok * job->n_grp;
    const int64_t c = rows * (job->kb1 - job->kb0) + rows + 4; /* tiles + per-row setup + call */
    const int64_t mid2 = 2 * w->cost + c;
    w->cost += c;
    return w->pass != 0 && (int)(mid2 * w->nth / (2 * w->total)) == w->ith;
}

/* Runs the item if it is this thread's. Dynamic: the next claim comes after the run; claiming
 * first handed one thread two items before the others claimed any (a decode step of 2 KV heads
 * on 2 threads ran on one core). */
static void walk_item(struct walk *w, struct fa2_job *job)
{
    if (!walk_item_mine(w, job)) return;
    for (int kb = job->kb0; kb < job->kb1; kb++)
        ATTND_CHECK(job->block_table[kb] >= 0 && job->block_table[kb] < w->a->n_blocks);
    w->fn(job);
    if (w->next) w->claim = atomic_fetch_add_explicit(w->next, 1, memory_order_relaxed);
}

static void walk_all(struct walk *w)
{
    const struct fa2_args *a = w->a;
    const struct plan *p = w->p;
    const int D = a->head_dim;
    const size_t tok_stride = (size_t)a->n_head * D;
    size_t soff = 0; /* scratch offset of the current split sequence */
    w->cost = 0;
    for (int si = 0; si < a->n_seqs; si++) {
        const struct fa2_seq *s = &a->seqs[si];
        if (s->n_q <= 0) continue;
        ATTND_CHECK(s->pos0 >= 0 && s->q && s->out && s->block_table);
        const int parts = seq_parts(a, s);
        for (int kvh = 0; kvh < a->n_head_kv; kvh++) {
            for (int hc = 0; hc < p->n_hc; hc++) {
                const int g0 = hc * p->gmax;
                const int ng = p->group - g0 < p->gmax ? p->group - g0 : p->gmax;
                const int h0 = kvh * p->group + g0;
                struct fa2_job job = {
                    .n_grp = ng,
                    .head_dim = D,
                    .q_tok_stride = tok_stride,
                    .o_tok_stride = tok_stride,
                    .kv_f16 = a->kv_type == TENSOR_F16,
                    .k = (const unsigned char *)a->k + (size_t)kvh * p->head_bytes,
                    .v = (const unsigned char *)a->v + (size_t)kvh * p->head_bytes,
                    .block_stride = p->block_bytes,
                    .block_table = s->block_table,
                    .scale = a->scale,
                };
                if (parts > 1) {
                    const int nkb = n_tiles(s->pos0 + 1);
                    float *so = a->scratch + soff;
                    job.n_tok = 1;
                    job.q = s->q + (size_t)h0 * D;
                    job.kend0 = s->pos0 + 1;
                    for (int part = 0; part < parts; part++) {
                        job.kb0 = (int)((int64_t)nkb * part / parts);
                        job.kb1 = (int)((int64_t)nkb * (part + 1) / parts);
                        job.o = so + ((size_t)part * a->n_head + h0) * D;
                        job.ml = so + (size_t)parts * a->n_head * D + ((size_t)part * a->n_head + h0) * 2;
                        walk_item(w, &job);
                    }
                } else {
                    const int n_tt = (s->n_q + p->tok_per_job - 1) / p->tok_per_job;
                    for (int tt = n_tt - 1; tt >= 0; tt--) { /* the later tokens see more keys */
                        const int t0 = tt * p->tok_per_job;
                        job.n_tok = s->n_q - t0 < p->tok_per_job ? s->n_q - t0 : p->tok_per_job;
                        job.q = s->q + (size_t)t0 * tok_stride + (size_t)h0 * D;
                        job.o = s->out + (size_t)t0 * tok_stride + (size_t)h0 * D;
                        job.ml = NULL;
                        job.kb0 = 0;
                        job.kb1 = n_tiles(s->pos0 + t0 + job.n_tok);
                        job.kend0 = s->pos0 + t0 + 1;
                        walk_item(w, &job);
                    }
                }
            }
        }
        if (parts > 1) soff += seq_scratch(a, s);
    }
}

/* next: NULL for the static partition, else the dynamic claim counter (0 before the job). */
static void run_with(const struct fa2_args *a, int ith, int nth, fa2_job_fn fn, atomic_int *next)
{
    struct plan p;
    plan_init(a, &p);
    ATTND_CHECK(nth >= 1 && ith >= 0 && ith < nth);
    ATTND_CHECK(a->scratch != NULL || !fa2_needs_reduce(a));
    struct walk w = {.a = a, .p = &p, .fn = fn, .pass = 0, .ith = ith, .nth = nth, .next = next};
    if (next) {
        w.claim = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
        walk_all(&w);
        return;
    }
    walk_all(&w);
    if (w.cost == 0) return;
    w.total = w.cost;
    w.pass = 1;
    walk_all(&w);
}

/* ================================================================ variants and their choice */

static const fa2_job_fn g_jobs[FA2_N_VARIANTS] = {scalar_job, fa2_avx2_job, fa2_avx512_job};
static const char *const g_var_names[FA2_N_VARIANTS] = {"scalar", "avx2", "avx512"};
/* the measured choice per phase and head size: variant + 1, 0 for none */
static atomic_uchar g_choice[FA2_N_PHASES][FA2_MAX_HEAD_DIM + 1];

const char *fa2_variant_str(enum fa2_variant v) { return (unsigned)v < FA2_N_VARIANTS ? g_var_names[v] : "unknown"; }

int fa2_variant_available(enum fa2_variant v, int head_dim)
{
    const enum cpu_isa isa = cpu_kernels_init();
    switch (v) {
    case FA2_VAR_SCALAR: return 1;
    case FA2_VAR_AVX2: return isa >= CPU_ISA_AVX2 && head_dim % 8 == 0;
    case FA2_VAR_AVX512: return isa >= CPU_ISA_AVX512;
    case FA2_N_VARIANTS: break;
    }
    return 0;
}

/* The rule: the widest the ISA cap allows (AVX2 needs head_dim % 8 == 0). */
static enum fa2_variant rule(int head_dim)
{
    if (fa2_variant_available(FA2_VAR_AVX512, head_dim)) return FA2_VAR_AVX512;
    if (fa2_variant_available(FA2_VAR_AVX2, head_dim)) return FA2_VAR_AVX2;
    return FA2_VAR_SCALAR;
}

enum fa2_variant fa2_variant_of(int head_dim, enum fa2_phase ph)
{
    if (head_dim >= 1 && head_dim <= FA2_MAX_HEAD_DIM && (unsigned)ph < FA2_N_PHASES) {
        const int c = atomic_load_explicit(&g_choice[ph][head_dim], memory_order_relaxed);
        if (c && fa2_variant_available((enum fa2_variant)(c - 1), head_dim)) return (enum fa2_variant)(c - 1);
    }
    return rule(head_dim);
}

/* The chosen kernel for the job's head size and phase. */
static void chosen_job(const struct fa2_job *j)
{
    g_jobs[fa2_variant_of(j->head_dim, j->n_tok > 1 ? FA2_PREFILL : FA2_DECODE)](j);
}

const char *fa2_variant_name(int head_dim, enum fa2_phase ph) { return g_var_names[fa2_variant_of(head_dim, ph)]; }

void fa2_forget(void)
{
    for (int p = 0; p < FA2_N_PHASES; p++)
        for (int d = 0; d <= FA2_MAX_HEAD_DIM; d++) atomic_store(&g_choice[p][d], 0);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Best of 5 single-thread runs of fn over a, in seconds. */
static double time_job(const struct fa2_args *a, fa2_job_fn fn)
{
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        const double t0 = now_s();
        run_with(a, 0, 1, fn, NULL);
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

#define TUNE_PREFILL 64 /* query tokens of the prefill problem */
#define TUNE_CTX 512    /* keys of the decode problem */

void fa2_tune(int head_dim, int n_head, int n_head_kv)
{
    if (head_dim < 1 || head_dim > FA2_MAX_HEAD_DIM || n_head_kv < 1 || n_head % n_head_kv ||
        atomic_load(&g_choice[FA2_PREFILL][head_dim]))
        return;
    /* a pool of F16 keys and values with small pseudo-random values, a prefill of TUNE_PREFILL
     * tokens from position 0 and a decode token at position TUNE_CTX - 1 */
    const int n_blocks = TUNE_CTX / FA2_BLOCK;
    const size_t pool = (size_t)n_blocks * (size_t)n_head_kv * FA2_BLOCK * (size_t)head_dim;
    uint16_t *kv = malloc(2 * pool * sizeof(uint16_t));
    float *q = malloc((size_t)TUNE_PREFILL * (size_t)n_head * (size_t)head_dim * sizeof(float));
    float *out = malloc((size_t)TUNE_PREFILL * (size_t)n_head * (size_t)head_dim * sizeof(float));
    int32_t *table = malloc((size_t)n_blocks * sizeof(int32_t));
    if (!kv || !q || !out || !table) {
        free(kv), free(q), free(out), free(table);
        return;
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < 2 * pool; i++) {
        x = x * 1664525u + 1013904223u;
        kv[i] = cpu_f32_to_f16((float)(x >> 8) / 16777216.0f - 0.5f);
    }
    for (size_t i = 0; i < (size_t)TUNE_PREFILL * (size_t)n_head * (size_t)head_dim; i++) {
        x = x * 1664525u + 1013904223u;
        q[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
    }
    for (int b = 0; b < n_blocks; b++) table[b] = b;
    struct fa2_seq prefill = {.q = q, .out = out, .n_q = TUNE_PREFILL, .pos0 = 0, .block_table = table};
    struct fa2_seq decode = {.q = q, .out = out, .n_q = 1, .pos0 = TUNE_CTX - 1, .block_table = table};
    struct fa2_args a = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim, .kv_type = TENSOR_F16,
                         .k = kv, .v = kv + pool, .n_blocks = n_blocks, .scale = 1.0f / sqrtf((float)head_dim),
                         .n_split = 1};
    for (int ph = FA2_N_PHASES - 1; ph >= 0; ph--) { /* decode first: prefill's choice marks the tune done */
        a.seqs = ph == FA2_DECODE ? &decode : &prefill, a.n_seqs = 1;
        enum fa2_variant pick = rule(head_dim);
        double best = 1e30;
        for (int v = 0; v < FA2_N_VARIANTS; v++) {
            if (!fa2_variant_available((enum fa2_variant)v, head_dim)) continue;
            const double t = time_job(&a, g_jobs[v]);
            if (t < best) best = t, pick = (enum fa2_variant)v;
        }
        atomic_store(&g_choice[ph][head_dim], (unsigned char)(pick + 1));
    }
    free(kv), free(q), free(out), free(table);
}

/* Thread ith's share of the batch with the selected ISA's kernel. */
void fa2_run(const struct fa2_args *a, int ith, int nth) { run_with(a, ith, nth, chosen_job, NULL); }

/* ================================================================ reduce */

/* Combines the parts of one query head h of a split sequence:
 *   M = max m_p,  w_p = e^(m_p - M),  out = sum w_p O_p / sum w_p l_p  (0 if that sum is 0). */
static void reduce_head(const struct fa2_args *a, const struct fa2_seq *s, const float *so, int parts, int h)
{
    const int D = a->head_dim;
    const float *ml = so + (size_t)parts * a->n_head * D;
    float mmax = -FLT_MAX;
    for (int part = 0; part < parts; part++) {
        const float mp = ml[((size_t)part * a->n_head + h) * 2];
        if (mp > mmax) mmax = mp;
    }
    float lsum = 0.0f;
    float *out = s->out + (size_t)h * D;
    for (int d = 0; d < D; d++) out[d] = 0.0f;
    for (int part = 0; part < parts; part++) {
        const float *mlp = ml + ((size_t)part * a->n_head + h) * 2;
        const float wp = expf(mlp[0] - mmax);
        lsum += wp * mlp[1];
        const float *op = so + ((size_t)part * a->n_head + h) * D;
        for (int d = 0; d < D; d++) out[d] += wp * op[d];
    }
    const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
    for (int d = 0; d < D; d++) out[d] = lsum > 0.0f ? out[d] * inv : 0.0f;
}

/* Units of work are (split sequence, query head); thread ith takes a contiguous range. */
void fa2_reduce(const struct fa2_args *a, int ith, int nth)
{
    ATTND_CHECK(nth >= 1 && ith >= 0 && ith < nth);
    int64_t total = 0;
    for (int si = 0; si < a->n_seqs; si++)
        if (seq_parts(a, &a->seqs[si]) > 1) total += a->n_head;
    if (total == 0) return;
    ATTND_CHECK(a->scratch != NULL);
    const int64_t lo = total * ith / nth, hi = total * (ith + 1) / nth;
    int64_t unit = 0;
    size_t soff = 0;
    for (int si = 0; si < a->n_seqs && unit < hi; si++) {
        const struct fa2_seq *s = &a->seqs[si];
        const int parts = seq_parts(a, s);
        if (parts <= 1) continue;
        for (int h = 0; h < a->n_head; h++, unit++)
            if (unit >= lo && unit < hi) reduce_head(a, s, a->scratch + soff, parts, h);
        soff += seq_scratch(a, s);
    }
}

/* ================================================================ drivers */

struct attend_ctx {
    struct fa2_args a;
    fa2_job_fn fn;
    atomic_int next; /* next unclaimed work item */
};

static void attend_run_cb(void *arg, int ith, int nth)
{
    struct attend_ctx *c = arg;
    run_with(&c->a, ith, nth, c->fn, &c->next);
}

static void attend_reduce_cb(void *arg, int ith, int nth)
{
    struct attend_ctx *c = arg;
    fa2_reduce(&c->a, ith, nth);
}

/* Two pool jobs at most: the items, then (if a sequence is split) the reduce. Items are claimed
 * dynamically, so a thread that the OS holds back (other load on the cores) costs only its
 * current item, not a whole share. */
void fa2_attend(struct tpool *pool, const struct fa2_args *a)
{
    struct attend_ctx c = {.a = *a, .fn = chosen_job};
    atomic_init(&c.next, 0);
    tpool_run(pool, attend_run_cb, &c);
    if (fa2_needs_reduce(a)) tpool_run(pool, attend_reduce_cb, &c);
}

/* Single-threaded, scalar kernel whatever the ISA. */
void fa2_ref(const struct fa2_args *a)
{
    run_with(a, 0, 1, scalar_job, NULL);
    fa2_reduce(a, 0, 1);
}
