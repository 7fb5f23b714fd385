#version 450
/* fa2_lanes.comp - the lanes shader with uvec4 loads (any CPU device). See fa2_lanes.glsl. */
#extension GL_GOOGLE_include_directive : require
#include "fa2_lanes.glsl"
