#version 450
/* op_swiglu.comp - gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g))
 * (vkb_op_swiglu in vk_ops.h; the same formula as silu() in server/engine/forward.c).
 * Layout: 4 consecutive elements per invocation, 64 invocations per workgroup, workgroups on a
 * 2-D grid read as one linear index. No loops. Push block: struct vkb_elt_push in vk_ops.c. */
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    uint a_off; /* floats into abuf (gate) */
    uint b_off; /* floats into bbuf (up) */
    uint n;
    uint pad;
} pc;

layout(std430, binding = 0) buffer Ab { float abuf[]; };
layout(std430, binding = 1) readonly buffer Bb { float bbuf[]; };

void main()
{
    uint i0 = ((gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x) * 4u;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        if (i0 + k < pc.n) {
            float g = abuf[pc.a_off + i0 + k];
            abuf[pc.a_off + i0 + k] = g / (1.0 + exp(-g)) * bbuf[pc.b_off + i0 + k];
        }
    }
}
