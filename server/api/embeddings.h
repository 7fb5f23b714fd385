/* embeddings.h - POST /v1/embeddings in the OpenAI API's shape: each input's embedding is the mean
 * of the last layer's resid_post (the residual stream before the final RMSNorm) over the input's
 * tokens, L2-normalised; read through the activation captures (intervene.h) of one prompt-only
 * request per input, all submitted together (ivrun.h).
 *
 * Body: {"input": string | [string, ...] | [id, ...] | [[id, ...], ...], "model"?: ignored,
 *        "encoding_format"?: "float" (default) | "base64", "dimensions"?: 1..n_embd, "user"?}
 * Answer: {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...] | "base64"}],
 *          "model","usage":{"prompt_tokens","total_tokens"}}
 * "dimensions" keeps the first k components and normalises again; base64 is of little-endian
 * float32. Strings are tokenized as prompts are (BOS as the model asks). At most API_EMB_MAX_INPUTS
 * inputs and API_EMB_MAX_TOKENS tokens in all. Errors in the OpenAI shape, naming the field.
 * Not a public header. */
#ifndef ATTND_API_EMBEDDINGS_H
#define ATTND_API_EMBEDDINGS_H

#include <microhttpd.h>

#include "server/api/api.h"

#define API_EMB_MAX_INPUTS 2048
#define API_EMB_MAX_TOKENS 65536

/* Handles POST /v1/embeddings on c; blocks the connection's thread while the inputs run. */
enum MHD_Result api_embeddings(struct api_conn *c);

#endif
