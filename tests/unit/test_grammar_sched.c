/* test_grammar_sched.c - output held to a grammar through the batched scheduler (issue 34), on
 * the shipped KJV model (models/kjv.gguf: SentencePiece with byte fallback, trained on prose only,
 * never shown JSON) and on tiny-qwen2 (byte-level BPE, 151,936 tokens). Several requests with a
 * JSON schema run at once, greedy and sampled; each answer must be JSON that the grammar
 * accepts whole (the finish reason "stop": the grammar completed and an end token was
 * chosen), and requests without a grammar in the same batch are not disturbed. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gram_match.h"
#include "attnd/grammar.h"
#include "attnd/json_schema.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "testutil.h"

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"light\",\"word\",\"truth\"]},\"maxItems\":3},"
    "\"saved\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\",\"tags\",\"saved\"],"
    "\"additionalProperties\":false}";

struct result {
    pthread_mutex_t mu;
    char text[16384];
    size_t len;
    int done, n_tokens;
    char reason[32];
};

static void on_event(void *ud, const struct sched_event *ev)
{
    struct result *r = ud;
    pthread_mutex_lock(&r->mu);
    const char *t = ev->kind == SCHED_EV_TOKEN ? ev->text : ev->kind == SCHED_EV_DONE ? ev->final_text : "";
    size_t n = ev->kind == SCHED_EV_TOKEN ? ev->text_len : ev->kind == SCHED_EV_DONE ? ev->final_text_len : 0;
    if (r->len + n < sizeof r->text) {
        memcpy(r->text + r->len, t, n);
        r->len += n;
    }
    if (ev->kind == SCHED_EV_TOKEN) r->n_tokens++;
    if (ev->kind != SCHED_EV_TOKEN) {
        snprintf(r->reason, sizeof r->reason, "%s", ev->kind == SCHED_EV_DONE ? ev->finish_reason : "error");
        if (ev->kind == SCHED_EV_ERROR) fprintf(stderr, "error: %s\n", ev->message);
        r->done = 1;
    }
    pthread_mutex_unlock(&r->mu);
}

static int wait_done(struct result *r)
{
    for (int i = 0; i < 120000; i++) {
        pthread_mutex_lock(&r->mu);
        int d = r->done;
        pthread_mutex_unlock(&r->mu);
        if (d) return 1;
        usleep(1000);
    }
    return 0;
}

static bool grammar_accepts(const struct gram *g, const char *s, size_t n, bool whole)
{
    struct gmatch *m = NULL;
    if (gmatch_create(g, &m) != ATTND_OK) return false;
    bool ok = gmatch_accept_bytes(m, s, n) && (!whole || gmatch_accepts_end(m));
    gmatch_destroy(m);
    return ok;
}

enum { N_REQ = 4 };

static void run_model(const char *path)
{
    char err[512];
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    if (model_load(path, &m, err, sizeof err)) {
        T_CHECK(0, "load %s: %s", path, err);
        return;
    }
    T_CHECK(tok_create(m->gguf, &tok, err, sizeof err) == ATTND_OK, "tok_create: %s", err);
    struct sched_opts so = {.n_threads = 2, .n_ctx = 512, .max_queue = 8};
    struct sched *s = NULL;
    T_CHECK(tok && sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create");
    struct gram *g = NULL, *obj = NULL;
    T_CHECK(jsg_compile(SCHEMA, strlen(SCHEMA), &g, err, sizeof err) == ATTND_OK, "schema: %s", err);
    T_CHECK(jsg_json_object(&obj, err, sizeof err) == ATTND_OK, "json_object: %s", err);
    int32_t *prompt = NULL;
    size_t np = 0;
    const char *text = "And God said, Let there be light: and there was light. The record, as JSON:";
    T_CHECK(tok_encode(tok, text, strlen(text), true, false, &prompt, &np) == ATTND_OK, "encode");
    static struct result res[N_REQ + 1];
    memset(res, 0, sizeof res);
    for (int i = 0; s && g && obj && i <= N_REQ; i++) {
        pthread_mutex_init(&res[i].mu, NULL);
        /* 0, 1: greedy and sampled with the schema; 2: sampled, json_object; 3: no grammar; 4: schema */
        struct sched_request rq = {.prompt = prompt, .n_prompt = np, .max_tokens = i == 2 ? 48 : 400,
                                   .sampling = sampler_params_default(),
                                   .grammar = i == 3 ? NULL : i == 2 ? obj : g};
        rq.sampling.temperature = i == 0 ? 0.0f : 1.0f;
        rq.sampling.seed = 1000 + (uint64_t)i;
        rq.ignore_eos = i == 3;
        if (i == 3) rq.max_tokens = 24;
        uint64_t id;
        T_CHECK(sched_submit(s, &rq, on_event, &res[i], &id, err, sizeof err) == ATTND_OK, "submit %d: %s", i, err);
    }
    gram_destroy(obj); /* the requests keep their own references */
    for (int i = 0; s && g && i <= N_REQ; i++) {
        T_CHECK(wait_done(&res[i]), "request %d ends", i);
        struct result *r = &res[i];
        printf("  %s #%d (%s, %d tokens): %.*s\n", path, i, r->reason, r->n_tokens, (int)r->len, r->text);
        if (i == 3) {
            T_CHECK(!strcmp(r->reason, "length") && r->n_tokens == 24, "the plain request runs as before");
            continue;
        }
        if (i == 2) { /* json_object may run out of tokens inside a string: a prefix of an object */
            T_CHECK(r->text[0] == '{', "json_object starts an object");
            continue;
        }
        T_CHECK(!strcmp(r->reason, "stop"), "#%d ends on the grammar's end, not %s", i, r->reason);
        T_CHECK(grammar_accepts(g, r->text, r->len, true), "#%d: the grammar accepts the whole answer", i);
        cJSON *j = cJSON_ParseWithLength(r->text, r->len);
        T_CHECK(j && cJSON_IsObject(j), "#%d parses as a JSON object", i);
        const cJSON *age = cJSON_GetObjectItem(j, "age");
        T_CHECK(cJSON_IsNumber(age) && age->valuedouble >= 0 && age->valuedouble <= 120, "#%d: age in range", i);
        T_CHECK(cJSON_GetArraySize(j) == 4 && cJSON_IsBool(cJSON_GetObjectItem(j, "saved")), "#%d: 4 keys", i);
        cJSON_Delete(j);
    }
    free(prompt);
    gram_destroy(g);
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
}

int main(void)
{
    char path[512];
    run_model("models/kjv.gguf");
    snprintf(path, sizeof path, "%s/models/tiny-qwen2-f32.gguf", t_shared());
    run_model(path);
    printf("test_grammar_sched: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
