#version 450
/* op_matmul.comp - y (n_tok, n_out) = x (n_tok, n_in) · Wᵀ (+ bias) for many tokens
 * (vkb_op_matmul in vk_ops.h): a shared-memory tiled product.
 *
 * Layout: one workgroup of 64 invocations per tile of BN = 64 output rows x BM = 32 tokens
 * (row tiles on a 2-D grid (x, y) read as one linear index, token tiles on z). The k loop takes
 * BK = 32 elements (one Q8_0/Q4_0 block) per trip: invocation i dequantises 32 weights of row
 * i of the tile and loads 16 activations, all into shared memory; then invocation (tx = i % 8,
 * ty = i / 8) accumulates rows tx + 8j (j < 8) x tokens ty + 8m (m < 4). Loop trips per
 * invocation: n_in / 32 * 9 (2304 at n_in = 8192, far below lavapipe's loop limit).
 * Specialisation constant 0: the weight type (WT_* in op_common.glsl).
 * The push block is the one of op_matvec.comp (struct vkb_matmul_push in vk_ops.c). */
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require

layout(constant_id = 0) const uint WT = 0u;
layout(local_size_x = 64) in;
#define BN 64u /* output rows per tile (= invocations) */
#define BM 32u /* tokens per tile */
#define BK 32u /* k per trip */

layout(push_constant) uniform Push {
    uint n_in, n_out, n_tok;
    uint row_bytes; /* bytes from one weight row to the next */
    uint w_off;     /* bytes */
    uint x_off, y_off, bias_off; /* floats */
    uint has_bias;
    uint n_groups;  /* row tiles: (n_out + BN - 1) / BN */
    uint ldy;       /* floats from one row of y to the next (>= n_out) */
    uint pad1;
} pc;

layout(std430, binding = 0) readonly buffer Wb { uint wbuf[]; };
layout(std430, binding = 1) readonly buffer Xb { float xbuf[]; };
layout(std430, binding = 2) readonly buffer Bb { float bbuf[]; };
layout(std430, binding = 3) writeonly buffer Yb { float ybuf[]; };

#include "op_common.glsl"

shared float w_sh[BK * BN]; /* [k][row] */
shared float x_sh[BK * BM]; /* [k][token] */

void main()
{
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (g >= pc.n_groups) return; /* uniform over the workgroup */
    uint lid = gl_LocalInvocationID.x;
    uint n0 = g * BN, t0 = gl_WorkGroupID.z * BM;
    uint tx = lid & 7u, ty = lid >> 3u;
    /* this invocation's row for the weight loads (rows past n_out read row n_out-1, not stored) */
    uint rb = pc.w_off + min(n0 + lid, pc.n_out - 1u) * pc.row_bytes;
    /* and its token and half of the k step for the activation loads */
    uint lt = lid >> 1u, lh = (lid & 1u) * 16u;
    bool tok_ok = t0 + lt < pc.n_tok;
    uint xrow = pc.x_off + (t0 + lt) * pc.n_in;
    vec4 acc[8]; /* acc[j][m]: row tx + 8j, token ty + 8m */
    [[unroll]] for (uint j = 0u; j < 8u; j++) acc[j] = vec4(0.0);

    for (uint k0 = 0u; k0 < pc.n_in; k0 += BK) {
        [[unroll]] for (uint q = 0u; q < 4u; q++) {
            vec4 lo, hi;
            load8n(WT, rb, k0 / 8u + q, pc.n_in, lo, hi);
            [[unroll]] for (uint k = 0u; k < 4u; k++) {
                w_sh[(8u * q + k) * BN + lid] = lo[k];
                w_sh[(8u * q + 4u + k) * BN + lid] = hi[k];
            }
        }
        [[unroll]] for (uint k = 0u; k < 16u; k++) {
            float v = 0.0;
            if (tok_ok && k0 + lh + k < pc.n_in) v = xbuf[xrow + k0 + lh + k];
            x_sh[(lh + k) * BM + lt] = v;
        }
        barrier();
        for (uint k1 = 0u; k1 < BK; k1 += 4u) {
            [[unroll]] for (uint k = k1; k < k1 + 4u; k++) {
                vec4 xv = vec4(x_sh[k * BM + ty], x_sh[k * BM + ty + 8u], x_sh[k * BM + ty + 16u], x_sh[k * BM + ty + 24u]);
                [[unroll]] for (uint j = 0u; j < 8u; j++) acc[j] += xv * w_sh[k * BN + tx + 8u * j];
            }
        }
        barrier();
    }
    [[unroll]] for (uint j = 0u; j < 8u; j++) {
        uint n = n0 + tx + 8u * j;
        if (n >= pc.n_out) continue;
        float b = pc.has_bias != 0u ? bbuf[pc.bias_off + n] : 0.0;
        [[unroll]] for (uint m = 0u; m < 4u; m++) {
            uint t = t0 + ty + 8u * m;
            if (t < pc.n_tok) ybuf[pc.y_off + t * pc.ldy + n] = acc[j][m] + b;
        }
    }
}
