/* oai_chat.h - POST /v1/chat/completions in the OpenAI API's shapes: messages rendered with the
 * model's chat template (chat_template.h), n choices, logprobs/top_logprobs, streaming chunks
 * with stream_options.include_usage, errors in the API's error shape. */
#ifndef ATTND_API_OAI_CHAT_H
#define ATTND_API_OAI_CHAT_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles the request whose body is in c (on the connection's thread; blocks until a
 * non-streamed answer is ready). Every refusal goes through oai_error(). */
enum MHD_Result oai_chat(struct api_conn *c);

#endif
