/* scheduler.c - a bounded FIFO of generation requests served by one worker thread that owns
 * the forward context. See sched.h for the contract.
 *
 * Locking: s->mu guards the queue, the running request pointer, the attention job slot and
 * the flags. The forward context, sampler and detokenizer are touched only by the worker.
 * Callbacks run on the worker without the lock held.
 */
#include "attnd/sched.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/check.h"
#include "attnd/forward.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"

struct req {
    uint64_t id;
    int32_t *prompt;
    size_t n_prompt;
    int max_tokens;
    struct sampler_params sampling;
    char *stops[SCHED_MAX_STOPS];
    int n_stops;
    bool ignore_eos;
    int logprobs;
    sched_cb cb;
    void *ud;
    atomic_int cancelled;
    double t_submit;
    struct req *next;
};

struct attn_job {
    const int32_t *tokens;
    size_t n;
    int layer, head;
    float *weights, *values, *output;
    attnd_status st;
    int done;
    struct attn_job *next;
};

struct sched {
    const struct model *m;
    const struct tokenizer *tok;
    struct sched_opts o;
    struct fwd_ctx *fwd;
    float *logits;     /* (n_vocab) */
    char *piece;       /* detokenizer output scratch */
    size_t piece_cap;
    float *probe_q, *probe_att; /* (n_ctx, n_head * head_dim) for attention maps */

    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* worker waits for work */
    pthread_cond_t idle_cv; /* waiters for idleness and attention jobs */
    struct req *head, *tail;
    int n_queued;
    struct req *running;
    struct attn_job *jobs;
    int draining, stopping;
    uint64_t next_id;
    atomic_uint_fast64_t kv_used;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void req_free(struct req *r)
{
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r);
}

static void finish(struct req *r, const char *reason, const char *text, size_t len, int n_gen, double t_start,
                   double t_prompt_done, double t_end)
{
    struct sched_event ev = {.kind = SCHED_EV_DONE, .id = r->id, .finish_reason = reason, .final_text = text,
                             .final_text_len = len, .prompt_tokens = (int)r->n_prompt, .completion_tokens = n_gen};
    ev.queue_ms = t_start - r->t_submit;
    ev.prompt_ms = t_prompt_done > 0 ? t_prompt_done - t_start : 0;
    ev.generation_ms = t_prompt_done > 0 ? t_end - t_prompt_done : 0;
    r->cb(r->ud, &ev);
}

static void fail_req(struct req *r, attnd_status st, const char *msg)
{
    struct sched_event ev = {.kind = SCHED_EV_ERROR, .id = r->id, .status = st, .message = msg,
                             .prompt_tokens = (int)r->n_prompt};
    r->cb(r->ud, &ev);
}

/* ---- the worker ---------------------------------------------------------------------------- */

static void run_request(struct sched *s, struct req *r)
{
    const int V = s->m->hp.n_vocab;
    struct sampler *smp = NULL;
    struct stop_matcher *stop = NULL;
    struct tok_stream *ts = NULL;
    double t_start = now_ms(), t_prompt = 0;
    int n_gen = 0;
    const char *reason = "length";
    int top_ids[SCHED_MAX_LOGPROBS];
    float top_lp[SCHED_MAX_LOGPROBS];

    if (sampler_create(&r->sampling, V, &smp) || stop_create((const char *const *)r->stops, r->n_stops, &stop) ||
        tok_stream_create(s->tok, 0, &ts)) {
        fail_req(r, ATTND_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < r->n_prompt; i++) sampler_accept(smp, r->prompt[i]);
    fwd_reset(s->fwd);
    if (atomic_load(&r->cancelled)) {
        reason = "cancelled";
        finish(r, reason, "", 0, 0, t_start, 0, now_ms());
        goto out;
    }
    attnd_status st = fwd_eval(s->fwd, r->prompt, (int)r->n_prompt, false, s->logits);
    if (st) {
        fail_req(r, st, "evaluating the prompt failed");
        goto out;
    }
    atomic_store(&s->kv_used, (uint64_t)fwd_n_past(s->fwd));
    t_prompt = now_ms();
    struct stop_out so = {.text = "", .len = 0, .stop = -1};
    while (n_gen < r->max_tokens) {
        if (atomic_load(&r->cancelled)) {
            reason = "cancelled";
            break;
        }
        int id = sampler_sample(smp, s->logits);
        sampler_accept(smp, id);
        n_gen++;
        struct sched_event ev = {.kind = SCHED_EV_TOKEN, .id = r->id, .token = id, .text = "", .text_len = 0};
        sampler_token_logprob(s->logits, V, id, &ev.logprob);
        if (r->logprobs > 0) {
            sampler_top_logprobs(s->logits, V, r->logprobs, top_ids, top_lp);
            ev.n_top = r->logprobs;
            ev.top_ids = top_ids;
            ev.top_logprobs = top_lp;
        }
        bool eog = !r->ignore_eos && tok_is_eog(s->tok, id);
        if (!eog) {
            size_t n = 0;
            tok_stream_push(ts, id, s->piece, s->piece_cap, &n);
            stop_feed(stop, s->piece, n, &so);
            ev.text = so.text;
            ev.text_len = so.len;
        }
        r->cb(r->ud, &ev);
        if (eog || so.stop >= 0) {
            reason = "stop";
            break;
        }
        if (n_gen == r->max_tokens) break;
        if (fwd_n_past(s->fwd) >= fwd_n_ctx(s->fwd)) break; /* submit checks this cannot happen */
        if ((st = fwd_eval(s->fwd, &id, 1, false, s->logits))) {
            fail_req(r, st, "evaluation failed");
            goto out;
        }
        atomic_store(&s->kv_used, (uint64_t)fwd_n_past(s->fwd));
    }
    /* release what the detokenizer and the stop matcher still hold */
    char *tail = NULL;
    size_t tail_len = 0;
    {
        size_t n = 0;
        tok_stream_flush(ts, s->piece, s->piece_cap, &n);
        stop_feed(stop, s->piece, n, &so);
        size_t a = so.len;
        tail = malloc(a + 1);
        if (tail) memcpy(tail, so.text, a);
        stop_flush(stop, &so);
        char *t2 = tail ? realloc(tail, a + so.len + 1) : NULL;
        if (t2) {
            memcpy(t2 + a, so.text, so.len);
            tail = t2;
            tail_len = a + so.len;
        }
    }
    finish(r, reason, tail ? tail : "", tail_len, n_gen, t_start, t_prompt, now_ms());
    free(tail);
out:
    atomic_store(&s->kv_used, 0);
    tok_stream_destroy(ts);
    stop_destroy(stop);
    sampler_destroy(smp);
}

static void run_attention(struct sched *s, struct attn_job *j)
{
    const struct model_hparams *hp = &s->m->hp;
    const size_t hd = (size_t)hp->head_dim, nq = (size_t)hp->n_head * hd;
    fwd_reset(s->fwd);
    fwd_set_probe(s->fwd, j->layer, s->probe_q, s->probe_att);
    j->st = fwd_eval(s->fwd, j->tokens, (int)j->n, false, NULL);
    fwd_set_probe(s->fwd, -1, NULL, NULL);
    if (j->st) return;
    fwd_attention_weights(s->fwd, j->layer, j->head, s->probe_q, (int)j->n, j->weights);
    int kvh = j->head / (hp->n_head / hp->n_head_kv);
    for (size_t i = 0; i < j->n; i++) {
        if (j->values) fwd_cache_v(s->fwd, j->layer, (int)i, kvh, j->values + i * hd);
        if (j->output) memcpy(j->output + i * hd, s->probe_att + i * nq + (size_t)j->head * hd, hd * sizeof(float));
    }
    fwd_reset(s->fwd);
}

static void *worker(void *arg)
{
    struct sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->jobs && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        if (s->jobs) {
            struct attn_job *j = s->jobs;
            s->jobs = j->next;
            pthread_mutex_unlock(&s->mu);
            run_attention(s, j);
            pthread_mutex_lock(&s->mu);
            j->done = 1;
            pthread_cond_broadcast(&s->idle_cv);
            continue;
        }
        if (!s->head) break; /* stopping with nothing left */
        struct req *r = s->head;
        s->head = r->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--;
        s->running = r;
        pthread_mutex_unlock(&s->mu);
        run_request(s, r);
        pthread_mutex_lock(&s->mu);
        s->running = NULL;
        req_free(r);
        pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- public -------------------------------------------------------------------------------- */

attnd_status sched_create(const struct model *m, const struct tokenizer *tok, const struct sched_opts *opts,
                          struct sched **out)
{
    *out = NULL;
    struct sched *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    s->m = m;
    s->tok = tok;
    s->o = opts ? *opts : (struct sched_opts){0};
    if (s->o.max_queue <= 0) s->o.max_queue = 64;
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    struct fwd_opts fo = {.n_ctx = s->o.n_ctx, .n_threads = s->o.n_threads};
    attnd_status st = fwd_create(m, &fo, &s->fwd);
    if (st) goto fail;
    s->o.n_ctx = fwd_n_ctx(s->fwd);
    size_t nq = (size_t)m->hp.n_head * m->hp.head_dim;
    s->logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    s->piece_cap = tok_max_piece(tok) + 16;
    s->piece = malloc(s->piece_cap);
    s->probe_q = malloc((size_t)s->o.n_ctx * nq * sizeof(float));
    s->probe_att = malloc((size_t)s->o.n_ctx * nq * sizeof(float));
    if (!s->logits || !s->piece || !s->probe_q || !s->probe_att) {
        st = ATTND_ERR_NOMEM;
        goto fail;
    }
    if (pthread_create(&s->thread, NULL, worker, s)) {
        st = ATTND_ERR_NOMEM;
        goto fail;
    }
    s->thread_started = 1;
    *out = s;
    return ATTND_OK;
fail:
    sched_destroy(s, 0);
    return st;
}

void sched_destroy(struct sched *s, int grace_ms)
{
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->draining = 1;
        /* queued requests end at once */
        struct req *q = s->head;
        s->head = s->tail = NULL;
        s->n_queued = 0;
        pthread_mutex_unlock(&s->mu);
        while (q) {
            struct req *n = q->next;
            finish(q, "cancelled", "", 0, 0, now_ms(), 0, now_ms());
            req_free(q);
            q = n;
        }
        if (!sched_wait_idle(s, grace_ms)) {
            pthread_mutex_lock(&s->mu);
            if (s->running) atomic_store(&s->running->cancelled, 1);
            pthread_mutex_unlock(&s->mu);
        }
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    fwd_destroy(s->fwd);
    free(s->logits);
    free(s->piece);
    free(s->probe_q);
    free(s->probe_att);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}

attnd_status sched_submit(struct sched *s, const struct sched_request *r, sched_cb cb, void *ud, uint64_t *id,
                          char *err, size_t errlen)
{
    const int V = s->m->hp.n_vocab;
    if (!r || !cb || !r->prompt || r->n_prompt == 0) {
        snprintf(err, errlen, "the prompt is empty");
        return ATTND_ERR_INVALID;
    }
    for (size_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= V) {
            snprintf(err, errlen, "token id %d at position %zu is outside the vocabulary (0..%d)", r->prompt[i], i,
                     V - 1);
            return ATTND_ERR_INVALID;
        }
    if (r->max_tokens < 0 || r->logprobs < 0 || r->logprobs > SCHED_MAX_LOGPROBS || r->n_stops < 0 ||
        r->n_stops > SCHED_MAX_STOPS) {
        snprintf(err, errlen, "max_tokens, logprobs (0..%d) or stop (at most %d) out of range", SCHED_MAX_LOGPROBS,
                 SCHED_MAX_STOPS);
        return ATTND_ERR_INVALID;
    }
    if (sampler_params_validate(&r->sampling, err, errlen)) return ATTND_ERR_INVALID;
    if (r->n_prompt > (size_t)s->o.n_ctx || (size_t)r->max_tokens > (size_t)s->o.n_ctx - r->n_prompt + 1) {
        snprintf(err, errlen, "the prompt (%zu tokens) plus max_tokens (%d) exceeds the context of %d tokens",
                 r->n_prompt, r->max_tokens, s->o.n_ctx);
        return ATTND_ERR_RANGE;
    }
    struct req *q = calloc(1, sizeof *q);
    if (!q) return ATTND_ERR_NOMEM;
    q->prompt = malloc(r->n_prompt * sizeof *q->prompt);
    if (!q->prompt) goto oom;
    memcpy(q->prompt, r->prompt, r->n_prompt * sizeof *q->prompt);
    q->n_prompt = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->sampling = r->sampling;
    q->ignore_eos = r->ignore_eos;
    q->logprobs = r->logprobs;
    q->cb = cb;
    q->ud = ud;
    for (int i = 0; i < r->n_stops; i++) {
        if (!r->stops[i] || !r->stops[i][0] || strlen(r->stops[i]) > STOP_MAX_LEN) {
            req_free(q);
            snprintf(err, errlen, "stop strings must be 1..%d bytes", STOP_MAX_LEN);
            return ATTND_ERR_INVALID;
        }
        if (!(q->stops[i] = strdup(r->stops[i]))) goto oom;
        q->n_stops = i + 1;
    }
    q->t_submit = now_ms();
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->n_queued >= s->o.max_queue) {
        int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        req_free(q);
        snprintf(err, errlen, draining ? "the server is shutting down" : "the request queue is full");
        return ATTND_ERR_UNSUPPORTED;
    }
    q->id = s->next_id++;
    if (s->tail) s->tail->next = q;
    else s->head = q;
    s->tail = q;
    s->n_queued++;
    if (id) *id = q->id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return ATTND_OK;
oom:
    req_free(q);
    snprintf(err, errlen, "out of memory");
    return ATTND_ERR_NOMEM;
}

void sched_cancel(struct sched *s, uint64_t id)
{
    pthread_mutex_lock(&s->mu);
    if (s->running && s->running->id == id) atomic_store(&s->running->cancelled, 1);
    for (struct req *q = s->head; q; q = q->next)
        if (q->id == id) atomic_store(&q->cancelled, 1); /* ends with "cancelled" when dequeued */
    pthread_mutex_unlock(&s->mu);
}

void sched_drain(struct sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
}

bool sched_wait_idle(struct sched *s, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(timeout_ms > 0 ? timeout_ms : 0) * 1000000LL;
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while ((s->head || s->running || s->jobs) && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
    bool idle = !s->head && !s->running && !s->jobs;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void sched_get_stats(struct sched *s, struct sched_stats *st)
{
    const struct model_hparams *hp = &s->m->hp;
    pthread_mutex_lock(&s->mu);
    st->queued = s->n_queued;
    st->running = s->running ? 1 : 0;
    pthread_mutex_unlock(&s->mu);
    st->kv_tokens_used = atomic_load(&s->kv_used);
    st->kv_tokens_capacity = (uint64_t)s->o.n_ctx;
    st->kv_bytes_capacity = 2ull * (uint64_t)hp->n_layer * (uint64_t)s->o.n_ctx * (uint64_t)hp->n_head_kv *
                            (uint64_t)hp->head_dim * sizeof(float);
}

int sched_n_ctx(const struct sched *s) { return s->o.n_ctx; }

attnd_status sched_attention(struct sched *s, const int32_t *tokens, size_t n, int layer, int head, float *weights,
                             float *values, float *output)
{
    const struct model_hparams *hp = &s->m->hp;
    if (layer < 0 || layer >= hp->n_layer || head < 0 || head >= hp->n_head || !weights) return ATTND_ERR_INVALID;
    if (n == 0 || n > (size_t)s->o.n_ctx) return ATTND_ERR_RANGE;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) return ATTND_ERR_INVALID;
    struct attn_job j = {.tokens = tokens, .n = n, .layer = layer, .head = head, .weights = weights,
                         .values = values, .output = output};
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return ATTND_ERR_UNSUPPORTED;
    }
    struct attn_job **pp = &s->jobs;
    while (*pp) pp = &(*pp)->next;
    *pp = &j;
    pthread_cond_signal(&s->cv);
    while (!j.done) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return j.st;
}
