/* attention.h - GET /attention?layer=L&head=H[&id=ID][&values=1]: the causal attention weights
 * of one layer and query head over a finished request's tokens (history.h), recomputed by the
 * scheduler (sched_attention()). */
#ifndef ATTND_API_ATTENTION_H
#define ATTND_API_ATTENTION_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles GET /attention on c. Bad or unknown query parameters and an out-of-range layer or
 * head answer 400, an unknown id 404, a sequence longer than cfg.attention_max_tokens 413. */
enum MHD_Result api_attention(struct api_conn *c);

#endif
