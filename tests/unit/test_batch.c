/* test_batch.c - continuous batching is invisible in the results:
 *  - every golden case run alone, all at once, and interleaved with other traffic gives the
 *    reference's greedy tokens, and the log-probabilities of the chosen tokens agree within
 *    1e-3 between the runs;
 *  - a request whose prompt prefix is in the prefix cache gives the same output as without it
 *    (and the cache really was hit);
 *  - with a KV pool too small for all requests at once, requests are pre-empted and recomputed,
 *    never failed, and still give the same output.
 * Runs on the F32 golden models with an F32 KV cache (as the reference did). */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "testutil.h"

#define MAXT 128

struct out {
    pthread_mutex_t mu;
    int done, n;
    int tok[MAXT];
    float lp[MAXT];
    const char *reason;
};

static void on_ev(void *ud, const struct sched_event *ev)
{
    struct out *o = ud;
    pthread_mutex_lock(&o->mu);
    if (ev->kind == SCHED_EV_TOKEN && o->n < MAXT) {
        o->tok[o->n] = ev->token;
        o->lp[o->n++] = ev->logprob;
    } else if (ev->kind != SCHED_EV_TOKEN) {
        o->reason = ev->kind == SCHED_EV_DONE ? ev->finish_reason : "error";
        o->done = 1;
    }
    pthread_mutex_unlock(&o->mu);
}

static void wait_all(struct out *o, int n)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 60000; k++) {
            pthread_mutex_lock(&o[i].mu);
            int d = o[i].done;
            pthread_mutex_unlock(&o[i].mu);
            if (d) break;
            usleep(1000);
        }
}

struct job {
    int32_t prompt[MAXT];
    int n_prompt, n_gen;
};

static void submit(struct sched *s, const struct job *j, struct out *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    struct sched_request r = {.prompt = j->prompt, .n_prompt = (size_t)j->n_prompt, .max_tokens = j->n_gen,
                              .sampling = sampler_params_default(), .ignore_eos = true,
                              .logprobs = 1};
    r.sampling.temperature = 0;
    char err[256];
    uint64_t id;
    T_CHECK(sched_submit(s, &r, on_ev, o, &id, err, sizeof err) == ATTND_OK, "submit: %s", err);
}

static void compare(const char *what, const struct out *a, const struct out *b, const struct job *j)
{
    int same = a->n == b->n && a->n == j->n_gen;
    double worst = 0;
    for (int i = 0; same && i < a->n; i++) {
        same = a->tok[i] == b->tok[i];
        worst = fmax(worst, fabs(a->lp[i] - b->lp[i]));
    }
    T_CHECK(same, "%s: same tokens (%d vs %d generated)", what, a->n, b->n);
    T_CHECK(worst <= 1e-3, "%s: log-probabilities within 1e-3 (worst %.2e)", what, worst);
}

static void run_model(const char *name)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/%s.gguf", t_shared(), name);
    struct model *m;
    if (model_load(path, &m, err, sizeof err)) {
        T_CHECK(0, "load %s: %s", name, err);
        return;
    }
    struct tokenizer *tok;
    T_CHECK(tok_create(m->gguf, &tok, err, sizeof err) == ATTND_OK, "tokenizer");
    snprintf(path, sizeof path, "%s/golden/%s.json", t_shared(), name);
    char *js = t_slurp(path, NULL);
    cJSON *root = cJSON_Parse(js), *cases = cJSON_GetObjectItem(root, "cases");
    int nc = cJSON_GetArraySize(cases);
    if (nc > 8) nc = 8;
    struct job jobs[8], extra[4];
    for (int i = 0; i < nc; i++) {
        cJSON *c = cJSON_GetArrayItem(cases, i), *pt = cJSON_GetObjectItem(c, "prompt_tokens");
        jobs[i].n_prompt = cJSON_GetArraySize(pt);
        for (int k = 0; k < jobs[i].n_prompt; k++) jobs[i].prompt[k] = cJSON_GetArrayItem(pt, k)->valueint;
        jobs[i].n_gen = cJSON_GetArraySize(cJSON_GetObjectItem(c, "tokens"));
    }
    /* other traffic: long prompts built from the golden prompts (so they share prefixes) */
    for (int e = 0; e < 4; e++) {
        extra[e].n_prompt = 0;
        for (int i = 0; i < nc && extra[e].n_prompt < 60; i++)
            for (int k = 0; k < jobs[(i + e) % nc].n_prompt && extra[e].n_prompt < 60; k++)
                extra[e].prompt[extra[e].n_prompt++] = jobs[(i + e) % nc].prompt[k];
        extra[e].n_gen = 24;
    }

    struct sched_opts so = {.n_threads = 2, .n_ctx = 256, .max_queue = 64, .kv_type = TENSOR_F32, .n_batch = 64};
    struct sched *s;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create");
    static struct out alone[8], together[8], mixed[8], ex[4];

    /* alone: one after the other */
    for (int i = 0; i < nc; i++) {
        submit(s, &jobs[i], &alone[i]);
        wait_all(&alone[i], 1);
        cJSON *gt = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "tokens");
        int ok = alone[i].n == jobs[i].n_gen;
        for (int k = 0; ok && k < alone[i].n; k++) ok = alone[i].tok[k] == cJSON_GetArrayItem(gt, k)->valueint;
        T_CHECK(ok, "%s case %d alone: reference tokens", name, i);
    }
    /* all at once */
    for (int i = 0; i < nc; i++) submit(s, &jobs[i], &together[i]);
    wait_all(together, nc);
    for (int i = 0; i < nc; i++) compare("all at once vs alone", &alone[i], &together[i], &jobs[i]);
    /* interleaved with other traffic (long prompts, chunked prefill mixed with decodes) */
    for (int i = 0; i < nc; i++) {
        if (i < 4) submit(s, &extra[i], &ex[i]);
        submit(s, &jobs[i], &mixed[i]);
    }
    wait_all(mixed, nc);
    wait_all(ex, 4);
    for (int i = 0; i < nc; i++) compare("interleaved vs alone", &alone[i], &mixed[i], &jobs[i]);

    /* prefix cache: the extra prompts ran once above; again now, their leading blocks hit */
    struct sched_stats st0, st1;
    sched_get_stats(s, &st0);
    static struct out again[4];
    for (int e = 0; e < 4; e++) {
        submit(s, &extra[e], &again[e]);
        wait_all(&again[e], 1);
        compare("prefix cached vs not", &ex[e], &again[e], &extra[e]);
    }
    sched_get_stats(s, &st1);
    T_CHECK(st1.prefix_hit_tokens - st0.prefix_hit_tokens >= 4 * 48, "prefix cache hit (%llu tokens)",
            (unsigned long long)(st1.prefix_hit_tokens - st0.prefix_hit_tokens));
    sched_destroy(s, 0);

    /* a pool for about two requests: four at once get pre-empted and recomputed */
    struct sched_opts small = so;
    small.kv_blocks = 12; /* 192 tokens; each extra request needs 84 */
    small.n_ctx = 96;
    T_CHECK(sched_create(m, tok, &small, &s) == ATTND_OK, "sched_create small");
    static struct out tight[4];
    for (int e = 0; e < 4; e++) submit(s, &extra[e], &tight[e]);
    wait_all(tight, 4);
    sched_get_stats(s, &st1);
    for (int e = 0; e < 4; e++) {
        T_CHECK(tight[e].reason && !strcmp(tight[e].reason, "length"), "tight pool: request %d finished (%s)", e,
                tight[e].reason);
        compare("tight pool vs roomy", &ex[e], &tight[e], &extra[e]);
    }
    fprintf(stderr, "%s: tight pool: %llu pre-emptions over %llu steps\n", name, (unsigned long long)st1.preemptions,
            (unsigned long long)st1.steps);
    T_CHECK(st1.preemptions > 0, "the tight pool pre-empted");
    sched_destroy(s, 0);

    cJSON_Delete(root);
    free(js);
    tok_destroy(tok);
    model_destroy(m);
}

int main(void)
{
    run_model("tiny-llama-spm-f32");
    run_model("tiny-qwen2-f32");
    return t_finish("test_batch");
}
