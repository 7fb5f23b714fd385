/* oai_common.h - what the OpenAI-compatible routes (oai_chat.c: POST /v1/chat/completions,
 * oai_completions.c: POST /v1/completions, oai_responses.c: POST /v1/responses) share: the API's
 * error shape, reading the JSON body, the fields they all read, and the two answer shapes (chat
 * and legacy text) in which the completion job (job.h) answers the first two, whole or streamed.
 *
 * Ids: the response id is "chatcmpl-" or "cmpl-" and 128 random bits in hex (history.h); choice
 * i of a response is kept in the /attention history under (id, i, the caller's tenant).
 */
#ifndef ATTND_API_OAI_COMMON_H
#define ATTND_API_OAI_COMMON_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/sched.h"
#include "server/api/api.h"
#include "server/api/buf.h"
#include "server/api/fields.h"
#include "server/api/job.h"

struct cJSON;

#define OAI_MAX_CHOICES JOB_MAX_CHOICES /* choices per request: n x prompts */

/* The two answer shapes, for job_run(). */
extern const struct job_render oai_chat_render, oai_text_render;

/* Queues an error in the API's shape {"error":{"message","type","param","code"}} (param and
 * code may be NULL: JSON null) and counts it in attnd_errors_total like api_error(). */
enum MHD_Result oai_error(struct api_conn *c, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Parses c's body as one JSON object. Returns it (the caller deletes it), or NULL with an error
 * already queued in *ret. */
struct cJSON *oai_parse_body(struct api_conn *c, enum MHD_Result *ret);

/* Reads c's body as a JSON object and holds the engine (e). Returns the tree (the caller deletes
 * it and releases the engine), or NULL with an error already queued in *ret. */
struct cJSON *oai_begin(struct api_conn *c, struct api_engine *e, enum MHD_Result *ret);

/* job_params_init() with the OpenAI API's sampling defaults (temperature 1, top_p 1, no top_k,
 * min_p or repetition penalty). */
void oai_params_init(struct job_params *p);

/* Reads a route's own fields from root into p (the engine is held). Returns 0 or an HTTP status
 * with the reason in err and the field at fault in *param (NULL: none). */
typedef int (*oai_parse_fn)(struct api_conn *c, const struct api_engine *e, const struct cJSON *root,
                            struct job_params *p, const char **param, char *err, size_t errlen);

/* A whole route: reads the body, holds the engine, parses with parse, then job_run() in
 * render's shape. */
enum MHD_Result oai_route(struct api_conn *c, const struct job_render *render, oai_parse_fn parse);

/* The rows the routes read the same way: response_format (oai_tools.h), stream,
 * stream_options, logit_bias (only {}), model and user (ignored). */
extern const struct api_field oai_common_fields[];

/* The chat template family chat requests use: --chat-template, else the model file's. */
const struct chat_tmpl *oai_chat_template(const struct http_server *srv, const struct api_engine *e);

#endif
