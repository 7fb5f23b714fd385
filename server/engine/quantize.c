/* quantize.c - weight quantizers (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K here; Q8_0 and Q4_0 from the CPU
 * kernels) and `attnd quantize`'s whole-file conversion. Block layouts: attnd/tensor.h. */
#include "attnd/quantize.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/threadpool.h"

#define QK_K 256

static int nearest(float x) { return (int)nearbyintf(x); }

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put_f16(unsigned char *p, float v)
{
    uint16_t h = cpu_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static float rt_f16(float v) { return cpu_f16_to_f32(cpu_f32_to_f16(v)); }

/* ================================================================ 32-blocks */

/* Q5_0: d = m / -16 with m the value of largest magnitude, q = round(x/d) + 16 in [0, 31]. */
static void q5_0_block(const float *x, unsigned char *b)
{
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), m = x[i];
    const float d = m / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(nearest(x[j] * id) + 16, 0, 31), q1 = clampi(nearest(x[j + 16] * id) + 16, 0, 31);
        b[6 + j] = (unsigned char)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    memcpy(b + 2, &qh, 4);
}

/* Q5_1: m = min, d = (max - min) / 31, q = round((x - m)/d) in [0, 31]. */
static void q5_1_block(const float *x, unsigned char *b)
{
    float lo = x[0], hi = x[0];
    for (int i = 1; i < 32; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    const float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, lo);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(nearest((x[j] - lo) * id), 0, 31), q1 = clampi(nearest((x[j + 16] - lo) * id), 0, 31);
        b[8 + j] = (unsigned char)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    memcpy(b + 4, &qh, 4);
}

/* ================================================================ scale searches */

/* Asymmetric: x ~ scale*L + min with L in [0, nmax] and min <= 0, minimising sum w*(err)^2.
 * Starts from min/max rounding, then tries 21 scales around nmax/(max-min); for each, the
 * rounded L give a closed-form least-squares (scale, min). Returns scale, *neg_min = -min. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min)
{
    float lo = x[0], hi = x[0], sw = 0, swx = 0;
    for (int i = 0; i < n; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]), sw += w[i], swx += w[i] * x[i];
    if (lo > 0) lo = 0;
    if (hi <= lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0.0f;
    }
    float scale = (hi - lo) / (float)nmax, mn = lo, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest((x[i] - lo) / scale), 0, nmax);
        float e = scale * L[i] + lo - x[i];
        best += w[i] * e * e;
    }
    uint8_t La[32];
    for (int step = 0; step <= 20; step++) {
        const float is = ((float)nmax - 1.0f + 0.1f * (float)step) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            La[i] = (uint8_t)clampi(nearest(is * (x[i] - lo)), 0, nmax);
            sl += w[i] * La[i], sl2 += w[i] * La[i] * La[i], sxl += w[i] * La[i] * x[i];
        }
        const float D = sw * sl2 - sl * sl;
        if (D <= 0) continue;
        float s = (sw * sxl - swx * sl) / D, m = (sl2 * swx - sl * sxl) / D;
        if (m > 0) m = 0, s = sxl / sl2;
        float err = 0;
        for (int i = 0; i < n; i++) {
            float e = s * La[i] + m - x[i];
            err += w[i] * e * e;
        }
        if (err < best) best = err, scale = s, mn = m, memcpy(L, La, (size_t)n);
    }
    *neg_min = -mn;
    return scale;
}

/* Symmetric (Q6_K): x ~ scale*l with l in [-nmax, nmax-1], weights x^2; tries 19 scales around
 * nmax/max|x| and keeps the one with the best least-squares fit. Returns the scale. */
static float fit_scale_sym(int n, int nmax, const float *x)
{
    float amax = 0, m = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), m = x[i];
    if (amax < 1e-30f) return 0.0f;
    float best_s = 0, best = -1;
    for (int step = -9; step <= 9; step++) {
        const float is = -((float)nmax + 0.1f * (float)step) / m;
        float sxl = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest(is * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sxl += w * x[i] * l, sl2 += w * l * l;
        }
        if (sl2 > 0 && (best < 0 || sxl * sxl > best * sl2)) best_s = sxl / sl2, best = best_s * sxl;
    }
    return best_s;
}

/* ================================================================ K-quant blocks */

/* Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32 with 6-bit scales and mins. */
static void q45_k_block(const float *x, unsigned char *b, int nmax)
{
    float sc[8], mn[8], w[32], ss = 0;
    uint8_t L[QK_K];
    for (int i = 0; i < QK_K; i++) ss += x[i] * x[i];
    const float av = sqrtf(ss / QK_K);
    float max_sc = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        for (int i = 0; i < 32; i++) w[i] = av + fabsf(x[32 * j + i]);
        sc[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j]);
        max_sc = fmaxf(max_sc, sc[j]), max_mn = fmaxf(max_mn, mn[j]);
    }
    const float isc = max_sc > 0 ? 63.0f / max_sc : 0, imn = max_mn > 0 ? 63.0f / max_mn : 0;
    unsigned char *s12 = b + 4;
    memset(s12, 0, 12);
    int ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = clampi(nearest(isc * sc[j]), 0, 63), lm[j] = clampi(nearest(imn * mn[j]), 0, 63);
        if (j < 4) {
            s12[j] |= (unsigned char)ls[j], s12[j + 4] |= (unsigned char)lm[j];
        } else {
            s12[j + 4] = (unsigned char)((ls[j] & 0x0f) | (lm[j] & 0x0f) << 4);
            s12[j - 4] |= (unsigned char)((ls[j] >> 4) << 6), s12[j] |= (unsigned char)((lm[j] >> 4) << 6);
        }
    }
    put_f16(b, max_sc / 63.0f);
    put_f16(b + 2, max_mn / 63.0f);
    const float d = rt_f16(max_sc / 63.0f), dmin = rt_f16(max_mn / 63.0f);
    for (int j = 0; j < 8; j++) { /* re-round with the scales as stored */
        const float dl = d * (float)ls[j], ml = dmin * (float)lm[j];
        for (int i = 0; i < 32; i++) L[32 * j + i] = dl != 0 ? (uint8_t)clampi(nearest((x[32 * j + i] + ml) / dl), 0, nmax) : 0;
    }
    unsigned char *qs = b + (nmax == 15 ? 16 : 48), *qh = b + 16;
    if (nmax == 31) memset(qh, 0, 32);
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++) {
            const int lo = L[64 * k + l], hi = L[64 * k + 32 + l];
            qs[32 * k + l] = (unsigned char)((lo & 0x0f) | (hi & 0x0f) << 4);
            if (nmax == 31) qh[l] |= (unsigned char)((lo >> 4) << (2 * k) | (hi >> 4) << (2 * k + 1));
        }
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales against one f16 d. */
static void q6_k_block(const float *x, unsigned char *b)
{
    float sc[16], max_sc = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        sc[j] = fit_scale_sym(16, 32, x + 16 * j);
        if (fabsf(sc[j]) > amax) amax = fabsf(sc[j]), max_sc = sc[j];
    }
    memset(b, 0, 210);
    if (amax < 1e-30f) return;
    const float is = -128.0f / max_sc;
    put_f16(b + 208, 1.0f / is);
    const float d = rt_f16(1.0f / is);
    int8_t *s8 = (int8_t *)(b + 192);
    uint8_t L[QK_K];
    for (int j = 0; j < 16; j++) {
        s8[j] = (int8_t)clampi(nearest(is * sc[j]), -128, 127);
        const float dl = d * (float)s8[j];
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = dl != 0 ? (uint8_t)(clampi(nearest(x[16 * j + i] / dl), -32, 31) + 32) : 32;
    }
    unsigned char *ql = b, *qh = b + 128;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *q = L + 128 * h + l;
            ql[64 * h + l] = (unsigned char)((q[0] & 0x0f) | (q[64] & 0x0f) << 4);
            ql[64 * h + 32 + l] = (unsigned char)((q[32] & 0x0f) | (q[96] & 0x0f) << 4);
            qh[32 * h + l] = (unsigned char)((q[0] >> 4) | (q[32] >> 4) << 2 | (q[64] >> 4) << 4 | (q[96] >> 4) << 6);
        }
}

/* ================================================================ rows */

/* Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K. */
int quantize_type_supported(enum tensor_type t)
{
    switch (t) {
    case TENSOR_Q8_0: case TENSOR_Q4_0: case TENSOR_Q5_0: case TENSOR_Q5_1: case TENSOR_Q4_K: case TENSOR_Q5_K:
    case TENSOR_Q6_K: return 1;
    default: return 0;
    }
}

/* ATTND_ERR_INVALID for another type or a partial block; otherwise writes the blocks. Thread-safe. */
attnd_status quantize_row(enum tensor_type t, const float *x, void *dst, size_t n)
{
    if (!quantize_type_supported(t) || n % tensor_block_elems(t)) return ATTND_ERR_INVALID;
    unsigned char *b = dst;
    const size_t be = tensor_block_elems(t), bb = tensor_block_bytes(t);
    if (t == TENSOR_Q8_0) cpu_quantize_row_q8_0(x, dst, n);
    else if (t == TENSOR_Q4_0) cpu_quantize_row_q4_0(x, dst, n);
    else
        for (size_t i = 0; i < n / be; i++, x += be, b += bb) switch (t) {
            case TENSOR_Q5_0: q5_0_block(x, b); break;
            case TENSOR_Q5_1: q5_1_block(x, b); break;
            case TENSOR_Q4_K: q45_k_block(x, b, 15); break;
            case TENSOR_Q5_K: q45_k_block(x, b, 31); break;
            default: q6_k_block(x, b); break;
            }
    return ATTND_OK;
}

/* ================================================================ presets */

static const struct {
    const char *name;
    enum tensor_type base;
    uint32_t file_type; /* general.file_type (llama_ftype) */
} g_presets[] = {
    [QUANTIZE_Q8_0] = {"q8_0", TENSOR_Q8_0, 7},     [QUANTIZE_Q4_0] = {"q4_0", TENSOR_Q4_0, 2},
    [QUANTIZE_Q4_K_M] = {"q4_k_m", TENSOR_Q4_K, 15}, [QUANTIZE_Q5_K_M] = {"q5_k_m", TENSOR_Q5_K, 17},
    [QUANTIZE_Q6_K] = {"q6_k", TENSOR_Q6_K, 18},
};

/* 0 and *out set for a preset name, -1 (and *out untouched) otherwise. */
int quantize_preset_parse(const char *name, enum quantize_preset *out)
{
    for (int i = 0; i <= QUANTIZE_Q6_K; i++)
        if (!strcmp(name, g_presets[i].name)) {
            *out = (enum quantize_preset)i;
            return 0;
        }
    return -1;
}

/* Static string ("q4_k_m"); p must be a valid preset. */
const char *quantize_preset_name(enum quantize_preset p) { return g_presets[p].name; }

/* The reference quantizer's choice of layers that get more bits. */
static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The reference quantizer's mix (see quantize.h); pure. */
enum tensor_type quantize_tensor_type(enum quantize_preset p, const char *name, uint32_t n_dims, uint64_t ne0,
                                      int layer, int n_layers, int as_output)
{
    if (n_dims < 2) return TENSOR_F32;
    enum tensor_type t = g_presets[p].base;
    const int km = p == QUANTIZE_Q4_K_M || p == QUANTIZE_Q5_K_M;
    if (as_output) {
        if (t != TENSOR_Q8_0) t = TENSOR_Q6_K;
    } else if (km && layer >= 0 && (ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight"))) {
        if (use_more_bits(layer, n_layers)) t = TENSOR_Q6_K;
    }
    if (ne0 % QK_K && tensor_block_elems(t) == QK_K)
        t = t == TENSOR_Q4_K ? TENSOR_Q5_0 : t == TENSOR_Q5_K ? TENSOR_Q5_1 : TENSOR_Q8_0;
    if (ne0 % 32) t = TENSOR_F32; /* not even whole 32-blocks: keep it unquantized */
    return t;
}

/* ================================================================ files */

struct qfile {
    const struct gguf *g;
    int fd;
    enum tensor_type *types; /* (n_tensors) output type of each tensor */
    struct tpool *pool;
    quantize_progress_fn progress;
    void *ud;
    char *err;
    size_t errlen;
    /* the tensor being converted */
    const struct gguf_tensor *t;
    enum tensor_type to;
    const unsigned char *src;
    unsigned char *dst;
    size_t src_rb, dst_rb, ne0, rows;
    int failed; /* a worker ran out of memory */
};

/* Block index of "blk.N.*", else -1. */
static int layer_of(const char *name)
{
    int l, n = 0;
    if (sscanf(name, "blk.%d.%n", &l, &n) == 1 && n > 0) return l;
    return -1;
}

static void convert_rows(void *arg, int ith, int nth)
{
    struct qfile *q = arg;
    const enum tensor_type to = q->to;
    float *row = malloc(q->ne0 * sizeof(float));
    if (!row) {
        q->failed = 1; /* benign race: every writer stores 1 */
        return;
    }
    for (size_t r = (size_t)ith; r < q->rows; r += (size_t)nth) {
        cpu_dequant_row((enum tensor_type)q->t->type, q->src + r * q->src_rb, row, q->ne0);
        if (to == TENSOR_F32) memcpy(q->dst + r * q->dst_rb, row, q->ne0 * sizeof(float));
        else quantize_row(to, row, q->dst + r * q->dst_rb, q->ne0);
    }
    free(row);
}

static int read_all(int fd, void *buf, size_t n, uint64_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

static int fill_tensor(void *ud, int idx, void *buf, size_t nbytes)
{
    struct qfile *q = ud;
    const struct gguf_tensor *t = gguf_tensor(q->g, idx);
    const enum tensor_type to = q->types[idx];
    if (q->progress) q->progress(q->ud, idx, gguf_n_tensors(q->g), t->name, (enum tensor_type)t->type, to);
    if (to == (enum tensor_type)t->type) {
        if (read_all(q->fd, buf, nbytes, t->offset)) goto io;
        return 0;
    }
    unsigned char *src = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!src) goto nomem;
    if (read_all(q->fd, src, (size_t)t->nbytes, t->offset)) {
        free(src);
        goto io;
    }
    q->t = t;
    q->to = to;
    q->src = src;
    q->dst = buf;
    q->ne0 = (size_t)t->ne[0];
    q->rows = (size_t)(t->n_elems / t->ne[0]);
    q->src_rb = (size_t)(t->nbytes / q->rows);
    q->dst_rb = nbytes / q->rows;
    q->failed = 0;
    tpool_run(q->pool, convert_rows, q);
    free(src);
    if (q->failed) goto nomem;
    return 0;
io:
    snprintf(q->err, q->errlen, "cannot read tensor '%s'", t->name);
    return -1;
nomem:
    snprintf(q->err, q->errlen, "out of memory converting tensor '%s'", t->name);
    return -1;
}

/* Chooses every tensor's type and declares it in w; refuses source types we cannot read. */
static attnd_status plan(const struct gguf *g, enum quantize_preset p, struct gguf_writer *w, enum tensor_type *types,
                         char *err, size_t errlen)
{
    int n_layers = 0;
    const int tied = gguf_find_tensor(g, "output.weight") == NULL;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        int l = layer_of(gguf_tensor(g, i)->name);
        if (l + 1 > n_layers) n_layers = l + 1;
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        const int as_output = !strcmp(t->name, "output.weight") || (tied && !strcmp(t->name, "token_embd.weight"));
        const int src_float = t->type == TENSOR_F32 || t->type == TENSOR_F16 || t->type == TENSOR_BF16;
        if (!cpu_type_supported((enum tensor_type)t->type)) {
            snprintf(err, errlen, "tensor '%s' has type %s, which attnd cannot read", t->name, tensor_type_name(t->type));
            return ATTND_ERR_UNSUPPORTED;
        }
        types[i] = quantize_tensor_type(p, t->name, t->n_dims, t->ne[0], layer_of(t->name), n_layers, as_output);
        /* never re-quantize an already quantized tensor into F32 (or into another type: dequantizing
         * first keeps the numbers but adds error, so quantized inputs are copied as they are) */
        if (!src_float) types[i] = (enum tensor_type)t->type;
        attnd_status st = gguf_writer_add_tensor(w, t->name, types[i], t->n_dims, t->ne);
        if (st) {
            snprintf(err, errlen, "cannot declare tensor '%s'", t->name);
            return st;
        }
    }
    return ATTND_OK;
}

/* See quantize.h. The output goes through gguf_writer_write (a .tmp file renamed at the end), so a
 * failure leaves no file at out. Not thread-safe with itself on the same out path. */
attnd_status quantize_file(const char *in, const char *out, enum quantize_preset p, int n_threads,
                           quantize_progress_fn progress, void *ud, char *err, size_t errlen)
{
    struct gguf *g = NULL;
    struct gguf_writer *w = NULL;
    struct qfile q = {.fd = -1, .progress = progress, .ud = ud, .err = err, .errlen = errlen};
    char gerr[384];
    attnd_status st = gguf_open(in, &g, gerr, sizeof gerr);
    if (st) {
        snprintf(err, errlen, "%s: %s", in, gerr);
        return st;
    }
    q.g = g;
    st = ATTND_ERR_NOMEM;
    snprintf(err, errlen, "out of memory");
    if (!(w = gguf_writer_create())) goto done;
    if (!(q.types = calloc((size_t)gguf_n_tensors(g) + 1, sizeof *q.types))) goto done;
    if ((st = tpool_create(n_threads < 1 ? 1 : n_threads, &q.pool))) goto done;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_kv_key(g, i);
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.alignment")) continue;
        if ((st = gguf_writer_copy_kv(w, g, i))) goto done;
    }
    if ((st = gguf_writer_set_u32(w, "general.file_type", g_presets[p].file_type))) goto done;
    if ((st = plan(g, p, w, q.types, err, errlen))) goto done;
    if ((q.fd = open(in, O_RDONLY | O_CLOEXEC)) < 0) {
        st = ATTND_ERR_IO;
        snprintf(err, errlen, "%s: cannot open", in);
        goto done;
    }
    char werr[384] = "";
    err[0] = 0;
    if ((st = gguf_writer_write(w, out, fill_tensor, &q, werr, sizeof werr)) && !err[0])
        snprintf(err, errlen, "%s: %s", out, werr);
done:
    if (q.fd >= 0) close(q.fd);
    tpool_destroy(q.pool);
    free(q.types);
    gguf_writer_destroy(w);
    gguf_close(g);
    return st;
}
