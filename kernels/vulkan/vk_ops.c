/* vk_ops.c - host side of the forward-pass compute shaders op_*.comp (see vk_ops.h).
 *
 * Every op checks its arguments (sizes, alignment, every operand against its buffer, with
 * overflow-safe arithmetic), fills the push-constant struct that mirrors the shader's block and
 * records one dispatch. Workgroup counts are spread over a 2-D grid (x, y) that the shaders read
 * as one linear index, so no size is bounded by one grid dimension's limit.
 *
 * lavapipe (the CPU device) ends a shader invocation after ~65535 loop iterations in total (see
 * tile_cap() in vk_fa2.c), so every shader keeps its per-invocation loop trips small: the
 * caps below (MAX_N_IN, MAX_NORM_D) keep them under a few thousand, and larger sizes are
 * ATTND_ERR_RANGE rather than a silently truncated result. */
#include "kernels/vulkan/vk_ops.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spv_op_add.h"
#include "spv_op_get_rows.h"
#include "spv_op_kv_write.h"
#include "spv_op_matmul.h"
#include "spv_op_matmul_lanes.h"
#include "spv_op_matvec.h"
#include "spv_op_rmsnorm.h"
#include "spv_op_rope.h"
#include "spv_op_swiglu.h"

/* Weight type codes of op_common.glsl (WT_*). */
enum { WT_F32, WT_F16, WT_BF16, WT_Q8_0, WT_Q4_0, WT_Q4_1, WT_Q5_0, WT_Q5_1, WT_IQ4_NL, WT_Q2_K, WT_Q3_K, WT_Q4_K,
       WT_Q5_K, WT_Q6_K, WT_IQ4_XS, N_WT };

#define ELT_WG 64u          /* invocations per workgroup of the element-wise shaders */
#define ELT_PER_INV 4u      /* elements per invocation in op_add / op_swiglu */
#define GET_ROWS_CHUNK 8u   /* elements per invocation in op_get_rows */
#define MATVEC_ROWS 4u      /* R in op_matvec.comp */
#define MATVEC_TOK 4u       /* MT in op_matvec.comp */
#define MATVEC_MAX_TOK 8u   /* n_tok up to this: op_matvec (weights read once per 4 tokens) */
#define TILE_ROWS 64u       /* BN in op_matmul.comp */
#define TILE_TOK 32u        /* BM in op_matmul.comp */
#define LANES_WG 64u        /* invocations per workgroup of op_matmul_lanes.comp */
#define LANES_MIN_BYTES 16u /* op_matmul_lanes.comp reads whole uvec4: smaller bindings go to the GPU shaders */
#define MAX_N_IN (1u << 17) /* op_matmul: n_in / 32 * 9 loop trips per invocation */
#define MAX_NORM_D (1u << 20) /* op_rmsnorm: 2 * d / 256 loop trips per invocation */
#define MAX_ITEMS (UINT32_MAX - 65536u) /* flattened invocation ids stay below 2^32 */

/* ------------------------------------------------------------------------------------------
 * Push-constant blocks (each mirrors the block of its shader)
 * ------------------------------------------------------------------------------------------ */

/* op_get_rows.comp */
struct vkb_get_rows_push {
    uint32_t wt;        /* WT_* */
    uint32_t src_off;   /* bytes */
    uint32_t row_bytes; /* bytes */
    uint32_t idx_off;   /* int32 elements */
    uint32_t n, d;
    uint32_t dst_off;   /* floats */
    uint32_t n_chunks;  /* (d + 7) / 8 */
    uint32_t row_lo, row_hi; /* the table holds rows row_lo..row_hi-1 (row_lo at src_off): others skipped */
};
static_assert(sizeof(struct vkb_get_rows_push) == 40 && sizeof(struct vkb_get_rows_push) <= 128, "push block");

/* op_add.comp, op_swiglu.comp */
struct vkb_elt_push {
    uint32_t a_off, b_off; /* floats */
    uint32_t n, pad;
};
static_assert(sizeof(struct vkb_elt_push) == 16 && sizeof(struct vkb_elt_push) <= 128, "push block");

/* op_rmsnorm.comp */
struct vkb_rmsnorm_push {
    uint32_t x_off, w_off, out_off; /* floats */
    uint32_t n_rows, d;
    float eps;
    uint32_t pad0, pad1;
};
static_assert(sizeof(struct vkb_rmsnorm_push) == 32 && sizeof(struct vkb_rmsnorm_push) <= 128, "push block");

/* op_rope.comp */
struct vkb_rope_push {
    uint32_t x_off, cs_off; /* floats */
    uint32_t n_tok, n_heads, head_dim;
    uint32_t half_rot; /* n_rot / 2 */
    uint32_t neox;
    uint32_t n_items; /* n_tok * n_heads * half_rot */
};
static_assert(sizeof(struct vkb_rope_push) == 32 && sizeof(struct vkb_rope_push) <= 128, "push block");

/* op_kv_write.comp */
struct vkb_kv_write_push {
    uint32_t src_off;  /* floats */
    uint32_t slot_off; /* int32 elements */
    uint32_t n_head_kv, head_dim;
    uint32_t block_stride; /* pool elements */
    uint32_t f16;
    uint32_t n_items; /* pool words written */
    uint32_t pad;
};
static_assert(sizeof(struct vkb_kv_write_push) == 32 && sizeof(struct vkb_kv_write_push) <= 128, "push block");

/* op_matvec.comp and op_matmul.comp */
struct vkb_matmul_push {
    uint32_t n_in, n_out, n_tok;
    uint32_t row_bytes; /* bytes */
    uint32_t w_off;     /* bytes */
    uint32_t x_off, y_off, bias_off; /* floats */
    uint32_t has_bias;
    uint32_t n_groups; /* row groups (matvec) or row tiles (tiled) */
    uint32_t ldy;      /* floats from one row of y to the next (>= n_out) */
    uint32_t pad1;
};
static_assert(sizeof(struct vkb_matmul_push) == 48 && sizeof(struct vkb_matmul_push) <= 128, "push block");

/* ------------------------------------------------------------------------------------------
 * Pipelines
 * ------------------------------------------------------------------------------------------ */

struct vkb_ops {
    struct vkb_device *dev;
    struct vkb_pipeline *get_rows, *rmsnorm, *rope, *add, *swiglu, *kv_write;
    struct vkb_pipeline *matvec[N_WT], *matmul[N_WT];
    /* op_matmul_lanes.comp (CPU devices): [wt][n_tok > 1][texel reads]; the storage-read variant
     * only for buffers too large for a texel view (or $ATTND_VK_OPS_NO_TEXEL=1) */
    struct vkb_pipeline *lanes[N_WT][2][2];
};

/* op_matmul_lanes.comp specialisations: rows and tokens per lane, for n_tok == 1 and n_tok > 1.
 * One token: a weight row feeds one dot product, so 8 rows share each activation load; more
 * tokens: each weight row feeds 4 tokens, each activation chunk 4 rows (measured best on
 * lavapipe among 1-8 x 1-4). */
static const uint32_t lanes_rows[2] = {8, 4}, lanes_tok[2] = {1, 4};

/* op_matmul_lanes.comp bindings: w, x, bias, y as storage buffers, then w and x again as uniform
 * texel buffers (read by the TEX = 1 variant; both variants declare all six) */
#define LANES_BINDINGS 6u
#define LANES_TEXEL_MASK 0x30u

attnd_status vkb_ops_create(struct vkb_device *dev, struct vkb_ops **out)
{
    *out = NULL;
    if (!dev) return ATTND_ERR_INVALID;
    struct vkb_ops *o = calloc(1, sizeof *o);
    if (!o) return ATTND_ERR_NOMEM;
    o->dev = dev;
    *out = o;
    return ATTND_OK;
}

void vkb_ops_destroy(struct vkb_ops *o)
{
    if (!o) return;
    struct vkb_pipeline *all[] = {o->get_rows, o->rmsnorm, o->rope, o->add, o->swiglu, o->kv_write};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) vkb_pipeline_destroy(o->dev, all[i]);
    for (int i = 0; i < N_WT; i++) {
        vkb_pipeline_destroy(o->dev, o->matvec[i]);
        vkb_pipeline_destroy(o->dev, o->matmul[i]);
        for (int j = 0; j < 4; j++) vkb_pipeline_destroy(o->dev, o->lanes[i][j / 2][j % 2]);
    }
    free(o);
}

/* *slot, built on first use. */
static attnd_status pipe(struct vkb_ops *o, struct vkb_pipeline **slot, const uint32_t *spv, size_t spv_bytes,
                         uint32_t n_bindings, uint32_t push_bytes, const uint32_t *spec, uint32_t n_spec)
{
    if (*slot) return ATTND_OK;
    return vkb_pipeline_create(o->dev, spv, spv_bytes, n_bindings, push_bytes, spec, n_spec, slot);
}

#define PIPE(o, field, name, n_bindings, push_type) \
    pipe((o), &(o)->field, spv_##name, sizeof spv_##name, (n_bindings), sizeof(push_type), NULL, 0)

/* The matrix-vector (tiled = 0) or tiled (1) matmul pipeline for weight type wt. */
static attnd_status pipe_matmul(struct vkb_ops *o, int wt, int tiled, struct vkb_pipeline **out)
{
    const uint32_t spec[1] = {(uint32_t)wt};
    const uint32_t pb = sizeof(struct vkb_matmul_push);
    struct vkb_pipeline **slot = tiled ? &o->matmul[wt] : &o->matvec[wt];
    attnd_status st = tiled ? pipe(o, slot, spv_op_matmul, sizeof spv_op_matmul, 4, pb, spec, 1)
                            : pipe(o, slot, spv_op_matvec, sizeof spv_op_matvec, 4, pb, spec, 1);
    *out = *slot;
    return st;
}

/* The op_matmul_lanes.comp pipeline for weight type wt, n_tok > 1 (multi = 1) or 1 (0), with
 * texel (tex = 1) or storage (0) reads of weights and activations. */
static attnd_status pipe_lanes(struct vkb_ops *o, int wt, int multi, int tex, struct vkb_pipeline **out)
{
    struct vkb_pipeline **slot = &o->lanes[wt][multi][tex];
    const uint32_t spec[4] = {(uint32_t)wt, lanes_tok[multi], lanes_rows[multi], (uint32_t)tex};
    attnd_status st = ATTND_OK;
    if (!*slot)
        st = vkb_pipeline_create_texel(o->dev, spv_op_matmul_lanes, sizeof spv_op_matmul_lanes, LANES_BINDINGS,
                                       LANES_TEXEL_MASK, sizeof(struct vkb_matmul_push), spec, 4, slot);
    *out = *slot;
    return st;
}

/* The WT_* code of a weight type, or -1 when the shaders do not decode it. */
static int wt_of(enum tensor_type t)
{
    switch (t) {
    case TENSOR_F32: return WT_F32;
    case TENSOR_F16: return WT_F16;
    case TENSOR_BF16: return WT_BF16;
    case TENSOR_Q8_0: return WT_Q8_0;
    case TENSOR_Q4_0: return WT_Q4_0;
    case TENSOR_Q4_1: return WT_Q4_1;
    case TENSOR_Q5_0: return WT_Q5_0;
    case TENSOR_Q5_1: return WT_Q5_1;
    case TENSOR_IQ4_NL: return WT_IQ4_NL;
    case TENSOR_Q2_K: return WT_Q2_K;
    case TENSOR_Q3_K: return WT_Q3_K;
    case TENSOR_Q4_K: return WT_Q4_K;
    case TENSOR_Q5_K: return WT_Q5_K;
    case TENSOR_Q6_K: return WT_Q6_K;
    case TENSOR_IQ4_XS: return WT_IQ4_XS;
    default: return -1;
    }
}

int vkb_type_supported(enum tensor_type t) { return wt_of(t) >= 0; }

/* op_matmul_lanes.comp on CPU devices, unless $ATTND_VK_OPS_GPU_SHADERS=1 asks for the GPU
 * shaders (op_matvec/op_matmul.comp) there too: the tests use it to run them on lavapipe. */
static int use_lanes(const struct vkb_ops *o)
{
    const char *e = getenv("ATTND_VK_OPS_GPU_SHADERS");
    return vkb_device_limits(o->dev)->is_cpu && !(e && e[0] == '1');
}

/* 1 when op_matmul_lanes.comp may read buf through a texel view: the view (at most
 * max_texel_elements texels of 16 bytes) covers every whole 16 bytes of it. $ATTND_VK_OPS_NO_TEXEL=1
 * forces the storage reads (for tests). */
static int texel_ok(const struct vkb_ops *o, const struct vkb_buffer *buf)
{
    const char *e = getenv("ATTND_VK_OPS_NO_TEXEL");
    return !(e && e[0] == '1') && vkb_buffer_size(buf) / 16 <= vkb_device_limits(o->dev)->max_texel_elements;
}

attnd_status vkb_ops_prepare(struct vkb_ops *o, const enum tensor_type *types, int n_types)
{
    if (!o || n_types < 0 || (n_types && !types)) return ATTND_ERR_INVALID;
    for (int i = 0; i < n_types; i++)
        if (wt_of(types[i]) < 0) return ATTND_ERR_INVALID;
    attnd_status st;
    if ((st = PIPE(o, get_rows, op_get_rows, 3, struct vkb_get_rows_push)) ||
        (st = PIPE(o, rmsnorm, op_rmsnorm, 3, struct vkb_rmsnorm_push)) ||
        (st = PIPE(o, rope, op_rope, 2, struct vkb_rope_push)) || (st = PIPE(o, add, op_add, 2, struct vkb_elt_push)) ||
        (st = PIPE(o, swiglu, op_swiglu, 2, struct vkb_elt_push)) ||
        (st = PIPE(o, kv_write, op_kv_write, 3, struct vkb_kv_write_push)))
        return st;
    const int cpu = use_lanes(o);
    for (int i = 0; i < n_types; i++) {
        struct vkb_pipeline *p;
        const int wt = wt_of(types[i]);
        if (cpu && wt <= WT_Q4_0 ? (st = pipe_lanes(o, wt, 0, 1, &p)) || (st = pipe_lanes(o, wt, 1, 1, &p))
                : (st = pipe_matmul(o, wt, 0, &p)) || (st = pipe_matmul(o, wt, 1, &p)))
            return st;
    }
    return ATTND_OK;
}

/* ------------------------------------------------------------------------------------------
 * Argument checks and grids
 * ------------------------------------------------------------------------------------------ */

/* 1 when count elements of esz bytes at element offset off lie inside buf, and off + count
 * fits the shaders' 32-bit indices. */
static int fits(const struct vkb_buffer *buf, size_t off, uint64_t count, size_t esz)
{
    if (!buf) return 0;
    const uint64_t cap = vkb_buffer_size(buf) / esz;
    return off <= cap && count <= cap - off && off + count <= UINT32_MAX;
}

/* Spreads groups workgroups over a 2-D grid (gx, gy); the shaders read y * gx + x and skip the
 * ids past the count. */
static attnd_status grid(struct vkb_ops *o, uint64_t groups, uint32_t *gx, uint32_t *gy)
{
    const struct vkb_limits *l = vkb_device_limits(o->dev);
    const uint64_t mx = l->max_wg_count[0];
    *gx = (uint32_t)(groups < mx ? groups : mx);
    const uint64_t y = *gx ? (groups + *gx - 1) / *gx : 0;
    if (y > l->max_wg_count[1]) return ATTND_ERR_RANGE;
    *gy = (uint32_t)(y ? y : 1);
    return ATTND_OK;
}

/* Bytes of one row of n elements of type t (the checks above guarantee n fits the type). */
static uint64_t row_size(enum tensor_type t, uint32_t n)
{
    uint64_t b = 0;
    return tensor_nbytes((uint32_t)t, n, &b) ? 0 : b;
}

/* Checks a weight operand: type decodable, n a whole number of blocks, offsets aligned to what
 * the shader reads them as, n_rows rows of row_bytes inside buf (rounded up to whole words: the
 * shaders read 32-bit words) and byte positions within 32 bits. */
static attnd_status check_weights(enum tensor_type t, const struct vkb_buffer *buf, size_t off, size_t row_bytes,
                                  uint32_t n, uint32_t n_rows, int *wt)
{
    *wt = wt_of(t);
    if (*wt < 0 || !buf || n == 0 || n_rows == 0 || n % tensor_block_elems((uint32_t)t)) return ATTND_ERR_INVALID;
    const uint64_t rs = row_size(t, n);
    const size_t align = t == TENSOR_F32 ? 4 : (t == TENSOR_F16 || t == TENSOR_BF16) ? 2 : 1;
    if (rs == 0 || row_bytes < rs || off % align || row_bytes % align) return ATTND_ERR_INVALID;
    if (row_bytes > UINT32_MAX || (uint64_t)(n_rows - 1) > (UINT64_MAX - rs) / row_bytes) return ATTND_ERR_INVALID;
    const uint64_t span = (uint64_t)(n_rows - 1) * row_bytes + rs;
    const uint64_t size = vkb_buffer_size(buf);
    if (off > size || span > size - off || ((off + span + 3) & ~(uint64_t)3) > size) return ATTND_ERR_INVALID;
    if (off + span + 4 > UINT32_MAX) return ATTND_ERR_RANGE;
    return ATTND_OK;
}

/* ------------------------------------------------------------------------------------------
 * Ops
 * ------------------------------------------------------------------------------------------ */

attnd_status vkb_op_get_rows_part(struct vkb_ops *o, enum tensor_type type, struct vkb_buffer *src, size_t src_off,
                                  size_t row_bytes, uint32_t row_lo, uint32_t row_hi, struct vkb_buffer *idx,
                                  size_t idx_off, uint32_t n, uint32_t d, struct vkb_buffer *dst, size_t dst_off)
{
    int wt;
    attnd_status st;
    if (!o || n == 0 || row_lo >= row_hi) return ATTND_ERR_INVALID;
    /* the table must hold at least one row (the rows idx selects are trusted) */
    if ((st = check_weights(type, src, src_off, row_bytes, d, 1, &wt))) return st;
    if (!fits(idx, idx_off, n, 4) || !fits(dst, dst_off, (uint64_t)n * d, 4)) return ATTND_ERR_INVALID;
    const uint32_t n_chunks = (d + GET_ROWS_CHUNK - 1) / GET_ROWS_CHUNK;
    const uint64_t items = (uint64_t)n * n_chunks;
    if (items > MAX_ITEMS) return ATTND_ERR_RANGE;
    uint32_t gx, gy;
    if ((st = grid(o, (items + ELT_WG - 1) / ELT_WG, &gx, &gy))) return st;
    if ((st = PIPE(o, get_rows, op_get_rows, 3, struct vkb_get_rows_push))) return st;
    const struct vkb_get_rows_push p = {(uint32_t)wt, (uint32_t)src_off, (uint32_t)row_bytes, (uint32_t)idx_off,
                                        n,           d,                  (uint32_t)dst_off,    n_chunks,
                                        row_lo,      row_hi};
    struct vkb_buffer *b[3] = {src, idx, dst};
    return vkb_dispatch(o->dev, o->get_rows, b, 3, &p, gx, gy, 1);
}

attnd_status vkb_op_get_rows(struct vkb_ops *o, enum tensor_type type, struct vkb_buffer *src, size_t src_off,
                             size_t row_bytes, struct vkb_buffer *idx, size_t idx_off, uint32_t n, uint32_t d,
                             struct vkb_buffer *dst, size_t dst_off)
{
    return vkb_op_get_rows_part(o, type, src, src_off, row_bytes, 0, UINT32_MAX, idx, idx_off, n, d, dst, dst_off);
}

attnd_status vkb_op_rmsnorm(struct vkb_ops *o, struct vkb_buffer *x, size_t x_off, struct vkb_buffer *w, size_t w_off,
                            struct vkb_buffer *out, size_t out_off, uint32_t n_rows, uint32_t d, float eps)
{
    attnd_status st;
    if (!o || n_rows == 0 || d == 0) return ATTND_ERR_INVALID;
    const uint64_t n = (uint64_t)n_rows * d;
    if (!fits(x, x_off, n, 4) || !fits(w, w_off, d, 4) || !fits(out, out_off, n, 4)) return ATTND_ERR_INVALID;
    if (d > MAX_NORM_D) return ATTND_ERR_RANGE;
    uint32_t gx, gy;
    if ((st = grid(o, n_rows, &gx, &gy))) return st;
    if ((st = PIPE(o, rmsnorm, op_rmsnorm, 3, struct vkb_rmsnorm_push))) return st;
    const struct vkb_rmsnorm_push p = {(uint32_t)x_off, (uint32_t)w_off, (uint32_t)out_off, n_rows, d, eps, 0, 0};
    struct vkb_buffer *b[3] = {x, w, out};
    return vkb_dispatch(o->dev, o->rmsnorm, b, 3, &p, gx, gy, 1);
}

attnd_status vkb_op_matmul_ld(struct vkb_ops *o, enum tensor_type wtype, struct vkb_buffer *w, size_t w_off,
                              size_t row_bytes, uint32_t n_in, uint32_t n_out, struct vkb_buffer *x, size_t x_off,
                              uint32_t n_tok, struct vkb_buffer *bias, size_t bias_off, struct vkb_buffer *y,
                              size_t y_off, uint32_t ldy)
{
    int wt;
    attnd_status st;
    if (!o || n_tok == 0 || ldy < n_out) return ATTND_ERR_INVALID;
    if ((st = check_weights(wtype, w, w_off, row_bytes, n_in, n_out, &wt))) return st;
    if (!fits(x, x_off, (uint64_t)n_tok * n_in, 4) || !fits(y, y_off, (uint64_t)(n_tok - 1) * ldy + n_out, 4) ||
        (bias && !fits(bias, bias_off, n_out, 4)))
        return ATTND_ERR_INVALID;
    if (n_in > MAX_N_IN) return ATTND_ERR_RANGE;
    /* CPU devices: op_matmul_lanes.comp (tiny bindings, which it cannot read, excepted); it stages
     * F32..Q4_0 blocks only, the other types always take op_matvec/op_matmul.comp */
    const int lanes = use_lanes(o) && wt <= WT_Q4_0 && vkb_buffer_size(w) >= LANES_MIN_BYTES &&
                      vkb_buffer_size(x) >= LANES_MIN_BYTES;
    const int tex = lanes && texel_ok(o, w) && texel_ok(o, x);
    const int tiled = n_tok > MATVEC_MAX_TOK, multi = n_tok > 1;
    const uint32_t rows = lanes ? lanes_rows[multi] : tiled ? TILE_ROWS : MATVEC_ROWS;
    const uint32_t toks = lanes ? lanes_tok[multi] : tiled ? TILE_TOK : MATVEC_TOK;
    const uint32_t groups = (n_out + rows - 1) / rows, gz = (n_tok + toks - 1) / toks;
    uint32_t gx, gy;
    if ((st = grid(o, lanes ? (groups + LANES_WG - 1) / LANES_WG : groups, &gx, &gy))) return st;
    if (gz > vkb_device_limits(o->dev)->max_wg_count[2]) return ATTND_ERR_RANGE;
    struct vkb_pipeline *p;
    if ((st = lanes ? pipe_lanes(o, wt, multi, tex, &p) : pipe_matmul(o, wt, tiled, &p))) return st;
    const struct vkb_matmul_push pc = {.n_in = n_in,
                                       .n_out = n_out,
                                       .n_tok = n_tok,
                                       .row_bytes = (uint32_t)row_bytes,
                                       .w_off = (uint32_t)w_off,
                                       .x_off = (uint32_t)x_off,
                                       .y_off = (uint32_t)y_off,
                                       .bias_off = bias ? (uint32_t)bias_off : 0,
                                       .has_bias = bias != NULL,
                                       .n_groups = groups,
                                       .ldy = ldy};
    /* without a bias, y stands in for the unused binding; the lanes shader sees w and x twice */
    struct vkb_buffer *b[LANES_BINDINGS] = {w, x, bias ? bias : y, y, w, x};
    return vkb_dispatch(o->dev, p, b, lanes ? LANES_BINDINGS : 4, &pc, gx, gy, gz);
}

attnd_status vkb_op_matmul(struct vkb_ops *o, enum tensor_type wtype, struct vkb_buffer *w, size_t w_off,
                           size_t row_bytes, uint32_t n_in, uint32_t n_out, struct vkb_buffer *x, size_t x_off,
                           uint32_t n_tok, struct vkb_buffer *bias, size_t bias_off, struct vkb_buffer *y,
                           size_t y_off)
{
    return vkb_op_matmul_ld(o, wtype, w, w_off, row_bytes, n_in, n_out, x, x_off, n_tok, bias, bias_off, y, y_off,
                            n_out);
}

attnd_status vkb_op_rope(struct vkb_ops *o, struct vkb_buffer *x, size_t x_off, struct vkb_buffer *cs, size_t cs_off,
                         uint32_t n_tok, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int neox)
{
    attnd_status st;
    if (!o || n_tok == 0 || n_heads == 0 || head_dim == 0 || n_rot == 0 || n_rot % 2 || n_rot > head_dim)
        return ATTND_ERR_INVALID;
    const uint64_t rows = (uint64_t)n_tok * n_heads;
    if (!fits(x, x_off, rows * head_dim, 4) || !fits(cs, cs_off, (uint64_t)n_tok * n_rot, 4)) return ATTND_ERR_INVALID;
    const uint64_t items = rows * (n_rot / 2);
    if (items > MAX_ITEMS) return ATTND_ERR_RANGE;
    uint32_t gx, gy;
    if ((st = grid(o, (items + ELT_WG - 1) / ELT_WG, &gx, &gy))) return st;
    if ((st = PIPE(o, rope, op_rope, 2, struct vkb_rope_push))) return st;
    const struct vkb_rope_push p = {(uint32_t)x_off, (uint32_t)cs_off, n_tok,          n_heads,
                                    head_dim,        n_rot / 2,        neox ? 1u : 0u, (uint32_t)items};
    struct vkb_buffer *b[2] = {x, cs};
    return vkb_dispatch(o->dev, o->rope, b, 2, &p, gx, gy, 1);
}

/* op_add and op_swiglu: a[i] = f(a[i], b[i]) for i < n. */
static attnd_status binary(struct vkb_ops *o, int swiglu, struct vkb_buffer *a, size_t a_off, struct vkb_buffer *b,
                           size_t b_off, uint32_t n)
{
    attnd_status st;
    if (!o || n == 0 || !fits(a, a_off, n, 4) || !fits(b, b_off, n, 4)) return ATTND_ERR_INVALID;
    const uint64_t per_group = (uint64_t)ELT_WG * ELT_PER_INV;
    uint32_t gx, gy;
    if ((st = grid(o, (n + per_group - 1) / per_group, &gx, &gy))) return st;
    st = swiglu ? PIPE(o, swiglu, op_swiglu, 2, struct vkb_elt_push) : PIPE(o, add, op_add, 2, struct vkb_elt_push);
    if (st) return st;
    const struct vkb_elt_push p = {(uint32_t)a_off, (uint32_t)b_off, n, 0};
    struct vkb_buffer *bufs[2] = {a, b};
    return vkb_dispatch(o->dev, swiglu ? o->swiglu : o->add, bufs, 2, &p, gx, gy, 1);
}

attnd_status vkb_op_add(struct vkb_ops *o, struct vkb_buffer *x, size_t x_off, struct vkb_buffer *y, size_t y_off,
                        uint32_t n)
{
    return binary(o, 0, x, x_off, y, y_off, n);
}

attnd_status vkb_op_swiglu(struct vkb_ops *o, struct vkb_buffer *gate, size_t gate_off, struct vkb_buffer *up,
                           size_t up_off, uint32_t n)
{
    return binary(o, 1, gate, gate_off, up, up_off, n);
}

attnd_status vkb_op_kv_write(struct vkb_ops *o, struct vkb_buffer *src, size_t src_off, struct vkb_buffer *slot,
                             size_t slot_off, uint32_t n_tok, uint32_t n_head_kv, uint32_t head_dim,
                             struct vkb_buffer *pool, uint32_t block_stride, int f16)
{
    attnd_status st;
    if (!o || n_tok == 0 || n_head_kv == 0 || head_dim == 0 || !pool) return ATTND_ERR_INVALID;
    if (f16 && (head_dim % 2 || block_stride % 2)) return ATTND_ERR_INVALID;
    const uint64_t row = (uint64_t)n_head_kv * head_dim;
    /* a block holds 16 slots of every KV head; the pool at least one block */
    if ((uint64_t)block_stride < 16 * row || (uint64_t)block_stride > vkb_buffer_size(pool) / (f16 ? 2 : 4))
        return ATTND_ERR_INVALID;
    if (!fits(src, src_off, n_tok * row, 4) || !fits(slot, slot_off, n_tok, 4)) return ATTND_ERR_INVALID;
    const uint64_t items = n_tok * row / (f16 ? 2 : 1);
    if (items > MAX_ITEMS) return ATTND_ERR_RANGE;
    uint32_t gx, gy;
    if ((st = grid(o, (items + ELT_WG - 1) / ELT_WG, &gx, &gy))) return st;
    if ((st = PIPE(o, kv_write, op_kv_write, 3, struct vkb_kv_write_push))) return st;
    const struct vkb_kv_write_push p = {(uint32_t)src_off, (uint32_t)slot_off, n_head_kv,       head_dim,
                                        block_stride,      f16 ? 1u : 0u,       (uint32_t)items, 0};
    struct vkb_buffer *b[3] = {src, slot, pool};
    return vkb_dispatch(o->dev, o->kv_write, b, 3, &p, gx, gy, 1);
}
