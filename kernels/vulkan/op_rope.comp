#version 450
/* op_rope.comp - in-place rotary embedding with a host-computed (cos, sin) table (vkb_op_rope in
 * vk_ops.h; the same arithmetic as rope() in server/engine/forward.c).
 *
 * Layout: one invocation per rotated pair (token t, head h, pair i < n_rot / 2), i fastest,
 * 64 per workgroup, workgroups on a 2-D grid read as one linear index. No loops.
 * Keep the push block in sync with struct vkb_rope_push in vk_ops.c. */

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint x_off;    /* floats */
    uint cs_off;   /* floats */
    uint n_tok;
    uint n_heads;
    uint head_dim;
    uint half_rot; /* n_rot / 2 */
    uint neox;     /* 1: pairs (i, i + n_rot/2); 0: pairs (2i, 2i + 1) */
    uint n_items;  /* n_tok * n_heads * half_rot */
} pc;

layout(std430, binding = 0) buffer Xb { float xbuf[]; };
layout(std430, binding = 1) readonly buffer Cb { float cs[]; };

void main()
{
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (gid >= pc.n_items) return;
    uint i = gid % pc.half_rot, th = gid / pc.half_rot;
    uint h = th % pc.n_heads, t = th / pc.n_heads;
    uint base = pc.x_off + (t * pc.n_heads + h) * pc.head_dim;
    uint a = pc.neox != 0u ? i : 2u * i, b = pc.neox != 0u ? i + pc.half_rot : 2u * i + 1u;
    uint ci = pc.cs_off + (t * pc.half_rot + i) * 2u;
    float c = cs[ci], s = cs[ci + 1u];
    float x0 = xbuf[base + a], x1 = xbuf[base + b];
    xbuf[base + a] = x0 * c - x1 * s;
    xbuf[base + b] = x0 * s + x1 * c;
}
