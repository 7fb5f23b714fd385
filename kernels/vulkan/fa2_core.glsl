/* fa2_core.glsl - FlashAttention-2 tile loop shared by fa2_prefill.comp and fa2_decode.comp.
 *
 * One workgroup = one work item (gl_WorkGroupID.x) x one KV head (gl_WorkGroupID.y). A work item
 * is ROWS consecutive query rows of one sequence that share the KV head, row R = (token R / G,
 * query head kvh * G + R % G), over key tiles [kb0, kb1) of FA2_BLOCK = 16 tokens. Each K tile
 * and then each V tile is loaded once into shared memory for all rows of the group (GQA).
 * Thread layout: row r = tid / TPR, dims d = tid % TPR + TPR * j. No subgroup operations: the
 * code is correct for any subgroup size.
 * Loop iterations are kept few (inner loops unrolled by 4 or 8, workgroups of >= 64 threads):
 * llvmpipe (Mesa 22.3) ends a shader invocation after 65535 loop iterations in total (its loop
 * limiter), so the host caps the key tiles of one work item on CPU devices (vk_fa2.c).
 *
 * The file that includes this defines FA2_PARTIAL: 0 writes normalised rows into out, 1 writes
 * the unnormalised O followed by m and l into out at slot (item slot, kvh, row) (flash-decoding).
 * Keep the push-constant block in sync with struct vkb_fa2_push in vk_fa2.c. */
#extension GL_EXT_control_flow_attributes : enable

layout(constant_id = 0) const uint D = 64;    /* head_dim */
layout(constant_id = 1) const uint G = 1;     /* query heads per KV head */
layout(constant_id = 2) const uint ROWS = 16; /* query rows per workgroup */
layout(constant_id = 3) const uint TPR = 4;   /* threads per row; D / TPR <= MAXJ */
layout(local_size_x_id = 4) in;               /* = ROWS * TPR */

#define TILE 16u
#define MAXJ 64
const uint NJ = (D + TPR - 1u) / TPR;
const uint WG = ROWS * TPR;
const float NEG_BIG = -3.0e38;   /* a masked score */
const float M_START = -1.7e38;   /* -FLT_MAX / 2: the running max before any key */

layout(push_constant) uniform Push {
    uint n_head;       /* query heads */
    uint n_head_kv;
    uint kv_f16;       /* 1: pools hold f16 halves, 0: f32 */
    uint block_stride; /* elements from one physical block to the next */
    uint n_items;
    float scale;
    uint q_off;        /* elements: start of q in qbuf */
    uint out_off;      /* elements: start of out in obuf (prefill) */
} pc;

layout(std430, binding = 0) readonly buffer Qb { float qbuf[]; };
layout(std430, binding = 1) readonly buffer Kb { uint kpool[]; };
layout(std430, binding = 2) readonly buffer Vb { uint vpool[]; };
layout(std430, binding = 3) readonly buffer Bt { int btab[]; };
/* per sequence: q_off (floats into q and out), n_q, pos0, bt_off */
layout(std430, binding = 4) readonly buffer Sq { int seqinfo[]; };
/* per item: seq, row0, kb0, kb1, slot, kv_end (keys visible to the last row) */
layout(std430, binding = 5) readonly buffer It { int items[]; };
layout(std430, binding = 6) writeonly buffer Ob { float obuf[]; };

shared float q_sh[ROWS * D];
shared float kv_sh[TILE * D];
shared float s_sh[ROWS * TILE];

float load_kv(bool is_v, uint e)
{
    if (pc.kv_f16 != 0u) {
        uint w = is_v ? vpool[e >> 1] : kpool[e >> 1];
        vec2 h = unpackHalf2x16(w);
        return (e & 1u) != 0u ? h.y : h.x;
    }
    return uintBitsToFloat(is_v ? vpool[e] : kpool[e]);
}

/* Loads tile kb of K or V for this KV head into kv_sh; keys at or past kv_end are zero (stale
 * slots may hold NaN, and 0 * NaN would leak into O). */
void load_tile(bool is_v, uint kb, uint kvh, uint bt_off, uint kv_end)
{
    uint phys = uint(btab[bt_off + kb]);
    uint base = phys * pc.block_stride + kvh * TILE * D;
    for (uint i0 = gl_LocalInvocationID.x; i0 < TILE * D; i0 += 4u * WG) {
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint i = i0 + u * WG;
            if (i < TILE * D) kv_sh[i] = kb * TILE + i / D < kv_end ? load_kv(is_v, base + i) : 0.0;
        }
    }
}

void main()
{
    const uint item = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    const uint seq = uint(items[item * 6u + 0u]), row0 = uint(items[item * 6u + 1u]);
    const uint kb0 = uint(items[item * 6u + 2u]), kb1 = uint(items[item * 6u + 3u]);
    const uint slot = uint(items[item * 6u + 4u]), kv_end = uint(items[item * 6u + 5u]);
    const uint q_off = uint(seqinfo[seq * 4u + 0u]), n_q = uint(seqinfo[seq * 4u + 1u]);
    const uint pos0 = uint(seqinfo[seq * 4u + 2u]), bt_off = uint(seqinfo[seq * 4u + 3u]);
    const uint n_rows = n_q * G;

    for (uint i = tid; i < ROWS * D; i += WG) {
        uint R = row0 + i / D, d = i % D;
        q_sh[i] = R < n_rows ? qbuf[pc.q_off + q_off + ((R / G) * pc.n_head + kvh * G + R % G) * D + d] : 0.0;
    }

    const uint r = tid / TPR, lane = tid % TPR, R = row0 + r;
    const bool row_ok = R < n_rows;
    /* the first row of the item sees the fewest keys: tiles wholly below it need no mask */
    const uint first_end = pos0 + row0 / G + 1u;
    float o[MAXJ];
    [[unroll]] for (uint j = 0u; j < NJ; j++) o[j] = 0.0;
    float m = M_START, l = 0.0;

    for (uint kb = kb0; kb < kb1; kb++) {
        barrier();
        load_tile(false, kb, kvh, bt_off, kv_end);
        barrier();
        const bool diag = kb * TILE + TILE > first_end;
        [[unroll]] for (uint it = 0u; it < (ROWS * TILE + WG - 1u) / WG; it++) {
            uint i = tid + it * WG;
            uint rr = i / TILE, k = i % TILE, RR = row0 + rr;
            uint key = kb * TILE + k;
            bool ok = i < ROWS * TILE && RR < n_rows && (!diag || key < pos0 + RR / G + 1u);
            float acc = 0.0;
            if (ok) {
                for (uint d0 = 0u; d0 < D; d0 += 8u) {
                    [[unroll]] for (uint u = 0u; u < 8u; u++) {
                        uint d = d0 + u;
                        if (d < D) acc += q_sh[rr * D + d] * kv_sh[k * D + d];
                    }
                }
            }
            if (i < ROWS * TILE) s_sh[i] = ok ? acc * pc.scale : NEG_BIG;
        }
        barrier();
        float p[TILE];
        float mt = m;
        [[unroll]] for (uint k = 0u; k < TILE; k++) {
            p[k] = s_sh[r * TILE + k];
            mt = max(mt, p[k]);
        }
        const float alpha = exp(m - mt);
        float sum = 0.0;
        [[unroll]] for (uint k = 0u; k < TILE; k++) {
            p[k] = p[k] <= NEG_BIG ? 0.0 : exp(p[k] - mt);
            sum += p[k];
        }
        m = mt;
        l = l * alpha + sum;
        barrier(); /* every K read done: reuse kv_sh for V */
        load_tile(true, kb, kvh, bt_off, kv_end);
        barrier();
        [[unroll]] for (uint j = 0u; j < NJ; j++) {
            uint d = lane + TPR * j;
            if (d < D) {
                float acc = o[j] * alpha;
                [[unroll]] for (uint k = 0u; k < TILE; k++) acc += p[k] * kv_sh[k * D + d];
                o[j] = acc;
            }
        }
    }
    if (!row_ok) return;
#if FA2_PARTIAL
    const uint base = ((slot * pc.n_head_kv + kvh) * G + R % G) * (D + 2u);
    [[unroll]] for (uint j = 0u; j < NJ; j++) {
        uint d = lane + TPR * j;
        if (d < D) obuf[base + d] = o[j];
    }
    if (lane == 0u) {
        obuf[base + D] = m;
        obuf[base + D + 1u] = l;
    }
#else
    const float inv = l > 0.0 ? 1.0 / l : 0.0;
    const uint base = pc.out_off + q_off + ((R / G) * pc.n_head + kvh * G + R % G) * D;
    [[unroll]] for (uint j = 0u; j < NJ; j++) {
        uint d = lane + TPR * j;
        if (d < D) obuf[base + d] = o[j] * inv;
    }
#endif
}
