#version 450
/* fa2_prefill.comp - FlashAttention-2 for prefill chunks (n_q >= 2): one workgroup per
 * (sequence, KV head, tile of ROWS query rows = tokens x the query heads of the KV group),
 * causal tile skipping by the host (kb1), mask only on diagonal tiles. See fa2_core.glsl. */
#extension GL_GOOGLE_include_directive : require
#define FA2_PARTIAL 0
#include "fa2_core.glsl"
