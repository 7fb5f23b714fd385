/* op_common.glsl - weight decoding shared by op_get_rows.comp, op_matvec.comp and op_matmul.comp.
 *
 * Weights are read from a uint array named `wbuf` (declared by the including shader) at byte
 * offsets: no 8/16-bit storage features are needed. Q8_0 blocks are 34 bytes and Q4_0 blocks 18,
 * so block fields can start at any byte: ld32() reads 4 bytes at any byte offset. The host
 * guarantees that the bytes read lie inside the buffer rounded up to whole words (vk_ops.c).
 *
 * Weight type codes (WT_*) are the ones vk_ops.c passes as a specialisation constant (matmul) or
 * a push constant (get_rows). Elements are grouped in chunks of 8: chunk c of a row holds
 * elements [8c, 8c + 8), a quarter of a Q8_0/Q4_0 block. The K-quant, IQ4 and Q4_1/Q5_x types
 * (WT_Q4_1 and up) are decoded in op_quants.glsl. */
#define WT_F32 0u
#define WT_F16 1u
#define WT_BF16 2u
#define WT_Q8_0 3u
#define WT_Q4_0 4u

/* 4 bytes starting at byte b (any alignment), little-endian. */
uint ld32(uint b)
{
    uint i = b >> 2u, s = (b & 3u) * 8u;
    uint lo = wbuf[i];
    if (s == 0u) return lo;
    return (lo >> s) | (wbuf[i + 1u] << (32u - s));
}

#include "op_quants.glsl"

/* 2 bytes at an even byte offset b (never crosses a word). */
uint ld16(uint b) { return (wbuf[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu; }

float bf16_lo(uint w) { return uintBitsToFloat(w << 16u); }
float bf16_hi(uint w) { return uintBitsToFloat(w & 0xffff0000u); }

vec4 q8x4(uint w, float d)
{
    return vec4(float(bitfieldExtract(int(w), 0, 8)), float(bitfieldExtract(int(w), 8, 8)),
                float(bitfieldExtract(int(w), 16, 8)), float(bitfieldExtract(int(w), 24, 8))) * d;
}

vec4 q4x4(uint w, uint sh, float d)
{
    w >>= sh;
    return (vec4(float(w & 15u), float((w >> 8u) & 15u), float((w >> 16u) & 15u), float((w >> 24u) & 15u)) - 8.0) * d;
}

/* Chunk c (elements 8c..8c+7, all < the row length) of the row starting at byte rb. */
void load8(uint wt, uint rb, uint c, out vec4 lo, out vec4 hi)
{
    if (wt == WT_F32) {
        uint i = (rb >> 2u) + 8u * c;
        lo = uintBitsToFloat(uvec4(wbuf[i], wbuf[i + 1u], wbuf[i + 2u], wbuf[i + 3u]));
        hi = uintBitsToFloat(uvec4(wbuf[i + 4u], wbuf[i + 5u], wbuf[i + 6u], wbuf[i + 7u]));
    } else if (wt == WT_F16 || wt == WT_BF16) {
        uint b = rb + 16u * c;
        uint w0 = ld32(b), w1 = ld32(b + 4u), w2 = ld32(b + 8u), w3 = ld32(b + 12u);
        if (wt == WT_F16) {
            lo = vec4(unpackHalf2x16(w0), unpackHalf2x16(w1));
            hi = vec4(unpackHalf2x16(w2), unpackHalf2x16(w3));
        } else {
            lo = vec4(bf16_lo(w0), bf16_hi(w0), bf16_lo(w1), bf16_hi(w1));
            hi = vec4(bf16_lo(w2), bf16_hi(w2), bf16_lo(w3), bf16_hi(w3));
        }
    } else if (wt == WT_Q8_0) {
        uint bb = rb + 34u * (c >> 2u), p = c & 3u;
        float d = unpackHalf2x16(ld32(bb) & 0xffffu).x;
        lo = q8x4(ld32(bb + 2u + 8u * p), d);
        hi = q8x4(ld32(bb + 6u + 8u * p), d);
    } else if (wt == WT_Q4_0) { /* quarter p = low nibbles of bytes 0-7, 8-15, then high nibbles of 0-7, 8-15 */
        uint bb = rb + 18u * (c >> 2u), p = c & 3u;
        float d = unpackHalf2x16(ld32(bb) & 0xffffu).x;
        uint q = bb + 2u + 8u * (p & 1u), sh = 4u * (p >> 1u);
        lo = q4x4(ld32(q), sh, d);
        hi = q4x4(ld32(q + 4u), sh, d);
    } else {
        load8_quant(wt, rb, c, lo, hi); /* op_quants.glsl */
    }
}

/* Element e of a row of a plain type (F32, F16, BF16) starting at byte rb: the tail of a row
 * whose length is not a multiple of 8. */
float load1(uint wt, uint rb, uint e)
{
    if (wt == WT_F32) return uintBitsToFloat(wbuf[(rb >> 2u) + e]);
    uint h = ld16(rb + 2u * e);
    return wt == WT_F16 ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16u);
}

/* Chunk c of a row of n elements: full chunks through load8, a partial last one (plain types
 * only) element by element, zero past n. */
void load8n(uint wt, uint rb, uint c, uint n, out vec4 lo, out vec4 hi)
{
    if (wt >= WT_Q8_0 || 8u * c + 8u <= n) {
        load8(wt, rb, c, lo, hi);
        return;
    }
    float v[8];
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        v[k] = 0.0; /* an if, not ?:, so that nothing past the row is read */
        if (8u * c + k < n) v[k] = load1(wt, rb, 8u * c + k);
    }
    lo = vec4(v[0], v[1], v[2], v[3]);
    hi = vec4(v[4], v[5], v[6], v[7]);
}
