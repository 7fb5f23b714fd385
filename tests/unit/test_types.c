/* test_types.c - the tensor type table, both parts (issue 33): core's description (attnd/tensor.h)
 * and the kernels' rows (kernels/cpu/cpu_kernels.c), walked over every type id, so a type added as
 * one row is checked here without a line of this file changing:
 *   the description: names unique and lower-case, block sizes known, the accessors agree with
 *     the row, an activation type whose blocks tile the weight type's;
 *   the kernels: the supported types are exactly the ones cpu_kernels.h lists, each takes the
 *     activation type its description names, and at every ISA level this CPU has, every variant
 *     the row allows, for 1, 3 and 40 tokens, writes the rows asked for (and no other) with the
 *     scalar reference's values within float rounding: |v - ref| <= 1e-4 * S, S the sum of
 *     |w_i| * (|x_i| + max|x| / 64) over the dequantized weights w and the float activations x
 *     (the activations' quantization error is at most max|x| / 254 per value). A wrong layout or
 *     a kernel of another type misses by far more. The weights are random bytes whose odd bytes
 *     are masked to 0x3b, so every f16/bf16/f32 field is finite and below 1 in magnitude. */
#include "attnd/tensor.h"
#include "kernels/cpu/cpu_kernels.h"

#include "tests/unit/testutil.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define N 512   /* a row: two 256-blocks */
#define ROWS 8  /* the GEMMs write rows [1, ROWS - 1) */
#define TOK 40  /* the most tokens of a case */
#define SENTINEL 12345.0f

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)g_rng;
}

static void test_description(void)
{
    for (uint32_t t = 0; t < TENSOR_TYPE_MAX + 2; t++) {
        const struct tensor_type_info *ti = tensor_type_info(t);
        T_CHECK((ti != NULL) == tensor_type_known(t), "type %u: known and info agree", t);
        if (!ti) {
            T_CHECK(!strcmp(tensor_type_name(t), "unknown") && tensor_block_elems(t) == 0 &&
                        tensor_block_bytes(t) == 0,
                    "type %u: an unknown id has no name or sizes", t);
            continue;
        }
        T_CHECK(ti->name && ti->name[0] && ti->block_elems >= 1 && ti->block_bytes >= 1, "type %u: a name and sizes", t);
        for (const char *c = ti->name; *c; c++) T_CHECK(!isupper((unsigned char)*c), "type %s: lower-case", ti->name);
        for (uint32_t u = 0; u < t; u++)
            T_CHECK(!tensor_type_known(u) || strcmp(tensor_type_name(u), ti->name), "types %u and %u: one name", u, t);
        T_CHECK(tensor_type_name(t) == ti->name && tensor_block_elems(t) == ti->block_elems &&
                    tensor_block_bytes(t) == ti->block_bytes && tensor_dot_type(t) == ti->dot_type,
                "type %s: the accessors read its row", ti->name);
        const uint32_t d = ti->dot_type;
        T_CHECK(tensor_type_known(d) && ti->block_elems % tensor_block_elems(d) == 0,
                "type %s: activation type %s tiles its blocks", ti->name, tensor_type_name(d));
        uint64_t nb = 0;
        T_CHECK(tensor_nbytes(t, (uint64_t)ti->block_elems * 3, &nb) == 0 && nb == 3ull * ti->block_bytes,
                "type %s: three blocks are three blocks' bytes", ti->name);
    }
}

/* The types cpu_kernels.h says the kernels compute with. */
static const enum tensor_type k_listed[] = {TENSOR_F32,  TENSOR_F16,  TENSOR_BF16, TENSOR_Q8_0,   TENSOR_Q4_0,
                                            TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_IQ4_NL, TENSOR_Q2_K,
                                            TENSOR_Q3_K, TENSOR_Q4_K, TENSOR_Q5_K, TENSOR_Q6_K,   TENSOR_IQ4_XS};

static void test_supported(void)
{
    int listed[TENSOR_TYPE_MAX] = {0};
    for (size_t i = 0; i < sizeof k_listed / sizeof k_listed[0]; i++) listed[k_listed[i]] = 1;
    for (int t = 0; t < TENSOR_TYPE_MAX; t++) {
        T_CHECK(cpu_type_supported((enum tensor_type)t) == listed[t], "type %d (%s): supported as listed", t,
                tensor_type_name((uint32_t)t));
        T_CHECK(cpu_vec_dot_type((enum tensor_type)t) == tensor_dot_type((uint32_t)t), "type %s: one activation type",
                tensor_type_name((uint32_t)t));
        if (!listed[t]) continue;
        const enum tensor_type d = cpu_vec_dot_type((enum tensor_type)t);
        T_CHECK(d == TENSOR_F32 || d == TENSOR_Q8_0 || d == TENSOR_Q8_K, "type %s: a preparable activation type",
                tensor_type_name((uint32_t)t));
    }
    T_CHECK(!cpu_type_supported((enum tensor_type)TENSOR_TYPE_MAX) && !cpu_type_supported((enum tensor_type)-1),
            "ids outside the table are unsupported");
}

/* One case's data: weights, activations (float and prepared) and the bound of each output. */
struct data {
    enum tensor_type t;
    size_t wrb, arb;
    unsigned char *w, *a;
    float x[TOK * N];
    double bound[TOK * ROWS];
};

static void make_data(struct data *d, enum tensor_type t)
{
    d->t = t;
    d->wrb = N / tensor_block_elems(t) * tensor_block_bytes(t);
    uint64_t arb = 0;
    tensor_nbytes(cpu_vec_dot_type(t), N, &arb);
    d->arb = (size_t)arb;
    d->w = t_xmalloc(d->wrb * ROWS);
    d->a = t_xmalloc(d->arb * TOK);
    for (size_t i = 0; i < d->wrb * ROWS; i++) d->w[i] = (unsigned char)(i % 2 ? rnd() & 0x3b : rnd());
    for (size_t i = 0; i < TOK * N; i++) d->x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
    for (size_t j = 0; j < TOK; j++) cpu_prepare_row(t, d->x + j * N, d->a + j * d->arb, N);
    float wd[N];
    for (size_t r = 0; r < ROWS; r++) {
        cpu_dequant_row(t, d->w + r * d->wrb, wd, N);
        for (size_t j = 0; j < TOK; j++) {
            double s = 0, m = 0;
            for (size_t i = 0; i < N; i++) m = fmax(m, fabs(d->x[j * N + i]));
            for (size_t i = 0; i < N; i++) s += fabs(wd[i]) * (fabs(d->x[j * N + i]) + m / 64);
            d->bound[j * ROWS + r] = 1e-4 * s + 1e-30;
        }
    }
}

/* Variant v at the current ISA for n_tok tokens against the reference, and the rows outside [1, ROWS-1) untouched. */
static void check_variant(const struct data *d, enum cpu_variant v, size_t n_tok, const float *ref)
{
    static float y[TOK * ROWS];
    for (size_t i = 0; i < TOK * ROWS; i++) y[i] = SENTINEL;
    cpu_gemm_variant(v, d->t, N, d->w, d->wrb, 1, ROWS - 1, d->a, d->arb, n_tok, y, ROWS);
    int off = 0, stray = 0;
    for (size_t j = 0; j < n_tok; j++)
        for (size_t r = 0; r < ROWS; r++) {
            const float got = y[j * ROWS + r];
            if (r == 0 || r == ROWS - 1) stray += got != SENTINEL;
            else off += !(fabs((double)got - ref[j * ROWS + r]) <= d->bound[j * ROWS + r]);
        }
    T_CHECK(off == 0 && stray == 0, "%s %s at %s, %zu tokens: %d outputs off the reference, %d written outside",
            tensor_type_name(d->t), cpu_variant_name(v), cpu_isa_name(cpu_kernels_init()), n_tok, off, stray);
}

static void test_kernels_of(enum tensor_type t, enum cpu_isa start)
{
    static struct data d;
    make_data(&d, t);
    static float ref[TOK * ROWS];
    cpu_gemm_ref(t, N, d.w, d.wrb, 0, ROWS, d.a, d.arb, TOK, ref, ROWS);
    int finite = 1;
    for (size_t i = 0; i < TOK * ROWS; i++) finite &= isfinite(ref[i]) != 0;
    T_CHECK(finite, "%s: the reference is finite on tame weights", tensor_type_name(t));
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_kernels_max_isa(); isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        for (size_t j = 0; j < TOK; j++) {
            const float dot = cpu_vec_dot(t, N, d.w + 2 * d.wrb, d.a + j * d.arb);
            T_CHECK(fabs((double)dot - ref[j * ROWS + 2]) <= d.bound[j * ROWS + 2], "%s dot at %s, token %zu: %g vs %g",
                    tensor_type_name(t), cpu_isa_name((enum cpu_isa)isa), j, (double)dot, (double)ref[j * ROWS + 2]);
        }
        const size_t toks[] = {1, 3, TOK};
        for (size_t k = 0; k < 3; k++)
            for (int v = 0; v < CPU_N_VARIANTS; v++)
                if (cpu_variant_available(cpu_family_of(toks[k]), t, (enum cpu_variant)v))
                    check_variant(&d, (enum cpu_variant)v, toks[k], ref);
    }
    cpu_kernels_set_isa(start);
    free(d.w);
    free(d.a);
}

int main(void)
{
    const enum cpu_isa start = cpu_kernels_init();
    test_description();
    test_supported();
    for (int t = 0; t < TENSOR_TYPE_MAX; t++)
        if (cpu_type_supported((enum tensor_type)t)) test_kernels_of((enum tensor_type)t, start);
    fprintf(stderr, "test_types: %d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
