/* oai_common.h - what the OpenAI-compatible routes (oai_chat.c: POST /v1/chat/completions,
 * oai_completions.c: POST /v1/completions) share: the API's error shape, reading the JSON body,
 * and one generation job of several choices (n, or one per prompt) run through the scheduler
 * and answered as one object or as a stream of chunks in the API's shapes.
 *
 * A job's choices are independent scheduler requests. The first choice of each prompt goes
 * first; the others follow once it has read the prompt, so they find the prompt's full KV
 * blocks in the prefix cache instead of computing them again. Their ids: the response id is "chatcmpl-N" or
 * "cmpl-N", where N is the scheduler id of choice 0; choice i is kept in the /attention history
 * under api_history_key(API_HISTORY_CHAT or _CMPL, N, i) (history.h).
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

struct cJSON;

#define OAI_MAX_CHOICES 16 /* choices per request: n x prompts */

enum oai_kind { OAI_CHAT = 0, OAI_TEXT = 1 };

/* Queues an error in the API's shape {"error":{"message","type","param","code"}} (param and
 * code may be NULL: JSON null) and counts it in attnd_errors_total like api_error(). */
enum MHD_Result oai_error(struct api_conn *c, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Parses c's body as one JSON object. Returns it (the caller deletes it), or NULL with an error
 * already queued in *ret. */
struct cJSON *oai_parse_body(struct api_conn *c, enum MHD_Result *ret);

/* What a route hands to oai_run(). */
struct oai_params {
    enum oai_kind kind;
    struct sched_request req;           /* sampling, max_tokens, stops; prompt set per choice */
    const char *stops[SCHED_MAX_STOPS]; /* point into the caller's cJSON tree */
    bool max_given;                     /* max_tokens was in the body (else: what the context leaves) */
    bool seed_given;
    int n;                              /* choices per prompt, 1..8 */
    int logprobs;                       /* -1: none; else top alternatives per token */
    bool stream, include_usage;
    bool echo;                          /* legacy: the prompt text starts each choice's text */
    int32_t *prompts[OAI_MAX_CHOICES];  /* malloc'd, owned here: oai_run() and oai_params_free() free them */
    size_t n_prompt[OAI_MAX_CHOICES];
    int n_prompts;
};

/* Sampling defaults of the OpenAI API (temperature 1, top_p 1, no top_k, min_p or repetition
 * penalty), max_tokens from the context, n 1, no logprobs. */
void oai_params_init(struct oai_params *p);
void oai_params_free(struct oai_params *p);

/* Submits every choice (see above), then answers (blocking until done for a whole answer, or by queuing a
 * stream). Takes the prompts from p (freed here on every path). e is the caller's acquired engine;
 * oai_run releases it. Errors go through oai_error. */
enum MHD_Result oai_run(struct api_conn *c, struct api_engine *e, struct oai_params *p);

/* Reads a route's own fields from root into p (the engine is held). Returns 0 or an HTTP status
 * with the reason in err and the field at fault in *param (NULL: none). */
typedef int (*oai_parse_fn)(struct api_conn *c, const struct api_engine *e, const struct cJSON *root,
                            struct oai_params *p, const char **param, char *err, size_t errlen);

/* A whole route: reads the body, holds the engine, parses with parse, then oai_run(). */
enum MHD_Result oai_route(struct api_conn *c, enum oai_kind kind, oai_parse_fn parse);

/* The fields both routes read the same way: stream, stream_options, a field that appears twice
 * (refused). Returns 0 (read), -1 (not one of them) or 400 with the reason in err. */
int oai_common_field(const struct cJSON *root, const struct cJSON *it, struct oai_params *p, char *err, size_t errlen);

/* The chat template family chat requests use: --chat-template, else the model file's. */
int oai_chat_family(const struct http_server *srv, const struct api_engine *e);


#endif
