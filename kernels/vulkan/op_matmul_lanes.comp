#version 450
/* op_matmul_lanes.comp - y (n_tok, n_out) = x (n_tok, n_in) · Wᵀ (+ bias) on CPU Vulkan devices
 * (lavapipe); op_matvec.comp and op_matmul.comp are the variants for GPUs (vkb_op_matmul in
 * vk_ops.h chooses).
 *
 * Why a separate variant: llvmpipe runs the invocations of a subgroup as SIMD lanes, but every
 * storage-buffer or shared-memory load becomes a scalar loop over the lanes (Mesa 22.3), so the
 * cost is the number of load instructions, not arithmetic (see fa2_lanes.comp). Here every lane
 * computes whole dot products on its own: no shared memory, no subgroup operations, no
 * barriers; weights and activations are read 16 bytes per load, and one weight row feeds TT
 * tokens, one activation chunk RR rows.
 *
 * Texel reads (TEX = 1, the variant vk_ops.c uses whenever the bindings fit a texel-buffer view):
 * the 16-byte loads of weights and activations are texelFetch()es of uniform texel buffers
 * (bindings 4 and 5: R32G32B32A32_UINT views of the buffers at bindings 0 and 1, made by
 * vkb_pipeline_create_texel), which llvmpipe serves from its vectorised sampler path instead of
 * a per-lane loop of scalar loads (about 10x cheaper a byte). TEX = 0 reads the uvec4 / vec4
 * storage views instead (buffers over maxTexelBufferElements texels). Both variants declare all
 * six bindings; specialisation removes the unused reads.
 *
 * Layout: invocation (lane) g of the row-group grid (workgroups on a 2-D grid (x, y) read as one
 * linear index, 64 lanes each) computes rows RR*g .. RR*g + RR-1 for tokens TT*z .. TT*z + TT-1
 * (z = gl_WorkGroupID.z). The k loop takes K = 64 elements per trip (two Q8_0/Q4_0 blocks):
 * n_in / 64 trips (2048 at n_in = 131072, far below lavapipe's loop limit). Everything inside a
 * trip is unrolled, so the arrays below are registers.
 *
 * Unaligned 16-byte reads: a trip's bytes of a row (or floats of an activation row) start at
 * any byte (float) offset, so the shader loads the NU uvec4 that cover them and shifts the words
 * into place with selects (cheap: arithmetic). Loads past the end of a binding are never issued:
 * indices are clamped to the last whole uvec4 (texel fetches too: out-of-range texels are
 * undefined without robustBufferAccess), and the few words after it (a buffer size that is not a
 * multiple of 16, outside the texel view too) come through the 32-bit storage view of the same
 * binding, read once per invocation. Elements past n_in (the last trip) are zeroed by selects, weights and activations
 * both (garbage there could be NaN). The host guarantees every binding holds at least 16 bytes.
 *
 * Specialisation constants: 0 the weight type (WT_* in op_common.glsl), 1 TT (tokens per lane),
 * 2 RR (rows per lane), 3 TEX (1: texel reads, see above). The push block is the one of op_matvec.comp (struct vkb_matmul_push in
 * vk_ops.c), n_groups = (n_out + RR - 1) / RR. */
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require

layout(constant_id = 0) const uint WT = 0u;
layout(constant_id = 1) const uint TT = 1u; /* tokens per lane, 1..4 */
layout(constant_id = 2) const uint RR = 8u; /* rows per lane, 1..8 */
layout(constant_id = 3) const uint TEX = 1u; /* 1: weights and activations through texel fetches */
layout(local_size_x = 64) in;
#define K 64u /* elements per trip */

layout(push_constant) uniform Push {
    uint n_in, n_out, n_tok;
    uint row_bytes; /* bytes from one weight row to the next */
    uint w_off;     /* bytes */
    uint x_off, y_off, bias_off; /* floats */
    uint has_bias;
    uint n_groups;  /* row groups: (n_out + RR - 1) / RR */
    uint ldy;       /* floats from one row of y to the next (>= n_out) */
    uint pad1;
} pc;

/* three views of each input: 16-byte storage loads (TEX = 0), 16-byte texel fetches (TEX = 1:
 * bindings 4 and 5, the same buffers as 0 and 1), and 32-bit storage loads for a buffer's last
 * words */
layout(std430, binding = 0) readonly buffer Wb { uint wbuf[]; };
layout(std430, binding = 0) readonly buffer Wb4 { uvec4 wbuf4[]; };
layout(std430, binding = 1) readonly buffer Xb { float xbuf[]; };
layout(std430, binding = 1) readonly buffer Xb4 { vec4 xbuf4[]; };
layout(std430, binding = 2) readonly buffer Bb { float bbuf[]; };
layout(std430, binding = 3) writeonly buffer Yb { float ybuf[]; };
layout(binding = 4) uniform usamplerBuffer wtex;
layout(binding = 5) uniform usamplerBuffer xtex;

#include "op_common.glsl"

/* uvec4 loaded per trip and row: the bytes of K elements (F32 256, F16/BF16 128, Q8_0 68, Q4_0
 * 36) from any byte offset (F32: 4-aligned, F16/BF16: 2-aligned) */
const uint NU = WT == WT_F32 ? 17u : (WT == WT_F16 || WT == WT_BF16) ? 9u : WT == WT_Q8_0 ? 6u : 4u;
/* words of those bytes the decoder reads */
const uint NWD = WT == WT_F32 ? 64u : (WT == WT_F16 || WT == WT_BF16) ? 32u : WT == WT_Q8_0 ? 17u : 9u;

uint w_n4;    /* whole uvec4 in the weight binding */
uvec4 w_tail; /* the words after them (zero where past the end) */
uint x_n4;
vec4 x_tail;

uvec4 wld4(uint i)
{
    uint c = min(i, w_n4 - 1u);
    uvec4 v;
    if (TEX != 0u)
        v = texelFetch(wtex, int(c));
    else
        v = wbuf4[c];
    return i < w_n4 ? v : i == w_n4 ? w_tail : uvec4(0u);
}

vec4 xld4(uint i)
{
    uint c = min(i, x_n4 - 1u);
    vec4 v;
    if (TEX != 0u)
        v = uintBitsToFloat(texelFetch(xtex, int(c)));
    else
        v = xbuf4[c];
    return i < x_n4 ? v : i == x_n4 ? x_tail : vec4(0.0);
}

/* word j of u[], as if u were a flat array of words */
#define WORD(u, j) (u[(j) >> 2u][(j) & 3u])

/* The K elements (dequantised, zero from element nv on) of the row bytes that start at byte b. */
void load_w(uint b, uint nv, out vec4 wv[16])
{
    uvec4 u[17]; /* NU used */
    uint a = b >> 4u;
    [[unroll]] for (uint i = 0u; i < 17u; i++) u[i] = i < NU ? wld4(a + i) : uvec4(0u);
    uint ws = (b >> 2u) & 3u, bs = (b & 3u) * 8u;
    uint w[64]; /* NWD used */
    [[unroll]] for (uint i = 0u; i < 64u; i++) {
        if (i >= NWD) break;
        uint w0 = WORD(u, i), w1 = WORD(u, i + 1u), w2 = WORD(u, i + 2u), w3 = WORD(u, i + 3u);
        uint lo = ws == 0u ? w0 : ws == 1u ? w1 : ws == 2u ? w2 : w3;
        uint hi = ws == 0u ? w1 : ws == 1u ? w2 : ws == 2u ? w3 : WORD(u, i + 4u);
        w[i] = bs == 0u ? lo : (lo >> bs) | (hi << (32u - bs));
    }
    if (WT == WT_F32) {
        [[unroll]] for (uint i = 0u; i < 16u; i++)
            wv[i] = uintBitsToFloat(uvec4(w[4u * i], w[4u * i + 1u], w[4u * i + 2u], w[4u * i + 3u]));
    } else if (WT == WT_F16) {
        [[unroll]] for (uint i = 0u; i < 16u; i++)
            wv[i] = vec4(unpackHalf2x16(w[2u * i]), unpackHalf2x16(w[2u * i + 1u]));
    } else if (WT == WT_BF16) {
        [[unroll]] for (uint i = 0u; i < 16u; i++)
            wv[i] = vec4(bf16_lo(w[2u * i]), bf16_hi(w[2u * i]), bf16_lo(w[2u * i + 1u]), bf16_hi(w[2u * i + 1u]));
    } else if (WT == WT_Q8_0) { /* block 0 at byte 0 (scale, quants from byte 2), block 1 at byte 34 */
        float d0 = unpackHalf2x16(w[0] & 0xffffu).x, d1 = unpackHalf2x16(w[8] >> 16u).x;
        d1 = nv > 32u ? d1 : 0.0;
        [[unroll]] for (uint i = 0u; i < 8u; i++) {
            wv[i] = q8x4((w[i] >> 16u) | (w[i + 1u] << 16u), d0);
            wv[8u + i] = q8x4(w[9u + i], d1);
        }
    } else { /* WT_Q4_0: block 0 at byte 0, block 1 at byte 18 */
        float d0 = unpackHalf2x16(w[0] & 0xffffu).x, d1 = unpackHalf2x16(w[4] >> 16u).x;
        d1 = nv > 32u ? d1 : 0.0;
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            uint q0 = (w[i] >> 16u) | (w[i + 1u] << 16u), q1 = w[5u + i];
            wv[i] = q4x4(q0, 0u, d0);
            wv[4u + i] = q4x4(q0, 4u, d0);
            wv[8u + i] = q4x4(q1, 0u, d1);
            wv[12u + i] = q4x4(q1, 4u, d1);
        }
    }
    if (WT <= WT_BF16) { /* plain types: any n_in, so zero the elements past the row */
        [[unroll]] for (uint i = 0u; i < 16u; i++)
            wv[i] = mix(vec4(0.0), wv[i], lessThan(uvec4(4u * i) + uvec4(0u, 1u, 2u, 3u), uvec4(nv)));
    }
}

/* The K activations from float index f on (zero from element nv on). */
void load_x(uint f, uint nv, out vec4 xv[16])
{
    vec4 u[17];
    uint a = f >> 2u, ws = f & 3u;
    [[unroll]] for (uint i = 0u; i < 17u; i++) u[i] = xld4(a + i);
    [[unroll]] for (uint i = 0u; i < 16u; i++) {
        vec4 p = u[i], q = u[i + 1u];
        vec4 v = ws == 0u ? p : ws == 1u ? vec4(p.yzw, q.x) : ws == 2u ? vec4(p.zw, q.xy) : vec4(p.w, q.xyz);
        xv[i] = mix(vec4(0.0), v, lessThan(uvec4(4u * i) + uvec4(0u, 1u, 2u, 3u), uvec4(nv)));
    }
}

void main()
{
    uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (g >= pc.n_groups) return; /* no barriers below */
    uint r0 = g * RR, t0 = gl_WorkGroupID.z * TT;

    /* TEX: the host uses texel reads only when the views cover every whole uvec4 */
    w_n4 = uint(wbuf4.length());
    uint wt = 4u * w_n4, wl = uint(wbuf.length()) - 1u; /* >= 4 words: the host checks */
    w_tail = uvec4(wbuf[min(wt, wl)], wbuf[min(wt + 1u, wl)], wbuf[min(wt + 2u, wl)], wbuf[min(wt + 3u, wl)]);
    w_tail = mix(uvec4(0u), w_tail, lessThanEqual(uvec4(wt) + uvec4(0u, 1u, 2u, 3u), uvec4(wl)));
    x_n4 = uint(xbuf4.length());
    uint xt = 4u * x_n4, xl = uint(xbuf.length()) - 1u;
    x_tail = vec4(xbuf[min(xt, xl)], xbuf[min(xt + 1u, xl)], xbuf[min(xt + 2u, xl)], xbuf[min(xt + 3u, xl)]);
    x_tail = mix(vec4(0.0), x_tail, lessThanEqual(uvec4(xt) + uvec4(0u, 1u, 2u, 3u), uvec4(xl)));

    uint rb[RR], xr[TT];
    float acc[RR * TT];
    [[unroll]] for (uint r = 0u; r < RR; r++) /* rows past n_out: read row n_out-1, not stored */
        rb[r] = pc.w_off + min(r0 + r, pc.n_out - 1u) * pc.row_bytes;
    [[unroll]] for (uint t = 0u; t < TT; t++) xr[t] = pc.x_off + min(t0 + t, pc.n_tok - 1u) * pc.n_in;
    [[unroll]] for (uint i = 0u; i < RR * TT; i++) acc[i] = 0.0;

    const uint bpt = WT == WT_F32 ? 256u : (WT == WT_F16 || WT == WT_BF16) ? 128u : WT == WT_Q8_0 ? 68u : 36u;
    uint trips = (pc.n_in + K - 1u) / K;
    for (uint it = 0u; it < trips; it++) {
        uint k0 = it * K, nv = min(K, pc.n_in - k0);
        vec4 xv[TT][16];
        [[unroll]] for (uint t = 0u; t < TT; t++) load_x(xr[t] + k0, nv, xv[t]);
        [[unroll]] for (uint r = 0u; r < RR; r++) {
            vec4 wv[16];
            load_w(rb[r] + it * bpt, nv, wv);
            [[unroll]] for (uint t = 0u; t < TT; t++) {
                vec4 s = vec4(0.0);
                [[unroll]] for (uint i = 0u; i < 16u; i++) s += wv[i] * xv[t][i];
                acc[r * TT + t] += (s.x + s.y) + (s.z + s.w);
            }
        }
    }

    [[unroll]] for (uint r = 0u; r < RR; r++) {
        uint n = r0 + r;
        if (n >= pc.n_out) continue;
        float bias = pc.has_bias != 0u ? bbuf[pc.bias_off + n] : 0.0;
        [[unroll]] for (uint t = 0u; t < TT; t++)
            if (t0 + t < pc.n_tok) ybuf[pc.y_off + (t0 + t) * pc.ldy + n] = acc[r * TT + t] + bias;
    }
}
