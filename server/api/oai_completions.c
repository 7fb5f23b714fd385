/* oai_completions.c - POST /v1/completions (OpenAI-compatible legacy API). See oai_completions.h. */
#include "server/api/oai_completions.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "server/api/generate.h"
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

/* The fields only this API has. Returns 0, -1 (not one of them) or 400. */
static int text_field(const cJSON *it, struct job_params *p, char *err, size_t errlen)
{
    const char *k = it->string;
    double v;
    if (!strcmp(k, "n") || !strcmp(k, "best_of")) {
        if (!api_json_int(it, 1, 8, &v)) {
            snprintf(err, errlen, "'%s' must be an integer in 1..8", k);
            return 400;
        }
        if (!strcmp(k, "n")) p->n = (int)v;
        else if (v != 1) {
            snprintf(err, errlen, "'best_of' other than 1 is not supported by attnd (use n)");
            return 400;
        }
    } else if (!strcmp(k, "logprobs")) {
        if (!api_json_int(it, 0, MAX_TEXT_LOGPROBS, &v)) {
            snprintf(err, errlen, "'logprobs' must be an integer in 0..%d", MAX_TEXT_LOGPROBS);
            return 400;
        }
        p->logprobs = (int)v;
    } else if (!strcmp(k, "echo")) {
        if (!cJSON_IsBool(it)) {
            snprintf(err, errlen, "'echo' must be true or false");
            return 400;
        }
        p->echo = cJSON_IsTrue(it);
    } else if (!strcmp(k, "suffix")) {
        if (!(cJSON_IsString(it) && !it->valuestring[0])) {
            snprintf(err, errlen, "'suffix' (insertion) is not supported by attnd");
            return 400;
        }
    } else if (!strcmp(k, "logit_bias")) {
        if (!(cJSON_IsObject(it) && !it->child)) {
            snprintf(err, errlen, "'logit_bias' is not supported by attnd");
            return 400;
        }
    } else return -1;
    return 0;
}

static int parse_text(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                      const char **param, char *err, size_t errlen)
{
    const cJSON *prompt = NULL, *it;
    cJSON_ArrayForEach(it, root)
    {
        const char *k = it->string ? it->string : "";
        *param = k;
        int code = oai_common_field(root, it, p, err, errlen);
        if (code >= 0) {
            if (code) return code;
            continue;
        }
        if (!strcmp(k, "prompt")) {
            prompt = it;
            continue;
        }
        if (!strcmp(k, "model") || !strcmp(k, "user") || cJSON_IsNull(it)) continue;
        code = text_field(it, p, err, errlen);
        if (code < 0 && (code = api_gen_field(c->srv, it, &p->req, p->stops, &p->max_given, err, errlen)) == 0 &&
            !strcmp(k, "seed"))
            p->seed_given = true;
        if (code > 0) return code;
        if (code < 0) {
            snprintf(err, errlen, "unknown field '%s'", k);
            return 400;
        }
    }
    *param = "prompt";
    if (!prompt) {
        snprintf(err, errlen, "'prompt' is required");
        return 400;
    }
    if (p->echo && p->logprobs >= 0) {
        *param = "echo";
        snprintf(err, errlen, "'echo' with 'logprobs' (the prompt's own log-probabilities) is not supported by attnd");
        return 400;
    }
    return parse_prompts(prompt, e, p, err, errlen);
}

enum MHD_Result oai_completions(struct api_conn *c) { return oai_route(c, OAI_TEXT, parse_text); }
