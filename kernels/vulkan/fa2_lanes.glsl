/* fa2_lanes.glsl - FlashAttention-2 for CPU Vulkan devices (lavapipe): prefill chunks and split
 * decode steps in one shader, included by fa2_lanes.comp (pools as storage buffers, uvec4 loads)
 * and fa2_lanes_tex.comp (FA2_TEX: pools as uniform texel buffers, texelFetch of uvec4 texels,
 * which lavapipe serves from its vectorised sampler path, about 3x faster here) (one pipeline per
 * head_dim, group size and pool type: compiling is slow on lavapipe). fa2_prefill/fa2_decode.comp (fa2_core.glsl, shared-memory tiles) are the
 * variant for GPUs.
 *
 * Why a second variant: llvmpipe runs the invocations of a subgroup as SIMD lanes, but every
 * storage-buffer or shared-memory access inside a loop becomes a scalar loop over the lanes that
 * round-trips each component through the stack (Mesa 22.3). So the cost is in the loads, not in
 * arithmetic: here nothing goes through shared memory, every K/V row is read exactly once with
 * 16-byte loads (uvec4: 8 halves or 4 floats; texel fetches with FA2_TEX), and each lane keeps
 * GR query rows (heads
 * of one GQA group) and their outputs in registers so that one K/V row feeds GR dot products.
 * No barriers, no subgroup operations.
 *
 * One workgroup = one work item (gl_WorkGroupID.x) x one KV head (gl_WorkGroupID.y), WG lanes.
 * A sequence with n_q == 1 is a decode step, else a prefill chunk:
 *   prefill: lane = query token row0 + lane of the chunk, query heads kvh * G + g0 + [0, GR); all
 *     lanes walk the same keys kb0*16 .. kv_end-1 (causal mask per lane) and write normalised
 *     rows into obuf (the out buffer) at out_off.
 *   decode: lane walks keys kb0*16 + lane, + WG, ... below min(kb1*16, kv_end) and writes its
 *     partial (O, m, l) into obuf (the partials buffer) at slot * WG + lane, which
 *     fa2_reduce.comp combines.
 * Item ints: seq, row0 (prefill: first token; decode: g0), kb0, kb1 (key blocks), slot (prefill:
 * g0; decode: the part's slot), kv_end (keys visible to the item's last token).
 *
 * Registers, not memory: q, o, m, l are arrays indexed only by constants once the loops over
 * chunks of 8 elements (DC <= 32 trips) and rows (ROWS4, folded by `g < GR`) are unrolled, which
 * NIR does for these short loops; a dynamically indexed array would live in scratch memory.
 * The only loop left is the key loop: the host keeps the keys one lane walks under llvmpipe's loop
 * limit of 65535 iterations (lanes_cap in vk_fa2.c), and guarantees that D and the block stride
 * are multiples of 8 elements, so rows start on a load unit.
 * Keep the push-constant block in sync with struct vkb_fa2_push in vk_fa2.c. */
#extension GL_EXT_control_flow_attributes : enable

layout(constant_id = 0) const uint D = 64;     /* head_dim, a multiple of 8 */
layout(constant_id = 1) const uint G = 1;      /* query heads per KV head */
layout(constant_id = 2) const uint GR = 1;     /* query heads per lane (1..4, <= G) */
layout(constant_id = 3) const uint WG = 8;     /* lanes per workgroup */
layout(constant_id = 4) const uint KVF16 = 1;  /* 1: f16 pools, 0: f32 */
layout(local_size_x_id = 3) in;

#define TILE 16u
const uint DC = D / 8u;               /* chunks of 8 elements per row */
const uint EPU = KVF16 != 0u ? 8u : 4u;  /* elements per load unit (uvec4) */
const float NEG_BIG = -3.0e38;        /* a masked score */
const float M_START = -1.7e38;        /* -FLT_MAX / 2: the running max before any key */

layout(push_constant) uniform Push {
    uint n_head;       /* query heads */
    uint n_head_kv;
    uint kv_f16;       /* unused here (KVF16) */
    uint block_stride; /* elements from one physical block to the next */
    uint n_items;
    float scale;
    uint q_off;        /* elements: start of q in qbuf */
    uint out_off;      /* elements: start of out in obuf (prefill) */
} pc;

layout(std430, binding = 0) readonly buffer Qb { float qbuf[]; };
#ifdef FA2_TEX
/* R32G32B32A32_UINT views of the pools (vkb_pipeline_create_texel): one texel = one uvec4 */
layout(binding = 1) uniform usamplerBuffer kpool;
layout(binding = 2) uniform usamplerBuffer vpool;
#define FETCH(pool, i) texelFetch(pool, int(i))
#else
layout(std430, binding = 1) readonly buffer Kb { uvec4 kpool[]; };
layout(std430, binding = 2) readonly buffer Vb { uvec4 vpool[]; };
#define FETCH(pool, i) pool[i]
#endif
layout(std430, binding = 3) readonly buffer Bt { int btab[]; };
/* per sequence: q_off (floats into q and out), n_q, pos0, bt_off */
layout(std430, binding = 4) readonly buffer Sq { int seqinfo[]; };
layout(std430, binding = 5) readonly buffer It { int items[]; };
layout(std430, binding = 6) writeonly buffer Ob { float obuf[]; };

/* The 8 elements of chunk c of the row that starts at uvec4 r. */
#define LOAD8(pool, r, c, x)                                                                    \
    if (KVF16 != 0u) {                                                                          \
        uvec4 w = FETCH(pool, (r) + (c));                                                              \
        vec2 h0 = unpackHalf2x16(w.x), h1 = unpackHalf2x16(w.y);                                \
        vec2 h2 = unpackHalf2x16(w.z), h3 = unpackHalf2x16(w.w);                                \
        x[0] = h0.x; x[1] = h0.y; x[2] = h1.x; x[3] = h1.y;                                     \
        x[4] = h2.x; x[5] = h2.y; x[6] = h3.x; x[7] = h3.y;                                     \
    } else {                                                                                    \
        uvec4 w0 = FETCH(pool, (r) + 2u * (c)), w1 = FETCH(pool, (r) + 2u * (c) + 1u);                        \
        x[0] = uintBitsToFloat(w0.x); x[1] = uintBitsToFloat(w0.y);                             \
        x[2] = uintBitsToFloat(w0.z); x[3] = uintBitsToFloat(w0.w);                             \
        x[4] = uintBitsToFloat(w1.x); x[5] = uintBitsToFloat(w1.y);                             \
        x[6] = uintBitsToFloat(w1.z); x[7] = uintBitsToFloat(w1.w);                             \
    }


/* Applies M(g, c) for the rows g = 0..3 of one chunk (those with g >= GR fold away). */
#define ROWS4(M, c) M(0u, c) M(1u, c) M(2u, c) M(3u, c)

#define QK_ROW(g, c)                                                                            \
    if ((g) < GR) {                                                                             \
        const uint b = (g) * D + (c) * 8u;                                                      \
        s[g] += q[b] * x[0] + q[b + 1u] * x[1] + q[b + 2u] * x[2] + q[b + 3u] * x[3] +          \
                q[b + 4u] * x[4] + q[b + 5u] * x[5] + q[b + 6u] * x[6] + q[b + 7u] * x[7];      \
    }
#define PV_ROW(g, c)                                                                            \
    if ((g) < GR) {                                                                             \
        const uint b = (g) * D + (c) * 8u;                                                      \
        o[b] = o[b] * alpha[g] + p[g] * x[0];                                                   \
        o[b + 1u] = o[b + 1u] * alpha[g] + p[g] * x[1];                                         \
        o[b + 2u] = o[b + 2u] * alpha[g] + p[g] * x[2];                                         \
        o[b + 3u] = o[b + 3u] * alpha[g] + p[g] * x[3];                                         \
        o[b + 4u] = o[b + 4u] * alpha[g] + p[g] * x[4];                                         \
        o[b + 5u] = o[b + 5u] * alpha[g] + p[g] * x[5];                                         \
        o[b + 6u] = o[b + 6u] * alpha[g] + p[g] * x[6];                                         \
        o[b + 7u] = o[b + 7u] * alpha[g] + p[g] * x[7];                                         \
    }
/* q rows (pre-scaled) and zeroed o */
#define INIT_ROW(g, c)                                                                          \
    if ((g) < GR) {                                                                             \
        const uint b = (g) * D + (c) * 8u;                                                      \
        const bool qok = tok_ok && g0 + (g) < G;                                                \
        const uint qb = pc.q_off + s_qoff + (tok * pc.n_head + kvh * G + g0 + (g)) * D + (c) * 8u; \
        for (uint e = 0u; e < 8u; e++) {                                                        \
            q[b + e] = qok ? qbuf[qb + e] * pc.scale : 0.0;                                     \
            o[b + e] = 0.0;                                                                     \
        }                                                                                       \
    }

void main()
{
    const uint item = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    const uint seq = uint(items[item * 6u + 0u]), row0 = uint(items[item * 6u + 1u]);
    const uint kb0 = uint(items[item * 6u + 2u]), kb1 = uint(items[item * 6u + 3u]);
    const uint slot = uint(items[item * 6u + 4u]), kv_end = uint(items[item * 6u + 5u]);
    const uint s_qoff = uint(seqinfo[seq * 4u + 0u]), n_q = uint(seqinfo[seq * 4u + 1u]);
    const uint pos0 = uint(seqinfo[seq * 4u + 2u]), bt_off = uint(seqinfo[seq * 4u + 3u]);
    const bool dec = n_q == 1u; /* the same for the whole workgroup */
    const uint tok = dec ? 0u : row0 + lane, g0 = dec ? row0 : slot;
    const uint key_end = dec ? min(kb1 * TILE, kv_end) : kv_end;
    const uint key0 = dec ? kb0 * TILE + lane : kb0 * TILE, step = dec ? WG : 1u;
    const uint trips = key_end > kb0 * TILE ? (key_end - kb0 * TILE + step - 1u) / step : 0u;
    const uint lim = dec ? key_end : pos0 + tok + 1u; /* keys this lane sees (causal) */
    const bool tok_ok = tok < n_q;

    float q[GR * D];
    float o[GR * D];
    float m[4], l[4], alpha[4], p[4], s[4];
    for (uint g = 0u; g < 4u; g++) {
        m[g] = M_START;
        l[g] = 0.0;
    }
    [[unroll]] for (uint c = 0u; c < DC; c++) { ROWS4(INIT_ROW, c) }

    const uint rows_per_block = pc.block_stride / EPU, kv_row = kvh * TILE; /* load units */
    for (uint it = 0u; it < trips; it++) {
        const uint key = key0 + it * step;
        const bool ok = key < lim;
        const uint kc = min(key, key_end - 1u); /* a stored key: loads stay in bounds, never NaN */
        const uint row = uint(btab[bt_off + kc / TILE]) * rows_per_block + (kv_row + kc % TILE) * (D / EPU);
        s[0] = 0.0; s[1] = 0.0; s[2] = 0.0; s[3] = 0.0;
        [[unroll]] for (uint c = 0u; c < DC; c++) { float x[8]; LOAD8(kpool, row, c, x) ROWS4(QK_ROW, c) }
        for (uint g = 0u; g < GR; g++) {
            const float sc = ok ? s[g] : NEG_BIG;
            const float mn = max(m[g], sc);
            alpha[g] = exp(m[g] - mn);
            p[g] = exp(sc - mn);
            l[g] = l[g] * alpha[g] + p[g];
            m[g] = mn;
        }
        [[unroll]] for (uint c = 0u; c < DC; c++) { float x[8]; LOAD8(vpool, row, c, x) ROWS4(PV_ROW, c) }
    }

    if (dec) {
#define OUT_ROW(g, c)                                                                           \
    if ((g) < GR && g0 + (g) < G) {                                                             \
        const uint base = (((slot * WG + lane) * pc.n_head_kv + kvh) * G + g0 + (g)) * (D + 2u) + (c) * 8u; \
        for (uint e = 0u; e < 8u; e++) obuf[base + e] = o[(g) * D + (c) * 8u + e];             \
    }
        [[unroll]] for (uint c = 0u; c < DC; c++) { ROWS4(OUT_ROW, c) }
#undef OUT_ROW
        for (uint g = 0u; g < 4u; g++) {
            if (g < GR && g0 + g < G) {
                const uint base = (((slot * WG + lane) * pc.n_head_kv + kvh) * G + g0 + g) * (D + 2u);
                obuf[base + D] = m[g];
                obuf[base + D + 1u] = l[g];
            }
        }
    } else {
        float inv[4];
        for (uint g = 0u; g < GR; g++) inv[g] = l[g] > 0.0 ? 1.0 / l[g] : 0.0;
#define OUT_ROW(g, c)                                                                           \
    if ((g) < GR && g0 + (g) < G && tok_ok) {                                                   \
        const uint base = pc.out_off + s_qoff + (tok * pc.n_head + kvh * G + g0 + (g)) * D + (c) * 8u; \
        for (uint e = 0u; e < 8u; e++) obuf[base + e] = o[(g) * D + (c) * 8u + e] * inv[g];     \
    }
        [[unroll]] for (uint c = 0u; c < DC; c++) { ROWS4(OUT_ROW, c) }
    }
}
