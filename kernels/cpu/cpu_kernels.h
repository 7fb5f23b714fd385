/* cpu_kernels.h - CPU dot-product / GEMM kernels for the weight types attnd runs:
 * F32, F16, BF16, Q8_0 and Q4_0. Each kernel has a scalar reference (cpu_*_ref) and SIMD
 * versions (AVX2+FMA+F16C, AVX-512F/BW/VL) chosen once at run time by cpu_kernels_init().
 * A build without those instruction sets still works (scalar only).
 *
 * Activations are "prepared" for a weight type before a dot product:
 *   weight F32, F16, BF16 -> activations stay F32 (plain float array)
 *   weight Q8_0, Q4_0     -> activations quantized to Q8_0 blocks (scale = max|x|/127
 *                            stored as F16, q = round-to-nearest(x/scale)); this matches what
 *                            the reference engine does, so results land close to it.
 * All functions are thread-safe (no shared state after cpu_kernels_init()).
 */
#ifndef ATTND_CPU_KERNELS_H
#define ATTND_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/tensor.h"

enum cpu_isa { CPU_ISA_SCALAR = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 };

/* Detects the CPU (once; later calls are cheap) and selects kernels. $ATTND_ISA=scalar|avx2|avx512
 * caps the choice (for tests and benchmarks). Returns the ISA in use. Thread-safe. */
enum cpu_isa cpu_kernels_init(void);
/* Forces an ISA (capped at what the CPU has); returns the one now in use. For tests. */
enum cpu_isa cpu_kernels_set_isa(enum cpu_isa isa);
const char *cpu_isa_name(enum cpu_isa isa);

/* ---- conversions (scalar, exact IEEE round-to-nearest-even) ---- */
float cpu_f16_to_f32(uint16_t h);
uint16_t cpu_f32_to_f16(float f);
float cpu_bf16_to_f32(uint16_t h);
uint16_t cpu_f32_to_bf16(float f); /* round to nearest even, NaN kept NaN */

/* Converts n values; SIMD where available. */
void cpu_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void cpu_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);

/* ---- weights ---- */
/* 1 if the kernels can compute with weights of this type. */
int cpu_type_supported(enum tensor_type t);
/* The type activations must be prepared as for weights of type t (TENSOR_F32 or TENSOR_Q8_0). */
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
 * The SIMD version reads each weight row once for several tokens at a time (register
 * blocking over tokens), so a prefill batch costs far less than n_tok matrix-vector products.
 * Results equal cpu_vec_dot() per element up to float summation order. */
void cpu_gemm(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
              const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_gemm_ref(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                  const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);

#endif
