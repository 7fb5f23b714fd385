/* logit_lens.h - GET /logit_lens?pos=P[&id=ID][&top=K]: for one position of a finished
 * request, what each layer's residual stream would predict if it were the last one (passed
 * through the final RMSNorm and the output layer), as the top K next-token probabilities per
 * layer. The engine work is sched_logit_lens(); the request is looked up in the same history
 * of finished requests that /attention reads (history.h, lookup.h). */
#ifndef ATTND_API_LOGIT_LENS_H
#define ATTND_API_LOGIT_LENS_H

#include <microhttpd.h>

#include "server/api/api.h"

#define API_LOGIT_LENS_TOP_DEFAULT 5  /* top entries per layer when the query gives none */
#define API_LOGIT_LENS_TOP_MAX 20     /* largest top= (== SCHED_MAX_LOGPROBS) */

/* Handles GET /logit_lens on c. Answers
 *   {"id":"gen-N","pos":P,"token_id":T,"token":"piece","n_tokens":n,"top":K,
 *    "layers":[{"layer":0,"top":[["piece",prob],...],"top_ids":[id,...]},...]}
 * A missing or bad pos (or any other bad or unknown query parameter) answers 400, an unknown
 * id 404, a request longer than cfg.attention_max_tokens 413; every error goes through
 * api_error(). Blocks the connection's thread while the scheduler computes. */
enum MHD_Result api_logit_lens(struct api_conn *c);

#endif
