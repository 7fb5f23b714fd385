/* generate.h - POST /v1/generate: validates the JSON body, tokenizes the prompt, submits the
 * request to the scheduler and answers with one JSON object or a Server-Sent Events stream.
 * A client that disconnects before the end has its request cancelled. */
#ifndef ATTND_API_GENERATE_H
#define ATTND_API_GENERATE_H

#include <microhttpd.h>
#include "server/api/api.h"

/* Handles the request whose body is in c (called once the body is complete, on the
 * connection's thread; blocks until a non-streamed answer is ready). Every refusal goes
 * through api_error(). */
enum MHD_Result api_generate(struct api_conn *c);

#endif
