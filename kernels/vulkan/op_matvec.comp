#version 450
/* op_matvec.comp - y (n_tok, n_out) = x (n_tok, n_in) · Wᵀ (+ bias) for few tokens
 * (vkb_op_matmul in vk_ops.h, used while n_tok is small): weight-bandwidth bound, so each
 * weight row is read once for up to MT tokens.
 *
 * Layout: one workgroup of 64 invocations per R = 4 consecutive output rows and MT = 4
 * consecutive tokens (row groups on a 2-D grid (x, y) read as one linear index, token groups
 * on z). Invocation i walks chunks c = i, i + 64, ... of 8 elements of the R rows (n_in / 512
 * loop trips: 16 at n_in = 8192, far below lavapipe's loop limit), dequantises them once and
 * multiplies them with the x chunks of its tokens. Partial sums: subgroupAdd() within a
 * subgroup, then shared memory across subgroups (correct for any subgroup size).
 * Specialisation constant 0: the weight type (WT_* in op_common.glsl).
 * Keep the push block in sync with struct vkb_matmul_push in vk_ops.c. */
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(constant_id = 0) const uint WT = 0u;
layout(local_size_x = 64) in;
#define WG 64u
#define R 4u  /* output rows per workgroup */
#define MT 4u /* tokens per workgroup (a vec4 of accumulators per row) */

layout(push_constant) uniform Push {
    uint n_in, n_out, n_tok;
    uint row_bytes; /* bytes from one weight row to the next */
    uint w_off;     /* bytes */
    uint x_off, y_off, bias_off; /* floats */
    uint has_bias;
    uint n_groups;  /* row groups: (n_out + R - 1) / R */
    uint ldy;       /* floats from one row of y to the next (>= n_out) */
    uint pad1;
} pc;

layout(std430, binding = 0) readonly buffer Wb { uint wbuf[]; };
layout(std430, binding = 1) readonly buffer Xb { float xbuf[]; };
layout(std430, binding = 2) readonly buffer Bb { float bbuf[]; };
layout(std430, binding = 3) writeonly buffer Yb { float ybuf[]; };

#include "op_common.glsl"

shared vec4 red[WG * R]; /* [subgroup][row]: per-token partial sums */

void main()
{
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (g >= pc.n_groups) return; /* uniform over the workgroup */
    uint lid = gl_LocalInvocationID.x;
    uint r0 = g * R, t0 = gl_WorkGroupID.z * MT;
    uint nt = min(MT, pc.n_tok - t0);
    uint rb[R];
    vec4 acc[R];
    [[unroll]] for (uint r = 0u; r < R; r++) {
        rb[r] = pc.w_off + min(r0 + r, pc.n_out - 1u) * pc.row_bytes; /* rows past n_out: read row n_out-1, not stored */
        acc[r] = vec4(0.0);
    }
    uint nch = (pc.n_in + 7u) / 8u;
    for (uint c = lid; c < nch; c += WG) {
        vec4 wl[R], wh[R];
        [[unroll]] for (uint r = 0u; r < R; r++) load8n(WT, rb[r], c, pc.n_in, wl[r], wh[r]);
        bool full = WT >= WT_Q8_0 || 8u * c + 8u <= pc.n_in;
        [[unroll]] for (uint t = 0u; t < MT; t++) {
            if (t < nt) {
                uint xi = pc.x_off + (t0 + t) * pc.n_in + 8u * c;
                vec4 xl, xh;
                if (full) {
                    xl = vec4(xbuf[xi], xbuf[xi + 1u], xbuf[xi + 2u], xbuf[xi + 3u]);
                    xh = vec4(xbuf[xi + 4u], xbuf[xi + 5u], xbuf[xi + 6u], xbuf[xi + 7u]);
                } else {
                    float v[8];
                    [[unroll]] for (uint k = 0u; k < 8u; k++) {
                        v[k] = 0.0;
                        if (8u * c + k < pc.n_in) v[k] = xbuf[xi + k];
                    }
                    xl = vec4(v[0], v[1], v[2], v[3]);
                    xh = vec4(v[4], v[5], v[6], v[7]);
                }
                [[unroll]] for (uint r = 0u; r < R; r++) acc[r][t] += dot(wl[r], xl) + dot(wh[r], xh);
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < R; r++) {
        vec4 s = subgroupAdd(acc[r]);
        if (subgroupElect()) red[gl_SubgroupID * R + r] = s;
    }
    barrier();
    if (lid < R * MT) {
        uint r = lid / MT, t = lid % MT;
        if (r0 + r < pc.n_out && t < nt) {
            float s = 0.0;
            for (uint sg = 0u; sg < gl_NumSubgroups; sg++) s += red[sg * R + r][t];
            if (pc.has_bias != 0u) s += bbuf[pc.bias_off + r0 + r];
            ybuf[pc.y_off + (t0 + t) * pc.ldy + r0 + r] = s;
        }
    }
}
