/* fa2_cases.h - the case builder, float64 reference and checker shared by the CPU (test_fa2.c) and
 * Vulkan (test_vk_fa2.c) FlashAttention-2 tests. Include after testutil.h and kernels/cpu/fa2.h. */
#ifndef ATTND_FA2_CASES_H
#define ATTND_FA2_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x2545f4914f6cdd1dULL;

static uint64_t rnd_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static double rnd_unit(void) { return (double)(rnd_u64() >> 11) * 0x1.0p-53; }

static float rnd_sym(void) { return (float)(2.0 * rnd_unit() - 1.0); }


static void fill_nan(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* ------------------------------------------------------------------------------------------
 * A test batch: pools, sequences, reference
 * ------------------------------------------------------------------------------------------ */

struct seqdef {
    int pos0, n_q;
};

struct batch {
    int n_head, n_head_kv, D;
    enum tensor_type kv_type;
    size_t esz, block_stride; /* bytes; padded beyond the dense size */
    int n_blocks;
    unsigned char *k, *v;     /* pools */
    int n_seqs;
    struct fa2_seq *seqs;
    struct seqdef *def;
    float **qv;               /* per sequence (n_q, n_head, D) */
    double **ref;             /* per sequence (n_q, n_head, D) */
    float *kf, *vf;           /* per sequence: the values stored, by logical position */
    size_t *kv_off;           /* per sequence: offset into kf/vf (floats) */
    float scale;
};

static size_t elem_off(const struct batch *b, int phys, int kvh, int slot, int d)
{
    return (size_t)phys * b->block_stride + (((size_t)kvh * FA2_BLOCK + (size_t)slot) * b->D + (size_t)d) * b->esz;
}

static void store_kv(const struct batch *b, unsigned char *pool, size_t off, float x)
{
    if (b->kv_type == TENSOR_F16) {
        uint16_t h = cpu_f32_to_f16(x);
        memcpy(pool + off, &h, 2);
    } else {
        memcpy(pool + off, &x, 4);
    }
}

/* Builds the pools (every slot NaN first), shuffled block tables, queries, float64 reference. */
static void batch_init(struct batch *b, int D, int n_head_kv, int group, enum tensor_type kvt, const struct seqdef *defs,
                       int n_seqs, float logit_mul)
{
    memset(b, 0, sizeof *b);
    b->D = D;
    b->n_head_kv = n_head_kv;
    b->n_head = n_head_kv * group;
    b->kv_type = kvt;
    b->esz = kvt == TENSOR_F16 ? 2 : 4;
    b->block_stride = (size_t)n_head_kv * FA2_BLOCK * D * b->esz + (kvt == TENSOR_F32 ? 64 : 0);
    b->n_seqs = n_seqs;
    b->scale = logit_mul / sqrtf((float)D);

    int need = 0;
    for (int s = 0; s < n_seqs; s++) need += (defs[s].pos0 + defs[s].n_q + FA2_BLOCK - 1) / FA2_BLOCK;
    b->n_blocks = need + 3 + (int)(rnd_u64() % 5);
    int *perm = t_xmalloc((size_t)b->n_blocks * sizeof(int));
    for (int i = 0; i < b->n_blocks; i++) perm[i] = i;
    for (int i = b->n_blocks - 1; i > 0; i--) {
        int j = (int)(rnd_u64() % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }

    const size_t pool_bytes = (size_t)b->n_blocks * b->block_stride;
    b->k = t_xmalloc(pool_bytes);
    b->v = t_xmalloc(pool_bytes);
    if (kvt == TENSOR_F16) {
        const uint16_t nanh = 0x7e00;
        for (size_t i = 0; i < pool_bytes / 2; i++) {
            memcpy(b->k + 2 * i, &nanh, 2);
            memcpy(b->v + 2 * i, &nanh, 2);
        }
    } else {
        fill_nan((float *)b->k, pool_bytes / 4);
        fill_nan((float *)b->v, pool_bytes / 4);
    }

    b->seqs = t_xmalloc((size_t)n_seqs * sizeof *b->seqs);
    b->def = t_xmalloc((size_t)n_seqs * sizeof *b->def);
    b->qv = t_xmalloc((size_t)n_seqs * sizeof *b->qv);
    b->ref = t_xmalloc((size_t)n_seqs * sizeof *b->ref);
    b->kv_off = t_xmalloc((size_t)n_seqs * sizeof *b->kv_off);
    size_t kv_total = 0;
    for (int s = 0; s < n_seqs; s++) {
        b->kv_off[s] = kv_total;
        kv_total += (size_t)(defs[s].pos0 + defs[s].n_q) * n_head_kv * D;
    }
    b->kf = t_xmalloc(kv_total * sizeof(float));
    b->vf = t_xmalloc(kv_total * sizeof(float));

    int next = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct seqdef *sd = &defs[s];
        const int len = sd->pos0 + sd->n_q, nb = (len + FA2_BLOCK - 1) / FA2_BLOCK;
        int32_t *bt = t_xmalloc((size_t)(nb ? nb : 1) * sizeof(int32_t));
        for (int i = 0; i < nb; i++) bt[i] = perm[next++];
        /* keys and values, f16-rounded: the reference sees exactly what the pool holds */
        float *kf = b->kf + b->kv_off[s], *vf = b->vf + b->kv_off[s]; /* (len, n_head_kv, D) */
        for (int p = 0; p < len; p++)
            for (int h = 0; h < n_head_kv; h++)
                for (int d = 0; d < D; d++) {
                    const size_t i = ((size_t)p * n_head_kv + h) * D + d;
                    kf[i] = cpu_f16_to_f32(cpu_f32_to_f16(rnd_sym()));
                    vf[i] = cpu_f16_to_f32(cpu_f32_to_f16(rnd_sym()));
                    const size_t off = elem_off(b, bt[p / FA2_BLOCK], h, p % FA2_BLOCK, d);
                    store_kv(b, b->k, off, kf[i]);
                    store_kv(b, b->v, off, vf[i]);
                }
        const size_t nqf = (size_t)sd->n_q * b->n_head * D;
        float *q = t_xmalloc(nqf * sizeof(float));
        for (size_t i = 0; i < nqf; i++) q[i] = cpu_f16_to_f32(cpu_f32_to_f16(rnd_sym()));
        b->qv[s] = q;
        b->def[s] = *sd;
        b->seqs[s] = (struct fa2_seq){.q = q, .out = NULL, .n_q = sd->n_q, .pos0 = sd->pos0, .block_table = bt};

        /* float64 reference: plain softmax over keys 0..pos0+i */
        double *ref = t_xmalloc((nqf ? nqf : 1) * sizeof(double));
        double *w = t_xmalloc((size_t)(len ? len : 1) * sizeof(double));
        for (int i = 0; i < sd->n_q; i++) {
            for (int h = 0; h < b->n_head; h++) {
                const int kvh = h / group, nk = sd->pos0 + i + 1;
                const float *qr = q + ((size_t)i * b->n_head + h) * D;
                double mx = -INFINITY, sum = 0.0;
                for (int p = 0; p < nk; p++) {
                    const float *kr = kf + ((size_t)p * n_head_kv + kvh) * D;
                    double acc = 0.0;
                    for (int d = 0; d < D; d++) acc += (double)qr[d] * (double)kr[d];
                    w[p] = acc * (double)b->scale;
                    if (w[p] > mx) mx = w[p];
                }
                for (int p = 0; p < nk; p++) {
                    w[p] = exp(w[p] - mx);
                    sum += w[p];
                }
                double *o = ref + ((size_t)i * b->n_head + h) * D;
                for (int d = 0; d < D; d++) o[d] = 0.0;
                for (int p = 0; p < nk; p++) {
                    const float *vr = vf + ((size_t)p * n_head_kv + kvh) * D;
                    for (int d = 0; d < D; d++) o[d] += w[p] / sum * (double)vr[d];
                }
            }
        }
        free(w);
        b->ref[s] = ref;
    }
    free(perm);
}

static void batch_free(struct batch *b)
{
    for (int s = 0; s < b->n_seqs; s++) {
        free((void *)b->seqs[s].block_table);
        free(b->qv[s]);
        free(b->ref[s]);
    }
    free(b->seqs);
    free(b->def);
    free(b->qv);
    free(b->ref);
    free(b->kv_off);
    free(b->kf);
    free(b->vf);
    free(b->k);
    free(b->v);
}

/* Fresh outputs for every sequence of b, wired into b->seqs: NaN-filled, or (in_place) a copy of
 * the queries that q and out then share. Free with batch_outputs_free(). */
static float **batch_outputs(struct batch *b, int in_place)
{
    float **out = t_xmalloc((size_t)b->n_seqs * sizeof *out);
    for (int s = 0; s < b->n_seqs; s++) {
        const size_t n = (size_t)b->def[s].n_q * b->n_head * b->D;
        out[s] = t_xmalloc(n * sizeof(float));
        if (in_place)
            memcpy(out[s], b->qv[s], n * sizeof(float));
        else
            fill_nan(out[s], n);
        b->seqs[s].out = out[s];
        b->seqs[s].q = in_place ? out[s] : b->qv[s];
    }
    return out;
}

static void batch_outputs_free(struct batch *b, float **out)
{
    for (int s = 0; s < b->n_seqs; s++) {
        free(out[s]);
        b->seqs[s].q = b->qv[s];
        b->seqs[s].out = NULL;
    }
    free(out);
}

/* The kernel arguments for b (no scratch). */
static struct fa2_args batch_args(const struct batch *b, int n_split)
{
    return (struct fa2_args){
        .n_head = b->n_head,
        .n_head_kv = b->n_head_kv,
        .head_dim = b->D,
        .kv_type = b->kv_type,
        .k = b->k,
        .v = b->v,
        .block_stride = b->kv_type == TENSOR_F32 ? b->block_stride : 0, /* F16: the dense default */
        .n_blocks = b->n_blocks,
        .scale = b->scale,
        .seqs = b->seqs,
        .n_seqs = b->n_seqs,
        .n_split = n_split,
    };
}

/* Compares every sequence's output with the reference; returns the number of bad sequences. */
static int check_out(const struct batch *b, float *const *out, const char *what)
{
    int bad_seqs = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const size_t n = (size_t)b->def[s].n_q * b->n_head * b->D;
        double se = 0.0, sr = 0.0;
        size_t first_bad = SIZE_MAX, n_bad = 0;
        for (size_t i = 0; i < n; i++) {
            const double r = b->ref[s][i], g = (double)out[s][i], e = g - r;
            if (!(fabs(e) <= 2e-3 + 2e-3 * fabs(r))) {
                if (first_bad == SIZE_MAX) first_bad = i;
                n_bad++;
            }
            se += e * e;
            sr += r * r;
        }
        const double nmse = sr > 0 ? se / sr : se;
        const int ok = n_bad == 0 && nmse <= 5e-4;
        if (!ok) {
            bad_seqs++;
            if (bad_seqs <= 3) {
                const size_t i = first_bad == SIZE_MAX ? 0 : first_bad;
                const size_t per_tok = (size_t)b->n_head * b->D;
                T_CHECK(ok,
                        "%s: seq %d (pos0 %d, n_q %d) D %d heads %d/%d %s: nmse %.3g, %zu bad elements; "
                        "first at tok %zu head %zu d %zu: got %.7g want %.7g",
                        what, s, b->def[s].pos0, b->def[s].n_q, b->D, b->n_head, b->n_head_kv,
                        tensor_type_name(b->kv_type), nmse, n_bad, i / per_tok, i % per_tok / b->D, i % b->D,
                        (double)out[s][i], b->ref[s][i]);
            }
        } else {
            T_CHECK(ok, "ok");
        }
    }
    return bad_seqs;

#endif
