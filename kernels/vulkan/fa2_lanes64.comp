#version 450
/* fa2_lanes64.comp - the lanes shader with u64vec4 loads (CPU devices with shaderInt64: half the
 * load components of fa2_lanes.comp on lavapipe). See fa2_lanes.glsl. */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define FA2_INT64 1
#include "fa2_lanes.glsl"
