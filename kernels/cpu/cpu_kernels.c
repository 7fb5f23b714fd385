/* cpu_kernels.c - CPU kernels: run-time ISA dispatch, the kernels part of the tensor type table
 * (one row per weight type: dequantize, dot, row GEMM and matrix-vector product per ISA level, the
 * wide GEMMs it allows), and the scalar reference kernels of F32/F16/BF16/Q8_0/Q4_0 (which are
 * also the kernels of the "scalar" ISA). The SIMD versions live in kernels_avx2.c,
 * kernels_avx512.c, kernels_amx.c and quants*.c; this file is built for baseline x86-64 and never
 * uses their instructions itself. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_kernels_impl.h"
#include "kernels/cpu/quants.h"

#include "attnd/check.h"
#include "attnd/log.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* ================================================================ conversions */

/* The scalar conversions are core's (attnd/tensor.h), exported here under the kernels' names. */
float cpu_f16_to_f32(uint16_t h) { return tensor_f16_to_f32(h); }

uint16_t cpu_f32_to_f16(float f) { return tensor_f32_to_f16(f); }

float cpu_bf16_to_f32(uint16_t h) { return tensor_bf16_to_f32(h); }

uint16_t cpu_f32_to_bf16(float f) { return tensor_f32_to_bf16(f); }

static void ref_f16_to_f32_row(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(src[i]);
}

static void ref_f32_to_f16_row(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

static size_t ref_argmax(const float *x, size_t n)
{
    size_t best = n;
    float bv = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (x[i] > bv) { /* NaN never compares greater */
            bv = x[i];
            best = i;
        }
    return best;
}

static void ref_rmsnorm_row(float *out, const float *x, const float *w, size_t n, float eps)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (size_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void ref_swiglu_row(float *g, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void ref_add_row(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static size_t ref_find_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* ================================================================ scalar reference kernels */

/* Rows are addressed through byte pointers; these loads work at any alignment. */
static inline float ld_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint16_t ld_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Float types accumulate exact products in double, as the reference engine's scalar path does. */
static float ref_dot_f32(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)ld_f32(pw + 4 * i) * (double)ld_f32(pa + 4 * i);
    return (float)s;
}

static float ref_dot_f16(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)cpu_f16_to_f32(ld_u16(pw + 2 * i)) * (double)ld_f32(pa + 4 * i);
    return (float)s;
}

static float ref_dot_bf16(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)cpu_bf16_to_f32(ld_u16(pw + 2 * i)) * (double)ld_f32(pa + 4 * i);
    return (float)s;
}

/* Per block: exact integer dot, then sum += isum * (d_w * d_a) in float. */
static float ref_dot_q8_0(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    float sum = 0.0f;
    for (size_t b = 0; b < n / QK8_0; b++) {
        const unsigned char *bw = pw + b * CPU_Q8_0_BYTES, *ba = pa + b * CPU_Q8_0_BYTES;
        const int8_t *qw = (const int8_t *)(bw + 2), *qa = (const int8_t *)(ba + 2);
        int isum = 0;
        for (int k = 0; k < QK8_0; k++) isum += qw[k] * qa[k];
        sum += (float)isum * (cpu_f16_to_f32(ld_u16(bw)) * cpu_f16_to_f32(ld_u16(ba)));
    }
    return sum;
}

static float ref_dot_q4_0(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    float sum = 0.0f;
    for (size_t b = 0; b < n / QK4_0; b++) {
        const unsigned char *bw = pw + b * CPU_Q4_0_BYTES, *ba = pa + b * CPU_Q8_0_BYTES;
        const int8_t *qa = (const int8_t *)(ba + 2);
        int isum = 0;
        for (int k = 0; k < QK4_0 / 2; k++) {
            int lo = (bw[2 + k] & 0x0f) - 8, hi = (bw[2 + k] >> 4) - 8;
            isum += lo * qa[k] + hi * qa[k + QK4_0 / 2];
        }
        sum += (float)isum * (cpu_f16_to_f32(ld_u16(bw)) * cpu_f16_to_f32(ld_u16(ba)));
    }
    return sum;
}

static void ref_gemm_with(cpu_vec_dot_fn dot, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                          const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)
{
    for (size_t j = 0; j < n_tok; j++) {
        const unsigned char *aj = (const unsigned char *)a + j * a_row_bytes;
        for (size_t r = r0; r < r1; r++) y[j * y_stride + r] = dot(n, (const unsigned char *)w + r * w_row_bytes, aj);
    }
}

#define REF_GEMM(T)                                                                                          \
    static void ref_gemm_##T(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a, \
                             size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)                      \
    {                                                                                                        \
        ref_gemm_with(ref_dot_##T, n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);           \
    }
REF_GEMM(f32)
REF_GEMM(f16)
REF_GEMM(bf16)
REF_GEMM(q8_0)
REF_GEMM(q4_0)
#undef REF_GEMM

/* d = max|x| / 127 (stored as f16); q = round-to-nearest-even(x * id) with id = 1/d computed
 * from the unrounded d. The clamp keeps q in [-127, 127] (the SIMD dot products rely on it)
 * and sends NaN to -127 exactly as the SIMD max/min instructions do. */
static void ref_quantize_q8_0(const float *x, void *dst, size_t n)
{
    unsigned char *out = dst;
    for (size_t b = 0; b < n / QK8_0; b++, out += CPU_Q8_0_BYTES) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int k = 0; k < QK8_0; k++) {
            float ax = fabsf(xb[k]);
            if (ax > amax) amax = ax;
        }
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t hd = cpu_f32_to_f16(d);
        memcpy(out, &hd, sizeof hd);
        for (int k = 0; k < QK8_0; k++) {
            float v = xb[k] * id;
            if (!(v >= -127.0f)) v = -127.0f;
            if (v > 127.0f) v = 127.0f;
            out[2 + k] = (unsigned char)(int8_t)(int)nearbyintf(v);
        }
    }
}

/* Dequantization of the types this file has references for (t is the row's own type). */
static void dequant_f32(enum tensor_type t, const void *src, float *dst, size_t n)
{
    memmove(dst, src, n * sizeof(float));
}

static void dequant_f16(enum tensor_type t, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    for (size_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(ld_u16(p + 2 * i));
}

static void dequant_bf16(enum tensor_type t, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    for (size_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_f32(ld_u16(p + 2 * i));
}

static void dequant_q8_0(enum tensor_type t, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    for (size_t b = 0; b < n / QK8_0; b++, p += CPU_Q8_0_BYTES) {
        float d = cpu_f16_to_f32(ld_u16(p));
        const int8_t *q = (const int8_t *)(p + 2);
        for (int k = 0; k < QK8_0; k++) dst[b * QK8_0 + k] = d * (float)q[k];
    }
}

static void dequant_q4_0(enum tensor_type t, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    for (size_t b = 0; b < n / QK4_0; b++, p += CPU_Q4_0_BYTES) {
        float d = cpu_f16_to_f32(ld_u16(p));
        for (int k = 0; k < QK4_0 / 2; k++) {
            dst[b * QK4_0 + k] = d * (float)((p[2 + k] & 0x0f) - 8);
            dst[b * QK4_0 + k + QK4_0 / 2] = d * (float)((p[2 + k] >> 4) - 8);
        }
    }
}

/* ================================================================ the per-ISA row kernels */

/* What every weight type shares at an ISA: conversions, activation quantizers, float-row scans. */
struct kernel_set {
    void (*quantize_q8_0)(const float *x, void *dst, size_t n);
    void (*quantize_q8_k)(const float *x, void *dst, size_t n);
    void (*h2f)(const uint16_t *src, float *dst, size_t n);
    void (*f2h)(const float *src, uint16_t *dst, size_t n);
    size_t (*argmax)(const float *x, size_t n);
    size_t (*find_nonfinite)(const float *x, size_t n);
    void (*swiglu)(float *g, const float *u, size_t n);
    void (*rmsnorm)(float *out, const float *x, const float *w, size_t n, float eps);
    void (*add)(float *x, const float *y, size_t n);
};

static const struct kernel_set g_sets[3] = { /* by ISA; CPU_ISA_AMX runs the AVX-512 set */
    [CPU_ISA_SCALAR] = {ref_quantize_q8_0, quants_quantize_row_q8_k, ref_f16_to_f32_row, ref_f32_to_f16_row,
                        ref_argmax, ref_find_nonfinite, ref_swiglu_row, ref_rmsnorm_row, ref_add_row},
    [CPU_ISA_AVX2] = {cpu_avx2_quantize_row_q8_0, quants_avx2_quantize_row_q8_k, cpu_avx2_f16_to_f32_row,
                      cpu_avx2_f32_to_f16_row, cpu_avx2_argmax, cpu_avx2_find_nonfinite, cpu_avx2_swiglu_row,
                      cpu_avx2_rmsnorm_row, cpu_avx2_add_row},
    [CPU_ISA_AVX512] = {cpu_avx512_quantize_row_q8_0, quants_avx2_quantize_row_q8_k, /* one Q8_K quantizer */
                        cpu_avx512_f16_to_f32_row, cpu_avx512_f32_to_f16_row,
                        cpu_avx2_argmax, /* memory-bound: the AVX2 scan keeps up */
                        cpu_avx2_find_nonfinite, cpu_avx512_swiglu_row, cpu_avx2_rmsnorm_row,
                        cpu_avx2_add_row}, /* memory-bound */
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static enum cpu_isa g_cpu_max = CPU_ISA_SCALAR; /* written once under g_once */
static int g_vnni;                              /* AVX-512 VNNI present (with g_cpu_max AVX512); once */
static atomic_int g_isa = -1;                   /* ISA in use; -1 until cpu_kernels_init() */

static enum cpu_isa detect_cpu(void)
{
    enum cpu_isa isa = CPU_ISA_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    /* libgcc's checks include the OS saving the ymm/zmm state (XGETBV). */
    __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 16
    const int f16c = 1; /* clang < 16 (the fuzz build) cannot ask for f16c; every AVX2 CPU has it */
#else
    const int f16c = __builtin_cpu_supports("f16c");
#endif
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
        isa = CPU_ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            isa = CPU_ISA_AVX512;
    }
#endif
    return isa;
}

/* AVX-512 VNNI (vpdpbusd/vpdpwssd), which quants_avx512.c needs beside the AVX512 ISA's extensions. */
static int detect_vnni(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && !(defined(__clang__) && __clang_major__ < 16)
    return __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* The AMX tile unit with INT8 and BF16, AVX-512 BF16 beside it, the OS saving the tile state
 * (XCR0 bits 17 and 18) and the kernel granting this process the tile data (Linux asks for it once
 * per process: arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA). CPUID, not
 * __builtin_cpu_supports: older compilers do not know the AMX names. */
static int detect_amx(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const int tile = (d >> 24) & 1, int8 = (d >> 25) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !int8 || !bf16) return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return 0; /* AVX512_BF16 */
    unsigned lo, hi; /* XGETBV is there: the AVX-512 check (g_vnni) already needed OSXSAVE */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return 0;
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        log_info("cpu kernels: the kernel refused the AMX tile data (arch_prctl); AMX not used");
        return 0;
    }
    return 1;
#else
    return 0;
#endif
}

static void init_once(void)
{
    g_cpu_max = detect_cpu();
    g_vnni = g_cpu_max == CPU_ISA_AVX512 && detect_vnni();
    if (g_vnni && detect_amx()) g_cpu_max = CPU_ISA_AMX;
    enum cpu_isa use = g_cpu_max;
    const char *cap = getenv("ATTND_ISA");
    if (cap && *cap) {
        int want = -1;
        for (int i = 0; i <= CPU_ISA_AMX; i++)
            if (!strcasecmp(cap, cpu_isa_name((enum cpu_isa)i))) want = i;
        if (want < 0)
            log_warn("ATTND_ISA=%s is not scalar|avx2|avx512|amx; ignored", cap);
        else if ((enum cpu_isa)want < use)
            use = (enum cpu_isa)want;
    }
    atomic_store(&g_isa, (int)use);
    log_debug("cpu kernels: using %s (cpu supports %s)", cpu_isa_name(use), cpu_isa_name(g_cpu_max));
}

/* Detects once (pthread_once); returns the ISA in use, which cpu_kernels_set_isa() may have changed. */
enum cpu_isa cpu_kernels_init(void)
{
    pthread_once(&g_once, init_once);
    return (enum cpu_isa)atomic_load(&g_isa);
}

/* Caps isa at what the CPU supports and switches to it for all threads. For tests/benchmarks:
 * kernels already running on other threads finish with the ISA they started with. */
enum cpu_isa cpu_kernels_set_isa(enum cpu_isa isa)
{
    pthread_once(&g_once, init_once);
    if ((int)isa < 0) isa = CPU_ISA_SCALAR;
    if (isa > g_cpu_max) isa = g_cpu_max;
    atomic_store(&g_isa, (int)isa);
    return isa;
}

enum cpu_isa cpu_kernels_max_isa(void)
{
    pthread_once(&g_once, init_once);
    return g_cpu_max;
}

/* Static string; "unknown" for values outside the enum. */
const char *cpu_isa_name(enum cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_SCALAR: return "scalar";
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    case CPU_ISA_AMX: return "amx";
    }
    return "unknown";
}

static inline const struct kernel_set *active(void)
{
    int i = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (i < 0) i = (int)cpu_kernels_init();
    return &g_sets[i > CPU_ISA_AVX512 ? CPU_ISA_AVX512 : i];
}

/* ================================================================ the type table (kernels part)
 *
 * One row per weight type, keyed by enum tensor_type (the description part, name, block size and
 * bytes and the activation type, is core's: attnd/tensor.h). A type is supported when its row has
 * a scalar dot. Per ISA level it names the dot, the row GEMM (NULL: quants_gemm, one weight row at
 * a time through the dot) and the one-token matrix-vector product tried first (NULL, or 0 returned:
 * the row GEMM); then the wide GEMMs for 2+ tokens it allows (NULL: not allowed). A level or wide
 * slot left NULL is a variant the type does not have (cpu_variant_available). */

/* Levels: the scalar reference, AVX2+FMA+F16C, AVX-512 F/BW/VL/DQ, and AVX-512 with VNNI (what an
 * AVX-512 ISA runs where the CPU has VNNI). The quants.c types have no AVX-512 level without VNNI:
 * AVX-512 machines without it run their AVX2 kernels. */
enum level { LV_REF, LV_AVX2, LV_AVX512, LV_VNNI, N_LEVELS };
/* The wide GEMMs, in the order of their variants: CPU_VAR_PANEL, CPU_VAR_VNNI_PANEL, CPU_VAR_AMX and
 * the small-batch CPU_VAR_AVX2_BATCH, CPU_VAR_VNNI_BATCH. */
enum wide { W_PANEL, W_VNNI_PANEL, W_AMX, W_AVX2_BATCH, W_VNNI_BATCH, N_WIDE };
_Static_assert(CPU_VAR_VNNI_PANEL == CPU_VAR_PANEL + W_VNNI_PANEL && CPU_VAR_AMX == CPU_VAR_PANEL + W_AMX &&
                   CPU_VAR_AVX2_BATCH == CPU_VAR_PANEL + W_AVX2_BATCH &&
                   CPU_VAR_VNNI_BATCH == CPU_VAR_PANEL + W_VNNI_BATCH && CPU_N_VARIANTS == CPU_VAR_PANEL + N_WIDE,
               "the wide variants are the last five, in enum wide's order");

/* A GEMM that takes its type and may decline (returns 0: nothing written). */
typedef int (*wide_fn)(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                       const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
/* One token: y[r] for r in [r0, r1); returns 0, writing nothing, when it declines. */
typedef int (*matvec_fn)(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                         const void *a, float *y);

struct type_kernels {
    void (*dequant)(enum tensor_type t, const void *src, float *dst, size_t n);
    cpu_vec_dot_fn dot[N_LEVELS];
    cpu_gemm_fn gemm[N_LEVELS];
    matvec_fn matvec[N_LEVELS];
    wide_fn wide[N_WIDE];
};

/* The float panel GEMMs (AVX2) in the wide shape: they take every n_tok and never decline. */
#define FLOAT_PANEL(T)                                                                                        \
    static int panel_##T(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, \
                         const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)            \
    {                                                                                                         \
        cpu_avx2_gemm_panel_##T(n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);               \
        return 1;                                                                                             \
    }
FLOAT_PANEL(f32)
FLOAT_PANEL(f16)
FLOAT_PANEL(bf16)
#undef FLOAT_PANEL

/* The AVX2 Q8_0/Q4_0 matrix-vector product runs on AVX-512 machines without VNNI too. */
#define MV_Q8 {NULL, quants_avx2_matvec_q, quants_avx2_matvec_q, quants_avx512_matvec_q}
#define MV_K {NULL, quants_avx2_matvec_q, NULL, quants_avx512_matvec_q}
/* A quants.c type: its dots per level (no AVX-512 level without VNNI), rows through quants_gemm. */
#define QUANTS_DOTS(T) {quants_ref_dot_##T, quants_avx2_dot_##T, NULL, quants_avx512_dot_##T}
#define INT8_WIDE {quants_avx2_gemm, quants_avx512_gemm, cpu_amx_gemm}
/* ... and the small-batch GEMMs (Q4_0 and the types with unsigned quants and a min) */
#define INT8_BATCH {quants_avx2_gemm, quants_avx512_gemm, cpu_amx_gemm, quants_avx2_batch, quants_avx512_batch}
#define INT8_PANELS {quants_avx2_gemm, quants_avx512_gemm, NULL} /* no AMX: scales per 16 weights */

static const struct type_kernels g_kernels[TENSOR_TYPE_MAX] = {
    [TENSOR_F32] = {dequant_f32,
                    {ref_dot_f32, cpu_avx2_vec_dot_f32, cpu_avx512_vec_dot_f32, cpu_avx512_vec_dot_f32},
                    {ref_gemm_f32, cpu_avx2_gemm_f32, cpu_avx512_gemm_f32, cpu_avx512_gemm_f32},
                    {NULL},
                    {panel_f32, NULL, NULL}},
    [TENSOR_F16] = {dequant_f16,
                    {ref_dot_f16, cpu_avx2_vec_dot_f16, cpu_avx512_vec_dot_f16, cpu_avx512_vec_dot_f16},
                    {ref_gemm_f16, cpu_avx2_gemm_f16, cpu_avx512_gemm_f16, cpu_avx512_gemm_f16},
                    {NULL},
                    {panel_f16, NULL, cpu_amx_gemm}},
    [TENSOR_BF16] = {dequant_bf16,
                     {ref_dot_bf16, cpu_avx2_vec_dot_bf16, cpu_avx512_vec_dot_bf16, cpu_avx512_vec_dot_bf16},
                     {ref_gemm_bf16, cpu_avx2_gemm_bf16, cpu_avx512_gemm_bf16, cpu_avx512_gemm_bf16},
                     {NULL},
                     {panel_bf16, NULL, cpu_amx_gemm}},
    /* no AVX2 panel: its sign trick cannot negate a Q8_0 weight of -128; no AVX2 small-batch GEMM:
     * its sign trick costs as much as the row kernel (a 0.5B-shape decode step of 4 tokens 145 ms
     * against 97, one thread; quants_avx2_batch still takes Q8_0) */
    [TENSOR_Q8_0] = {dequant_q8_0,
                     {ref_dot_q8_0, cpu_avx2_vec_dot_q8_0, cpu_avx512_vec_dot_q8_0, cpu_avx512_vec_dot_q8_0},
                     {ref_gemm_q8_0, cpu_avx2_gemm_q8_0, cpu_avx512_gemm_q8_0, cpu_avx512_gemm_q8_0},
                     MV_Q8,
                     {NULL, quants_avx512_gemm, cpu_amx_gemm, NULL, quants_avx512_batch}},
    [TENSOR_Q4_0] = {dequant_q4_0,
                     {ref_dot_q4_0, cpu_avx2_vec_dot_q4_0, cpu_avx512_vec_dot_q4_0, cpu_avx512_vec_dot_q4_0},
                     {ref_gemm_q4_0, cpu_avx2_gemm_q4_0, cpu_avx512_gemm_q4_0, cpu_avx512_gemm_q4_0},
                     MV_Q8,
                     INT8_BATCH},
    [TENSOR_Q4_1] = {quants_dequant_row, QUANTS_DOTS(q4_1), {NULL}, {NULL}, INT8_BATCH},
    [TENSOR_Q5_0] = {quants_dequant_row, QUANTS_DOTS(q5_0), {NULL}, {NULL, NULL, NULL, quants_avx512_matvec_q},
                     INT8_WIDE},
    [TENSOR_Q5_1] = {quants_dequant_row, QUANTS_DOTS(q5_1), {NULL}, {NULL}, INT8_BATCH},
    [TENSOR_IQ4_NL] = {quants_dequant_row, QUANTS_DOTS(iq4_nl), {NULL}, {NULL}, INT8_WIDE},
    /* no wide GEMM: its mins are per 16 weights */
    [TENSOR_Q2_K] = {quants_dequant_row, QUANTS_DOTS(q2_k), {NULL}, {NULL}, {NULL}},
    [TENSOR_Q3_K] = {quants_dequant_row, QUANTS_DOTS(q3_k), {NULL}, {NULL}, INT8_PANELS},
    [TENSOR_Q4_K] = {quants_dequant_row, QUANTS_DOTS(q4_k), {NULL}, MV_K, INT8_BATCH},
    [TENSOR_Q5_K] = {quants_dequant_row, QUANTS_DOTS(q5_k), {NULL}, MV_K, INT8_BATCH},
    [TENSOR_Q6_K] = {quants_dequant_row, QUANTS_DOTS(q6_k), {NULL}, MV_K, INT8_PANELS},
    [TENSOR_IQ4_XS] = {quants_dequant_row, QUANTS_DOTS(iq4_xs), {NULL}, {NULL}, INT8_WIDE},
};
#undef MV_Q8
#undef MV_K
#undef QUANTS_DOTS
#undef INT8_WIDE
#undef INT8_BATCH
#undef INT8_PANELS

/* The row of a supported type whose n fits its block size; anything else is a caller bug. */
static const struct type_kernels *checked_row(enum tensor_type t, size_t n)
{
    ATTND_CHECK(cpu_type_supported(t));
    ATTND_CHECK(n % tensor_block_elems(t) == 0);
    return &g_kernels[t];
}

/* The level variant v runs (the wide variants: where they decline, the AVX2 row kernels). */
static enum level variant_level(enum cpu_variant v)
{
    switch (v) {
    case CPU_VAR_SCALAR: return LV_REF;
    case CPU_VAR_AVX512: return g_vnni ? LV_VNNI : LV_AVX512;
    default: return LV_AVX2;
    }
}

/* The level ISA isa runs for row k: the widest it has at or below isa's. */
static enum level isa_level(const struct type_kernels *k, int isa)
{
    if (isa >= CPU_ISA_AVX512 && k->dot[g_vnni ? LV_VNNI : LV_AVX512]) return g_vnni ? LV_VNNI : LV_AVX512;
    if (isa >= CPU_ISA_AVX2 && k->dot[LV_AVX2]) return LV_AVX2;
    return LV_REF;
}

/* Dispatched; every ISA gives the bits of cpu_f16_to_f32. */
void cpu_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) { active()->h2f(src, dst, n); }

/* Dispatched; every ISA gives the bits of cpu_f32_to_f16. */
void cpu_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) { active()->f2h(src, dst, n); }

size_t cpu_argmax(const float *x, size_t n) { return active()->argmax(x, n); }
size_t cpu_argmax_ref(const float *x, size_t n) { return ref_argmax(x, n); }
size_t cpu_find_nonfinite(const float *x, size_t n) { return active()->find_nonfinite(x, n); }
size_t cpu_find_nonfinite_ref(const float *x, size_t n) { return ref_find_nonfinite(x, n); }
void cpu_swiglu_row(float *g, const float *u, size_t n) { active()->swiglu(g, u, n); }
void cpu_swiglu_row_ref(float *g, const float *u, size_t n) { ref_swiglu_row(g, u, n); }
void cpu_add_row(float *x, const float *y, size_t n) { active()->add(x, y, n); }
void cpu_add_row_ref(float *x, const float *y, size_t n) { ref_add_row(x, y, n); }
void cpu_rmsnorm_row(float *out, const float *x, const float *w, size_t n, float eps)
{
    active()->rmsnorm(out, x, w, n, eps);
}
void cpu_rmsnorm_row_ref(float *out, const float *x, const float *w, size_t n, float eps)
{
    ref_rmsnorm_row(out, x, w, n, eps);
}

/* ================================================================ public kernels */

/* A row with a scalar dot (g_kernels). */
int cpu_type_supported(enum tensor_type t) { return (unsigned)t < TENSOR_TYPE_MAX && g_kernels[t].dot[LV_REF]; }

/* The type table's activation type (attnd/tensor.h): TENSOR_Q8_K for the K-quants and IQ4_XS,
 * TENSOR_Q8_0 for the other quantized types, TENSOR_F32 otherwise (also for unsupported types). */
enum tensor_type cpu_vec_dot_type(enum tensor_type t) { return tensor_dot_type(t); }

/* Aborts (ATTND_CHECK) on an unsupported type or an n that is not a multiple of the block size. */
void cpu_dequant_row(enum tensor_type t, const void *src, float *dst, size_t n)
{
    checked_row(t, n)->dequant(t, src, dst, n);
}

/* Dispatched; every ISA writes the same bytes. Aborts if n % 32 != 0. */
void cpu_quantize_row_q8_0(const float *x, void *dst, size_t n)
{
    ATTND_CHECK(n % QK8_0 == 0);
    active()->quantize_q8_0(x, dst, n);
}

/* Scalar (only mkmodel uses it). m = the value of largest magnitude, d = m / -8,
 * q = clamp(round-to-nearest-even(x / d), -8, 7) + 8; NaN gives q = 0. */
void cpu_quantize_row_q4_0(const float *x, void *dst, size_t n)
{
    ATTND_CHECK(n % QK4_0 == 0);
    unsigned char *out = dst;
    for (size_t b = 0; b < n / QK4_0; b++, out += CPU_Q4_0_BYTES) {
        const float *xb = x + b * QK4_0;
        float amax = 0.0f, m = 0.0f;
        for (int k = 0; k < QK4_0; k++) {
            if (fabsf(xb[k]) > amax) {
                amax = fabsf(xb[k]);
                m = xb[k];
            }
        }
        float d = m / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t hd = cpu_f32_to_f16(d);
        memcpy(out, &hd, sizeof hd);
        unsigned char q[QK4_0];
        for (int k = 0; k < QK4_0; k++) {
            float v = xb[k] * id;
            if (!(v >= -8.0f)) v = -8.0f;
            if (v > 7.0f) v = 7.0f;
            q[k] = (unsigned char)((int)nearbyintf(v) + 8);
        }
        for (int k = 0; k < QK4_0 / 2; k++) out[2 + k] = (unsigned char)(q[k] | (q[k + QK4_0 / 2] << 4));
    }
}

/* F32/F16/BF16 weights: copies x (dst may equal x). Q8_0 activations: cpu_quantize_row_q8_0;
 * Q8_K: quants_quantize_row_q8_k (or its AVX2 twin, the same bits). */
void cpu_prepare_row(enum tensor_type t, const float *x, void *dst, size_t n)
{
    (void)checked_row(t, n);
    switch (tensor_dot_type(t)) {
    case TENSOR_Q8_0: active()->quantize_q8_0(x, dst, n); return;
    case TENSOR_Q8_K: active()->quantize_q8_k(x, dst, n); return;
    default:
        if (dst != (const void *)x) memmove(dst, x, n * sizeof(float));
        return;
    }
}

/* Dispatched dot product; aborts on an unsupported type or a partial block. */
float cpu_vec_dot(enum tensor_type t, size_t n, const void *w, const void *a)
{
    const struct type_kernels *k = checked_row(t, n);
    return k->dot[isa_level(k, (int)cpu_kernels_init())](n, w, a);
}

/* Scalar reference of cpu_vec_dot (float types summed in double). */
float cpu_vec_dot_ref(enum tensor_type t, size_t n, const void *w, const void *a)
{
    return checked_row(t, n)->dot[LV_REF](n, w, a);
}

/* ================================================================ variants */

static _Atomic unsigned char g_choice[CPU_N_FAMILIES][TENSOR_TYPE_MAX]; /* 0: none (the rule); v + 1 */

enum cpu_family cpu_family_of(size_t n_tok)
{
    return n_tok <= 1 ? CPU_FAM_MATVEC : n_tok <= CPU_BATCH_MAX ? CPU_FAM_BATCH : CPU_FAM_GEMM;
}

const char *cpu_family_name(enum cpu_family f)
{
    static const char *const names[CPU_N_FAMILIES] = {"matvec", "batch", "gemm"};
    return (unsigned)f < CPU_N_FAMILIES ? names[f] : "unknown";
}

const char *cpu_variant_name(enum cpu_variant v)
{
    static const char *const names[CPU_N_VARIANTS] = {"scalar",     "avx2", "avx512",     "avx2-panel",
                                                      "vnni-panel", "amx",  "avx2-batch", "vnni-batch"};
    return (unsigned)v < CPU_N_VARIANTS ? names[v] : "unknown";
}

/* What each variant needs of the CPU beside its kernel in the type's row: the ISA, VNNI, 2+ tokens
 * (the wide GEMMs) and the batch family (the small-batch GEMMs). */
static const struct {
    enum cpu_isa isa;
    unsigned char vnni, wide, batch;
} g_variant_needs[CPU_N_VARIANTS] = {
    [CPU_VAR_SCALAR] = {CPU_ISA_SCALAR, 0, 0}, [CPU_VAR_AVX2] = {CPU_ISA_AVX2, 0, 0},
    [CPU_VAR_AVX512] = {CPU_ISA_AVX512, 0, 0}, [CPU_VAR_PANEL] = {CPU_ISA_AVX2, 0, 1},
    [CPU_VAR_VNNI_PANEL] = {CPU_ISA_AVX512, 1, 1}, [CPU_VAR_AMX] = {CPU_ISA_AMX, 1, 1},
    [CPU_VAR_AVX2_BATCH] = {CPU_ISA_AVX2, 0, 1, 1}, [CPU_VAR_VNNI_BATCH] = {CPU_ISA_AVX512, 1, 1, 1},
};

int cpu_variant_available(enum cpu_family f, enum tensor_type t, enum cpu_variant v)
{
    if ((unsigned)f >= CPU_N_FAMILIES || (unsigned)v >= CPU_N_VARIANTS || !cpu_type_supported(t)) return 0;
    const struct type_kernels *k = &g_kernels[t];
    if (cpu_kernels_init() < g_variant_needs[v].isa || (g_variant_needs[v].vnni && !g_vnni)) return 0;
    if (g_variant_needs[v].batch && f != CPU_FAM_BATCH) return 0;
    if (g_variant_needs[v].wide) return f != CPU_FAM_MATVEC && k->wide[v - CPU_VAR_PANEL] != NULL;
    return k->dot[variant_level(v)] != NULL;
}

/* AMX tiles for 2+ tokens of their types where the CPU has them, else for the batch family the
 * small-batch GEMM (VNNI, then AVX2) of its types, else the VNNI int8 panel where the CPU has VNNI,
 * else the AVX2 int8 panel and the float panel for prompts, else the widest ISA that has the type.
 * Float weights are those whose activations stay F32 (tensor_dot_type). */
enum cpu_variant cpu_kernels_rule(enum cpu_family f, enum tensor_type t)
{
    if (cpu_variant_available(f, t, CPU_VAR_AMX)) return CPU_VAR_AMX;
    if (cpu_variant_available(f, t, CPU_VAR_VNNI_BATCH)) return CPU_VAR_VNNI_BATCH;
    if (cpu_variant_available(f, t, CPU_VAR_VNNI_PANEL)) return CPU_VAR_VNNI_PANEL;
    if (cpu_variant_available(f, t, CPU_VAR_AVX2_BATCH)) return CPU_VAR_AVX2_BATCH;
    if (cpu_variant_available(f, t, CPU_VAR_PANEL) && (tensor_dot_type(t) != TENSOR_F32 || f == CPU_FAM_GEMM))
        return CPU_VAR_PANEL;
    if (cpu_variant_available(f, t, CPU_VAR_AVX512)) return CPU_VAR_AVX512;
    if (cpu_variant_available(f, t, CPU_VAR_AVX2)) return CPU_VAR_AVX2;
    return CPU_VAR_SCALAR;
}

enum cpu_variant cpu_kernels_choice(enum cpu_family f, enum tensor_type t)
{
    if ((unsigned)f < CPU_N_FAMILIES && (unsigned)t < TENSOR_TYPE_MAX) {
        const int c = atomic_load_explicit(&g_choice[f][t], memory_order_relaxed);
        if (c && cpu_variant_available(f, t, (enum cpu_variant)(c - 1))) return (enum cpu_variant)(c - 1);
    }
    return cpu_kernels_rule(f, t);
}

int cpu_kernels_choose(enum cpu_family f, enum tensor_type t, enum cpu_variant v)
{
    if ((unsigned)t >= TENSOR_TYPE_MAX || !cpu_variant_available(f, t, v)) return -1;
    atomic_store(&g_choice[f][t], (unsigned char)(v + 1));
    return 0;
}

void cpu_kernels_clear_choices(void)
{
    for (int f = 0; f < CPU_N_FAMILIES; f++)
        for (int t = 0; t < TENSOR_TYPE_MAX; t++) atomic_store(&g_choice[f][t], 0);
}

/* The kernels of (v, t) from t's row: a wide GEMM (falling back to the AVX2 row kernels where it
 * declines), else for one token the level's matrix-vector product, else its row GEMM. */
void cpu_gemm_variant(enum cpu_variant v, enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0,
                      size_t r1, const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)
{
    const struct type_kernels *k = checked_row(t, n);
    ATTND_CHECK(cpu_variant_available(cpu_family_of(n_tok), t, v));
    if (r0 >= r1 || n_tok == 0) return;
    if (v >= CPU_VAR_PANEL && k->wide[v - CPU_VAR_PANEL](t, n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y,
                                                        y_stride))
        return;
    const enum level lv = variant_level(v);
    if (n_tok == 1 && k->matvec[lv] && k->matvec[lv](t, n, w, w_row_bytes, r0, r1, a, y)) return;
    if (k->gemm[lv]) k->gemm[lv](n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);
    else quants_gemm(k->dot[lv], n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);
}

/* Dispatched matrix product (see cpu_kernels.h); aborts on an unsupported type or a partial block. */
void cpu_gemm(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
              const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)
{
    cpu_gemm_variant(cpu_kernels_choice(cpu_family_of(n_tok), t), t, n, w, w_row_bytes, r0, r1, a, a_row_bytes,
                     n_tok, y, y_stride);
}

/* Scalar reference of cpu_gemm: one cpu_vec_dot_ref per output element. */
void cpu_gemm_ref(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                  const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)
{
    cpu_gemm_variant(CPU_VAR_SCALAR, t, n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);
}
