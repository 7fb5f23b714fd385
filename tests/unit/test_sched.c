/* test_sched.c - the scheduler against the golden files: greedy requests submitted together
 * produce the reference tokens (the same as alone), events arrive in order with whole UTF-8
 * pieces whose concatenation is the decoded text, cancellation ends a request with
 * "cancelled", a full queue is refused, bad requests are refused without disturbing others, and
 * attention maps are row-stochastic and reproduce the attention output (weights · V). */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "testutil.h"

struct result {
    pthread_mutex_t mu;
    int tokens[256];
    int n_tokens;
    char text[8192];
    size_t text_len;
    int events_after_done;
    int done;
    const char *reason;
    int prompt_tokens, completion_tokens;
    int bad_utf8;
    struct sched *s;   /* for cancel-from-callback */
    int cancel_after;  /* cancel once this many tokens arrived (0: never) */
    uint64_t id;
};

static void on_event(void *ud, const struct sched_event *ev)
{
    struct result *r = ud;
    pthread_mutex_lock(&r->mu);
    if (r->done) r->events_after_done++;
    if (ev->kind == SCHED_EV_TOKEN) {
        if (r->n_tokens < 256) r->tokens[r->n_tokens++] = ev->token;
        if (!utf8_valid(ev->text, ev->text_len)) r->bad_utf8++;
        if (r->text_len + ev->text_len < sizeof r->text) {
            memcpy(r->text + r->text_len, ev->text, ev->text_len);
            r->text_len += ev->text_len;
        }
        if (r->cancel_after && r->n_tokens == r->cancel_after) sched_cancel(r->s, ev->id);
    } else {
        if (ev->kind == SCHED_EV_DONE) {
            r->reason = ev->finish_reason;
            if (r->text_len + ev->final_text_len < sizeof r->text) {
                memcpy(r->text + r->text_len, ev->final_text, ev->final_text_len);
                r->text_len += ev->final_text_len;
            }
        } else r->reason = "error";
        r->prompt_tokens = ev->prompt_tokens;
        r->completion_tokens = ev->completion_tokens;
        r->done = 1;
    }
    pthread_mutex_unlock(&r->mu);
}

static int wait_done(struct result *r, int ms)
{
    for (int i = 0; i < ms; i++) {
        pthread_mutex_lock(&r->mu);
        int d = r->done;
        pthread_mutex_unlock(&r->mu);
        if (d) return 1;
        usleep(1000);
    }
    return 0;
}

int main(void)
{
    char path[1024], err[512];
    const char *name = "tiny-llama-spm-f32";
    snprintf(path, sizeof path, "%s/models/%s.gguf", t_shared(), name);
    struct model *m;
    if (model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "load: %s\n", err);
        return 1;
    }
    struct tokenizer *tok;
    T_CHECK(tok_create(m->gguf, &tok, err, sizeof err) == ATTND_OK, "tok_create: %s", err);
    struct sched_opts so = {.n_threads = 2, .n_ctx = 256, .max_queue = 8};
    struct sched *s;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create");

    snprintf(path, sizeof path, "%s/golden/%s.json", t_shared(), name);
    char *js = t_slurp(path, NULL);
    cJSON *root = js ? cJSON_Parse(js) : NULL, *cases = cJSON_GetObjectItem(root, "cases");
    int nc = cJSON_GetArraySize(cases);
    T_CHECK(nc >= 5, "golden cases");
    if (nc > 8) nc = 8;

    /* 1. all golden cases at once (queued behind each other), greedy */
    struct result res[8];
    memset(res, 0, sizeof res);
    for (int i = 0; i < nc; i++) {
        cJSON *c = cJSON_GetArrayItem(cases, i), *pt = cJSON_GetObjectItem(c, "prompt_tokens");
        int32_t p[256];
        int np = cJSON_GetArraySize(pt);
        for (int k = 0; k < np; k++) p[k] = cJSON_GetArrayItem(pt, k)->valueint;
        pthread_mutex_init(&res[i].mu, NULL);
        struct sched_request rq = {.prompt = p, .n_prompt = (size_t)np,
                                   .max_tokens = cJSON_GetArraySize(cJSON_GetObjectItem(c, "tokens")),
                                   .sampling = sampler_params_default(), .ignore_eos = true, .logprobs = 3};
        rq.sampling.temperature = 0;
        T_CHECK(sched_submit(s, &rq, on_event, &res[i], &res[i].id, err, sizeof err) == ATTND_OK, "submit: %s", err);
    }
    for (int i = 0; i < nc; i++) {
        T_CHECK(wait_done(&res[i], 20000), "request %d finished", i);
        cJSON *gt = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "tokens");
        int ok = res[i].n_tokens == cJSON_GetArraySize(gt);
        for (int k = 0; ok && k < res[i].n_tokens; k++) ok = res[i].tokens[k] == cJSON_GetArrayItem(gt, k)->valueint;
        T_CHECK(ok, "case %d: greedy tokens equal the reference", i);
        T_CHECK(res[i].reason && !strcmp(res[i].reason, "length"), "case %d finish %s", i, res[i].reason);
        T_CHECK(res[i].bad_utf8 == 0, "case %d: pieces are whole UTF-8", i);
        T_CHECK(res[i].events_after_done == 0, "no events after DONE");
        /* streamed text == decode of the tokens */
        char *dec = NULL;
        size_t dl = 0;
        int32_t ids[256];
        for (int k = 0; k < res[i].n_tokens; k++) ids[k] = res[i].tokens[k];
        T_CHECK(tok_decode(tok, ids, (size_t)res[i].n_tokens, 0, &dec, &dl) == ATTND_OK, "decode");
        T_CHECK(dec && dl == res[i].text_len && !memcmp(dec, res[i].text, dl), "case %d: streamed text == decode", i);
        free(dec);
    }

    /* 2. cancel from the callback after 3 tokens */
    struct result rc;
    memset(&rc, 0, sizeof rc);
    pthread_mutex_init(&rc.mu, NULL);
    rc.s = s;
    rc.cancel_after = 3;
    int32_t p1[3] = {1, 450, 6635};
    struct sched_request rq = {.prompt = p1, .n_prompt = 3, .max_tokens = 100, .sampling = sampler_params_default(),
                               .ignore_eos = true};
    T_CHECK(sched_submit(s, &rq, on_event, &rc, &rc.id, err, sizeof err) == ATTND_OK, "submit");
    T_CHECK(wait_done(&rc, 20000), "cancelled request finished");
    T_CHECK(rc.reason && !strcmp(rc.reason, "cancelled") && rc.n_tokens == 3, "cancelled after 3 tokens (%s, %d)",
            rc.reason, rc.n_tokens);

    /* 3. bad requests are refused with a message */
    int32_t bad[2] = {1, 999999};
    struct sched_request rb = rq;
    rb.prompt = bad;
    rb.n_prompt = 2;
    uint64_t id;
    err[0] = 0;
    T_CHECK(sched_submit(s, &rb, on_event, &rc, &id, err, sizeof err) == ATTND_ERR_INVALID && err[0], "bad id");
    rb = rq;
    rb.max_tokens = 1000;
    T_CHECK(sched_submit(s, &rb, on_event, &rc, &id, err, sizeof err) == ATTND_ERR_RANGE, "too long: %s", err);
    rb = rq;
    rb.sampling.top_p = 2;
    T_CHECK(sched_submit(s, &rb, on_event, &rc, &id, err, sizeof err) == ATTND_ERR_INVALID, "bad top_p");
    rb = rq;
    rb.n_prompt = 0;
    T_CHECK(sched_submit(s, &rb, on_event, &rc, &id, err, sizeof err) == ATTND_ERR_INVALID, "empty prompt");

    /* 4. attention maps: rows sum to 1, weights · V == the forward pass's attention output */
    const struct model_hparams *hp = &m->hp;
    int n = 12, hd = hp->head_dim;
    int32_t toks[12] = {1, 450, 6635, 3290, 373, 278, 1775, 1363, 372, 471, 23407, 29889};
    float *w = malloc((size_t)n * (n + 1) / 2 * sizeof(float)), *v = malloc((size_t)n * hd * sizeof(float)),
          *o = malloc((size_t)n * hd * sizeof(float));
    double worst_sum = 0, worst_out = 0;
    for (int layer = 0; layer < hp->n_layer; layer++)
        for (int head = 0; head < hp->n_head; head++) {
            T_CHECK(sched_attention(s, toks, (size_t)n, layer, head, w, v, o) == ATTND_OK, "attention");
            size_t off = 0;
            for (int i = 0; i < n; i++) {
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += w[off + (size_t)j];
                if (fabs(sum - 1) > worst_sum) worst_sum = fabs(sum - 1);
                for (int d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++) acc += (double)w[off + (size_t)j] * v[(size_t)j * hd + d];
                    double e = fabs(acc - o[(size_t)i * hd + d]);
                    if (e > worst_out) worst_out = e;
                }
                off += (size_t)i + 1;
            }
        }
    T_CHECK(worst_sum < 1e-5, "rows sum to 1 (worst %.2e)", worst_sum);
    T_CHECK(worst_out < 1e-5, "weights·V == attention output (worst %.2e)", worst_out);
    T_CHECK(sched_attention(s, toks, (size_t)n, hp->n_layer, 0, w, v, o) == ATTND_ERR_INVALID, "bad layer");
    T_CHECK(sched_attention(s, toks, (size_t)n, 0, hp->n_head, w, v, o) == ATTND_ERR_INVALID, "bad head");
    fprintf(stderr, "attention: worst |row sum - 1| %.2e, worst |w·V - out| %.2e\n", worst_sum, worst_out);
    free(w);
    free(v);
    free(o);

    /* 4b. logit lens: the last layer is the model's real distribution (the reference's top-8
     * after the prompt of golden case 0), every layer's list is sorted and sums to <= 1 */
    {
        cJSON *c0 = cJSON_GetArrayItem(cases, 0), *pt = cJSON_GetObjectItem(c0, "prompt_tokens");
        cJSON *top = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c0, "steps"), 0), "top");
        int np = cJSON_GetArraySize(pt), L = hp->n_layer, K = 8;
        int32_t p[256];
        for (int k = 0; k < np; k++) p[k] = cJSON_GetArrayItem(pt, k)->valueint;
        int *ids = malloc((size_t)L * K * sizeof *ids);
        float *pr = malloc((size_t)L * K * sizeof *pr);
        T_CHECK(sched_logit_lens(s, p, (size_t)np, np - 1, K, ids, pr) == ATTND_OK, "logit lens");
        for (int l = 0; l < L; l++) {
            double sum = 0;
            for (int i = 0; i < K; i++) {
                sum += pr[l * K + i];
                if (i) T_CHECK(pr[l * K + i] <= pr[l * K + i - 1], "layer %d sorted", l);
            }
            T_CHECK(sum <= 1.0 + 1e-5, "layer %d sums to %.6f <= 1", l, sum);
        }
        for (int i = 0; i < K; i++) {
            cJSON *pair = cJSON_GetArrayItem(top, i);
            double ref = exp(cJSON_GetArrayItem(pair, 1)->valuedouble);
            T_CHECK(ids[(L - 1) * K + i] == cJSON_GetArrayItem(pair, 0)->valueint &&
                        fabs(pr[(L - 1) * K + i] - ref) <= 1e-3 * ref + 1e-7,
                    "last layer entry %d: id %d p %.6g vs reference %d %.6g", i, ids[(L - 1) * K + i],
                    pr[(L - 1) * K + i], cJSON_GetArrayItem(pair, 0)->valueint, ref);
        }
        T_CHECK(sched_logit_lens(s, p, (size_t)np, np, K, ids, pr) == ATTND_ERR_INVALID, "pos out of range");
        T_CHECK(sched_logit_lens(s, p, (size_t)np, 0, 0, ids, pr) == ATTND_ERR_INVALID, "top 0");
        free(ids);
        free(pr);
    }

    /* 5. a full queue is refused; shutdown cancels what is queued */
    struct result many[12];
    memset(many, 0, sizeof many);
    int refused = 0, accepted = 0;
    for (int i = 0; i < 12; i++) {
        pthread_mutex_init(&many[i].mu, NULL);
        rb = rq;
        rb.max_tokens = 50;
        attnd_status st = sched_submit(s, &rb, on_event, &many[i], &many[i].id, err, sizeof err);
        if (st == ATTND_ERR_UNSUPPORTED) refused++, many[i].done = 1;
        else if (st == ATTND_OK) accepted++;
    }
    T_CHECK(refused >= 3, "queue of 8 refuses some of 12 (refused %d)", refused);
    sched_destroy(s, 100);
    for (int i = 0; i < 12; i++) T_CHECK(many[i].done, "request %d ended at shutdown", i);

    cJSON_Delete(root);
    free(js);
    tok_destroy(tok);
    model_destroy(m);
    return t_finish("test_sched");
}
