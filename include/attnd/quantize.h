/* quantize.h - weight quantizers and whole-file quantization (`attnd quantize`).
 *
 * Row quantizers for Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K. The K-quants search each
 * sub-block's scale (and min) by weighted least squares over a range of candidate scales
 * instead of plain min/max rounding; the 6-bit sub-block scales are then quantized against the
 * super-block's f16 scale and the weights re-rounded with the final scales.
 *
 * Presets follow the reference quantizer's per-tensor mixes: 1-D tensors stay F32; q8_0 and
 * q6_k: every matrix in that type (q8_0 keeps output in Q8_0); q4_0: Q4_0 with the output
 * matrix in Q6_K; q4_k_m / q5_k_m: Q4_K / Q5_K with the output matrix in Q6_K, and attn_v and
 * ffn_down in Q6_K on the layers use_more_bits picks (the first and last eighth, and every
 * third one between). A K-quant matrix whose rows are not whole 256-blocks falls back to
 * Q5_0 (for Q4_K), Q5_1 (Q5_K) or Q8_0 (Q6_K), as the reference does. Never prints. */
#ifndef ATTND_QUANTIZE_H
#define ATTND_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"
#include "attnd/tensor.h"

enum quantize_preset { QUANTIZE_Q8_0, QUANTIZE_Q4_0, QUANTIZE_Q4_K_M, QUANTIZE_Q5_K_M, QUANTIZE_Q6_K };

/* "q8_0" | "q4_0" | "q4_k_m" | "q5_k_m" | "q6_k" -> *out; returns 0, or -1 for another name. */
int quantize_preset_parse(const char *name, enum quantize_preset *out);
const char *quantize_preset_name(enum quantize_preset p);

/* 1 if quantize_row can write type t. */
int quantize_type_supported(enum tensor_type t);
/* Quantizes n floats (a multiple of t's block size) into dst (tensor_nbytes(t, n) bytes).
 * Returns ATTND_ERR_INVALID for an unsupported type or a partial block. Thread-safe. */
attnd_status quantize_row(enum tensor_type t, const float *x, void *dst, size_t n);

/* The type preset p gives the tensor `name` of n_dims dimensions and row length ne0, where
 * layer/n_layers is its block index among the model's blocks (-1 when not in a block) and
 * as_output says it is the output matrix (output.weight, or token_embd.weight when tied). */
enum tensor_type quantize_tensor_type(enum quantize_preset p, const char *name, uint32_t n_dims, uint64_t ne0,
                                      int layer, int n_layers, int as_output);

/* Progress callback: tensor i of n, its name and the types from and to. */
typedef void (*quantize_progress_fn)(void *ud, int64_t i, int64_t n, const char *name, enum tensor_type from,
                                     enum tensor_type to);

/* Reads the GGUF at in (weights F32/F16/BF16 or any type the CPU kernels dequantize), writes out
 * with preset p using n_threads threads (>= 1), copying every metadata entry but
 * general.file_type, which is set to the preset's. Tensors already quantized in the input are
 * copied unchanged. progress may be NULL. On failure returns a
 * status with a message in err and leaves no file at out. */
attnd_status quantize_file(const char *in, const char *out, enum quantize_preset p, int n_threads,
                           quantize_progress_fn progress, void *ud, char *err, size_t errlen);

#endif
