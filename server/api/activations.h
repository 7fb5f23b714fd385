/* activations.h - POST /v1/activations: the model's activations at TransformerLens' hook points for
 * a prompt, optionally under interventions (intervene.h), read as a request of the scheduler (a
 * prompt pass with max_tokens 0, batched with the other traffic) whose steps copy the asked sites
 * out as they compute them.
 *
 * Body: {"prompt": string or token ids,
 *        "sites": [{"site": "resid_pre"|"resid_post"|"attn_out"|"mlp_out"|"z", "layer": L, "head"?: H}],
 *        "positions"?: "all" (default) | [i, ...] (prompt positions, in the order wanted),
 *        "encoding"?: "json" (default) | "base64", "interventions"?: [...], "model"?: ignored}
 * Answer: {"tokens": [...], "interventions"?: n,
 *          "activations": [{"site", "layer", "head"?, "shape": [rows, width],
 *                           "data": [[...], ...] | "data_b64": base64 of little-endian float32,
 *                           row-major}]}
 * widths: d for the stream sites, head_dim for "z" with a head, n_head * head_dim without.
 * At most API_ACT_MAX_SITES sites; an answer estimated over API_ACT_MAX_BYTES is refused with a
 * 413 before anything runs. Errors name the field path ("sites[2].layer"). Not a public header. */
#ifndef ATTND_API_ACTIVATIONS_H
#define ATTND_API_ACTIVATIONS_H

#include <microhttpd.h>

#include "server/api/api.h"

#define API_ACT_MAX_SITES 64
#define API_ACT_MAX_BYTES (16u << 20) /* 16 MiB of answer */

/* Handles POST /v1/activations on c; blocks the connection's thread while the prompt runs. */
enum MHD_Result api_activations(struct api_conn *c);

#endif
