#version 450
/* fa2_reduce.comp - combines the partial (O, m, l) of a split decode sequence: workgroup
 * (item, query head h), threads over the head dimension.
 *   M = max m_p,  L = sum l_p e^(m_p - M),  out = sum O_p e^(m_p - M) / L  (0 when L == 0).
 * Keep the push-constant block in sync with struct vkb_fa2_reduce_push in vk_fa2.c. */
layout(constant_id = 0) const uint D = 64;
layout(local_size_x_id = 1) in;

layout(push_constant) uniform Push {
    uint n_head;
    uint n_head_kv;
    uint n_items;
    uint out_off; /* elements: start of out in obuf */
} pc;

/* per item: q_off (floats into out), slot0, n_parts */
layout(std430, binding = 0) readonly buffer It { int items[]; };
layout(std430, binding = 1) readonly buffer Pb { float part[]; };
layout(std430, binding = 2) writeonly buffer Ob { float obuf[]; };

void main()
{
    const uint item = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    const uint q_off = uint(items[item * 3u]), slot0 = uint(items[item * 3u + 1u]);
    const uint n_parts = uint(items[item * 3u + 2u]);
    const uint G = pc.n_head / pc.n_head_kv, kvh = h / G, g = h % G;
    float M = -3.0e38;
    for (uint p = 0u; p < n_parts; p++) {
        uint base = (((slot0 + p) * pc.n_head_kv + kvh) * G + g) * (D + 2u);
        M = max(M, part[base + D]);
    }
    float L = 0.0;
    for (uint p = 0u; p < n_parts; p++) {
        uint base = (((slot0 + p) * pc.n_head_kv + kvh) * G + g) * (D + 2u);
        L += part[base + D + 1u] * exp(part[base + D] - M);
    }
    const float inv = L > 0.0 ? 1.0 / L : 0.0;
    for (uint d = gl_LocalInvocationID.x; d < D; d += gl_WorkGroupSize.x) {
        float acc = 0.0;
        for (uint p = 0u; p < n_parts; p++) {
            uint base = (((slot0 + p) * pc.n_head_kv + kvh) * G + g) * (D + 2u);
            acc += part[base + d] * exp(part[base + D] - M);
        }
        obuf[pc.out_off + q_off + h * D + d] = acc * inv;
    }
}
