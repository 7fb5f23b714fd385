/* oai_completions.h - POST /v1/completions, the OpenAI API's legacy text completions: prompt as
 * a string, an array of strings or token ids, echo, logprobs 0..5 in that API's shape, n,
 * streaming. suffix is refused. */
#ifndef ATTND_API_OAI_COMPLETIONS_H
#define ATTND_API_OAI_COMPLETIONS_H

#include <microhttpd.h>

#include "server/api/api.h"

/* As oai_chat() (oai_chat.h), for the legacy endpoint. */
enum MHD_Result oai_completions(struct api_conn *c);

#endif
