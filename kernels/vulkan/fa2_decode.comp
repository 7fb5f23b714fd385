#version 450
/* fa2_decode.comp - flash-decoding for decode steps (n_q == 1): each workgroup takes one part of
 * a sequence's KV length for the G query heads of one KV head and writes the partial (O, m, l)
 * to scratch; fa2_reduce.comp combines the parts. See fa2_core.glsl. */
#extension GL_GOOGLE_include_directive : require
#define FA2_PARTIAL 1
#include "fa2_core.glsl"
