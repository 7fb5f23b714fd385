/* tensor.h - ggml tensor type ids and their block layout (facts from the GGUF format). */
#ifndef ATTND_TENSOR_H
#define ATTND_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* ggml type ids as stored in GGUF tensor infos. */
enum tensor_type {
    TENSOR_F32 = 0,
    TENSOR_F16 = 1,
    TENSOR_Q4_0 = 2,
    TENSOR_Q4_1 = 3,
    TENSOR_Q5_0 = 6,
    TENSOR_Q5_1 = 7,
    TENSOR_Q8_0 = 8,
    TENSOR_Q8_1 = 9,
    TENSOR_Q2_K = 10,
    TENSOR_Q3_K = 11,
    TENSOR_Q4_K = 12,
    TENSOR_Q5_K = 13,
    TENSOR_Q6_K = 14,
    TENSOR_Q8_K = 15,
    TENSOR_IQ4_NL = 20,
    TENSOR_IQ4_XS = 23,
    TENSOR_I8 = 24,
    TENSOR_I16 = 25,
    TENSOR_I32 = 26,
    TENSOR_I64 = 27,
    TENSOR_F64 = 28,
    TENSOR_BF16 = 30,
    TENSOR_TYPE_MAX = 31 /* ids >= this are unknown */
};

#define QK8_0 32
#define QK4_0 32

/* Q8_0: 32 weights, w = d * q. 34 bytes. */
typedef struct {
    uint16_t d; /* f16 scale */
    int8_t qs[QK8_0];
} block_q8_0;

/* Q4_0: 32 weights; element j<16 is the low nibble of qs[j], j+16 the high nibble; w = d*(nib-8). 18 bytes. */
typedef struct {
    uint16_t d; /* f16 scale */
    uint8_t qs[QK4_0 / 2];
} block_q4_0;

_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 block is 18 bytes");

/* 1 if t is a type id this build knows the layout of (it may still be unsupported by the kernels). */
int tensor_type_known(uint32_t t);
/* Lower-case name ("f32", "q8_0", ...), or "unknown". */
const char *tensor_type_name(uint32_t t);
/* Elements per block (1 for plain types); 0 for an unknown type. */
size_t tensor_block_elems(uint32_t t);
/* Bytes per block; 0 for an unknown type. */
size_t tensor_block_bytes(uint32_t t);
/* Bytes needed for n elements of type t into *out. Returns 0 on success, -1 if t is unknown,
 * n is not a multiple of the block size, or the size overflows size_t/uint64. */
int tensor_nbytes(uint32_t t, uint64_t n, uint64_t *out);

#endif
