#version 450
/* fa2_lanes_tex.comp - the lanes shader with the K/V pools bound as uniform texel buffers
 * (R32G32B32A32_UINT views, read with texelFetch): lavapipe fetches texels through its
 * vectorised sampler path instead of a per-lane loop of storage loads. See fa2_lanes.glsl. */
#extension GL_GOOGLE_include_directive : require
#define FA2_TEX 1
#include "fa2_lanes.glsl"
