/* gguf.h - a hardened reader for GGUF files (versions 2 and 3, little-endian).
 *
 * The reader never prints and never exits. Every length, count and offset read from the
 * file is checked against the file size with overflow-safe arithmetic before it is used; a
 * truncated, corrupt or hostile file yields ATTND_ERR_FORMAT (or ATTND_ERR_UNSUPPORTED) and a
 * message naming the section and the value that is wrong.
 *
 * gguf_open() reads only the header (metadata and tensor table) into memory; tensor data is
 * left in the file for the weight loader (weights.c) to read. A struct gguf is immutable after
 * it is opened and may be read from several threads.
 */
#ifndef ATTND_GGUF_H
#define ATTND_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* Metadata value types, as numbered in the file. */
enum gguf_vtype {
    GGUF_U8 = 0,
    GGUF_I8 = 1,
    GGUF_U16 = 2,
    GGUF_I16 = 3,
    GGUF_U32 = 4,
    GGUF_I32 = 5,
    GGUF_F32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_U64 = 10,
    GGUF_I64 = 11,
    GGUF_F64 = 12,
    GGUF_VTYPE_COUNT = 13
};

/* A string inside the header: ptr is NOT NUL-terminated and may contain NUL bytes. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

/* One entry of the tensor table. */
struct gguf_tensor {
    const char *name;           /* NUL-terminated copy of the name */
    uint32_t n_dims;            /* 1..GGUF_MAX_DIMS */
    uint64_t ne[GGUF_MAX_DIMS]; /* elements per dimension, ne[0] contiguous; unused dims are 1 */
    uint32_t type;              /* enum tensor_type */
    uint64_t n_elems;           /* product of ne[] */
    uint64_t nbytes;            /* size of the data in bytes */
    uint64_t offset;            /* absolute offset of the data in the file */
};

struct gguf;

/* Opens and validates path. On success *out owns the parsed header (free with gguf_close()).
 * On failure returns a status, leaves *out NULL and writes a one-line reason into err
 * (if err != NULL). */
attnd_status gguf_open(const char *path, struct gguf **out, char *err, size_t errlen);
/* Same over a memory image of a whole file; data must outlive the returned handle only if the
 * caller uses gguf_mem_data(). */
attnd_status gguf_open_mem(const void *data, size_t size, struct gguf **out, char *err, size_t errlen);
/* Frees everything; gguf_close(NULL) is a no-op. */
void gguf_close(struct gguf *g);

uint32_t gguf_version(const struct gguf *g);
uint64_t gguf_file_size(const struct gguf *g);
uint32_t gguf_alignment(const struct gguf *g);
/* Absolute file offset where the tensor data section starts. */
uint64_t gguf_data_offset(const struct gguf *g);

/* ---- metadata ---- */
int64_t gguf_n_kv(const struct gguf *g);
/* Key of entry i (NUL-terminated), or NULL if i is out of range. */
const char *gguf_kv_key(const struct gguf *g, int64_t i);
/* Type of entry i, or GGUF_VTYPE_COUNT if out of range. */
enum gguf_vtype gguf_kv_type(const struct gguf *g, int64_t i);
/* Index of key, or -1. */
int64_t gguf_find_key(const struct gguf *g, const char *key);

/* Typed getters by key. Return ATTND_OK, ATTND_ERR_NOTFOUND (no such key) or
 * ATTND_ERR_FORMAT (the key holds another type). */
/* Any integer type; a u64 above INT64_MAX gives ATTND_ERR_RANGE. */
attnd_status gguf_get_int(const struct gguf *g, const char *key, int64_t *out);
/* f32 or f64 (integers are accepted too). */
attnd_status gguf_get_float(const struct gguf *g, const char *key, double *out);
attnd_status gguf_get_bool(const struct gguf *g, const char *key, bool *out);
attnd_status gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);
/* An array: its element type and count. */
attnd_status gguf_get_arr(const struct gguf *g, const char *key, enum gguf_vtype *etype, uint64_t *n);

/* Scalar value of entry i by type, for dumping: */
int64_t gguf_kv_int(const struct gguf *g, int64_t i);    /* integer and bool types, else 0 */
double gguf_kv_float(const struct gguf *g, int64_t i);   /* f32/f64, else 0 */
struct gguf_str gguf_kv_str(const struct gguf *g, int64_t i); /* string, else {NULL,0} */
/* Array entry i: element type and count (0 and GGUF_VTYPE_COUNT if not an array). */
enum gguf_vtype gguf_arr_type(const struct gguf *g, int64_t i);
uint64_t gguf_arr_n(const struct gguf *g, int64_t i);
/* Raw little-endian elements of a numeric/bool array (may be unaligned: read with memcpy);
 * NULL for string arrays or non-arrays. */
const void *gguf_arr_data(const struct gguf *g, int64_t i);
/* Element j of a string array ({NULL,0} if not a string array or j out of range). */
struct gguf_str gguf_arr_str(const struct gguf *g, int64_t i, uint64_t j);
/* Element j of a numeric array converted: integers (and bool) as int64, floats as double. */
int64_t gguf_arr_int(const struct gguf *g, int64_t i, uint64_t j);
double gguf_arr_float(const struct gguf *g, int64_t i, uint64_t j);

/* ---- tensors ---- */
int64_t gguf_n_tensors(const struct gguf *g);
/* Entry i of the tensor table, or NULL. */
const struct gguf_tensor *gguf_tensor(const struct gguf *g, int64_t i);
/* Tensor by name, or NULL. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);
/* For handles from gguf_open_mem(): pointer to the tensor's data inside the image. NULL otherwise. */
const void *gguf_mem_data(const struct gguf *g, const struct gguf_tensor *t);

/* Size in bytes of one element of a scalar metadata type (0 for string/array/unknown). */
size_t gguf_vtype_size(enum gguf_vtype t);
const char *gguf_vtype_name(enum gguf_vtype t);

#endif
