/* gguf.c - hardened GGUF header reader. See gguf.h for the contract.
 *
 * The parser walks the header with a cursor that refuses to step past the end of the file.
 * While parsing, positions are kept as offsets into a buffer that may still grow (it is filled
 * from the file on demand); pointers are made only once the whole header has been read.
 */
#include "attnd/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnd/tensor.h"

#define MAX_KEY_LEN 65535u   /* longer keys are surely corrupt */
#define MAX_NAME_LEN 1023u   /* tensor names (ggml itself allows 63) */
#define MAX_STR_LEN (1ull << 31)

struct kv {
    char *key;
    enum gguf_vtype type;
    union {
        uint64_t u; /* raw bits of a scalar, zero-extended */
        struct {
            uint64_t off, len;
        } str;
        struct {
            enum gguf_vtype etype;
            uint64_t n;
            uint64_t off;      /* numeric arrays: offset of element 0 */
            uint64_t *str_off; /* string arrays: offset of each string's bytes */
            uint64_t *str_len;
        } arr;
    } v;
};

struct gguf {
    uint32_t version;
    uint32_t alignment;
    uint64_t file_size;
    uint64_t data_offset;
    uint8_t *buf;          /* header bytes (owned unless mem) */
    const uint8_t *mem;    /* the whole image for gguf_open_mem() */
    int64_t n_kv;
    struct kv *kvs;
    int64_t n_tensors;
    struct gguf_tensor *tensors;
};

/* ------------------------------------------------------------------------------------------
 * cursor
 * ---------------------------------------------------------------------------------------- */

struct cursor {
    int fd;              /* -1 for memory images */
    const uint8_t *mem;
    uint64_t size;       /* file size */
    uint8_t *buf;        /* bytes [0, have) of the file (== mem for images) */
    uint64_t have, cap;
    uint64_t pos;
    const char *section; /* what is being read, for error messages */
    char *err;
    size_t errlen;
    attnd_status st;
};

static attnd_status fail(struct cursor *c, attnd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static attnd_status fail(struct cursor *c, attnd_status st, const char *fmt, ...)
{
    if (c->st != ATTND_OK) return c->st; /* keep the first reason */
    c->st = st;
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Makes bytes [pos, pos+n) available; fails with a "truncated" message otherwise. */
static int need(struct cursor *c, uint64_t n)
{
    if (c->st != ATTND_OK) return -1;
    if (n > c->size || c->pos > c->size - n) {
        fail(c, ATTND_ERR_FORMAT,
             "truncated file: %s needs %" PRIu64 " bytes at offset %" PRIu64 " but the file has %" PRIu64,
             c->section, n, c->pos, c->size);
        return -1;
    }
    uint64_t end = c->pos + n;
    if (end <= c->have) return 0;
    /* grow geometrically, at least 1 MiB, never past the file */
    uint64_t want = c->cap ? c->cap : (1u << 20);
    while (want < end) want *= 2;
    if (want > c->size) want = c->size;
    if (want > SIZE_MAX) {
        fail(c, ATTND_ERR_NOMEM, "header too large for this machine");
        return -1;
    }
    uint8_t *nb = realloc(c->buf, (size_t)want);
    if (!nb) {
        fail(c, ATTND_ERR_NOMEM, "out of memory reading the header (%" PRIu64 " bytes)", want);
        return -1;
    }
    c->buf = nb;
    c->cap = want;
    while (c->have < want) {
        ssize_t r = pread(c->fd, c->buf + c->have, (size_t)(want - c->have), (off_t)c->have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            fail(c, ATTND_ERR_IO, "read failed at offset %" PRIu64 ": %s", c->have,
                 r < 0 ? strerror(errno) : "unexpected end of file");
            return -1;
        }
        c->have += (uint64_t)r;
    }
    return 0;
}

static int rd(struct cursor *c, void *dst, uint64_t n)
{
    if (need(c, n)) return -1;
    memcpy(dst, c->buf + c->pos, (size_t)n);
    c->pos += n;
    return 0;
}

static int rd_u32(struct cursor *c, uint32_t *v) { return rd(c, v, 4); }
static int rd_u64(struct cursor *c, uint64_t *v) { return rd(c, v, 8); }

/* Reads a string header and skips its bytes; returns offset/len of the bytes. */
static int rd_str(struct cursor *c, uint64_t *off, uint64_t *len)
{
    uint64_t n;
    if (rd_u64(c, &n)) return -1;
    if (n > MAX_STR_LEN || n > c->size - c->pos) {
        fail(c, ATTND_ERR_FORMAT,
             "%s: string length %" PRIu64 " at offset %" PRIu64 " runs past the end of the file (%" PRIu64
             " bytes)",
             c->section, n, c->pos - 8, c->size);
        return -1;
    }
    if (need(c, n)) return -1;
    *off = c->pos;
    *len = n;
    c->pos += n;
    return 0;
}

static char *dup_str(struct cursor *c, uint64_t off, uint64_t len)
{
    char *s = malloc((size_t)len + 1);
    if (!s) {
        fail(c, ATTND_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(s, c->buf + off, (size_t)len);
    s[len] = 0;
    return s;
}

/* ------------------------------------------------------------------------------------------
 * types
 * ---------------------------------------------------------------------------------------- */

size_t gguf_vtype_size(enum gguf_vtype t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(enum gguf_vtype t)
{
    static const char *names[GGUF_VTYPE_COUNT] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                  "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

static int64_t scalar_to_int(enum gguf_vtype t, uint64_t u)
{
    switch (t) {
    case GGUF_U8: return (uint8_t)u;
    case GGUF_I8: return (int8_t)(uint8_t)u;
    case GGUF_U16: return (uint16_t)u;
    case GGUF_I16: return (int16_t)(uint16_t)u;
    case GGUF_U32: return (uint32_t)u;
    case GGUF_I32: return (int32_t)(uint32_t)u;
    case GGUF_BOOL: return (uint8_t)u != 0;
    case GGUF_U64: return (int64_t)u; /* range checked by callers */
    case GGUF_I64: return (int64_t)u;
    default: return 0;
    }
}

static double scalar_to_float(enum gguf_vtype t, uint64_t u)
{
    if (t == GGUF_F32) {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (t == GGUF_F64) {
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    if (t == GGUF_U64) return (double)u;
    return (double)scalar_to_int(t, u);
}

/* ------------------------------------------------------------------------------------------
 * parsing
 * ---------------------------------------------------------------------------------------- */

static int parse_value(struct cursor *c, struct kv *kv, const char *key)
{
    uint32_t t;
    c->section = "metadata value type";
    if (rd_u32(c, &t)) return -1;
    if (t >= GGUF_VTYPE_COUNT) {
        fail(c, ATTND_ERR_FORMAT, "metadata key '%s': unknown value type %u", key, t);
        return -1;
    }
    kv->type = (enum gguf_vtype)t;
    c->section = "metadata value";
    if (t == GGUF_STRING) return rd_str(c, &kv->v.str.off, &kv->v.str.len);
    if (t != GGUF_ARRAY) {
        size_t sz = gguf_vtype_size(kv->type);
        uint64_t u = 0;
        if (rd(c, &u, sz)) return -1;
        if (t == GGUF_BOOL && u > 1) {
            fail(c, ATTND_ERR_FORMAT, "metadata key '%s': bool value %u is not 0 or 1", key, (unsigned)u);
            return -1;
        }
        kv->v.u = u;
        return 0;
    }
    uint32_t et;
    uint64_t n;
    c->section = "metadata array header";
    if (rd_u32(c, &et) || rd_u64(c, &n)) return -1;
    if (et >= GGUF_VTYPE_COUNT) {
        fail(c, ATTND_ERR_FORMAT, "metadata key '%s': array of unknown element type %u", key, et);
        return -1;
    }
    if (et == GGUF_ARRAY) {
        fail(c, ATTND_ERR_UNSUPPORTED, "metadata key '%s': nested arrays are not supported", key);
        return -1;
    }
    kv->v.arr.etype = (enum gguf_vtype)et;
    kv->v.arr.n = n;
    c->section = "metadata array";
    if (et != GGUF_STRING) {
        uint64_t sz = gguf_vtype_size((enum gguf_vtype)et), bytes;
        if (__builtin_mul_overflow(n, sz, &bytes) || bytes > c->size - c->pos) {
            fail(c, ATTND_ERR_FORMAT,
                 "metadata key '%s': array of %" PRIu64 " %s runs past the end of the file", key, n,
                 gguf_vtype_name((enum gguf_vtype)et));
            return -1;
        }
        if (need(c, bytes)) return -1;
        kv->v.arr.off = c->pos;
        if (et == GGUF_BOOL)
            for (uint64_t j = 0; j < n; j++)
                if (c->buf[c->pos + j] > 1) {
                    fail(c, ATTND_ERR_FORMAT, "metadata key '%s': bool element %" PRIu64 " is not 0 or 1", key,
                         j);
                    return -1;
                }
        c->pos += bytes;
        return 0;
    }
    /* every string takes at least its 8-byte length: bound n before allocating */
    if (n > (c->size - c->pos) / 8) {
        fail(c, ATTND_ERR_FORMAT, "metadata key '%s': array of %" PRIu64 " strings runs past the end of the file",
             key, n);
        return -1;
    }
    kv->v.arr.str_off = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    kv->v.arr.str_len = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    if (!kv->v.arr.str_off || !kv->v.arr.str_len) {
        fail(c, ATTND_ERR_NOMEM, "out of memory for array '%s'", key);
        return -1;
    }
    for (uint64_t j = 0; j < n; j++)
        if (rd_str(c, &kv->v.arr.str_off[j], &kv->v.arr.str_len[j])) return -1;
    return 0;
}

static int cmp_tensor_off(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a, *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts names[0..n) and returns a name that occurs twice, or NULL. O(n log n): a hostile file
 * may hold ~size/14 keys; pairwise strcmp took 16 s for 80000 keys in a 1.7 MB file. */
static const char *find_duplicate(const char **names, size_t n)
{
    qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

static int parse_tensor(struct cursor *c, struct gguf_tensor *t, int64_t idx)
{
    uint64_t off, len;
    c->section = "tensor name";
    if (rd_str(c, &off, &len)) return -1;
    if (len == 0 || len > MAX_NAME_LEN) {
        fail(c, ATTND_ERR_FORMAT, "tensor %" PRId64 ": name length %" PRIu64 " is out of range (1..%u)", idx, len,
             MAX_NAME_LEN);
        return -1;
    }
    if (!(t->name = dup_str(c, off, len))) return -1;
    if (memchr(t->name, 0, (size_t)len)) {
        fail(c, ATTND_ERR_FORMAT, "tensor %" PRId64 ": name contains a NUL byte", idx);
        return -1;
    }
    c->section = "tensor info";
    if (rd_u32(c, &t->n_dims)) return -1;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS) {
        fail(c, ATTND_ERR_FORMAT, "tensor '%s': %u dimensions (must be 1..%d)", t->name, t->n_dims, GGUF_MAX_DIMS);
        return -1;
    }
    uint64_t n = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (rd_u64(c, &t->ne[d])) return -1;
        if (t->ne[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(n, t->ne[d], &n) || n > (uint64_t)INT64_MAX) {
            fail(c, ATTND_ERR_FORMAT, "tensor '%s': dimension %u (%" PRIu64 ") overflows the element count",
                 t->name, d, t->ne[d]);
            return -1;
        }
    }
    t->n_elems = n;
    if (rd_u32(c, &t->type) || rd_u64(c, &t->offset)) return -1;
    if (!tensor_type_known(t->type)) {
        fail(c, ATTND_ERR_FORMAT, "tensor '%s': unknown type id %u", t->name, t->type);
        return -1;
    }
    size_t blck = tensor_block_elems(t->type);
    if (t->ne[0] % blck) {
        fail(c, ATTND_ERR_FORMAT, "tensor '%s': row length %" PRIu64 " is not a multiple of the %s block size %zu",
             t->name, t->ne[0], tensor_type_name(t->type), blck);
        return -1;
    }
    if (tensor_nbytes(t->type, n, &t->nbytes)) {
        fail(c, ATTND_ERR_FORMAT, "tensor '%s': data size overflows", t->name);
        return -1;
    }
    return 0;
}

static void free_kvs(struct kv *kvs, int64_t n)
{
    if (!kvs) return;
    for (int64_t i = 0; i < n; i++) {
        free(kvs[i].key);
        if (kvs[i].type == GGUF_ARRAY) {
            free(kvs[i].v.arr.str_off);
            free(kvs[i].v.arr.str_len);
        }
    }
    free(kvs);
}

void gguf_close(struct gguf *g)
{
    if (!g) return;
    free_kvs(g->kvs, g->n_kv);
    if (g->tensors)
        for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->tensors);
    if (!g->mem) free(g->buf);
    free(g);
}

/* Step 1: magic, version and the two counts (each checked against what the file can hold). */
static int parse_header(struct cursor *c, struct gguf *g, uint64_t *n_tensors, uint64_t *n_kv)
{
    char magic[4];
    c->section = "magic";
    if (rd(c, magic, 4)) return -1;
    if (memcmp(magic, GGUF_MAGIC, 4))
        return fail(c, ATTND_ERR_FORMAT, "not a GGUF file: magic is %02x %02x %02x %02x, expected 'GGUF'",
                    (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    c->section = "version";
    if (rd_u32(c, &g->version)) return -1;
    if (g->version == 1) return fail(c, ATTND_ERR_UNSUPPORTED, "GGUF version 1 is not supported (only 2 and 3)");
    if ((g->version & 0xffff) == 0 && (g->version >> 16))
        return fail(c, ATTND_ERR_UNSUPPORTED,
                    "GGUF file is big-endian (version field 0x%08x); only little-endian is supported", g->version);
    if (g->version != 2 && g->version != 3)
        return fail(c, ATTND_ERR_UNSUPPORTED, "unknown GGUF version %u (supported: 2, 3)", g->version);
    c->section = "header counts";
    if (rd_u64(c, n_tensors) || rd_u64(c, n_kv)) return -1;
    /* each metadata entry takes >= 8 (key len) + 4 (type) + 1 bytes; each tensor info >= 8+1+4+8+4+8 */
    if (*n_kv > (c->size - c->pos) / 13)
        return fail(c, ATTND_ERR_FORMAT, "metadata count %" PRIu64 " cannot fit in a %" PRIu64 "-byte file", *n_kv,
                    c->size);
    if (*n_tensors > (c->size - c->pos) / 33)
        return fail(c, ATTND_ERR_FORMAT, "tensor count %" PRIu64 " cannot fit in a %" PRIu64 "-byte file",
                    *n_tensors, c->size);
    return 0;
}

/* Makes room for entry i of an array of total entries that grows as entries are actually read
 * (so a hostile count costs no memory up front); new slots are zeroed. */
static int grow(struct cursor *c, void **arr, size_t *cap, size_t elem, uint64_t i, uint64_t total)
{
    if (*arr && i < *cap) return 0;
    size_t nc = !*arr ? (total < 256 ? (size_t)(total ? total : 1) : 256)
                      : (*cap * 2 < total ? *cap * 2 : (size_t)total);
    char *na = realloc(*arr, nc * elem);
    if (!na) return fail(c, ATTND_ERR_NOMEM, "out of memory");
    size_t old = *arr ? *cap : 0;
    memset(na + old * elem, 0, (nc - old) * elem);
    *arr = na;
    *cap = nc;
    return 0;
}

/* general.alignment: a power-of-two u32. */
static int parse_alignment(struct cursor *c, struct gguf *g, const struct kv *kv)
{
    if (kv->type != GGUF_U32)
        return fail(c, ATTND_ERR_FORMAT, "general.alignment has type %s, expected u32", gguf_vtype_name(kv->type));
    uint32_t a = (uint32_t)kv->v.u;
    if (a == 0 || (a & (a - 1))) return fail(c, ATTND_ERR_FORMAT, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    return 0;
}

/* Fails with "duplicate WHAT 'name'" if two of names[0..n) are equal (names is reordered). */
static int check_unique(struct cursor *c, const char **names, size_t n, const char *what)
{
    const char *dup = find_duplicate(names, n);
    return dup ? fail(c, ATTND_ERR_FORMAT, "duplicate %s '%s'", what, dup) : 0;
}

/* Step 2: the metadata entries, then a check that no key repeats. */
static int parse_kvs(struct cursor *c, struct gguf *g, uint64_t n_kv)
{
    size_t cap = 0;
    void *arr = NULL;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow(c, &arr, &cap, sizeof *g->kvs, i, n_kv)) return -1;
        g->kvs = arr;
        struct kv *kv = &g->kvs[i];
        g->n_kv = (int64_t)i + 1;
        uint64_t off, len;
        c->section = "metadata key";
        if (rd_str(c, &off, &len)) return -1;
        if (len == 0 || len > MAX_KEY_LEN)
            return fail(c, ATTND_ERR_FORMAT, "metadata entry %" PRIu64 ": key length %" PRIu64 " is out of range", i,
                        len);
        if (!(kv->key = dup_str(c, off, len))) return -1;
        if (memchr(kv->key, 0, (size_t)len))
            return fail(c, ATTND_ERR_FORMAT, "metadata entry %" PRIu64 ": key contains a NUL byte", i);
        if (parse_value(c, kv, kv->key)) return -1;
        if (!strcmp(kv->key, "general.alignment") && parse_alignment(c, g, kv)) return -1;
    }
    const char **names = malloc((size_t)(n_kv ? n_kv : 1) * sizeof *names);
    if (!names) return fail(c, ATTND_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n_kv; i++) names[i] = g->kvs[i].key;
    int rc = check_unique(c, names, (size_t)n_kv, "metadata key");
    free(names);
    return rc;
}

/* Step 3: the tensor infos. */
static int parse_tensors(struct cursor *c, struct gguf *g, uint64_t n_tensors)
{
    size_t cap = 0;
    void *arr = NULL;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (grow(c, &arr, &cap, sizeof *g->tensors, i, n_tensors)) return -1;
        g->tensors = arr;
        g->n_tensors = (int64_t)i + 1;
        if (parse_tensor(c, &g->tensors[i], (int64_t)i)) return -1;
    }
    return 0;
}

/* Step 4b: tensor t's data, at data offset t->offset, lies inside the file; t->offset becomes absolute. */
static int place_tensor(struct cursor *c, const struct gguf *g, struct gguf_tensor *t, uint64_t data)
{
    if (t->offset % g->alignment)
        return fail(c, ATTND_ERR_FORMAT, "tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %u",
                    t->name, t->offset, g->alignment);
    uint64_t abs, end;
    if (__builtin_add_overflow(data, t->offset, &abs) || __builtin_add_overflow(abs, t->nbytes, &end) ||
        end > c->size)
        return fail(c, ATTND_ERR_FORMAT,
                    "truncated file: tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64
                    ") ends past the end of the file (%" PRIu64 " bytes)",
                    t->name, t->nbytes, t->offset, c->size);
    t->offset = abs;
    return 0;
}

/* Step 4: the data section starts at the next multiple of the alignment; every tensor lies in
 * the file, no two overlap, no name repeats. */
static int place_tensors(struct cursor *c, struct gguf *g)
{
    uint64_t a = g->alignment, data = c->pos, n = (uint64_t)g->n_tensors;
    if (data % a) data += a - data % a;
    g->data_offset = data;
    if (!n) return 0;
    if (data > c->size)
        return fail(c, ATTND_ERR_FORMAT,
                    "truncated file: tensor data section would start at %" PRIu64 " but the file has %" PRIu64
                    " bytes",
                    data, c->size);
    struct gguf_tensor **by_off = malloc((size_t)n * sizeof *by_off);
    const char **names = malloc((size_t)n * sizeof *names);
    int rc = -1;
    if (!by_off || !names) {
        fail(c, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) {
        by_off[i] = &g->tensors[i];
        names[i] = g->tensors[i].name;
        if (place_tensor(c, g, &g->tensors[i], data)) goto out;
    }
    qsort(by_off, (size_t)n, sizeof *by_off, cmp_tensor_off);
    for (uint64_t i = 1; i < n; i++)
        if (by_off[i - 1]->offset + by_off[i - 1]->nbytes > by_off[i]->offset) {
            fail(c, ATTND_ERR_FORMAT, "tensors '%s' and '%s' overlap in the file", by_off[i - 1]->name,
                 by_off[i]->name);
            goto out;
        }
    rc = check_unique(c, names, (size_t)n, "tensor name");
out:
    free(by_off);
    free(names);
    return rc;
}

static attnd_status parse(struct cursor *c, struct gguf **out)
{
    struct gguf *g = calloc(1, sizeof *g);
    if (!g) return fail(c, ATTND_ERR_NOMEM, "out of memory");
    g->file_size = c->size;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    uint64_t n_tensors = 0, n_kv = 0;
    if (parse_header(c, g, &n_tensors, &n_kv) || parse_kvs(c, g, n_kv) || parse_tensors(c, g, n_tensors) ||
        place_tensors(c, g)) {
        gguf_close(g);
        return c->st != ATTND_OK ? c->st : ATTND_ERR_INTERNAL;
    }
    g->buf = c->buf;
    g->mem = c->mem;
    c->buf = NULL;
    *out = g;
    return ATTND_OK;
}

attnd_status gguf_open(const char *path, struct gguf **out, char *err, size_t errlen)
{
    struct cursor c = {.fd = -1, .err = err, .errlen = errlen, .section = "header"};
    *out = NULL;
    if (err && errlen) err[0] = 0;
    c.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (c.fd < 0) return fail(&c, ATTND_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(c.fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(c.fd);
        return fail(&c, ATTND_ERR_IO, "'%s' is not a regular file", path);
    }
    c.size = (uint64_t)sb.st_size;
    attnd_status st = parse(&c, out);
    free(c.buf);
    close(c.fd);
    return st;
}

attnd_status gguf_open_mem(const void *data, size_t size, struct gguf **out, char *err, size_t errlen)
{
    struct cursor c = {.fd = -1, .err = err, .errlen = errlen, .section = "header"};
    *out = NULL;
    if (err && errlen) err[0] = 0;
    c.mem = data;
    c.buf = (uint8_t *)(uintptr_t)data;
    c.size = c.have = c.cap = size;
    attnd_status st = parse(&c, out);
    if (st != ATTND_OK) c.buf = NULL; /* not ours */
    return st;
}

/* ------------------------------------------------------------------------------------------
 * accessors
 * ---------------------------------------------------------------------------------------- */

uint32_t gguf_version(const struct gguf *g) { return g->version; }
uint64_t gguf_file_size(const struct gguf *g) { return g->file_size; }
uint32_t gguf_alignment(const struct gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const struct gguf *g) { return g->data_offset; }
int64_t gguf_n_kv(const struct gguf *g) { return g->n_kv; }
int64_t gguf_n_tensors(const struct gguf *g) { return g->n_tensors; }

const char *gguf_kv_key(const struct gguf *g, int64_t i) { return i >= 0 && i < g->n_kv ? g->kvs[i].key : NULL; }

enum gguf_vtype gguf_kv_type(const struct gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kvs[i].type : GGUF_VTYPE_COUNT;
}

int64_t gguf_find_key(const struct gguf *g, const char *key)
{
    for (int64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kvs[i].key, key)) return i;
    return -1;
}

static int is_int_type(enum gguf_vtype t)
{
    return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 || t == GGUF_I32 ||
           t == GGUF_U64 || t == GGUF_I64;
}

attnd_status gguf_get_int(const struct gguf *g, const char *key, int64_t *out)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return ATTND_ERR_NOTFOUND;
    const struct kv *kv = &g->kvs[i];
    if (!is_int_type(kv->type)) return ATTND_ERR_FORMAT;
    if (kv->type == GGUF_U64 && kv->v.u > (uint64_t)INT64_MAX) return ATTND_ERR_RANGE;
    *out = scalar_to_int(kv->type, kv->v.u);
    return ATTND_OK;
}

attnd_status gguf_get_float(const struct gguf *g, const char *key, double *out)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return ATTND_ERR_NOTFOUND;
    const struct kv *kv = &g->kvs[i];
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64 && !is_int_type(kv->type)) return ATTND_ERR_FORMAT;
    *out = scalar_to_float(kv->type, kv->v.u);
    return ATTND_OK;
}

attnd_status gguf_get_bool(const struct gguf *g, const char *key, bool *out)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return ATTND_ERR_NOTFOUND;
    if (g->kvs[i].type != GGUF_BOOL) return ATTND_ERR_FORMAT;
    *out = g->kvs[i].v.u != 0;
    return ATTND_OK;
}

attnd_status gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return ATTND_ERR_NOTFOUND;
    if (g->kvs[i].type != GGUF_STRING) return ATTND_ERR_FORMAT;
    *out = gguf_kv_str(g, i);
    return ATTND_OK;
}

attnd_status gguf_get_arr(const struct gguf *g, const char *key, enum gguf_vtype *etype, uint64_t *n)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return ATTND_ERR_NOTFOUND;
    if (g->kvs[i].type != GGUF_ARRAY) return ATTND_ERR_FORMAT;
    *etype = g->kvs[i].v.arr.etype;
    *n = g->kvs[i].v.arr.n;
    return ATTND_OK;
}

int64_t gguf_kv_int(const struct gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv) return 0;
    return scalar_to_int(g->kvs[i].type, g->kvs[i].v.u);
}

double gguf_kv_float(const struct gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv || (g->kvs[i].type != GGUF_F32 && g->kvs[i].type != GGUF_F64)) return 0;
    return scalar_to_float(g->kvs[i].type, g->kvs[i].v.u);
}

struct gguf_str gguf_kv_str(const struct gguf *g, int64_t i)
{
    struct gguf_str s = {NULL, 0};
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != GGUF_STRING) return s;
    s.ptr = (const char *)g->buf + g->kvs[i].v.str.off;
    s.len = g->kvs[i].v.str.len;
    return s;
}

enum gguf_vtype gguf_arr_type(const struct gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != GGUF_ARRAY) return GGUF_VTYPE_COUNT;
    return g->kvs[i].v.arr.etype;
}

uint64_t gguf_arr_n(const struct gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != GGUF_ARRAY) return 0;
    return g->kvs[i].v.arr.n;
}

const void *gguf_arr_data(const struct gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != GGUF_ARRAY || g->kvs[i].v.arr.etype == GGUF_STRING) return NULL;
    return g->buf + g->kvs[i].v.arr.off;
}

struct gguf_str gguf_arr_str(const struct gguf *g, int64_t i, uint64_t j)
{
    struct gguf_str s = {NULL, 0};
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != GGUF_ARRAY || g->kvs[i].v.arr.etype != GGUF_STRING ||
        j >= g->kvs[i].v.arr.n)
        return s;
    s.ptr = (const char *)g->buf + g->kvs[i].v.arr.str_off[j];
    s.len = g->kvs[i].v.arr.str_len[j];
    return s;
}

static uint64_t arr_raw(const struct gguf *g, int64_t i, uint64_t j, enum gguf_vtype *et)
{
    *et = GGUF_VTYPE_COUNT;
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != GGUF_ARRAY || j >= g->kvs[i].v.arr.n) return 0;
    *et = g->kvs[i].v.arr.etype;
    size_t sz = gguf_vtype_size(*et);
    uint64_t u = 0;
    if (sz) memcpy(&u, g->buf + g->kvs[i].v.arr.off + j * sz, sz);
    return u;
}

int64_t gguf_arr_int(const struct gguf *g, int64_t i, uint64_t j)
{
    enum gguf_vtype et;
    uint64_t u = arr_raw(g, i, j, &et);
    if (et == GGUF_F32 || et == GGUF_F64) {
        /* the value comes from the file: converting NaN or an out-of-range float is undefined */
        double d = scalar_to_float(et, u);
        if (d != d) return 0;
        if (d >= 9223372036854775808.0) return INT64_MAX;
        if (d < -9223372036854775808.0) return INT64_MIN;
        return (int64_t)d;
    }
    return scalar_to_int(et, u);
}

double gguf_arr_float(const struct gguf *g, int64_t i, uint64_t j)
{
    enum gguf_vtype et;
    uint64_t u = arr_raw(g, i, j, &et);
    return scalar_to_float(et, u);
}

const struct gguf_tensor *gguf_tensor(const struct gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

const void *gguf_mem_data(const struct gguf *g, const struct gguf_tensor *t)
{
    return g->mem ? g->mem + t->offset : NULL;
}
