/* fields.h - a request body's fields, read from tables: one row per field (name, type, range,
 * where the value goes, or the route's own reader), one rule for a field no table names (a 400
 * naming it and listing the known ones), one for a field that appears twice (a 400), and one for
 * null (the OpenAI routes: the client's way of saying "default"; /v1/generate: a type error).
 * Also the JSON body itself (api_json_body) and the prompt (api_gen_prompt), which every
 * completion route reads the same way. Not a public header: only server/api/ includes it.
 */
#ifndef ATTND_API_FIELDS_H
#define ATTND_API_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api/api.h"

struct cJSON;

enum api_field_type {
    FIELD_FLOAT,   /* a JSON number into the float at off */
    FIELD_INT,     /* an integer in [lo, hi] into the int at off */
    FIELD_U53,     /* an integer in [lo, hi] (at most 2^53) into the uint64_t at off */
    FIELD_BOOL,    /* true or false into the bool at off */
    FIELD_STRING,  /* any string; nothing stored */
    FIELD_IGNORED, /* accepted, any value, changes nothing in the answer */
    FIELD_JSON,    /* any value: its cJSON node (const cJSON *) stored at off, for the route to read later */
    FIELD_CUSTOM,  /* read by read() */
};

/* What the readers get besides the value. */
struct api_field_ctx {
    struct api_conn *c;
    const struct api_engine *e;
    const struct cJSON *root;
    void *dst;   /* the route's parameter struct (off is into it) */
    void *route; /* the route's own scratch (the prompt field, etc.) */
    bool null_ok;
};

#define FIELD_HI_MAX_TOKENS (-1.0) /* hi: the server's --max-tokens-cap */
#define FIELD_NO_GIVEN ((size_t)-1)

struct api_field {
    const char *name;
    enum api_field_type type;
    size_t off;   /* where the value goes in ctx->dst */
    double lo, hi; /* FIELD_INT / FIELD_U53 range (hi FIELD_HI_MAX_TOKENS: the server's cap) */
    size_t given; /* a bool in ctx->dst set when the field is present, or FIELD_NO_GIVEN */
    /* FIELD_CUSTOM: reads it. Returns 0 or an HTTP status with the reason in err. */
    int (*read)(const struct api_field_ctx *x, const struct cJSON *it, char *err, size_t errlen);
};

/* A table is an array of rows ending with a row whose name is NULL. */
#define FIELD_END {NULL, FIELD_IGNORED, 0, 0, 0, FIELD_NO_GIVEN, NULL}

/* The fields every completion route reads into struct job_params (job.h) the same way:
 * max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
 * frequency_penalty, penalty_last_n, seed, stop, ignore_eos. */
extern const struct api_field api_sampling_fields[];

/* Reads every member of x->root through tables (a NULL-terminated list, searched in order).
 * Returns 0 or an HTTP status with the reason in err and the member at fault in *param (it
 * points into the tree). */
int api_fields_read(const struct api_field *const *tables, const struct api_field_ctx *x, const char **param,
                    char *err, size_t errlen);

/* Parses c's body as one JSON value with nothing but white space after it. Returns the tree
 * (the caller deletes it), or NULL with the reason for a 400 in err. A NUL (raw or \u0000) and
 * more values than any valid body holds are refused before cJSON builds anything. */
struct cJSON *api_json_body(const struct api_conn *c, char *err, size_t errlen);

/* The opening of a route that takes a JSON body and runs on the model (/v1/generate, /v1/activations,
 * /v1/patching; the OpenAI routes have oai_begin for their error shape): the body's tree, with the
 * engine held (api_engine_release when done), or NULL with the 400 (body) or 503 (no model) in *ret. */
struct cJSON *api_begin(struct api_conn *c, struct api_engine *e, enum MHD_Result *ret);

/* True if it is an integer-valued JSON number in [lo, hi]; *out receives it. */
bool api_json_int(const struct cJSON *it, double lo, double hi, double *out);

/* Tokenizes a prompt given as a string (BOS as the model asks, special tokens not parsed) or as
 * an array of token ids, and checks it fits the context. Returns 0 or an HTTP status (400, 413,
 * 503, 500) with the reason in err; *prompt is malloc'd (the caller frees it, also on failure). */
int api_gen_prompt(const struct cJSON *it, const struct api_engine *e, int32_t **prompt, size_t *n_prompt, char *err,
                   size_t errlen);

#endif
