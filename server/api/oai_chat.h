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

/* POST /apply-template (llama-server's name): a chat/completions body in, {"prompt": "..."} out,
 * the text the model reads (the template applied, tools included unless tool_choice is none). */
enum MHD_Result oai_apply_template(struct api_conn *c);

struct cJSON;
struct job_params;

/* Renders the chat messages msgs (an array in the chat API's shape) and tools (checked, or NULL)
 * with the server's template and tokenizes them into p->prompts[0] (the engine e is held).
 * Returns 0 or an HTTP status with the reason in err. For the routes that take a chat in another
 * shape (/v1/responses). */
int oai_chat_prompt(struct api_conn *c, const struct api_engine *e, const struct cJSON *msgs, const struct cJSON *tools,
                    struct job_params *p, char *err, size_t errlen);

#endif
