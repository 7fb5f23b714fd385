/* tensor.c - the description part of the tensor type table (tensor.h): one row per ggml type. The
 * kernels of each type are its row in kernels/cpu/cpu_kernels.c, keyed by the same enum. */
#include "attnd/tensor.h"

/* name, elements per block, bytes per block, activation type of its dots (0 = TENSOR_F32: float
 * weights, and the types no kernel takes) */
static const struct tensor_type_info g_types[TENSOR_TYPE_MAX] = {
    [TENSOR_F32] = {"f32", 1, 4, TENSOR_F32},
    [TENSOR_F16] = {"f16", 1, 2, TENSOR_F32},
    [TENSOR_BF16] = {"bf16", 1, 2, TENSOR_F32},
    [TENSOR_Q8_0] = {"q8_0", 32, 34, TENSOR_Q8_0},
    [TENSOR_Q4_0] = {"q4_0", 32, 18, TENSOR_Q8_0},
    [TENSOR_Q4_1] = {"q4_1", 32, 20, TENSOR_Q8_0},
    [TENSOR_Q5_0] = {"q5_0", 32, 22, TENSOR_Q8_0},
    [TENSOR_Q5_1] = {"q5_1", 32, 24, TENSOR_Q8_0},
    [TENSOR_IQ4_NL] = {"iq4_nl", 32, 18, TENSOR_Q8_0},
    [TENSOR_Q2_K] = {"q2_k", 256, 84, TENSOR_Q8_K},
    [TENSOR_Q3_K] = {"q3_k", 256, 110, TENSOR_Q8_K},
    [TENSOR_Q4_K] = {"q4_k", 256, 144, TENSOR_Q8_K},
    [TENSOR_Q5_K] = {"q5_k", 256, 176, TENSOR_Q8_K},
    [TENSOR_Q6_K] = {"q6_k", 256, 210, TENSOR_Q8_K},
    [TENSOR_IQ4_XS] = {"iq4_xs", 256, 136, TENSOR_Q8_K},
    [TENSOR_Q8_1] = {"q8_1", 32, 36, TENSOR_F32},
    [TENSOR_Q8_K] = {"q8_k", 256, 292, TENSOR_F32},
    [TENSOR_I8] = {"i8", 1, 1, TENSOR_F32},
    [TENSOR_I16] = {"i16", 1, 2, TENSOR_F32},
    [TENSOR_I32] = {"i32", 1, 4, TENSOR_F32},
    [TENSOR_I64] = {"i64", 1, 8, TENSOR_F32},
    [TENSOR_F64] = {"f64", 1, 8, TENSOR_F32},
};

/* NULL for ids past the table and the holes in ggml's numbering. */
const struct tensor_type_info *tensor_type_info(uint32_t t)
{
    return t < TENSOR_TYPE_MAX && g_types[t].name != NULL ? &g_types[t] : NULL;
}

int tensor_type_known(uint32_t t) { return tensor_type_info(t) != NULL; }

const char *tensor_type_name(uint32_t t) { return tensor_type_known(t) ? g_types[t].name : "unknown"; }

size_t tensor_block_elems(uint32_t t) { return tensor_type_known(t) ? g_types[t].block_elems : 0; }

size_t tensor_block_bytes(uint32_t t) { return tensor_type_known(t) ? g_types[t].block_bytes : 0; }

enum tensor_type tensor_dot_type(uint32_t t) { return tensor_type_known(t) ? g_types[t].dot_type : TENSOR_F32; }

int tensor_nbytes(uint32_t t, uint64_t n, uint64_t *out)
{
    if (!tensor_type_known(t)) return -1;
    uint64_t b = g_types[t].block_elems;
    if (n % b) return -1;
    uint64_t blocks = n / b, bytes;
    if (__builtin_mul_overflow(blocks, (uint64_t)g_types[t].block_bytes, &bytes)) return -1;
    if (bytes > (uint64_t)SIZE_MAX) return -1;
    *out = bytes;
    return 0;
}
