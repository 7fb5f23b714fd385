/* cpu_kernels.c - CPU kernels: run-time ISA dispatch, f16/bf16 conversions, and the scalar
 * reference kernels (which are also the kernels of the "scalar" ISA). The SIMD versions live
 * in kernels_avx2.c and kernels_avx512.c; this file is built for baseline x86-64 and never
 * uses their instructions itself. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_kernels_impl.h"

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

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Exact: every f16 is representable as f32. NaN payloads are kept and the quiet bit set, as the
 * F16C instruction does. */
float cpu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant ? 0x400000u : 0u) | (mant << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* IEEE round-to-nearest-even; overflow gives inf; NaN stays (quiet) NaN keeping the top payload
 * bits, which is also what the F16C instruction does. */
uint16_t cpu_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (u < 0x38800000u) {
        /* result is subnormal (or zero): q = round(|f| / 2^-24) */
        if (u <= 0x33000000u) return sign; /* <= 2^-25: ties to even give 0 */
        uint32_t e = u >> 23;              /* 102..112 */
        uint32_t m = (u & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++; /* q may reach 0x400: min normal */
        return (uint16_t)(sign | q);
    }
    uint32_t h = (u >> 13) - (112u << 10); /* rebias exponent 127 -> 15 */
    uint32_t rem = u & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

/* Exact. */
float cpu_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* Round to nearest even; NaN stays NaN (quiet bit set so it cannot become inf). */
uint16_t cpu_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

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

/* ================================================================ dispatch */

enum { SLOT_F32, SLOT_F16, SLOT_BF16, SLOT_Q8_0, SLOT_Q4_0, N_SLOTS };

struct kernel_set {
    cpu_vec_dot_fn dot[N_SLOTS];
    cpu_gemm_fn gemm[N_SLOTS];
    void (*quantize_q8_0)(const float *x, void *dst, size_t n);
    void (*h2f)(const uint16_t *src, float *dst, size_t n);
    void (*f2h)(const float *src, uint16_t *dst, size_t n);
    size_t (*argmax)(const float *x, size_t n);
    size_t (*find_nonfinite)(const float *x, size_t n);
    void (*swiglu)(float *g, const float *u, size_t n);
    void (*rmsnorm)(float *out, const float *x, const float *w, size_t n, float eps);
    void (*add)(float *x, const float *y, size_t n);
};

static const struct kernel_set g_sets[3] = { /* by ISA; CPU_ISA_AMX runs the AVX-512 set */
    [CPU_ISA_SCALAR] = {{ref_dot_f32, ref_dot_f16, ref_dot_bf16, ref_dot_q8_0, ref_dot_q4_0},
                        {ref_gemm_f32, ref_gemm_f16, ref_gemm_bf16, ref_gemm_q8_0, ref_gemm_q4_0},
                        ref_quantize_q8_0,
                        ref_f16_to_f32_row,
                        ref_f32_to_f16_row,
                        ref_argmax,
                        ref_find_nonfinite,
                        ref_swiglu_row,
                        ref_rmsnorm_row,
                        ref_add_row},
    [CPU_ISA_AVX2] = {{cpu_avx2_vec_dot_f32, cpu_avx2_vec_dot_f16, cpu_avx2_vec_dot_bf16, cpu_avx2_vec_dot_q8_0,
                       cpu_avx2_vec_dot_q4_0},
                      {cpu_avx2_gemm_f32, cpu_avx2_gemm_f16, cpu_avx2_gemm_bf16, cpu_avx2_gemm_q8_0,
                       cpu_avx2_gemm_q4_0},
                      cpu_avx2_quantize_row_q8_0,
                      cpu_avx2_f16_to_f32_row,
                      cpu_avx2_f32_to_f16_row,
                      cpu_avx2_argmax,
                      cpu_avx2_find_nonfinite,
                      cpu_avx2_swiglu_row,
                      cpu_avx2_rmsnorm_row,
                      cpu_avx2_add_row},
    [CPU_ISA_AVX512] = {{cpu_avx512_vec_dot_f32, cpu_avx512_vec_dot_f16, cpu_avx512_vec_dot_bf16,
                         cpu_avx512_vec_dot_q8_0, cpu_avx512_vec_dot_q4_0},
                        {cpu_avx512_gemm_f32, cpu_avx512_gemm_f16, cpu_avx512_gemm_bf16, cpu_avx512_gemm_q8_0,
                         cpu_avx512_gemm_q4_0},
                        cpu_avx512_quantize_row_q8_0,
                        cpu_avx512_f16_to_f32_row,
                        cpu_avx512_f32_to_f16_row,
                        cpu_avx2_argmax, /* memory-bound: the AVX2 scan keeps up */
                        cpu_avx2_find_nonfinite,
                        cpu_avx512_swiglu_row,
                        cpu_avx2_rmsnorm_row,
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

static int type_slot(enum tensor_type t)
{
    switch (t) {
    case TENSOR_F32: return SLOT_F32;
    case TENSOR_F16: return SLOT_F16;
    case TENSOR_BF16: return SLOT_BF16;
    case TENSOR_Q8_0: return SLOT_Q8_0;
    case TENSOR_Q4_0: return SLOT_Q4_0;
    default: return -1;
    }
}

/* The slot of a supported type whose n fits its block size; anything else is a caller bug. */
static int checked_slot(enum tensor_type t, size_t n)
{
    int s = type_slot(t);
    ATTND_CHECK(s >= 0);
    ATTND_CHECK(s < SLOT_Q8_0 || n % QK8_0 == 0);
    return s;
}

/* The quants.c level an ISA runs: the VNNI build needs AVX-512 and VNNI (AVX-512 machines without
 * it run the AVX2 kernels). */
static enum quants_level quants_level_of(enum cpu_isa isa)
{
    if (isa == CPU_ISA_SCALAR) return QUANTS_LEVEL_REF;
    return isa >= CPU_ISA_AVX512 && g_vnni ? QUANTS_LEVEL_VNNI : QUANTS_LEVEL_AVX2;
}

/* The K-quant/IQ4/Q4_1/Q5_x dot (quants.c) for ISA isa: scalar, AVX2, or the AVX-512 VNNI build
 * where the CPU has VNNI (AVX-512 machines without it run the AVX2 kernels). */
static cpu_vec_dot_fn quants_isa_fn(enum tensor_type t, enum cpu_isa isa)
{
    return quants_dot_fn(t, quants_level_of(isa));
}

/* The K-quant/IQ4/Q4_1/Q5_x dot for the active ISA, or the scalar one when ref; NULL for the
 * other types. Aborts on a partial block. */
static cpu_vec_dot_fn quants_fn(enum tensor_type t, size_t n, int ref)
{
    if (!quants_supported(t)) return NULL;
    ATTND_CHECK(n % tensor_block_elems(t) == 0);
    return quants_isa_fn(t, ref ? CPU_ISA_SCALAR : cpu_kernels_init());
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

/* F32, F16, BF16, Q8_0, Q4_0 here; Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS in quants.c. */
int cpu_type_supported(enum tensor_type t) { return type_slot(t) >= 0 || quants_supported(t); }

/* TENSOR_Q8_K for the K-quants and IQ4_XS, TENSOR_Q8_0 for the other quantized types, TENSOR_F32
 * otherwise (also for unsupported types). */
enum tensor_type cpu_vec_dot_type(enum tensor_type t)
{
    if (quants_supported(t)) return quants_dot_type(t);
    return (t == TENSOR_Q8_0 || t == TENSOR_Q4_0) ? TENSOR_Q8_0 : TENSOR_F32;
}

/* Aborts (ATTND_CHECK) on an unsupported type or an n that is not a multiple of the block size. */
void cpu_dequant_row(enum tensor_type t, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    if (quants_fn(t, n, 1)) {
        quants_dequant_row(t, src, dst, n);
        return;
    }
    switch (checked_slot(t, n)) {
    case SLOT_F32: memmove(dst, src, n * sizeof(float)); return;
    case SLOT_F16:
        for (size_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(ld_u16(p + 2 * i));
        return;
    case SLOT_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_f32(ld_u16(p + 2 * i));
        return;
    case SLOT_Q8_0:
        for (size_t b = 0; b < n / QK8_0; b++, p += CPU_Q8_0_BYTES) {
            float d = cpu_f16_to_f32(ld_u16(p));
            const int8_t *q = (const int8_t *)(p + 2);
            for (int k = 0; k < QK8_0; k++) dst[b * QK8_0 + k] = d * (float)q[k];
        }
        return;
    case SLOT_Q4_0:
        for (size_t b = 0; b < n / QK4_0; b++, p += CPU_Q4_0_BYTES) {
            float d = cpu_f16_to_f32(ld_u16(p));
            for (int k = 0; k < QK4_0 / 2; k++) {
                dst[b * QK4_0 + k] = d * (float)((p[2 + k] & 0x0f) - 8);
                dst[b * QK4_0 + k + QK4_0 / 2] = d * (float)((p[2 + k] >> 4) - 8);
            }
        }
        return;
    }
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
    if (quants_fn(t, n, 1)) {
        if (quants_dot_type(t) == TENSOR_Q8_K) {
            if (active() == &g_sets[CPU_ISA_SCALAR]) quants_quantize_row_q8_k(x, dst, n);
            else quants_avx2_quantize_row_q8_k(x, dst, n);
        }
        else active()->quantize_q8_0(x, dst, n);
        return;
    }
    int s = checked_slot(t, n);
    if (s == SLOT_Q8_0 || s == SLOT_Q4_0)
        active()->quantize_q8_0(x, dst, n);
    else if (dst != (const void *)x)
        memmove(dst, x, n * sizeof(float));
}

/* Dispatched dot product; aborts on an unsupported type or a partial block. */
float cpu_vec_dot(enum tensor_type t, size_t n, const void *w, const void *a)
{
    cpu_vec_dot_fn q = quants_fn(t, n, 0);
    if (q) return q(n, w, a);
    int s = checked_slot(t, n);
    return active()->dot[s](n, w, a);
}

/* Scalar reference of cpu_vec_dot (float types summed in double). */
float cpu_vec_dot_ref(enum tensor_type t, size_t n, const void *w, const void *a)
{
    cpu_vec_dot_fn q = quants_fn(t, n, 1);
    if (q) return q(n, w, a);
    int s = checked_slot(t, n);
    return g_sets[CPU_ISA_SCALAR].dot[s](n, w, a);
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
    static const char *const names[CPU_N_VARIANTS] = {"scalar", "avx2", "avx512", "avx2-panel", "vnni-panel", "amx"};
    return (unsigned)v < CPU_N_VARIANTS ? names[v] : "unknown";
}

static int float_type(enum tensor_type t) { return t == TENSOR_F32 || t == TENSOR_F16 || t == TENSOR_BF16; }

int cpu_variant_available(enum cpu_family f, enum tensor_type t, enum cpu_variant v)
{
    if ((unsigned)f >= CPU_N_FAMILIES || !cpu_type_supported(t)) return 0;
    const enum cpu_isa isa = cpu_kernels_init();
    switch (v) {
    case CPU_VAR_SCALAR: return 1;
    case CPU_VAR_AVX2: return isa >= CPU_ISA_AVX2;
    case CPU_VAR_AVX512: return isa >= CPU_ISA_AVX512 && (type_slot(t) >= 0 || g_vnni);
    case CPU_VAR_PANEL:
        return isa >= CPU_ISA_AVX2 && f != CPU_FAM_MATVEC && (quants_panel_type(t, QUANTS_LEVEL_AVX2) || float_type(t));
    case CPU_VAR_VNNI_PANEL:
        return isa >= CPU_ISA_AVX512 && g_vnni && f != CPU_FAM_MATVEC && quants_panel_type(t, QUANTS_LEVEL_VNNI);
    case CPU_VAR_AMX: return isa >= CPU_ISA_AMX && f != CPU_FAM_MATVEC && cpu_amx_type(t);
    case CPU_N_VARIANTS: break;
    }
    return 0;
}

/* AMX tiles for 2+ tokens of their types where the CPU has them, else the VNNI int8 panel where the
 * CPU has VNNI, else the AVX2 int8 panel and the float panel for prompts, else the widest ISA that
 * has the type. */
enum cpu_variant cpu_kernels_rule(enum cpu_family f, enum tensor_type t)
{
    if (cpu_variant_available(f, t, CPU_VAR_AMX)) return CPU_VAR_AMX;
    if (cpu_variant_available(f, t, CPU_VAR_VNNI_PANEL)) return CPU_VAR_VNNI_PANEL;
    if (cpu_variant_available(f, t, CPU_VAR_PANEL) && (!float_type(t) || f == CPU_FAM_GEMM))
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

/* Aborts on an unsupported type or a partial block (the callers' bug, not the input's). */
static void check_type(enum tensor_type t, size_t n)
{
    if (!quants_fn(t, n, 1)) (void)checked_slot(t, n);
}

void cpu_gemm_variant(enum cpu_variant v, enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0,
                      size_t r1, const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)
{
    check_type(t, n);
    ATTND_CHECK(cpu_variant_available(cpu_family_of(n_tok), t, v));
    if (r0 >= r1 || n_tok == 0) return;
    if (v == CPU_VAR_PANEL && float_type(t)) {
        cpu_gemm_fn g = t == TENSOR_F32   ? cpu_avx2_gemm_panel_f32
                        : t == TENSOR_F16 ? cpu_avx2_gemm_panel_f16
                                          : cpu_avx2_gemm_panel_bf16;
        g(n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);
        return;
    }
    if (v == CPU_VAR_PANEL && quants_avx2_gemm(t, n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride))
        return;
    if (v == CPU_VAR_VNNI_PANEL && quants_avx512_gemm(t, n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride))
        return;
    if (v == CPU_VAR_AMX && cpu_amx_gemm(t, n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride)) return;
    const enum cpu_isa isa = v == CPU_VAR_SCALAR ? CPU_ISA_SCALAR : v == CPU_VAR_AVX512 ? CPU_ISA_AVX512 : CPU_ISA_AVX2;
    if (n_tok == 1 && isa != CPU_ISA_SCALAR) { /* Q8_0 / Q4_0 generation: the prefetching row loop */
        const int done = quants_level_of(isa) == QUANTS_LEVEL_VNNI
                             ? quants_avx512_matvec_q(t, n, w, w_row_bytes, r0, r1, a, y)
                             : quants_avx2_matvec_q(t, n, w, w_row_bytes, r0, r1, a, y);
        if (done) return;
    }
    if (quants_supported(t)) {
        cpu_vec_dot_fn dot = quants_isa_fn(t, isa);
        quants_gemm(dot, n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);
        return;
    }
    g_sets[isa].gemm[type_slot(t)](n, w, w_row_bytes, r0, r1, a, a_row_bytes, n_tok, y, y_stride);
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
