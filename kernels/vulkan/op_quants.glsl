/* op_quants.glsl - decoding of the K-quant, IQ4 and Q4_1/Q5_x weight types for load8() in
 * op_common.glsl (which includes this after ld32()). Block layouts: kernels/cpu/cpu_kernels_impl.h; the
 * formulas are those of the scalar reference kernels/cpu/quants.c. Chunk c of a row holds
 * elements [8c, 8c + 8); for the 256-element super-blocks those 8 always share one sub-block.
 * Every read lies inside the block (f16 fields at a block's end go through ld16u). */
#define WT_Q4_1 5u
#define WT_Q5_0 6u
#define WT_Q5_1 7u
#define WT_IQ4_NL 8u
#define WT_Q2_K 9u
#define WT_Q3_K 10u
#define WT_Q4_K 11u
#define WT_Q5_K 12u
#define WT_Q6_K 13u
#define WT_IQ4_XS 14u

const float IQ4_VALUES[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0,
                                       53.0, 69.0, 89.0, 113.0);

/* one byte, and 2 bytes at any offset, reading only the words that hold them */
uint ld8(uint b) { return (wbuf[b >> 2u] >> ((b & 3u) * 8u)) & 255u; }
uint ld16u(uint b) { return (b & 3u) == 3u ? (ld8(b) | (ld8(b + 1u) << 8u)) : (wbuf[b >> 2u] >> ((b & 3u) * 8u)) & 0xffffu; }
float f16at(uint b) { return unpackHalf2x16(ld16u(b)).x; }

/* 8 consecutive bytes at b, each shifted right by sh and masked */
void bytes8(uint b, uint sh, uint mask, out uvec4 a, out uvec4 z)
{
    uint w0 = ld32(b) >> sh, w1 = ld32(b + 4u) >> sh;
    a = uvec4(w0 & mask, (w0 >> 8u) & mask, (w0 >> 16u) & mask, (w0 >> 24u) & mask);
    z = uvec4(w1 & mask, (w1 >> 8u) & mask, (w1 >> 16u) & mask, (w1 >> 24u) & mask);
}

/* bits [e, e+8) of the 32-bit word at b, one per lane, as 0 or 16 */
void fifth8(uint b, uint e, out uvec4 a, out uvec4 z)
{
    uint h = ld32(b) >> e;
    a = (uvec4(h, h >> 1u, h >> 2u, h >> 3u) & 1u) << 4u;
    z = (uvec4(h >> 4u, h >> 5u, h >> 6u, h >> 7u) & 1u) << 4u;
}

/* Q4_K/Q5_K: 6-bit scale and min of sub-block j from the 12 bytes at s */
void k4_scale_min(uint s, uint j, out float sc, out float mn)
{
    if (j < 4u) {
        sc = float(ld8(s + j) & 63u);
        mn = float(ld8(s + j + 4u) & 63u);
    } else {
        sc = float((ld8(s + j + 4u) & 15u) | ((ld8(s + j - 4u) >> 6u) << 4u));
        mn = float((ld8(s + j + 4u) >> 4u) | ((ld8(s + j) >> 6u) << 4u));
    }
}

/* The 32-element types: block c/4, quarter p = c%4 (elements 8p..8p+7 of the block). */
void load8_q32(uint wt, uint rb, uint c, out vec4 lo, out vec4 hi)
{
    uint bsz = wt == WT_Q4_1 ? 20u : wt == WT_Q5_0 ? 22u : wt == WT_Q5_1 ? 24u : 18u;
    uint qoff = wt == WT_Q4_1 ? 4u : wt == WT_Q5_0 ? 6u : wt == WT_Q5_1 ? 8u : 2u;
    uint bb = rb + bsz * (c >> 2u), p = c & 3u;
    float d = f16at(bb), m = (wt == WT_Q4_1 || wt == WT_Q5_1) ? f16at(bb + 2u) : 0.0;
    uvec4 a, z;
    bytes8(bb + qoff + 8u * (p & 1u), 4u * (p >> 1u), 15u, a, z);
    if (wt == WT_IQ4_NL) {
        lo = vec4(IQ4_VALUES[a.x], IQ4_VALUES[a.y], IQ4_VALUES[a.z], IQ4_VALUES[a.w]) * d;
        hi = vec4(IQ4_VALUES[z.x], IQ4_VALUES[z.y], IQ4_VALUES[z.z], IQ4_VALUES[z.w]) * d;
        return;
    }
    if (wt != WT_Q4_1) {
        uvec4 ha, hz;
        fifth8(bb + (wt == WT_Q5_0 ? 2u : 4u), 8u * p, ha, hz);
        a |= ha;
        z |= hz;
    }
    float off = wt == WT_Q5_0 ? 16.0 : 0.0;
    lo = (vec4(a) - off) * d + m;
    hi = (vec4(z) - off) * d + m;
}

/* Q2_K, Q3_K: element e = 128h + 32j + l comes from bits 2j of byte 32h + l; sub-block 8h + 2j + l/16. */
void load8_q23(uint wt, uint bb, uint e, out vec4 lo, out vec4 hi)
{
    uint h = e >> 7u, j = (e >> 5u) & 3u, l = e & 31u, s = 8u * h + 2u * j + (l >> 4u);
    uvec4 a, z;
    bytes8(bb + (wt == WT_Q2_K ? 16u : 32u) + 32u * h + l, 2u * j, 3u, a, z);
    if (wt == WT_Q2_K) {
        uint sb = ld8(bb + s);
        float dl = f16at(bb + 80u) * float(sb & 15u), ml = f16at(bb + 82u) * float(sb >> 4u);
        lo = vec4(a) * dl - ml;
        hi = vec4(z) * dl - ml;
        return;
    }
    uint low = s < 8u ? ld8(bb + 96u + s) & 15u : ld8(bb + 88u + s) >> 4u;
    uint high = (ld8(bb + 104u + (s & 3u)) >> (2u * (s >> 2u))) & 3u;
    float dl = f16at(bb + 108u) * (float(low | (high << 4u)) - 32.0);
    uvec4 ma, mz; /* hmask bit 4h + j of byte l: set -> +0, clear -> -4 */
    bytes8(bb + l, 4u * h + j, 1u, ma, mz);
    lo = (vec4(a) - 4.0 + 4.0 * vec4(ma)) * dl;
    hi = (vec4(z) - 4.0 + 4.0 * vec4(mz)) * dl;
}

/* Q4_K, Q5_K: sub-block s = e/32; pair k = s/2 holds the low (even s) or high (odd s) nibbles of qs[32k + l]. */
void load8_q45(uint wt, uint bb, uint e, out vec4 lo, out vec4 hi)
{
    uint s = e >> 5u, k = s >> 1u, l = e & 31u;
    float sc, mn;
    k4_scale_min(bb + 4u, s, sc, mn);
    float dl = f16at(bb) * sc, ml = f16at(bb + 2u) * mn;
    uvec4 a, z;
    bytes8(bb + (wt == WT_Q4_K ? 16u : 48u) + 32u * k + l, 4u * (s & 1u), 15u, a, z);
    if (wt == WT_Q5_K) {
        uvec4 ha, hz;
        bytes8(bb + 16u + l, s, 1u, ha, hz);
        a |= ha << 4u;
        z |= hz << 4u;
    }
    lo = vec4(a) * dl - ml;
    hi = vec4(z) * dl - ml;
}

/* Q6_K: element e = 128h + 32g + l: low 4 bits from ql[64h + 32(g&1) + l] (nibble g/2), high 2
 * from qh[32h + l] bits 2g; sub-block 8h + 2g + l/16 with an int8 scale. */
void load8_q6(uint bb, uint e, out vec4 lo, out vec4 hi)
{
    uint h = e >> 7u, g = (e >> 5u) & 3u, l = e & 31u;
    uvec4 a, z, ha, hz;
    bytes8(bb + 64u * h + 32u * (g & 1u) + l, 4u * (g >> 1u), 15u, a, z);
    bytes8(bb + 128u + 32u * h + l, 2u * g, 3u, ha, hz);
    float dl = f16at(bb + 208u) * float(bitfieldExtract(int(ld8(bb + 192u + 8u * h + 2u * g + (l >> 4u))), 0, 8));
    lo = (vec4(a | (ha << 4u)) - 32.0) * dl;
    hi = (vec4(z | (hz << 4u)) - 32.0) * dl;
}

/* IQ4_XS: sub-block s = e/32, scale (6 bits) - 32; element j < 16 of it is the low nibble of
 * qs[16s + j], j >= 16 the high nibble of qs[16s + j - 16]. */
void load8_iq4xs(uint bb, uint e, out vec4 lo, out vec4 hi)
{
    uint s = e >> 5u, j = e & 31u;
    uint ls = ((ld8(bb + 4u + (s >> 1u)) >> (4u * (s & 1u))) & 15u) | (((ld16u(bb + 2u) >> (2u * s)) & 3u) << 4u);
    float dl = f16at(bb) * (float(ls) - 32.0);
    uvec4 a, z;
    bytes8(bb + 8u + 16u * s + (j & 15u), 4u * (j >> 4u), 15u, a, z);
    lo = vec4(IQ4_VALUES[a.x], IQ4_VALUES[a.y], IQ4_VALUES[a.z], IQ4_VALUES[a.w]) * dl;
    hi = vec4(IQ4_VALUES[z.x], IQ4_VALUES[z.y], IQ4_VALUES[z.z], IQ4_VALUES[z.w]) * dl;
}

/* Chunk c of a row of one of these types starting at byte rb. */
void load8_quant(uint wt, uint rb, uint c, out vec4 lo, out vec4 hi)
{
    if (wt <= WT_IQ4_NL) {
        load8_q32(wt, rb, c, lo, hi);
        return;
    }
    uint bsz = wt == WT_Q2_K ? 84u : wt == WT_Q3_K ? 110u : wt == WT_Q4_K ? 144u : wt == WT_Q5_K ? 176u
                   : wt == WT_Q6_K ? 210u : 136u;
    uint bb = rb + bsz * (c >> 5u), e = 8u * (c & 31u);
    if (wt == WT_Q2_K || wt == WT_Q3_K) load8_q23(wt, bb, e, lo, hi);
    else if (wt == WT_Q4_K || wt == WT_Q5_K) load8_q45(wt, bb, e, lo, hi);
    else if (wt == WT_Q6_K) load8_q6(bb, e, lo, hi);
    else load8_iq4xs(bb, e, lo, hi);
}
