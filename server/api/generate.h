/* generate.h - POST /v1/generate: validates the JSON body, tokenizes the prompt, submits the
 * request to the scheduler and answers with one JSON object or a Server-Sent Events stream.
 * A client that disconnects before the end has its request cancelled. */
#ifndef ATTND_API_GENERATE_H
#define ATTND_API_GENERATE_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api/api.h"

/* Handles the request whose body is in c (called once the body is complete, on the
 * connection's thread; blocks until a non-streamed answer is ready). Every refusal goes
 * through api_error(). */
enum MHD_Result api_generate(struct api_conn *c);

/* ---- validation shared with the OpenAI-compatible routes (oai_*.c) ---- */

struct cJSON;
struct sched_request;
struct api_engine;

/* Parses one body field that /v1/generate shares with the other generation routes: max_tokens,
 * temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty,
 * penalty_last_n, seed, stop, ignore_eos. Values go into req (stop strings into stops[], which
 * point into the cJSON tree; req->stops is left to the caller); *max_given is set for
 * max_tokens. Returns 0 (parsed), -1 (not one of these fields: nothing done) or 400 with the
 * reason in err. sampler_params_validate() is the caller's, once every field is read. */
int api_gen_field(const struct http_server *srv, const struct cJSON *it, struct sched_request *req, const char **stops,
                  bool *max_given, char *err, size_t errlen);

/* Tokenizes a prompt given as a string (BOS as the model asks, special tokens not parsed) or as
 * an array of token ids, and checks it fits the context. Returns 0 or an HTTP status (400, 413,
 * 503, 500) with the reason in err; *prompt is malloc'd (the caller frees it, also on failure). */
int api_gen_prompt(const struct cJSON *it, const struct api_engine *e, int32_t **prompt, size_t *n_prompt, char *err,
                   size_t errlen);

/* Parses c's body as one JSON value with nothing but white space after it. Returns the tree
 * (the caller deletes it), or NULL with the reason for a 400 in err. A NUL (raw or \u0000) and
 * more values than any valid body holds are refused before cJSON builds anything. */
struct cJSON *api_json_body(const struct api_conn *c, char *err, size_t errlen);

/* True (with the message in err) if member it of object root has a name an earlier member has. */
bool api_json_repeated(const struct cJSON *root, const struct cJSON *it, char *err, size_t errlen);

/* True if it is an integer-valued JSON number in [lo, hi]; *out receives it. */
bool api_json_int(const struct cJSON *it, double lo, double hi, double *out);

#endif
