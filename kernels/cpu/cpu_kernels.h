/* cpu_kernels.h - CPU dot-product / GEMM kernels for the weight types of the type table: F32, F16,
 * BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K and IQ4_XS. A type's row has two parts:
 * its description (name, block size and bytes, activation type) in core's table (attnd/tensor.h),
 * its kernels (dequantize, the dot and GEMM per ISA level, the variants it allows) in
 * cpu_kernels.c's, keyed by the same enum. Each kernel has a scalar reference (cpu_*_ref) and SIMD
 * versions (AVX2+FMA+F16C, AVX-512F/BW/VL, VNNI, AMX) chosen at run time by cpu_kernels_init().
 * A build without those instruction sets still works (scalar only).
 *
 * Activations are "prepared" for a weight type before a dot product (tensor_dot_type):
 *   weight F32, F16, BF16    -> activations stay F32 (plain float array)
 *   weight Q8_0, Q4_0, Q4_1, Q5_x, IQ4_NL -> activations quantized to Q8_0 blocks (scale = max|x|/127
 *                            stored as F16, q = round-to-nearest(x/scale)); this matches what
 *                            the reference engine does, so results land close to it.
 *   weight Q2_K..Q6_K, IQ4_XS -> activations quantized to Q8_K blocks (quants.h).
 * All functions are thread-safe (no shared state after cpu_kernels_init()).
 */
#ifndef ATTND_CPU_KERNELS_H
#define ATTND_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/tensor.h"

/* AMX: AVX-512 (with VNNI and BF16) and the AMX tile unit (int8 and bf16), which the kernel lets the
 * process use; its vector kernels are AVX-512's. */
enum cpu_isa { CPU_ISA_SCALAR = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2, CPU_ISA_AMX = 3 };

/* Detects the CPU (once; later calls are cheap) and selects kernels. $ATTND_ISA=scalar|avx2|avx512|amx
 * caps the choice (for tests and benchmarks). Returns the ISA in use. Thread-safe. */
enum cpu_isa cpu_kernels_init(void);
/* Forces an ISA (capped at what the CPU has); returns the one now in use. For tests. */
enum cpu_isa cpu_kernels_set_isa(enum cpu_isa isa);
const char *cpu_isa_name(enum cpu_isa isa);
/* The widest ISA the CPU (and OS) supports, whatever the cap. */
enum cpu_isa cpu_kernels_max_isa(void);

/* ---- conversions (scalar, exact IEEE round-to-nearest-even): core's tensor_f16_to_f32 & co ---- */
float cpu_f16_to_f32(uint16_t h);
uint16_t cpu_f32_to_f16(float f);
float cpu_bf16_to_f32(uint16_t h);
uint16_t cpu_f32_to_bf16(float f); /* round to nearest even, NaN kept NaN */

/* Converts n values; SIMD where available. */
void cpu_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void cpu_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);

/* ---- float rows: scans of a vocabulary's logits (SIMD where available, same results), the
 * SwiGLU gate and RMSNorm ---- */
/* The index of the largest value, the lowest one among equals; NaN never counts. n if there is
 * none above -inf (all -inf or NaN, or n == 0). */
size_t cpu_argmax(const float *x, size_t n);
size_t cpu_argmax_ref(const float *x, size_t n);
/* The index of the first NaN or infinity; n if all are finite. */
size_t cpu_find_nonfinite(const float *x, size_t n);
size_t cpu_find_nonfinite_ref(const float *x, size_t n);
/* The SwiGLU gate: g[i] = silu(g[i]) * u[i] = g[i] / (1 + e^-g[i]) * u[i]. The SIMD versions use a
 * polynomial exp: within 1e-6 relative of the reference. */
void cpu_swiglu_row(float *g, const float *u, size_t n);
void cpu_swiglu_row_ref(float *g, const float *u, size_t n);
/* x[i] += y[i] (x and y do not overlap): the same sums as the scalar loop. */
void cpu_add_row(float *x, const float *y, size_t n);
void cpu_add_row_ref(float *x, const float *y, size_t n);
/* RMSNorm: out[i] = x[i] * w[i] / sqrt(mean(x^2) + eps), the sum of squares in double (out may be x).
 * The SIMD versions sum in another order: the same result within float rounding. */
void cpu_rmsnorm_row(float *out, const float *x, const float *w, size_t n, float eps);
void cpu_rmsnorm_row_ref(float *out, const float *x, const float *w, size_t n, float eps);

/* ---- weights ---- */
/* 1 if the kernels can compute with weights of this type (its row in the table has kernels). */
int cpu_type_supported(enum tensor_type t);
/* The type activations must be prepared as for weights of type t: tensor_dot_type(t) (TENSOR_F32,
 * TENSOR_Q8_0 or TENSOR_Q8_K). */
enum tensor_type cpu_vec_dot_type(enum tensor_type t);

/* Dequantizes n elements (n a multiple of the type's block size) of type t to f32. */
void cpu_dequant_row(enum tensor_type t, const void *src, float *dst, size_t n);
/* Quantizes n floats (n a multiple of 32) to Q8_0 blocks (n/32 blocks of 34 bytes). */
void cpu_quantize_row_q8_0(const float *x, void *dst, size_t n);
/* Quantizes n floats (multiple of 32) to Q4_0 blocks (used by mkmodel). Scale: the value of
 * largest magnitude m gives d = m / -8, q = clamp(round(x/d) + 8, 0, 15). */
void cpu_quantize_row_q4_0(const float *x, void *dst, size_t n);
/* Prepares n activations for weights of type t into dst (tensor_nbytes(cpu_vec_dot_type(t), n) bytes). */
void cpu_prepare_row(enum tensor_type t, const float *x, void *dst, size_t n);

/* Dot product of one weight row w (type t, n elements) with prepared activations a. */
float cpu_vec_dot(enum tensor_type t, size_t n, const void *w, const void *a);
float cpu_vec_dot_ref(enum tensor_type t, size_t n, const void *w, const void *a);

/* Matrix product over a slice of output rows:
 *   for r in [r0, r1), j in [0, n_tok):  y[j*y_stride + r] = dot(W row r, A row j)
 * W: weight matrix of type t, rows of n elements, row r at (char*)w + r*w_row_bytes.
 * A: n_tok prepared activation rows, row j at (char*)a + j*a_row_bytes.
 * Runs the variant cpu_kernels_choice(cpu_family_of(n_tok), t) (below). The SIMD variants read
 * each weight row once for several tokens at a time, so a prefill batch costs far less than n_tok
 * matrix-vector products. Results equal cpu_vec_dot() per element up to float summation order. */
void cpu_gemm(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
              const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_gemm_ref(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                  const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);

/* ---- kernel variants and the dispatcher's choice ----
 * Every matrix-product family (by token count) has its variants side by side; cpu_gemm runs the
 * one chosen for (family, weight type). The choice starts from rules (the widest ISA, the int8
 * panel GEMM for 2+ tokens of its types) and is replaced by measurement (cpu_tune.h). All
 * variants compute the same products: each equals the scalar reference within float rounding. */
enum cpu_family {
    CPU_FAM_MATVEC, /* 1 token: generation, memory-bound */
    CPU_FAM_BATCH,  /* 2..CPU_BATCH_MAX tokens: batched decoding across requests */
    CPU_FAM_GEMM,   /* more: prompt reading, compute-bound */
    CPU_N_FAMILIES
};
#define CPU_BATCH_MAX 32
enum cpu_variant {
    CPU_VAR_SCALAR, /* the reference kernels */
    CPU_VAR_AVX2,   /* AVX2+FMA+F16C row kernels (Q8_0: tokens interleaved in int8 lanes) */
    CPU_VAR_AVX512, /* AVX-512 F/BW/VL/DQ (F32, F16, BF16, Q8_0, Q4_0); the other quantized types
                       where the CPU also has VNNI */
    CPU_VAR_PANEL,  /* AVX2 panel GEMM, 2+ tokens: int8 panels (Q4_0, Q4_1, Q5_x, IQ4_x, Q3_K..Q6_K) or
                       f32 outer-product panels (F32, F16, BF16) */
    CPU_VAR_VNNI_PANEL, /* the int8 panel GEMM on AVX-512 VNNI (vpdpbusd), 2+ tokens: those int8 types and Q8_0 */
    CPU_VAR_AMX,        /* AMX tiles, 2+ tokens: int8 (Q8_0, Q4_0, Q4_1, Q5_x, IQ4_x, Q4_K, Q5_K) and bf16 (F16, BF16) */
    CPU_VAR_AVX2_BATCH, /* the small-batch GEMM (batch family only), AVX2: Q4_0, Q4_1, Q5_1, Q4_K, Q5_K */
    CPU_VAR_VNNI_BATCH, /* the same on AVX-512 VNNI, and Q8_0 */
    CPU_N_VARIANTS
};
enum cpu_family cpu_family_of(size_t n_tok);
const char *cpu_family_name(enum cpu_family f);
const char *cpu_variant_name(enum cpu_variant v);
/* 1 if variant v can run family f for weights of type t on this CPU under the current ISA cap. */
int cpu_variant_available(enum cpu_family f, enum tensor_type t, enum cpu_variant v);
/* The variant cpu_gemm runs for (f, t): the chosen one if still available, else the rule's. */
enum cpu_variant cpu_kernels_choice(enum cpu_family f, enum tensor_type t);
/* The rule's variant for (f, t) (what runs without measurement). */
enum cpu_variant cpu_kernels_rule(enum cpu_family f, enum tensor_type t);
/* Makes v the choice for (f, t); -1 (nothing changed) if it is not available. Thread-safe. */
int cpu_kernels_choose(enum cpu_family f, enum tensor_type t, enum cpu_variant v);
/* Drops every choice: the rules apply again. */
void cpu_kernels_clear_choices(void);
/* cpu_gemm with a given variant (it must be available for cpu_family_of(n_tok) and t). */
void cpu_gemm_variant(enum cpu_variant v, enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0,
                      size_t r1, const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);

#endif
