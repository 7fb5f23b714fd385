/* patching.h - POST /v1/patching: activation patching in one call. The clean and the corrupted
 * prompt run once each (the clean one capturing the site at the asked layers); then one patched
 * run per grid cell, the corrupted prompt with the clean run's activation written in at that
 * site, layer and position (z: that head at the asked positions), all submitted together so the
 * batched engine runs them in the same steps (ivrun.h). Each run's logit difference (answer -
 * distractor at the last position) is read from the last layer's resid_post (final RMSNorm and
 * the two output rows).
 *
 * Body: {"clean": string | ids, "corrupted": string | ids (as many tokens),
 *        "answer": id | string (one token), "distractor": id | string,
 *        "site": "resid_pre" | "resid_post" | "attn_out" | "mlp_out" | "z",
 *        "layers"?: [L, ...] (default all), "positions"?: [P, ...] (default all),
 *        "heads"?: [H, ...] (z only, default all), "model"?: ignored}
 * Answer: {"clean_diff", "corrupted_diff", "site", "layers", "positions", "heads"? (z),
 *          "grid": [[...] per layer] (per position, or per head for z): (patched - corrupted) /
 *          (clean - corrupted), null when clean_diff == corrupted_diff,
 *          "patched_diff": same shape, the raw differences, "tokens": {"clean", "corrupted",
 *          "answer", "distractor"}, "runs", "skipped", "ms"}
 * A cell whose patch writes only positions before the first token where the prompts differ is not
 * run: the activations there are the same in both runs, so it is the corrupted run (exactly 0).
 * At most API_PATCH_MAX_CELLS cells and API_PATCH_MAX_FLOATS floats of clean activations and patch
 * vectors (else 413). Errors are 400s naming the field. Not a public header. */
#ifndef ATTND_API_PATCHING_H
#define ATTND_API_PATCHING_H

#include <microhttpd.h>

#include "server/api/api.h"

#define API_PATCH_MAX_CELLS 4096
#define API_PATCH_MAX_FLOATS (32 << 20) /* the clean run's activations + the patch vectors (128 MiB) */

/* Handles POST /v1/patching on c; blocks the connection's thread while the runs go. */
enum MHD_Result api_patching(struct api_conn *c);

#endif
