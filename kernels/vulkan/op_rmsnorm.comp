#version 450
/* op_rmsnorm.comp - out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w (vkb_op_rmsnorm in
 * vk_ops.h; rmsnorm() in server/engine/forward.c accumulates in double, this in f32).
 *
 * Layout: one workgroup of 256 invocations per row (rows on a 2-D grid read as one linear
 * index). Invocation i sums x[i], x[i + 256], ... (d / 256 loop trips, 32 at d = 8192, far
 * below lavapipe's loop limit), subgroupAdd() combines a subgroup, shared memory the subgroups.
 * out may alias x: every invocation reads and writes only its own elements after the barrier.
 * Keep the push block in sync with struct vkb_rmsnorm_push in vk_ops.c. */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#define WG 256u
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
    uint x_off;  /* floats */
    uint w_off;  /* floats */
    uint out_off;/* floats */
    uint n_rows;
    uint d;
    float eps;
    uint pad0, pad1;
} pc;

layout(std430, binding = 0) readonly buffer Xb { float xbuf[]; };
layout(std430, binding = 1) readonly buffer Wb { float wbuf[]; };
layout(std430, binding = 2) writeonly buffer Ob { float obuf[]; };

shared float red[WG];

void main()
{
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.n_rows) return; /* uniform over the workgroup */
    uint lid = gl_LocalInvocationID.x;
    uint xb = pc.x_off + row * pc.d, ob = pc.out_off + row * pc.d;
    float s = 0.0;
    for (uint i = lid; i < pc.d; i += WG) {
        float v = xbuf[xb + i];
        s += v * v;
    }
    s = subgroupAdd(s);
    if (subgroupElect()) red[gl_SubgroupID] = s;
    barrier();
    float tot = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; g++) tot += red[g];
    float scale = 1.0 / sqrt(tot / float(pc.d) + pc.eps);
    for (uint i = lid; i < pc.d; i += WG) obuf[ob + i] = xbuf[xb + i] * scale * wbuf[pc.w_off + i];
}
