/* oai_responses.h - POST /v1/responses, the OpenAI Responses API (what the AI SDK's default
 * OpenAI provider and LangChain's useResponsesApi call): `input` (a string or messages) and
 * `instructions` rendered with the model's chat template, one output message, whole or as the
 * API's numbered stream events (response.created ... response.output_text.delta ...
 * response.completed); text.format json_object / json_schema hold the answer to the schema.
 * Tools are refused for now. */
#ifndef ATTND_API_OAI_RESPONSES_H
#define ATTND_API_OAI_RESPONSES_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles the request whose body is in c (on the connection's thread; blocks until a
 * non-streamed answer is ready). Every refusal goes through oai_error(). */
enum MHD_Result oai_responses(struct api_conn *c);

#endif
