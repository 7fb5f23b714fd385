/* gguf_writer.c - see gguf_writer.h. Everything is buffered in memory except tensor data,
 * which is produced one tensor at a time. */
#include "attnd/gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/tensor.h"

struct buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
};

static void put(struct buf *b, const void *d, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
};

struct gguf_writer {
    struct buf kv;  /* serialised metadata entries */
    uint64_t n_kv;
    struct wtensor *t;
    int n_t, cap_t;
};

struct gguf_writer *gguf_writer_create(void) { return calloc(1, sizeof(struct gguf_writer)); }

void gguf_writer_destroy(struct gguf_writer *w)
{
    if (!w) return;
    free(w->kv.p);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

static attnd_status head(struct gguf_writer *w, const char *key, enum gguf_vtype t)
{
    put_str(&w->kv, key, strlen(key));
    put_u32(&w->kv, (uint32_t)t);
    w->n_kv++;
    return w->kv.oom ? ATTND_ERR_NOMEM : ATTND_OK;
}

static attnd_status done(struct gguf_writer *w) { return w->kv.oom ? ATTND_ERR_NOMEM : ATTND_OK; }

attnd_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    head(w, key, GGUF_U32);
    put_u32(&w->kv, v);
    return done(w);
}

attnd_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    head(w, key, GGUF_I32);
    put(&w->kv, &v, 4);
    return done(w);
}

attnd_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    head(w, key, GGUF_F32);
    put(&w->kv, &v, 4);
    return done(w);
}

attnd_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    head(w, key, GGUF_BOOL);
    put(&w->kv, &b, 1);
    return done(w);
}

attnd_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s, size_t len)
{
    head(w, key, GGUF_STRING);
    put_str(&w->kv, s, len);
    return done(w);
}

attnd_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype t, const void *data,
                                 uint64_t n)
{
    size_t sz = gguf_vtype_size(t);
    if (!sz) return ATTND_ERR_INVALID;
    head(w, key, GGUF_ARRAY);
    put_u32(&w->kv, (uint32_t)t);
    put_u64(&w->kv, n);
    put(&w->kv, data, (size_t)n * sz);
    return done(w);
}

attnd_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n)
{
    head(w, key, GGUF_ARRAY);
    put_u32(&w->kv, GGUF_STRING);
    put_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i]));
    return done(w);
}

attnd_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf *g, int64_t i)
{
    const char *key = gguf_kv_key(g, i);
    enum gguf_vtype t = gguf_kv_type(g, i);
    if (!key) return ATTND_ERR_INVALID;
    if (t == GGUF_STRING) {
        struct gguf_str s = gguf_kv_str(g, i);
        return gguf_writer_set_str(w, key, s.ptr, (size_t)s.len);
    }
    if (t == GGUF_ARRAY) {
        enum gguf_vtype et = gguf_arr_type(g, i);
        uint64_t n = gguf_arr_n(g, i);
        if (et != GGUF_STRING) return gguf_writer_set_arr(w, key, et, gguf_arr_data(g, i), n);
        head(w, key, GGUF_ARRAY);
        put_u32(&w->kv, GGUF_STRING);
        put_u64(&w->kv, n);
        for (uint64_t j = 0; j < n; j++) {
            struct gguf_str s = gguf_arr_str(g, i, j);
            put_str(&w->kv, s.ptr, (size_t)s.len);
        }
        return done(w);
    }
    size_t sz = gguf_vtype_size(t);
    if (!sz) return ATTND_ERR_INVALID;
    uint64_t raw = (uint64_t)gguf_kv_int(g, i);
    if (t == GGUF_F32) {
        float f = (float)gguf_kv_float(g, i);
        memcpy(&raw, &f, 4);
    } else if (t == GGUF_F64) {
        double d = gguf_kv_float(g, i);
        memcpy(&raw, &d, 8);
    }
    head(w, key, t);
    put(&w->kv, &raw, sz);
    return done(w);
}

attnd_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const uint64_t *ne)
{
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return ATTND_ERR_INVALID;
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++)
        if (__builtin_mul_overflow(n, ne[d], &n)) return ATTND_ERR_RANGE;
    uint64_t nbytes;
    if (tensor_nbytes(type, n, &nbytes)) return ATTND_ERR_INVALID;
    if (w->n_t == w->cap_t) {
        int nc = w->cap_t ? w->cap_t * 2 : 64;
        struct wtensor *nt = realloc(w->t, (size_t)nc * sizeof *nt);
        if (!nt) return ATTND_ERR_NOMEM;
        w->t = nt;
        w->cap_t = nc;
    }
    struct wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return ATTND_ERR_NOMEM;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    t->nbytes = nbytes;
    w->n_t++;
    return ATTND_OK;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

attnd_status gguf_writer_write(struct gguf_writer *w, const char *path, gguf_fill_fn fill, void *ud, char *err,
                               size_t errlen)
{
    const uint64_t A = GGUF_DEFAULT_ALIGNMENT;
    struct buf h = {0};
    put(&h, GGUF_MAGIC, 4);
    put_u32(&h, 3);
    put_u64(&h, (uint64_t)w->n_t);
    put_u64(&h, w->n_kv);
    put(&h, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        struct wtensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&h, t->ne[d]);
        put_u32(&h, t->type);
        t->offset = off;
        put_u64(&h, off);
        off = align_up(off + t->nbytes, A);
    }
    static const uint8_t zeros[64];
    if (w->n_t) put(&h, zeros, (size_t)(align_up(h.n, A) - h.n));
    if (h.oom || w->kv.oom) {
        free(h.p);
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
        free(h.p);
        return ATTND_ERR_IO;
    }
    attnd_status st = ATTND_OK;
    void *data = NULL;
    size_t data_cap = 0;
    if (fwrite(h.p, 1, h.n, f) != h.n) st = ATTND_ERR_IO;
    for (int i = 0; i < w->n_t && st == ATTND_OK; i++) {
        struct wtensor *t = &w->t[i];
        if (t->nbytes > data_cap) {
            free(data);
            data_cap = (size_t)t->nbytes;
            if (!(data = malloc(data_cap))) {
                st = ATTND_ERR_NOMEM;
                break;
            }
        }
        if (fill(ud, i, data, (size_t)t->nbytes)) {
            snprintf(err, errlen, "could not produce data for tensor '%s'", t->name);
            st = ATTND_ERR_INVALID;
            break;
        }
        size_t pad = (size_t)(align_up(t->nbytes, A) - t->nbytes);
        if (fwrite(data, 1, (size_t)t->nbytes, f) != t->nbytes || (i + 1 < w->n_t && fwrite(zeros, 1, pad, f) != pad))
            st = ATTND_ERR_IO;
    }
    free(data);
    free(h.p);
    if (fclose(f) && st == ATTND_OK) st = ATTND_ERR_IO;
    if (st == ATTND_OK && rename(tmp, path)) st = ATTND_ERR_IO;
    if (st != ATTND_OK) {
        if (st == ATTND_ERR_IO) snprintf(err, errlen, "writing '%s' failed: %s", path, strerror(errno));
        else if (st == ATTND_ERR_NOMEM) snprintf(err, errlen, "out of memory");
        remove(tmp);
    }
    return st;
}
