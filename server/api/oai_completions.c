/* oai_completions.c - POST /v1/completions (OpenAI-compatible legacy API). See oai_completions.h. */
#include "server/api/oai_completions.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/api/fields.h"
#include "server/api/oai_common.h"

#define MAX_TEXT_LOGPROBS 5 /* the legacy API's limit */

/* prompt: a string, an array of token ids, or an array of those (one choice group each). */
static int parse_prompts(const cJSON *it, const struct api_engine *e, struct job_params *p, char *err, size_t errlen)
{
    bool many = cJSON_IsArray(it) && it->child && (cJSON_IsString(it->child) || cJSON_IsArray(it->child));
    if (!many) {
        p->n_prompts = 1;
        return api_gen_prompt(it, e, &p->prompts[0], &p->n_prompt[0], err, errlen);
    }
    const cJSON *el;
    cJSON_ArrayForEach(el, it)
    {
        if (p->n_prompts == OAI_MAX_CHOICES) {
            snprintf(err, errlen, "'prompt' has more than %d prompts", OAI_MAX_CHOICES);
            return 400;
        }
        int i = p->n_prompts++;
        int code = api_gen_prompt(el, e, &p->prompts[i], &p->n_prompt[i], err, errlen);
        if (code) return code;
    }
    return 0;
}

struct text_seen {
    const cJSON *prompt; /* read last: it needs the tokenizer */
};

static int read_prompt(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    ((struct text_seen *)x->route)->prompt = it;
    return 0;
}

static int read_best_of(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    double v;
    if (api_json_int(it, 1, 8, &v) && v == 1) return 0;
    snprintf(err, errlen, "'best_of' other than 1 is not supported by attnd (use n)");
    return 400;
}

static int read_suffix(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (cJSON_IsString(it) && !it->valuestring[0]) return 0;
    snprintf(err, errlen, "'suffix' (insertion) is not supported by attnd");
    return 400;
}

#define JP(f) offsetof(struct job_params, f)

/* The fields only this API has. */
static const struct api_field text_fields[] = {
    {"prompt", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_prompt},
    {"n", FIELD_INT, JP(n), 1, 8, FIELD_NO_GIVEN, NULL},
    {"best_of", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_best_of},
    {"logprobs", FIELD_INT, JP(logprobs), 0, MAX_TEXT_LOGPROBS, FIELD_NO_GIVEN, NULL},
    {"echo", FIELD_BOOL, JP(echo), 0, 0, FIELD_NO_GIVEN, NULL},
    {"suffix", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_suffix},
    FIELD_END,
};

static const struct api_field *const text_tables[] = {text_fields, oai_common_fields, api_sampling_fields, NULL};

static int parse_text(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                      const char **param, char *err, size_t errlen)
{
    struct text_seen seen = {0};
    struct api_field_ctx x = {.c = c, .e = e, .root = root, .dst = p, .route = &seen, .null_ok = true};
    int code = api_fields_read(text_tables, &x, param, err, errlen);
    if (code) return code;
    *param = "prompt";
    if (!seen.prompt) {
        snprintf(err, errlen, "'prompt' is required");
        return 400;
    }
    if (p->echo && p->logprobs >= 0) {
        *param = "echo";
        snprintf(err, errlen, "'echo' with 'logprobs' (the prompt's own log-probabilities) is not supported by attnd");
        return 400;
    }
    return parse_prompts(seen.prompt, e, p, err, errlen);
}

enum MHD_Result oai_completions(struct api_conn *c) { return oai_route(c, &oai_text_render, parse_text); }
