/* gguf_writer.h - writes GGUF version 3 files (metadata, tensor table, aligned data).
 * Used by `attnd mkmodel` and by tests that build files on purpose. Never prints. */
#ifndef ATTND_GGUF_WRITER_H
#define ATTND_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/gguf.h"
#include "attnd/status.h"

struct gguf_writer;

/* Returns NULL on allocation failure. */
struct gguf_writer *gguf_writer_create(void);
void gguf_writer_destroy(struct gguf_writer *w);

/* Metadata setters copy their arguments. They return ATTND_OK or ATTND_ERR_NOMEM. */
attnd_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
attnd_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
attnd_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
attnd_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
attnd_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s, size_t len);
/* n elements of scalar type t (raw little-endian bytes, gguf_vtype_size(t) each). */
attnd_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype t, const void *data,
                                 uint64_t n);
attnd_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n);
/* Copies metadata entry i of g (any type) under the same key. */
attnd_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf *g, int64_t i);

/* Declares a tensor; its bytes are produced at write time by the fill callback. */
attnd_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const uint64_t *ne);

/* fill(ud, tensor index, buf, nbytes) must write exactly nbytes of the tensor's data; returns 0
 * or -1 to abort. */
typedef int (*gguf_fill_fn)(void *ud, int idx, void *buf, size_t nbytes);

/* Writes the file (to path + ".tmp", then renamed). On failure returns a status with a
 * message in err. */
attnd_status gguf_writer_write(struct gguf_writer *w, const char *path, gguf_fill_fn fill, void *ud, char *err,
                               size_t errlen);

#endif
