#version 450
/* op_kv_write.comp - scatters rows of K or V into the paged pool (vkb_op_kv_write in vk_ops.h):
 * element (t, h, e) goes to (slot / 16) * block_stride + (h * 16 + slot % 16) * head_dim + e,
 * slot = slots[slot_off + t].
 *
 * Layout: one invocation per pool word, 64 per workgroup, workgroups on a 2-D grid read as one
 * linear index. F16: a word is the pair (e, e + 1) for even e, packed with packHalf2x16, so
 * no two invocations write the same word (head_dim and block_stride are even, checked by the
 * host). F32: one element. No loops. A slot whose word falls outside the pool is skipped (the
 * host trusts slot values, the shader does not write past the buffer).
 * Keep the push block in sync with struct vkb_kv_write_push in vk_ops.c. */

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint src_off;      /* floats */
    uint slot_off;     /* int32 elements */
    uint n_head_kv;
    uint head_dim;
    uint block_stride; /* pool elements (halves for F16) */
    uint f16;          /* 1: F16 pool, 0: F32 */
    uint n_items;      /* words to write: n_tok * n_head_kv * head_dim (/ 2 for F16) */
    uint pad;
} pc;

layout(std430, binding = 0) readonly buffer Sb { float src[]; };
layout(std430, binding = 1) readonly buffer Tb { int slots[]; };
layout(std430, binding = 2) buffer Pb { uint pool[]; };

void main()
{
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (gid >= pc.n_items) return;
    uint per = pc.f16 != 0u ? pc.head_dim / 2u : pc.head_dim; /* words per head row */
    uint e = (gid % per) * (pc.f16 != 0u ? 2u : 1u), th = gid / per;
    uint h = th % pc.n_head_kv, t = th / pc.n_head_kv;
    uint slot = uint(slots[pc.slot_off + t]);
    uint dst = (slot / 16u) * pc.block_stride + (h * 16u + slot % 16u) * pc.head_dim + e;
    uint s = pc.src_off + th * pc.head_dim + e;
    if (pc.f16 != 0u) {
        uint wi = dst >> 1u;
        if (wi < uint(pool.length())) pool[wi] = packHalf2x16(vec2(src[s], src[s + 1u]));
    } else if (dst < uint(pool.length())) {
        pool[dst] = floatBitsToUint(src[s]);
    }
}
