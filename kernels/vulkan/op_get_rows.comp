#version 450
/* op_get_rows.comp - dst[i, 0..d) = dequantised row idx[idx_off + i] of a weight table
 * (vkb_op_get_rows in vk_ops.h).
 *
 * Layout: one invocation per chunk of 8 elements of one output row, 64 per workgroup; the
 * workgroups form a 2-D grid (x, y) read as one linear index (y * num_x + x), so the count is
 * not bounded by one dimension's limit. No loops (lavapipe's loop limiter is no concern).
 * The weight type is a push constant: get_rows is not hot, and one pipeline serves all types.
 * Keep the push block in sync with struct vkb_get_rows_push in vk_ops.c. */
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint wt;        /* WT_* type of the table */
    uint src_off;   /* bytes */
    uint row_bytes; /* bytes from one table row to the next */
    uint idx_off;   /* int32 elements */
    uint n;         /* rows to gather */
    uint d;         /* elements per row */
    uint dst_off;   /* floats */
    uint n_chunks;  /* (d + 7) / 8 */
    uint row_lo;    /* the table holds rows row_lo..row_hi-1, row_lo at src_off: */
    uint row_hi;    /* rows idx selects outside that range belong to another part */
} pc;

layout(std430, binding = 0) readonly buffer Wb { uint wbuf[]; };
layout(std430, binding = 1) readonly buffer Ib { int idx[]; };
layout(std430, binding = 2) writeonly buffer Db { float dst[]; };

#include "op_common.glsl"

void main()
{
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    uint row = gid / pc.n_chunks, c = gid - row * pc.n_chunks;
    if (row >= pc.n) return;
    uint r = uint(idx[pc.idx_off + row]);
    if (r < pc.row_lo || r >= pc.row_hi) return;
    uint rb = pc.src_off + (r - pc.row_lo) * pc.row_bytes;
    vec4 lo, hi;
    load8n(pc.wt, rb, c, pc.d, lo, hi);
    float v[8] = float[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    uint o = pc.dst_off + row * pc.d + 8u * c;
    [[unroll]] for (uint k = 0u; k < 8u; k++)
        if (8u * c + k < pc.d) dst[o + k] = v[k];
}
