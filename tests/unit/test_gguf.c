/* test_gguf.c - the GGUF reader against valid, truncated, hand-made hostile and fuzzed files.
 *
 * Runs under AddressSanitizer + UBSan in CI (make VARIANT=asan): every image handed to
 * gguf_open_mem() is copied into a heap block of exactly its size, so a read one byte past the
 * end is caught.
 *   1. a valid image with every metadata type (0..12), arrays of every scalar type and of
 *      strings, empty array/string, general.alignment = 64 and four tensors (f32, f16, q8_0,
 *      q4_0): every value is read back, through gguf_open_mem() and gguf_open();
 *   2. that image truncated at every byte of its header (and inside the tensor data);
 *   3. hand-made bad headers, each with the status and a word of the message it must give;
 *   4. a seeded fuzz loop over the valid image; whatever opens is walked through all accessors;
 *   5. every file in $SHARED/models and $SHARED/vocab opens.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "attnd/tensor.h"
#include "testutil.h"

/* ============================================================================================
 * byte builder
 * ========================================================================================== */

#define MAX_FIELDS 256

struct bb {
    uint8_t *p;
    size_t n, cap;
    /* positions of every u64 / u32 field written, for the fuzzer */
    size_t f64[MAX_FIELDS], f32[MAX_FIELDS];
    int n64, n32;
};

static void bb_put(struct bb *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void bb_u8(struct bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u16(struct bb *b, uint16_t v) { bb_put(b, &v, 2); }
static void bb_u32(struct bb *b, uint32_t v)
{
    if (b->n32 < MAX_FIELDS) b->f32[b->n32++] = b->n;
    bb_put(b, &v, 4);
}
static void bb_u64(struct bb *b, uint64_t v)
{
    if (b->n64 < MAX_FIELDS) b->f64[b->n64++] = b->n;
    bb_put(b, &v, 8);
}
static void bb_strn(struct bb *b, const char *s, size_t n)
{
    bb_u64(b, n);
    bb_put(b, s, n);
}
static void bb_str(struct bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_pad(struct bb *b, size_t a, uint8_t fill)
{
    while (b->n % a) bb_u8(b, fill);
}
static void bb_free(struct bb *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* header + metadata key/type */
static void bb_header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_put(b, GGUF_MAGIC, 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_key(struct bb *b, const char *key, enum gguf_vtype t)
{
    bb_str(b, key);
    bb_u32(b, (uint32_t)t);
}
static void bb_kv_u32(struct bb *b, const char *key, uint32_t v)
{
    bb_key(b, key, GGUF_U32);
    bb_u32(b, v);
}
static void bb_tensor(struct bb *b, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                      uint64_t offset)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* ============================================================================================
 * the valid image
 * ========================================================================================== */

struct want_tensor {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    uint64_t rel; /* offset inside the data section */
    uint64_t nbytes;
};

static struct want_tensor g_wt[] = {
    {"blk.0.weight_f32", TENSOR_F32, 2, {8, 3, 1, 1}, 0, 0},
    {"blk.0.weight_q8_0", TENSOR_Q8_0, 2, {64, 2, 1, 1}, 0, 0},
    {"blk.0.weight_q4_0", TENSOR_Q4_0, 4, {32, 1, 1, 2}, 0, 0},
    {"output_norm.f16", TENSOR_F16, 1, {5, 1, 1, 1}, 0, 0},
};
#define N_WT ((int)(sizeof g_wt / sizeof g_wt[0]))

static const uint8_t g_a_u8[] = {0, 1, 127, 128, 255};
static const int8_t g_a_i8[] = {-128, -1, 0, 1, 127};
static const uint16_t g_a_u16[] = {0, 1, 65535};
static const int16_t g_a_i16[] = {-32768, 0, 32767};
static const uint32_t g_a_u32[] = {0, 7, 4000000000u, 0xffffffffu};
static const int32_t g_a_i32[] = {INT32_MIN, -1, 0, INT32_MAX};
static const float g_a_f32[] = {0.0f, -1.5f, 3.14159274f, 1e-30f, 3.0e38f};
static const uint8_t g_a_bool[] = {1, 0, 0, 1};
static const uint64_t g_a_u64[] = {0, 1, (1ull << 53) + 1, UINT64_MAX};
static const int64_t g_a_i64[] = {INT64_MIN, -2, 0, INT64_MAX};
static const double g_a_f64[] = {0.0, -0.0, 2.718281828459045, -1.0e300, 4.9e-324};
static const char *const g_a_str[] = {"hello", "", "w\xc3\xb6rld", "a\0b", "0123456789abcdef0123456789"};
static const size_t g_a_str_len[] = {5, 0, 6, 3, 26};
static const char g_str_nul[] = "nul\0inside";

#define N_KV_VALID 31

/* Builds the valid image into b; *data_off receives the absolute start of the tensor data. */
static void build_valid(struct bb *b, uint32_t version, uint64_t *data_off)
{
    memset(b, 0, sizeof *b);
    bb_header(b, version, N_WT, N_KV_VALID);
    /* scalars, one of each type 0..12 (and then some) */
    bb_key(b, "t.u8", GGUF_U8), bb_u8(b, 200);
    bb_key(b, "t.i8", GGUF_I8), bb_u8(b, (uint8_t)(int8_t)-5);
    bb_key(b, "t.u16", GGUF_U16), bb_u16(b, 65535);
    bb_key(b, "t.i16", GGUF_I16), bb_u16(b, (uint16_t)(int16_t)-32768);
    bb_kv_u32(b, "t.u32", 4000000000u);
    bb_key(b, "t.i32", GGUF_I32), bb_u32(b, (uint32_t)INT32_MIN);
    float f = 1e-6f;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    bb_key(b, "t.f32", GGUF_F32), bb_u32(b, fb);
    bb_key(b, "t.bool1", GGUF_BOOL), bb_u8(b, 1);
    bb_key(b, "t.bool0", GGUF_BOOL), bb_u8(b, 0);
    bb_key(b, "t.str", GGUF_STRING), bb_str(b, "h\xc3\xa9llo, \"gguf\"");
    bb_key(b, "t.empty_str", GGUF_STRING), bb_str(b, "");
    bb_key(b, "t.str_nul", GGUF_STRING), bb_strn(b, g_str_nul, sizeof g_str_nul - 1);
    bb_key(b, "t.u64", GGUF_U64), bb_u64(b, UINT64_MAX);
    bb_key(b, "t.u64_small", GGUF_U64), bb_u64(b, 12345);
    bb_key(b, "t.i64", GGUF_I64), bb_u64(b, (uint64_t)INT64_MIN);
    double d = -1.5e300;
    uint64_t db;
    memcpy(&db, &d, 8);
    bb_key(b, "t.f64", GGUF_F64), bb_u64(b, db);
    bb_kv_u32(b, "general.alignment", 64);
    /* arrays of every scalar type */
#define ARR(key, et, arr)                                                                                          \
    do {                                                                                                           \
        bb_key(b, key, GGUF_ARRAY);                                                                                \
        bb_u32(b, et);                                                                                             \
        bb_u64(b, sizeof arr / sizeof arr[0]);                                                                     \
        bb_put(b, arr, sizeof arr);                                                                                \
    } while (0)
    ARR("a.u8", GGUF_U8, g_a_u8);
    ARR("a.i8", GGUF_I8, g_a_i8);
    ARR("a.u16", GGUF_U16, g_a_u16);
    ARR("a.i16", GGUF_I16, g_a_i16);
    ARR("a.u32", GGUF_U32, g_a_u32);
    ARR("a.i32", GGUF_I32, g_a_i32);
    ARR("a.f32", GGUF_F32, g_a_f32);
    ARR("a.bool", GGUF_BOOL, g_a_bool);
    ARR("a.u64", GGUF_U64, g_a_u64);
    ARR("a.i64", GGUF_I64, g_a_i64);
    ARR("a.f64", GGUF_F64, g_a_f64);
#undef ARR
    bb_key(b, "a.str", GGUF_ARRAY);
    bb_u32(b, GGUF_STRING);
    bb_u64(b, 5);
    for (int j = 0; j < 5; j++) bb_strn(b, g_a_str[j], g_a_str_len[j]);
    bb_key(b, "a.empty", GGUF_ARRAY), bb_u32(b, GGUF_U32), bb_u64(b, 0);
    bb_key(b, "a.empty_str", GGUF_ARRAY), bb_u32(b, GGUF_STRING), bb_u64(b, 0);
    /* 17 scalars + 11 arrays + 3 = 31 entries */

    /* tensor table: offsets packed at the 64-byte alignment */
    uint64_t rel = 0;
    for (int i = 0; i < N_WT; i++) {
        struct want_tensor *t = &g_wt[i];
        uint64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        tensor_nbytes(t->type, n, &t->nbytes);
        t->rel = rel;
        bb_tensor(b, t->name, t->type, t->n_dims, t->ne, rel);
        rel = align_up(rel + t->nbytes, 64);
    }
    bb_pad(b, 64, 0);
    *data_off = b->n;
    /* data: a recognisable pattern; padding between tensors, none after the last */
    for (int i = 0; i < N_WT; i++) {
        struct want_tensor *t = &g_wt[i];
        while (b->n < *data_off + t->rel) bb_u8(b, 0);
        for (uint64_t k = 0; k < t->nbytes; k++) bb_u8(b, (uint8_t)(i * 31 + k));
    }
}

/* Opens a private copy of exactly size bytes, so ASan sees any read past the end. */
static attnd_status open_copy(const uint8_t *img, size_t size, uint8_t **copy, struct gguf **g, char *err,
                              size_t errlen)
{
    *copy = malloc(size ? size : 1);
    if (!*copy) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    if (size) memcpy(*copy, img, size);
    return gguf_open_mem(*copy, size, g, err, errlen);
}

static bool feq(double a, double b) { return memcmp(&a, &b, sizeof a) == 0 || a == b; }

/* Checks every value of the valid image. mem: the image (for gguf_open_mem handles) or NULL. */
static void check_valid(const struct gguf *g, const uint8_t *mem, uint64_t size, uint64_t data_off,
                        uint32_t version, const char *how)
{
    T_CHECK(gguf_version(g) == version, "%s: version %u", how, gguf_version(g));
    T_CHECK(gguf_file_size(g) == size, "%s: size", how);
    T_CHECK(gguf_alignment(g) == 64, "%s: alignment %u", how, gguf_alignment(g));
    T_CHECK(gguf_data_offset(g) == data_off, "%s: data offset %" PRIu64 " want %" PRIu64, how, gguf_data_offset(g),
            data_off);
    T_CHECK(gguf_data_offset(g) % 64 == 0, "%s: data offset unaligned", how);
    T_CHECK(gguf_n_kv(g) == N_KV_VALID, "%s: n_kv %" PRId64, how, gguf_n_kv(g));
    T_CHECK(gguf_n_tensors(g) == N_WT, "%s: n_tensors %" PRId64, how, gguf_n_tensors(g));

    int64_t v;
    double x;
    bool bl;
    struct gguf_str s;
    enum gguf_vtype et;
    uint64_t n;
    /* integers through gguf_get_int */
    static const struct {
        const char *key;
        enum gguf_vtype t;
        int64_t v;
    } ints[] = {
        {"t.u8", GGUF_U8, 200},           {"t.i8", GGUF_I8, -5},           {"t.u16", GGUF_U16, 65535},
        {"t.i16", GGUF_I16, -32768},      {"t.u32", GGUF_U32, 4000000000}, {"t.i32", GGUF_I32, INT32_MIN},
        {"t.u64_small", GGUF_U64, 12345}, {"t.i64", GGUF_I64, INT64_MIN},  {"general.alignment", GGUF_U32, 64},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        int64_t i = gguf_find_key(g, ints[k].key);
        T_CHECK(i >= 0 && gguf_kv_type(g, i) == ints[k].t, "%s: %s type", how, ints[k].key);
        T_CHECK(!strcmp(gguf_kv_key(g, i), ints[k].key), "%s: key name", how);
        v = 0;
        T_CHECK(gguf_get_int(g, ints[k].key, &v) == ATTND_OK && v == ints[k].v, "%s: %s = %" PRId64, how,
                ints[k].key, v);
        T_CHECK(gguf_kv_int(g, i) == ints[k].v, "%s: kv_int %s", how, ints[k].key);
        T_CHECK(gguf_get_float(g, ints[k].key, &x) == ATTND_OK && x == (double)ints[k].v, "%s: %s as float", how,
                ints[k].key);
        T_CHECK(gguf_get_bool(g, ints[k].key, &bl) == ATTND_ERR_FORMAT, "%s: %s as bool", how, ints[k].key);
        T_CHECK(gguf_get_str(g, ints[k].key, &s) == ATTND_ERR_FORMAT, "%s: %s as str", how, ints[k].key);
        T_CHECK(gguf_get_arr(g, ints[k].key, &et, &n) == ATTND_ERR_FORMAT, "%s: %s as arr", how, ints[k].key);
    }
    /* u64 above INT64_MAX */
    T_CHECK(gguf_get_int(g, "t.u64", &v) == ATTND_ERR_RANGE, "%s: big u64 must be RANGE", how);
    T_CHECK(gguf_get_float(g, "t.u64", &x) == ATTND_OK && x == 18446744073709551615.0, "%s: big u64 float", how);
    T_CHECK((uint64_t)gguf_kv_int(g, gguf_find_key(g, "t.u64")) == UINT64_MAX, "%s: big u64 bits", how);
    /* floats */
    T_CHECK(gguf_get_float(g, "t.f32", &x) == ATTND_OK && x == (double)1e-6f, "%s: f32 %.9g", how, x);
    T_CHECK(gguf_kv_float(g, gguf_find_key(g, "t.f32")) == (double)1e-6f, "%s: kv_float f32", how);
    T_CHECK(gguf_get_float(g, "t.f64", &x) == ATTND_OK && x == -1.5e300, "%s: f64 %g", how, x);
    T_CHECK(gguf_get_int(g, "t.f64", &v) == ATTND_ERR_FORMAT, "%s: f64 as int", how);
    T_CHECK(gguf_kv_float(g, gguf_find_key(g, "t.u32")) == 0, "%s: kv_float of an int is 0", how);
    /* bools */
    T_CHECK(gguf_get_bool(g, "t.bool1", &bl) == ATTND_OK && bl, "%s: bool1", how);
    T_CHECK(gguf_get_bool(g, "t.bool0", &bl) == ATTND_OK && !bl, "%s: bool0", how);
    T_CHECK(gguf_kv_type(g, gguf_find_key(g, "t.bool1")) == GGUF_BOOL, "%s: bool type", how);
    T_CHECK(gguf_get_int(g, "t.bool1", &v) == ATTND_ERR_FORMAT, "%s: bool as int", how);
    /* strings */
    const char *hs = "h\xc3\xa9llo, \"gguf\"";
    T_CHECK(gguf_get_str(g, "t.str", &s) == ATTND_OK && s.len == strlen(hs) && !memcmp(s.ptr, hs, s.len),
            "%s: str", how);
    T_CHECK(gguf_get_str(g, "t.empty_str", &s) == ATTND_OK && s.len == 0, "%s: empty str", how);
    T_CHECK(gguf_get_str(g, "t.str_nul", &s) == ATTND_OK && s.len == sizeof g_str_nul - 1 &&
                !memcmp(s.ptr, g_str_nul, s.len),
            "%s: str with NUL", how);
    T_CHECK(gguf_get_int(g, "t.str", &v) == ATTND_ERR_FORMAT, "%s: str as int", how);
    T_CHECK(gguf_kv_str(g, gguf_find_key(g, "t.u8")).ptr == NULL, "%s: kv_str of int", how);
    /* not found / out of range */
    T_CHECK(gguf_get_int(g, "no.such.key", &v) == ATTND_ERR_NOTFOUND, "%s: notfound int", how);
    T_CHECK(gguf_get_str(g, "no.such.key", &s) == ATTND_ERR_NOTFOUND, "%s: notfound str", how);
    T_CHECK(gguf_get_arr(g, "no.such.key", &et, &n) == ATTND_ERR_NOTFOUND, "%s: notfound arr", how);
    T_CHECK(gguf_find_key(g, "t.u") == -1 && gguf_find_key(g, "") == -1, "%s: prefix is not a key", how);
    T_CHECK(gguf_kv_key(g, -1) == NULL && gguf_kv_key(g, N_KV_VALID) == NULL, "%s: kv_key range", how);
    T_CHECK(gguf_kv_type(g, N_KV_VALID) == GGUF_VTYPE_COUNT, "%s: kv_type range", how);
    T_CHECK(gguf_arr_n(g, 0) == 0 && gguf_arr_type(g, 0) == GGUF_VTYPE_COUNT, "%s: arr of a scalar", how);

    /* numeric arrays, element by element */
#define CHECK_ARR(key, ET, arr, isfloat)                                                                           \
    do {                                                                                                           \
        int64_t i = gguf_find_key(g, key);                                                                         \
        size_t cnt = sizeof arr / sizeof arr[0];                                                                   \
        T_CHECK(i >= 0 && gguf_kv_type(g, i) == GGUF_ARRAY, "%s: %s is an array", how, key);                      \
        T_CHECK(gguf_get_arr(g, key, &et, &n) == ATTND_OK && et == ET && n == cnt, "%s: %s header", how, key);    \
        T_CHECK(gguf_arr_type(g, i) == ET && gguf_arr_n(g, i) == cnt, "%s: %s arr_type/n", how, key);             \
        const void *raw = gguf_arr_data(g, i);                                                                     \
        T_CHECK(raw && !memcmp(raw, arr, sizeof arr), "%s: %s raw bytes", how, key);                              \
        for (size_t j = 0; j < cnt; j++) {                                                                         \
            if (isfloat) T_CHECK(feq(gguf_arr_float(g, i, j), (double)arr[j]), "%s: %s[%zu]", how, key, j);      \
            else T_CHECK(gguf_arr_int(g, i, j) == (int64_t)arr[j], "%s: %s[%zu]", how, key, j);                   \
        }                                                                                                          \
        T_CHECK(gguf_arr_int(g, i, cnt) == 0 && gguf_arr_float(g, i, cnt) == 0, "%s: %s past end", how, key);     \
        T_CHECK(gguf_arr_str(g, i, 0).ptr == NULL, "%s: %s arr_str", how, key);                                    \
    } while (0)
    CHECK_ARR("a.u8", GGUF_U8, g_a_u8, 0);
    CHECK_ARR("a.i8", GGUF_I8, g_a_i8, 0);
    CHECK_ARR("a.u16", GGUF_U16, g_a_u16, 0);
    CHECK_ARR("a.i16", GGUF_I16, g_a_i16, 0);
    CHECK_ARR("a.u32", GGUF_U32, g_a_u32, 0);
    CHECK_ARR("a.i32", GGUF_I32, g_a_i32, 0);
    CHECK_ARR("a.f32", GGUF_F32, g_a_f32, 1);
    CHECK_ARR("a.bool", GGUF_BOOL, g_a_bool, 0);
    CHECK_ARR("a.u64", GGUF_U64, g_a_u64, 0); /* compared as int64 bit patterns */
    CHECK_ARR("a.i64", GGUF_I64, g_a_i64, 0);
    CHECK_ARR("a.f64", GGUF_F64, g_a_f64, 1);
#undef CHECK_ARR
    {
        int64_t i = gguf_find_key(g, "a.str");
        T_CHECK(gguf_get_arr(g, "a.str", &et, &n) == ATTND_OK && et == GGUF_STRING && n == 5, "%s: a.str", how);
        T_CHECK(gguf_arr_data(g, i) == NULL, "%s: arr_data of string array", how);
        for (uint64_t j = 0; j < 5; j++) {
            s = gguf_arr_str(g, i, j);
            T_CHECK(s.len == g_a_str_len[j] && (s.len == 0 || !memcmp(s.ptr, g_a_str[j], s.len)),
                    "%s: a.str[%" PRIu64 "]", how, j);
        }
        T_CHECK(gguf_arr_str(g, i, 5).ptr == NULL && gguf_arr_str(g, i, UINT64_MAX).ptr == NULL,
                "%s: a.str past end", how);
        T_CHECK(gguf_get_arr(g, "a.empty", &et, &n) == ATTND_OK && et == GGUF_U32 && n == 0, "%s: a.empty", how);
        T_CHECK(gguf_get_arr(g, "a.empty_str", &et, &n) == ATTND_OK && et == GGUF_STRING && n == 0,
                "%s: a.empty_str", how);
        T_CHECK(gguf_arr_str(g, gguf_find_key(g, "a.empty_str"), 0).ptr == NULL, "%s: empty str arr", how);
    }

    /* tensors */
    for (int i = 0; i < N_WT; i++) {
        const struct want_tensor *w = &g_wt[i];
        const struct gguf_tensor *t = gguf_tensor(g, i);
        T_CHECK(t && !strcmp(t->name, w->name), "%s: tensor %d name", how, i);
        if (!t) continue;
        T_CHECK(gguf_find_tensor(g, w->name) == t, "%s: find_tensor %s", how, w->name);
        T_CHECK(t->n_dims == w->n_dims && t->type == w->type, "%s: %s dims/type", how, w->name);
        for (int d = 0; d < 4; d++) T_CHECK(t->ne[d] == w->ne[d], "%s: %s ne[%d]", how, w->name, d);
        T_CHECK(t->n_elems == w->ne[0] * w->ne[1] * w->ne[2] * w->ne[3], "%s: %s n_elems", how, w->name);
        T_CHECK(t->nbytes == w->nbytes, "%s: %s nbytes %" PRIu64, how, w->name, t->nbytes);
        T_CHECK(t->offset == data_off + w->rel, "%s: %s offset %" PRIu64 " is not absolute", how, w->name,
                t->offset);
        T_CHECK(t->offset % 64 == 0, "%s: %s offset unaligned", how, w->name);
        T_CHECK(t->offset + t->nbytes <= size, "%s: %s past the end", how, w->name);
        const uint8_t *p = gguf_mem_data(g, t);
        if (mem) {
            T_CHECK(p == mem + t->offset, "%s: mem_data", how);
            bool same = true;
            for (uint64_t k = 0; p && k < t->nbytes; k++) same &= p[k] == (uint8_t)(i * 31 + k);
            T_CHECK(same, "%s: %s data bytes", how, w->name);
        } else {
            T_CHECK(p == NULL, "%s: mem_data of a file handle", how);
        }
    }
    T_CHECK(gguf_tensor(g, -1) == NULL && gguf_tensor(g, N_WT) == NULL, "%s: tensor range", how);
    T_CHECK(gguf_find_tensor(g, "blk.0") == NULL, "%s: find_tensor prefix", how);
}

static char g_tmpdir[256];

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void test_valid(void)
{
    struct bb b;
    uint64_t data_off;
    char err[512];
    for (uint32_t version = 2; version <= 3; version++) {
        build_valid(&b, version, &data_off);
        uint8_t *copy;
        struct gguf *g;
        attnd_status st = open_copy(b.p, b.n, &copy, &g, err, sizeof err);
        T_CHECK(st == ATTND_OK, "valid v%u image: %s", version, err);
        if (st == ATTND_OK) {
            check_valid(g, copy, b.n, data_off, version, version == 3 ? "mem v3" : "mem v2");
            gguf_close(g);
        }
        free(copy);

        char path[512];
        snprintf(path, sizeof path, "%s/valid.gguf", g_tmpdir);
        write_file(path, b.p, b.n);
        st = gguf_open(path, &g, err, sizeof err);
        T_CHECK(st == ATTND_OK, "valid v%u file: %s", version, err);
        if (st == ATTND_OK) {
            check_valid(g, NULL, b.n, data_off, version, version == 3 ? "file v3" : "file v2");
            gguf_close(g);
        }
        bb_free(&b);
    }
    /* gguf_open on things that are not regular files */
    struct gguf *g = (struct gguf *)&g; /* must be reset to NULL */
    T_CHECK(gguf_open("/nonexistent/x.gguf", &g, err, sizeof err) == ATTND_ERR_IO && !g && err[0],
            "missing file: %s", err);
    T_CHECK(gguf_open(g_tmpdir, &g, err, sizeof err) == ATTND_ERR_IO && !g && strstr(err, "regular"),
            "directory: %s", err);
    gguf_close(NULL);
    /* the smallest valid file: no metadata, no tensors; and a NULL err buffer */
    struct bb m = {0};
    bb_header(&m, 3, 0, 0);
    uint8_t *copy;
    T_CHECK(open_copy(m.p, m.n, &copy, &g, NULL, 0) == ATTND_OK, "empty header");
    if (g) {
        T_CHECK(gguf_n_kv(g) == 0 && gguf_n_tensors(g) == 0 && gguf_alignment(g) == 32, "empty header values");
        T_CHECK(gguf_data_offset(g) == 32, "empty header data offset %" PRIu64, gguf_data_offset(g));
        gguf_close(g);
    }
    free(copy);
    bb_free(&m);
}

/* The writer's output reads back (default alignment 32). */
static int fill_pattern(void *ud, int idx, void *buf, size_t n)
{
    for (size_t k = 0; k < n; k++) ((uint8_t *)buf)[k] = (uint8_t)(idx + k);
    return 0;
}

static void test_writer_roundtrip(void)
{
    struct gguf_writer *w = gguf_writer_create();
    char err[512] = "";
    T_CHECK(w != NULL, "writer_create");
    if (!w) return;
    static const int32_t ia[] = {1, -2, 3};
    const char *sa[] = {"x", "", "zz"};
    gguf_writer_set_u32(w, "w.u32", 7);
    gguf_writer_set_i32(w, "w.i32", -7);
    gguf_writer_set_f32(w, "w.f32", 0.25f);
    gguf_writer_set_bool(w, "w.bool", true);
    gguf_writer_set_str(w, "w.str", "abc", 3);
    gguf_writer_set_arr(w, "w.arr", GGUF_I32, ia, 3);
    gguf_writer_set_arr_str(w, "w.sarr", sa, NULL, 3);
    uint64_t ne1[2] = {32, 3}, ne2[1] = {7};
    T_CHECK(gguf_writer_add_tensor(w, "a", TENSOR_Q8_0, 2, ne1) == ATTND_OK, "add q8_0");
    T_CHECK(gguf_writer_add_tensor(w, "b", TENSOR_F32, 1, ne2) == ATTND_OK, "add f32");
    char path[512];
    snprintf(path, sizeof path, "%s/writer.gguf", g_tmpdir);
    T_CHECK(gguf_writer_write(w, path, fill_pattern, NULL, err, sizeof err) == ATTND_OK, "write: %s", err);
    gguf_writer_destroy(w);
    struct gguf *g;
    attnd_status st = gguf_open(path, &g, err, sizeof err);
    T_CHECK(st == ATTND_OK, "writer file: %s", err);
    if (st != ATTND_OK) return;
    int64_t v;
    double x;
    bool bl;
    struct gguf_str s;
    enum gguf_vtype et;
    uint64_t n;
    T_CHECK(gguf_get_int(g, "w.u32", &v) == ATTND_OK && v == 7, "w.u32");
    T_CHECK(gguf_get_int(g, "w.i32", &v) == ATTND_OK && v == -7, "w.i32");
    T_CHECK(gguf_get_float(g, "w.f32", &x) == ATTND_OK && x == 0.25, "w.f32");
    T_CHECK(gguf_get_bool(g, "w.bool", &bl) == ATTND_OK && bl, "w.bool");
    T_CHECK(gguf_get_str(g, "w.str", &s) == ATTND_OK && s.len == 3 && !memcmp(s.ptr, "abc", 3), "w.str");
    T_CHECK(gguf_get_arr(g, "w.arr", &et, &n) == ATTND_OK && et == GGUF_I32 && n == 3, "w.arr");
    T_CHECK(gguf_arr_int(g, gguf_find_key(g, "w.arr"), 1) == -2, "w.arr[1]");
    T_CHECK(gguf_get_arr(g, "w.sarr", &et, &n) == ATTND_OK && et == GGUF_STRING && n == 3, "w.sarr");
    T_CHECK(gguf_arr_str(g, gguf_find_key(g, "w.sarr"), 2).len == 2, "w.sarr[2]");
    const struct gguf_tensor *a = gguf_find_tensor(g, "a"), *bt = gguf_find_tensor(g, "b");
    T_CHECK(a && bt && a->nbytes == 3 * 34 && bt->nbytes == 28, "writer tensors");
    if (a && bt) {
        T_CHECK(a->offset == gguf_data_offset(g) && bt->offset == gguf_data_offset(g) + 128,
                "writer offsets %" PRIu64 " %" PRIu64, a->offset, bt->offset);
        T_CHECK(bt->offset + bt->nbytes == gguf_file_size(g), "writer file ends at the last tensor");
    }
    gguf_close(g);
}

/* ============================================================================================
 * truncation
 * ========================================================================================== */

static bool msg_says_short(const char *m)
{
    return strstr(m, "truncated") || strstr(m, "past the end") || strstr(m, "cannot fit");
}

/* the distinct messages seen (one example per message with its numbers taken out) */
static char g_msgs[64][160], g_pats[64][160];
static int g_n_msgs;

static void note_msg(const char *m)
{
    char pat[160];
    size_t o = 0;
    for (const char *p = m; *p && o + 1 < sizeof pat; p++)
        if (!(*p >= '0' && *p <= '9')) pat[o++] = *p;
    pat[o] = 0;
    for (int i = 0; i < g_n_msgs; i++)
        if (!strcmp(g_pats[i], pat)) return;
    if (g_n_msgs < 64) {
        snprintf(g_pats[g_n_msgs], sizeof g_pats[0], "%s", pat);
        snprintf(g_msgs[g_n_msgs++], sizeof g_msgs[0], "%s", m);
    }
}

static bool seen_msg(const char *word)
{
    for (int i = 0; i < g_n_msgs; i++)
        if (strstr(g_msgs[i], word)) return true;
    return false;
}

static void test_truncation(void)
{
    struct bb b;
    uint64_t data_off;
    char err[512];
    build_valid(&b, 3, &data_off);
    char path[512];
    snprintf(path, sizeof path, "%s/trunc.gguf", g_tmpdir);
    int n_mem = 0, n_file = 0, n_short_msg = 0;

    /* every prefix of the header, a little of the data, and some cuts inside each tensor */
    size_t cuts[4096];
    int nc = 0;
    for (size_t k = 0; k <= data_off + 16 && k < b.n; k++) cuts[nc++] = k;
    for (int i = 0; i < N_WT; i++) {
        uint64_t o = data_off + g_wt[i].rel;
        size_t in[] = {o + 1, o + g_wt[i].nbytes / 2, o + g_wt[i].nbytes - 1};
        for (size_t j = 0; j < 3; j++)
            if (in[j] > data_off + 16 && in[j] < b.n) cuts[nc++] = in[j];
    }
    cuts[nc++] = b.n - 1;

    for (int c = 0; c < nc; c++) {
        size_t k = cuts[c];
        uint8_t *copy;
        struct gguf *g = (struct gguf *)&g;
        err[0] = 0;
        attnd_status st = open_copy(b.p, k, &copy, &g, err, sizeof err);
        n_mem++;
        T_CHECK(st == ATTND_ERR_FORMAT || st == ATTND_ERR_IO, "cut at %zu: status %d (%s)", k, st, err);
        T_CHECK(g == NULL, "cut at %zu: handle not NULL", k);
        T_CHECK(err[0] != 0, "cut at %zu: empty message", k);
        T_CHECK(msg_says_short(err), "cut at %zu: message does not say the file is short: %s", k, err);
        n_short_msg += strstr(err, "truncated") != NULL;
        note_msg(err);
        if (st == ATTND_OK) gguf_close(g);
        free(copy);

        /* the same through a file, which uses the growing read buffer */
        write_file(path, b.p, k);
        err[0] = 0;
        st = gguf_open(path, &g, err, sizeof err);
        n_file++;
        T_CHECK(st == ATTND_ERR_FORMAT || st == ATTND_ERR_IO, "file cut at %zu: status %d (%s)", k, st, err);
        T_CHECK(err[0] != 0, "file cut at %zu: empty message", k);
        if (st == ATTND_OK) gguf_close(g);
    }
    if (getenv("GGUF_TEST_VERBOSE"))
        for (int i = 0; i < g_n_msgs; i++) fprintf(stderr, "  message: %s\n", g_msgs[i]);
    /* across the cuts, the messages name each section */
    static const char *const sections[] = {
        "truncated file: magic",         "truncated file: version",     "truncated file: header counts",
        "metadata count",                "metadata key: string length", "truncated file: metadata array header",
        "array of 5 u8 runs past the end", "array of 5 strings runs past", "metadata array: string length",
        "truncated file: tensor name",   "tensor name: string length",  "truncated file: tensor info",
        "tensor data section would start", "ends past the end of the file",
    };
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        T_CHECK(seen_msg(sections[i]), "no truncation message says '%s'", sections[i]);
    /* a tiny file whose counts pass the first check: cuts inside a value's type and value */
    struct bb t = {0};
    bb_header(&t, 3, 0, 2);
    bb_kv_u32(&t, "a.key.long.enough.to.pass", 7);
    bb_key(&t, "k2", GGUF_STRING), bb_str(&t, "a string value");
    for (size_t k = 0; k < t.n; k++) {
        uint8_t *copy;
        struct gguf *g;
        attnd_status st = open_copy(t.p, k, &copy, &g, err, sizeof err);
        T_CHECK(st == ATTND_ERR_FORMAT && err[0], "tiny cut at %zu: %s", k, err);
        note_msg(err);
        if (st == ATTND_OK) gguf_close(g);
        free(copy);
        n_mem++;
    }
    T_CHECK(seen_msg("truncated file: metadata value type needs 4 bytes"), "no cut inside a value type");
    T_CHECK(seen_msg("truncated file: metadata value needs 4 bytes"), "no cut inside a value");
    T_CHECK(seen_msg("metadata value: string length 14"), "no cut inside a string value");
    bb_free(&t);
    fprintf(stderr, "truncation: %d cuts through gguf_open_mem, %d through gguf_open (%d messages say "
                    "'truncated')\n",
            n_mem, n_file, n_short_msg);
    unlink(path);
    bb_free(&b);
}

/* ============================================================================================
 * hand-made bad headers
 * ========================================================================================== */

static int g_bad_cases = 0;

static void expect_bad(struct bb *b, attnd_status want, const char *word, const char *label)
{
    uint8_t *copy;
    struct gguf *g = (struct gguf *)&g;
    char err[512] = "";
    attnd_status st = open_copy(b->p, b->n, &copy, &g, err, sizeof err);
    g_bad_cases++;
    T_CHECK(st == want, "%s: status %s, want %s (%s)", label, attnd_status_str(st), attnd_status_str(want), err);
    T_CHECK(st == ATTND_OK || g == NULL, "%s: handle not NULL on failure", label);
    T_CHECK(st == ATTND_OK || err[0], "%s: empty message", label);
    T_CHECK(strstr(err, word) != NULL, "%s: message should mention '%s': %s", label, word, err);
    if (st == ATTND_OK) gguf_close(g);
    free(copy);
    bb_free(b);
}

/* header with one metadata entry under key, whose type is t (the caller writes the value) */
static void one_kv(struct bb *b, const char *key, uint32_t t)
{
    memset(b, 0, sizeof *b);
    bb_header(b, 3, 0, 1);
    bb_str(b, key);
    bb_u32(b, t);
}

/* header with n tensors (and no metadata), for the tensor-table cases */
static void tensors_hdr(struct bb *b, uint64_t n)
{
    memset(b, 0, sizeof *b);
    bb_header(b, 3, n, 0);
}

/* pads to the data section and appends n data bytes */
static void data_section(struct bb *b, uint64_t align, size_t n)
{
    bb_pad(b, (size_t)align, 0);
    for (size_t i = 0; i < n; i++) bb_u8(b, 0x5a);
}

static void test_bad_headers(void)
{
    struct bb b;
    uint64_t one[1] = {32}, two[2];
    char longname[1100];

    /* ---- preamble ---- */
    memset(&b, 0, sizeof b);
    bb_put(&b, "GGUX", 4), bb_u32(&b, 3), bb_u64(&b, 0), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "magic", "wrong magic");
    memset(&b, 0, sizeof b);
    bb_put(&b, "FUGG", 4), bb_u32(&b, 3), bb_u64(&b, 0), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "not a GGUF file", "reversed magic");
    memset(&b, 0, sizeof b);
    expect_bad(&b, ATTND_ERR_FORMAT, "truncated", "empty file");
    memset(&b, 0, sizeof b), bb_header(&b, 1, 0, 0);
    expect_bad(&b, ATTND_ERR_UNSUPPORTED, "version 1", "version 1");
    memset(&b, 0, sizeof b), bb_header(&b, 4, 0, 0);
    expect_bad(&b, ATTND_ERR_UNSUPPORTED, "version 4", "version 4");
    memset(&b, 0, sizeof b), bb_header(&b, 0, 0, 0);
    expect_bad(&b, ATTND_ERR_UNSUPPORTED, "version 0", "version 0");
    memset(&b, 0, sizeof b), bb_header(&b, 0x03000000u, 0, 0);
    expect_bad(&b, ATTND_ERR_UNSUPPORTED, "big-endian", "big-endian version");
    memset(&b, 0, sizeof b), bb_header(&b, 0xffffffffu, 0, 0);
    expect_bad(&b, ATTND_ERR_UNSUPPORTED, "version", "version 2^32-1");
    memset(&b, 0, sizeof b), bb_header(&b, 3, 0, 1ull << 63);
    expect_bad(&b, ATTND_ERR_FORMAT, "metadata count", "n_kv = 2^63");
    memset(&b, 0, sizeof b), bb_header(&b, 3, 0, UINT64_MAX);
    expect_bad(&b, ATTND_ERR_FORMAT, "metadata count", "n_kv = 2^64-1");
    memset(&b, 0, sizeof b), bb_header(&b, 3, 1ull << 63, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "tensor count", "n_tensors = 2^63");
    memset(&b, 0, sizeof b), bb_header(&b, 3, UINT64_MAX, UINT64_MAX);
    expect_bad(&b, ATTND_ERR_FORMAT, "count", "both counts 2^64-1");
    memset(&b, 0, sizeof b), bb_header(&b, 3, 0, 2);
    bb_kv_u32(&b, "k", 1);
    expect_bad(&b, ATTND_ERR_FORMAT, "cannot fit", "n_kv one more than present");

    /* ---- strings ---- */
    memset(&b, 0, sizeof b), bb_header(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX), bb_put(&b, "key", 3), bb_u32(&b, GGUF_U8), bb_u8(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "string length 18446744073709551615", "key length 2^64-1");
    one_kv(&b, "k", GGUF_STRING), bb_u64(&b, UINT64_MAX), bb_put(&b, "abcdefghijklmnopq", 17);
    expect_bad(&b, ATTND_ERR_FORMAT, "string length", "value string length 2^64-1");
    one_kv(&b, "k", GGUF_STRING), bb_u64(&b, 1ull << 63), bb_put(&b, "abcdefghijklmnopq", 17);
    expect_bad(&b, ATTND_ERR_FORMAT, "past the end", "value string length 2^63");
    one_kv(&b, "k", GGUF_STRING), bb_u64(&b, 6), bb_put(&b, "abcde", 5);
    expect_bad(&b, ATTND_ERR_FORMAT, "past the end", "string 1 byte past the end");
    one_kv(&b, "k", GGUF_STRING), bb_u64(&b, 5), bb_put(&b, "abcde", 5);
    expect_bad(&b, ATTND_OK, "", "string that ends exactly at the end (control)");
    memset(&b, 0, sizeof b), bb_header(&b, 3, 0, 1);
    bb_u64(&b, 0), bb_u32(&b, GGUF_U8), bb_u8(&b, 0), bb_put(&b, "padpadpadpad", 12);
    expect_bad(&b, ATTND_ERR_FORMAT, "key length 0", "key of length 0");
    memset(&b, 0, sizeof b), bb_header(&b, 3, 0, 1);
    bb_strn(&b, "gen\0eral.x", 10), bb_u32(&b, GGUF_U8), bb_u8(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "NUL", "NUL inside a key");
    memset(&b, 0, sizeof b), bb_header(&b, 3, 0, 2);
    bb_kv_u32(&b, "dup.key", 1), bb_kv_u32(&b, "dup.key", 2);
    expect_bad(&b, ATTND_ERR_FORMAT, "duplicate metadata key 'dup.key'", "duplicate key");

    /* ---- value types ---- */
    one_kv(&b, "k", 13), bb_u64(&b, 0), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown value type 13", "value type 13");
    one_kv(&b, "k", 0xffffffffu), bb_u64(&b, 0), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown value type 4294967295", "value type 0xffffffff");
    one_kv(&b, "k", GGUF_BOOL), bb_u8(&b, 2), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "bool value 2", "bool value 2");
    one_kv(&b, "k", GGUF_BOOL), bb_u8(&b, 0xff), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "bool value 255", "bool value 255");
    one_kv(&b, "k", GGUF_U64), bb_u32(&b, 1);
    expect_bad(&b, ATTND_ERR_FORMAT, "truncated", "u64 value cut short");

    /* ---- arrays ---- */
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, 13), bb_u64(&b, 1), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown element type 13", "array element type 13");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, 0xffffffffu), bb_u64(&b, 1), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown element type", "array element type 0xffffffff");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_ARRAY), bb_u64(&b, 1), bb_u32(&b, GGUF_U8), bb_u64(&b, 1);
    bb_u8(&b, 0);
    expect_bad(&b, ATTND_ERR_UNSUPPORTED, "nested", "nested array");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_U64), bb_u64(&b, (1ull << 61) + 1), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "runs past the end", "u64 array count*8 overflows");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_U32), bb_u64(&b, UINT64_MAX), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "runs past the end", "u32 array count 2^64-1");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_U16), bb_u64(&b, 5), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "runs past the end", "u16 array 1 element past the end");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_STRING), bb_u64(&b, 1ull << 60), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "strings", "string array count 2^60");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_STRING), bb_u64(&b, UINT64_MAX), bb_u64(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "strings", "string array count 2^64-1");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_STRING), bb_u64(&b, 3), bb_str(&b, "a"), bb_str(&b, "b");
    bb_u64(&b, UINT64_MAX);
    expect_bad(&b, ATTND_ERR_FORMAT, "string length", "string array element length 2^64-1");
    one_kv(&b, "k", GGUF_ARRAY), bb_u32(&b, GGUF_BOOL), bb_u64(&b, 3), bb_u8(&b, 1), bb_u8(&b, 0), bb_u8(&b, 2);
    expect_bad(&b, ATTND_ERR_FORMAT, "bool element 2", "bool array element 2");

    /* ---- general.alignment ---- */
    one_kv(&b, "general.alignment", GGUF_U64), bb_u64(&b, 32);
    expect_bad(&b, ATTND_ERR_FORMAT, "expected u32", "alignment of type u64");
    one_kv(&b, "general.alignment", GGUF_STRING), bb_str(&b, "32");
    expect_bad(&b, ATTND_ERR_FORMAT, "general.alignment", "alignment of type string");
    one_kv(&b, "general.alignment", GGUF_U32), bb_u32(&b, 0);
    expect_bad(&b, ATTND_ERR_FORMAT, "power of two", "alignment 0");
    one_kv(&b, "general.alignment", GGUF_U32), bb_u32(&b, 3);
    expect_bad(&b, ATTND_ERR_FORMAT, "power of two", "alignment 3");
    one_kv(&b, "general.alignment", GGUF_U32), bb_u32(&b, 0xffffffffu);
    expect_bad(&b, ATTND_ERR_FORMAT, "power of two", "alignment 2^32-1");
    /* a huge but legal alignment puts the data section past the end */
    memset(&b, 0, sizeof b), bb_header(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 1u << 31);
    bb_tensor(&b, "t", TENSOR_F32, 1, one, 0);
    data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "truncated", "alignment 2^31");

    /* ---- tensor table ---- */
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 0, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "0 dimensions", "n_dims 0");
    uint64_t five[5] = {1, 1, 1, 1, 1};
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 5, five, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "5 dimensions", "n_dims 5");
    tensors_hdr(&b, 1), bb_str(&b, "t"), bb_u32(&b, 0xffffffffu);
    for (int d = 0; d < 5; d++) bb_u64(&b, 1);
    bb_u32(&b, TENSOR_F32), bb_u64(&b, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "dimensions", "n_dims 2^32-1");
    two[0] = 1ull << 32, two[1] = 1ull << 32;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 2, two, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "overflows", "dims product 2^64");
    two[0] = 1ull << 31, two[1] = 1ull << 32;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 2, two, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "overflows", "dims product 2^63");
    one[0] = UINT64_MAX;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_I8, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "overflows", "ne0 2^64-1");
    one[0] = 1ull << 62; /* element count fits, f32 bytes (2^64) do not */
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "data size overflows", "f32 nbytes 2^64");
    one[0] = 1ull << 61; /* 2^63 bytes: fits in u64, not in the file */
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "past the end", "f32 nbytes 2^63");
    two[0] = 33, two[1] = 1;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_Q8_0, 2, two, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "block size", "q8_0 with ne0 = 33");
    two[0] = 16, two[1] = 2;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_Q4_0, 2, two, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "block size", "q4_0 with ne0 = 16");
    /* K-quants and IQ4: super-blocks of 256, a row of 128 or 288 is not whole blocks */
    two[0] = 128, two[1] = 2;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_Q4_K, 2, two, 0), data_section(&b, 32, 512);
    expect_bad(&b, ATTND_ERR_FORMAT, "q4_k block size 256", "q4_k with ne0 = 128");
    two[0] = 288, two[1] = 1;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_IQ4_XS, 2, two, 0), data_section(&b, 32, 512);
    expect_bad(&b, ATTND_ERR_FORMAT, "iq4_xs block size 256", "iq4_xs with ne0 = 288");
    two[0] = 16, two[1] = 2;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_Q5_1, 2, two, 0), data_section(&b, 32, 512);
    expect_bad(&b, ATTND_ERR_FORMAT, "q5_1 block size 32", "q5_1 with ne0 = 16");
    /* byte size from the shape vs the file: Q6_K [256, 2] is 420 bytes */
    two[0] = 256, two[1] = 2;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_Q6_K, 2, two, 0), data_section(&b, 32, 416);
    expect_bad(&b, ATTND_ERR_FORMAT, "past the end", "q6_k data 4 bytes short");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_Q6_K, 2, two, 0), data_section(&b, 32, 420);
    expect_bad(&b, ATTND_OK, "", "q6_k data exactly 420 bytes (control)");
    /* Q4_K [256, 1] is 144 bytes: a tensor at 128 overlaps it (an F32 reading would say 1024) */
    one[0] = 256;
    tensors_hdr(&b, 2), bb_tensor(&b, "t0", TENSOR_Q4_K, 1, one, 0), bb_tensor(&b, "t1", TENSOR_F32, 1, one, 128);
    data_section(&b, 32, 2048);
    expect_bad(&b, ATTND_ERR_FORMAT, "overlap", "q4_k tensor overlapping the next");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", 21, 1, one, 0), data_section(&b, 32, 1024); /* IQ3_S: not ours */
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown type id 21", "tensor type 21 (iq3_s)");
    one[0] = 32;
    tensors_hdr(&b, 1), bb_tensor(&b, "t", 99, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown type id 99", "tensor type 99");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", 4, 1, one, 0), data_section(&b, 32, 128); /* removed Q4_2 */
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown type id 4", "tensor type 4");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", 0xffffffffu, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "unknown type", "tensor type 2^32-1");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 1, one, 4), data_section(&b, 32, 256);
    expect_bad(&b, ATTND_ERR_FORMAT, "not a multiple of the alignment", "tensor offset 4");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 1, one, 0), data_section(&b, 32, 127);
    expect_bad(&b, ATTND_ERR_FORMAT, "past the end", "tensor data 1 byte short");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_OK, "", "tensor data exactly at the end (control)");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 1, one, 1ull << 40), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "past the end", "tensor offset 2^40");
    tensors_hdr(&b, 1), bb_tensor(&b, "t", TENSOR_F32, 1, one, UINT64_MAX & ~31ull), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "past the end", "tensor offset near 2^64 (add overflows)");
    /* overlap: t0 is 128 bytes at 0, t1 starts at 96 */
    tensors_hdr(&b, 2), bb_tensor(&b, "t0", TENSOR_F32, 1, one, 0), bb_tensor(&b, "t1", TENSOR_F32, 1, one, 96);
    data_section(&b, 32, 512);
    expect_bad(&b, ATTND_ERR_FORMAT, "overlap", "overlapping tensors");
    tensors_hdr(&b, 2), bb_tensor(&b, "t0", TENSOR_F32, 1, one, 128), bb_tensor(&b, "t1", TENSOR_F32, 1, one, 0);
    data_section(&b, 32, 256);
    expect_bad(&b, ATTND_OK, "", "adjacent tensors out of order (control)");
    tensors_hdr(&b, 2), bb_tensor(&b, "t0", TENSOR_F32, 1, one, 0), bb_tensor(&b, "t1", TENSOR_F32, 1, one, 0);
    data_section(&b, 32, 256);
    expect_bad(&b, ATTND_ERR_FORMAT, "overlap", "two tensors at the same offset");
    tensors_hdr(&b, 2), bb_tensor(&b, "same", TENSOR_F32, 1, one, 0), bb_tensor(&b, "same", TENSOR_F32, 1, one, 128);
    data_section(&b, 32, 256);
    expect_bad(&b, ATTND_ERR_FORMAT, "duplicate tensor name 'same'", "duplicate tensor names");
    tensors_hdr(&b, 1), bb_tensor(&b, "", TENSOR_F32, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "name length 0", "tensor name of length 0");
    memset(longname, 'n', 1024);
    longname[1024] = 0;
    tensors_hdr(&b, 1), bb_tensor(&b, longname, TENSOR_F32, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "name length 1024", "tensor name of length 1024");
    longname[1023] = 0;
    tensors_hdr(&b, 1), bb_tensor(&b, longname, TENSOR_F32, 1, one, 0), data_section(&b, 32, 128);
    expect_bad(&b, ATTND_OK, "", "tensor name of length 1023 (control)");
    tensors_hdr(&b, 1);
    bb_strn(&b, "na\0me", 5), bb_u32(&b, 1), bb_u64(&b, 32), bb_u32(&b, TENSOR_F32), bb_u64(&b, 0);
    data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "NUL", "NUL inside a tensor name");
    tensors_hdr(&b, 1);
    bb_u64(&b, UINT64_MAX), bb_put(&b, "t", 1), bb_u32(&b, 1), bb_u64(&b, 32), bb_u32(&b, 0), bb_u64(&b, 0);
    data_section(&b, 32, 128);
    expect_bad(&b, ATTND_ERR_FORMAT, "string length", "tensor name length 2^64-1");
    /* zero-element tensor: legal, 0 bytes */
    two[0] = 0, two[1] = 7;
    tensors_hdr(&b, 1), bb_tensor(&b, "empty", TENSOR_Q8_0, 2, two, 0), data_section(&b, 32, 0);
    expect_bad(&b, ATTND_OK, "", "zero-element tensor (control)");
    fprintf(stderr, "bad headers: %d hand-made files\n", g_bad_cases);

    /* float array elements read as integers: NaN and out-of-range values are clamped, not
     * converted (which C leaves undefined) */
    static const float fl[] = {1e30f, -1e30f, NAN, INFINITY, -2.75f, 0x1p63f};
    one_kv(&b, "floats", GGUF_ARRAY), bb_u32(&b, GGUF_F32), bb_u64(&b, 6), bb_put(&b, fl, sizeof fl);
    uint8_t *copy;
    struct gguf *g;
    char err[512];
    T_CHECK(open_copy(b.p, b.n, &copy, &g, err, sizeof err) == ATTND_OK, "float array: %s", err);
    if (g) {
        T_CHECK(gguf_arr_int(g, 0, 0) == INT64_MAX, "1e30 as int: %" PRId64, gguf_arr_int(g, 0, 0));
        T_CHECK(gguf_arr_int(g, 0, 1) == INT64_MIN, "-1e30 as int: %" PRId64, gguf_arr_int(g, 0, 1));
        T_CHECK(gguf_arr_int(g, 0, 2) == 0, "NaN as int: %" PRId64, gguf_arr_int(g, 0, 2));
        T_CHECK(gguf_arr_int(g, 0, 3) == INT64_MAX, "inf as int: %" PRId64, gguf_arr_int(g, 0, 3));
        T_CHECK(gguf_arr_int(g, 0, 4) == -2, "-2.75 as int: %" PRId64, gguf_arr_int(g, 0, 4));
        T_CHECK(gguf_arr_int(g, 0, 5) == INT64_MAX, "2^63 as int: %" PRId64, gguf_arr_int(g, 0, 5));
        T_CHECK(isnan(gguf_arr_float(g, 0, 2)), "NaN as float");
        gguf_close(g);
    }
    free(copy);
    bb_free(&b);
}

/* ============================================================================================
 * many entries: duplicate detection must not be quadratic
 * ========================================================================================== */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* n_kv tiny metadata entries and n_t zero-size tensors, all names distinct unless dup_last. */
static void build_many(struct bb *b, uint64_t n_kv, uint64_t n_t, bool dup_last)
{
    memset(b, 0, sizeof *b);
    bb_header(b, 3, n_t, n_kv);
    char name[32];
    for (uint64_t i = 0; i < n_kv; i++) {
        snprintf(name, sizeof name, "k%07" PRIu64, dup_last && i == n_kv - 1 ? 0 : i);
        bb_key(b, name, GGUF_U8), bb_u8(b, 1);
    }
    uint64_t ne[2] = {0, 3};
    for (uint64_t i = 0; i < n_t; i++) {
        snprintf(name, sizeof name, "t%07" PRIu64, dup_last && i == n_t - 1 ? 0 : i);
        bb_tensor(b, name, TENSOR_Q8_0, 2, ne, 0);
    }
    bb_pad(b, 32, 0);
}

static void test_many_entries(void)
{
    static const struct {
        uint64_t n_kv, n_t;
        bool dup;
        attnd_status want;
        const char *word;
    } cases[] = {
        {200000, 100000, false, ATTND_OK, ""},
        {200000, 0, true, ATTND_ERR_FORMAT, "duplicate metadata key 'k0000000'"},
        {1, 100000, true, ATTND_ERR_FORMAT, "duplicate tensor name 't0000000'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct bb b;
        build_many(&b, cases[i].n_kv, cases[i].n_t, cases[i].dup);
        uint8_t *copy;
        struct gguf *g;
        char err[512] = "";
        double t0 = now_s();
        attnd_status st = open_copy(b.p, b.n, &copy, &g, err, sizeof err);
        double dt = now_s() - t0;
        T_CHECK(st == cases[i].want && strstr(err, cases[i].word), "many entries %zu: %s (%s)", i,
                attnd_status_str(st), err);
        /* a pairwise comparison of 200000 keys takes minutes; sorting takes milliseconds */
        T_CHECK(dt < 5.0, "many entries %zu: opening took %.1f s", i, dt);
        if (st == ATTND_OK) {
            T_CHECK(gguf_n_kv(g) == (int64_t)cases[i].n_kv && gguf_n_tensors(g) == (int64_t)cases[i].n_t,
                    "many entries: counts");
            gguf_close(g);
        }
        fprintf(stderr, "many entries: %" PRIu64 " keys, %" PRIu64 " tensors%s: %s in %.3f s\n", cases[i].n_kv,
                cases[i].n_t, cases[i].dup ? " (one duplicate)" : "", attnd_status_str(st), dt);
        free(copy);
        bb_free(&b);
    }
}

/* ============================================================================================
 * fuzz
 * ========================================================================================== */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static volatile uint64_t g_sink;

/* Touches every byte every accessor hands out. */
static void walk(const struct gguf *g, const uint8_t *mem, size_t size)
{
    uint64_t h = gguf_version(g) + gguf_alignment(g) + gguf_data_offset(g) + gguf_file_size(g);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        h += strlen(key);
        T_CHECK(gguf_find_key(g, key) == i, "fuzz: find_key(%s)", key);
        enum gguf_vtype t = gguf_kv_type(g, i);
        T_CHECK((unsigned)t < GGUF_VTYPE_COUNT, "fuzz: kv type %d", t);
        int64_t v;
        double x;
        bool bl;
        struct gguf_str s;
        enum gguf_vtype et;
        uint64_t n;
        h += (uint64_t)gguf_kv_int(g, i);
        double f = gguf_kv_float(g, i);
        memcpy(&v, &f, 8);
        h += (uint64_t)v;
        if (gguf_get_int(g, key, &v) == ATTND_OK) h += (uint64_t)v;
        if (gguf_get_float(g, key, &x) == ATTND_OK) h += (uint64_t)(x == x);
        if (gguf_get_bool(g, key, &bl) == ATTND_OK) h += bl;
        if (gguf_get_str(g, key, &s) == ATTND_OK) {
            T_CHECK((const uint8_t *)s.ptr >= mem && s.len <= size && (const uint8_t *)s.ptr + s.len <= mem + size,
                    "fuzz: string outside the image");
            for (uint64_t k = 0; k < s.len; k++) h += (uint8_t)s.ptr[k];
        }
        if (gguf_get_arr(g, key, &et, &n) == ATTND_OK) {
            T_CHECK(et == gguf_arr_type(g, i) && n == gguf_arr_n(g, i), "fuzz: arr header");
            if (et == GGUF_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    s = gguf_arr_str(g, i, j);
                    T_CHECK(s.len == 0 || s.ptr, "fuzz: arr_str NULL");
                    for (uint64_t k = 0; k < s.len; k++) h += (uint8_t)s.ptr[k];
                }
            } else {
                const uint8_t *raw = gguf_arr_data(g, i);
                size_t sz = gguf_vtype_size(et);
                T_CHECK(raw && sz, "fuzz: numeric array without data");
                if (!raw) continue;
                for (uint64_t k = 0; k < n * sz; k++) h += raw[k];
                for (uint64_t j = 0; j < n; j++) {
                    if (et == GGUF_F32 || et == GGUF_F64) {
                        double d = gguf_arr_float(g, i, j);
                        memcpy(&v, &d, 8);
                        h += (uint64_t)v + (uint64_t)gguf_arr_int(g, i, j);
                    } else {
                        h += (uint64_t)gguf_arr_int(g, i, j) + (uint64_t)gguf_arr_float(g, i, j);
                    }
                }
            }
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        h += strlen(t->name) + t->n_dims + t->type + t->n_elems;
        T_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "fuzz: n_dims %u", t->n_dims);
        T_CHECK(t->offset % gguf_alignment(g) == 0, "fuzz: unaligned tensor");
        T_CHECK(t->offset >= gguf_data_offset(g) && t->offset + t->nbytes <= size, "fuzz: tensor outside the file");
        T_CHECK(gguf_find_tensor(g, t->name) == t, "fuzz: find_tensor");
        const uint8_t *p = gguf_mem_data(g, t);
        for (uint64_t k = 0; p && k < t->nbytes; k++) h += p[k];
    }
    g_sink += h;
}

static void test_fuzz(int iters)
{
    struct bb b;
    uint64_t data_off;
    build_valid(&b, 3, &data_off);
    static const uint64_t extremes[] = {0,
                                        1,
                                        2,
                                        13,
                                        32,
                                        33,
                                        64,
                                        0x7f,
                                        0xff,
                                        0x100,
                                        0xffff,
                                        0x7fffffff,
                                        0x80000000ull,
                                        0xffffffffull,
                                        0x100000000ull,
                                        1ull << 53,
                                        (1ull << 61) + 1,
                                        1ull << 62,
                                        INT64_MAX,
                                        1ull << 63,
                                        UINT64_MAX - 31,
                                        UINT64_MAX};
    const size_t n_ext = sizeof extremes / sizeof extremes[0];
    uint8_t *work = malloc(b.n + 64);
    int n_ok = 0, n_fail = 0, by_status[16] = {0};
    for (int it = 0; it < iters; it++) {
        size_t size = b.n;
        memcpy(work, b.p, b.n);
        int n_mut = 1 + (int)(rnd() % 4);
        for (int m = 0; m < n_mut; m++) {
            switch (rnd() % 6) {
            case 0: /* flip a bit in the header */
                work[rnd() % data_off] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            case 1: /* a random byte anywhere in the header */
                work[rnd() % data_off] = (uint8_t)rnd();
                break;
            case 2: { /* a u64 field (length, count, dim, offset) gets an extreme or nearby value */
                size_t at = b.f64[rnd() % (size_t)b.n64];
                uint64_t v = extremes[rnd() % n_ext];
                if (rnd() % 3 == 0) {
                    memcpy(&v, work + at, 8);
                    v += (uint64_t)(int64_t)((int)(rnd() % 65) - 32);
                }
                memcpy(work + at, &v, 8);
                break;
            }
            case 3: { /* a u32 field (version, type, n_dims) */
                size_t at = b.f32[rnd() % (size_t)b.n32];
                uint32_t v = rnd() % 2 ? (uint32_t)extremes[rnd() % n_ext] : (uint32_t)(rnd() % 40);
                memcpy(work + at, &v, 4);
                break;
            }
            case 4: /* truncate */
                size = (size_t)(rnd() % (size + 1));
                break;
            default: /* a random 8-byte value at a random header position */
            {
                uint64_t v = extremes[rnd() % n_ext];
                size_t at = (size_t)(rnd() % (data_off - 8));
                memcpy(work + at, &v, 8);
            }
            }
        }
        uint8_t *copy;
        struct gguf *g;
        char err[512];
        attnd_status st = open_copy(work, size, &copy, &g, err, sizeof err);
        by_status[st & 15]++;
        if (st == ATTND_OK) {
            n_ok++;
            walk(g, copy, size);
            gguf_close(g);
        } else {
            n_fail++;
            T_CHECK(g == NULL && err[0], "fuzz %d: failure without message or with a handle", it);
            T_CHECK(st == ATTND_ERR_FORMAT || st == ATTND_ERR_UNSUPPORTED || st == ATTND_ERR_NOMEM,
                    "fuzz %d: status %s (%s)", it, attnd_status_str(st), err);
        }
        free(copy);
    }
    fprintf(stderr, "fuzz: %d iterations, %d opened (all accessors walked), %d rejected (format %d, unsupported %d, "
                    "nomem %d)\n",
            iters, n_ok, n_fail, by_status[ATTND_ERR_FORMAT], by_status[ATTND_ERR_UNSUPPORTED],
            by_status[ATTND_ERR_NOMEM]);
    free(work);
    bb_free(&b);
}

/* ============================================================================================
 * shared files
 * ========================================================================================== */

static int open_dir(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf")) continue;
        char path[1024], err[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct gguf *g;
        attnd_status st = gguf_open(path, &g, err, sizeof err);
        T_CHECK(st == ATTND_OK, "%s: %s", path, err);
        if (st == ATTND_OK) {
            T_CHECK(gguf_find_key(g, "general.architecture") >= 0 || gguf_find_key(g, "tokenizer.ggml.model") >= 0,
                    "%s: no architecture or tokenizer key", path);
            for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
                const struct gguf_tensor *t = gguf_tensor(g, i);
                T_CHECK(t->offset % gguf_alignment(g) == 0 && t->offset + t->nbytes <= gguf_file_size(g),
                        "%s: tensor %s", path, t->name);
            }
            gguf_close(g);
        }
        n++;
    }
    closedir(d);
    return n;
}

static int test_shared(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", t_shared());
    int n = open_dir(dir);
    snprintf(dir, sizeof dir, "%s/vocab", t_shared());
    int nv = open_dir(dir);
    fprintf(stderr, "shared: %d models and %d vocab files opened from %s\n", n, nv, t_shared());
    return n + nv;
}

int main(void)
{
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/test_gguf.XXXXXX");
    if (!mkdtemp(g_tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_valid();
    test_writer_roundtrip();
    test_truncation();
    test_bad_headers();
    test_many_entries();
    /* GGUF_FUZZ_ITERS / GGUF_FUZZ_SEED run a longer or different fuzz campaign by hand */
    const char *fi = getenv("GGUF_FUZZ_ITERS"), *fs = getenv("GGUF_FUZZ_SEED");
    if (fs && *fs) g_rng = strtoull(fs, NULL, 0);
    test_fuzz(fi && *fi ? atoi(fi) : 20000);
    int shared = test_shared();

    char path[512];
    snprintf(path, sizeof path, "%s/valid.gguf", g_tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/writer.gguf", g_tmpdir);
    unlink(path);
    rmdir(g_tmpdir);
    if (!shared) fprintf(stderr, "note: no shared GGUF files found under %s (set SHARED=...)\n", t_shared());
    return t_finish("test_gguf");
}
