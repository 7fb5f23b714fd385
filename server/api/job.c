/* job.c - the one completion job. See job.h. */
#include "server/api/job.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/check.h"
#include "attnd/grammar.h"
#include "attnd/intervene.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"
#include "server/api/metrics.h"
#include "server/api/reply.h"
#include "server/api/tenant.h"

#define WAIT_SLICE_MS 200 /* how often a waiting connection checks its socket */
#define PAUSE_KIB_DEFAULT 64
#define WORK_DEFAULT 131072 /* e.g. n 8 x 4096 tokens with 3 alternatives, or n 1 x 4096 with 20 */
#define OWNER_ADDR (1ull << 63) /* owners that are client addresses (tenants are 0..TENANT_MAX) */

void job_params_init(struct job_params *p)
{
    memset(p, 0, sizeof *p);
    p->req.sampling = sampler_params_default();
    p->n = 1;
    p->logprobs = -1;
}

void job_params_free(struct job_params *p)
{
    for (int i = 0; i < p->n_prompts; i++) free(p->prompts[i]);
    p->n_prompts = 0;
    iv_destroy(p->iv);
    p->iv = NULL;
    gram_destroy(p->grammar);
    p->grammar = NULL;
}

void job_id_str(const struct api_job *j, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", j->rid.id);
}

static void job_unref(struct api_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    for (int i = 0; i < j->n_choices; i++) {
        free(j->ch[i].toks);
        free(j->ch[i].lps);
        api_buf_free(&j->ch[i].text);
    }
    for (int i = 0; i < j->n_prompts; i++) free(j->prompts[i]), free(j->echo_text[i]);
    api_buf_free(&j->sse.out);
    free(j);
}

/* Asks the scheduler to stop every choice still running (j->mu held: see job.h). Returns how many. */
static int cancel_running(struct api_job *j)
{
    int n = 0;
    for (int i = 0; i < j->n_choices; i++)
        if (!j->ch[i].done && j->ch[i].id) sched_cancel(j->sched, j->ch[i].id), n++;
    return n;
}

/* ==============================================================================================
 * The scheduler's callback (scheduler thread)
 * ============================================================================================== */

static bool grow(struct job_choice *c)
{
    if (c->n_toks < c->cap) return true;
    size_t nc = c->cap ? c->cap * 2 : 64;
    int32_t *t = realloc(c->toks, nc * sizeof *t);
    if (!t) return false;
    c->toks = t;
    if (c->job->logprobs >= 0) {
        struct job_tok *l = realloc(c->lps, nc * sizeof *l);
        if (!l) return false;
        c->lps = l;
    }
    c->cap = nc;
    return true;
}

static void on_token(struct api_job *j, struct job_choice *c, const struct sched_event *ev)
{
    if (!grow(c)) {
        j->oom = true;
        return;
    }
    size_t i = c->n_toks++;
    c->toks[i] = ev->token;
    if (j->logprobs >= 0) {
        struct job_tok *t = &c->lps[i];
        t->id = ev->token;
        t->lp = ev->logprob;
        t->n_top = ev->n_top < SCHED_MAX_LOGPROBS ? ev->n_top : SCHED_MAX_LOGPROBS;
        for (int k = 0; k < t->n_top; k++) t->top_ids[k] = ev->top_ids[k], t->top_lps[k] = ev->top_logprobs[k];
    }
    api_buf_put(&c->text, ev->text, ev->text_len); /* streams too: a renderer may repeat the whole text at the end */
    if (!j->stream || j->closed) return;
    j->render->stream_token(j, c, ev, i);
    if (j->sse.paused) sched_pause(j->sched, ev->id, true); /* a choice that started after the pause */
    else api_sse_appended(&j->sse);
}

static void fail(struct api_job *j, const struct sched_event *ev)
{
    j->failed = true;
    j->err_code = api_status_code(ev->status, false);
    snprintf(j->err_msg, sizeof j->err_msg, "%s", ev->message ? ev->message : attnd_status_str(ev->status));
    cancel_running(j); /* one failed choice fails the job */
    if (j->stream && !j->closed) {
        j->render->stream_error(j);
        j->closed = true;
    }
}

static void on_last(struct api_job *j, struct job_choice *c, const struct sched_event *ev)
{
    c->done = true;
    j->n_done++;
    c->prompt_tokens = ev->prompt_tokens;
    if (ev->kind == SCHED_EV_ERROR) {
        c->completion_tokens = (int)c->n_toks;
        fail(j, ev);
        return;
    }
    snprintf(c->finish, sizeof c->finish, "%s", ev->finish_reason ? ev->finish_reason : "stop");
    c->completion_tokens = ev->completion_tokens;
    c->cached_tokens = ev->cached_tokens;
    c->queue_ms = ev->queue_ms;
    c->prompt_ms = ev->prompt_ms;
    c->generation_ms = ev->generation_ms;
    api_buf_put(&c->text, ev->final_text, ev->final_text_len);
    c->drafted_tokens = ev->drafted_tokens;
    c->accepted_tokens = ev->accepted_tokens;
    if (!j->stream || j->closed) return;
    j->render->stream_choice_end(j, c, ev);
    if (j->n_done == j->n_choices) {
        j->render->stream_close(j);
        j->closed = true;
    }
}

/* Book-keeping at a choice's last event, before the answer can go out: a client that has its
 * answer finds the choice in /attention and in /metrics. c->toks is written only by callbacks. */
static void remember(struct api_job *j, struct job_choice *c, const struct sched_event *ev)
{
    struct metrics *mt = j->srv->metrics;
    if (ev->kind != SCHED_EV_DONE) {
        metrics_finish(mt, METRICS_FINISH_ERROR);
        return;
    }
    metrics_finish(mt, metrics_finish_from(ev->finish_reason ? ev->finish_reason : "stop"));
    metrics_tokens(mt, ev->prompt_tokens, ev->completion_tokens);
    api_history_remember(j->srv, &j->rid, (unsigned)c->index, c->prompt, c->n_prompt, c->toks, c->n_toks);
}

static void note_timing(struct api_job *j, struct job_choice *c)
{
    double t = api_now();
    if (!c->got_first) metrics_ttft(j->srv->metrics, t - j->t_submit);
    else metrics_tpot(j->srv->metrics, t - c->t_last_token);
    c->got_first = true;
    c->t_last_token = t;
}

static void on_event(void *ud, const struct sched_event *ev)
{
    struct job_choice *c = ud;
    struct api_job *j = c->job;
    bool last = ev->kind != SCHED_EV_TOKEN;
    if (last) remember(j, c, ev);
    pthread_mutex_lock(&j->mu);
    c->id = ev->id; /* the same as sched_submit's, which may not have returned yet */
    if (!c->index) j->id0 = ev->id;
    if (ev->kind == SCHED_EV_TOKEN) {
        note_timing(j, c);
        on_token(j, c, ev);
    } else {
        on_last(j, c, ev);
    }
    if (j->sse.out.oom || c->text.oom) j->oom = true;
    if (last || j->stream) pthread_cond_broadcast(&j->cv); /* a whole answer waits for the ends only */
    pthread_mutex_unlock(&j->mu);
    if (last) job_unref(j); /* the scheduler never touches this choice again */
}

/* ==============================================================================================
 * Connection side
 * ============================================================================================== */

/* MHD is done with the request: cancel the choices still running, then let go. */
static void job_end(struct api_conn *c, bool ok)
{
    struct api_job *j = c->job;
    struct http_server *srv = c->srv;
    int comp = 0;
    pthread_mutex_lock(&j->mu);
    for (int i = 0; i < j->n_choices; i++) comp += (int)j->ch[i].n_toks;
    c->prompt_tokens = j->prompt_tokens;
    c->completion_tokens = comp;
    int n = cancel_running(j); /* not through the engine guard: see job.h */
    char id[64];
    job_id_str(j, id, sizeof id);
    pthread_mutex_unlock(&j->mu);
    if (n) log_info("%s: client went away, %d choice(s) cancelled", id, n);
    api_inflight_end(srv);
    c->job = NULL;
    c->job_end = NULL;
    job_unref(j);
}

/* The stream's end (sse.h): it is closed (every choice ended, or an error closed it), or the
 * answer ran out of memory. */
static int stream_state(void *owner)
{
    const struct api_job *j = owner;
    return j->oom ? -1 : j->n_done == j->n_choices || j->closed ? 1 : 0;
}

static void stream_release(void *owner) { job_unref(owner); }

/* sse.h's pause hook (j->mu held): every choice still running stops or restarts. */
static void stream_pause(void *owner, bool on)
{
    struct api_job *j = owner;
    for (int i = 0; i < j->n_choices; i++)
        if (!j->ch[i].done && j->ch[i].id) sched_pause(j->sched, j->ch[i].id, on);
}

/* Who the scheduler takes turns between: the tenant, or without keys the client's address
 * (FNV-1a of its bytes, IPv4 and IPv6 alike). */
uint64_t job_owner(struct api_conn *c)
{
    if (tenant_count(c->srv->tenants) > 0) return (uint64_t)(c->tenant > 0 ? c->tenant : 0);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    const unsigned char *p = NULL;
    size_t n = 0;
    if (sa && sa->sa_family == AF_INET) p = (const void *)&((const struct sockaddr_in *)sa)->sin_addr, n = 4;
    if (sa && sa->sa_family == AF_INET6) p = (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr, n = 16;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h | OWNER_ADDR;
}

static enum MHD_Result answer_stream(struct api_conn *c, struct api_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the response's */
    pthread_mutex_unlock(&j->mu);
    struct MHD_Response *r = api_sse_response(&j->sse);
    if (!r) {
        job_unref(j);
        return j->render->error(c, 503, NULL, "out of memory");
    }
    return api_sse_queue(c, r);
}

static enum MHD_Result answer_whole(struct api_conn *c, struct api_job *j)
{
    pthread_mutex_lock(&j->mu);
    while (j->n_done < j->n_choices) {
        api_wait_ms(&j->cv, &j->mu, WAIT_SLICE_MS);
        if (j->n_done < j->n_choices && api_peer_gone(j->sse.fd)) {
            pthread_mutex_unlock(&j->mu);
            return MHD_NO; /* MHD closes the connection; job_end() cancels the choices */
        }
    }
    pthread_mutex_unlock(&j->mu);
    /* every choice is done: the scheduler no longer writes j */
    char msg[320];
    if (j->failed) {
        snprintf(msg, sizeof msg, "generation failed: %s", j->err_msg);
        return j->render->error(c, j->err_code, NULL, msg);
    }
    if (j->oom) return j->render->error(c, 503, NULL, "out of memory while collecting the answer");
    struct api_buf b = {0};
    j->render->whole(&b, j);
    return api_respond_buf(c, &b);
}

/* ==============================================================================================
 * Submission
 * ============================================================================================== */

static uint64_t random_seed(void)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (atomic_fetch_add(&counter, 1) << 32);
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33; /* splitmix finaliser */
    return x & ((1ull << 53) - 1);
}

/* Lays out choice i of j (prompt pi). */
static void choice_init(struct api_job *j, int i, int pi)
{
    struct job_choice *ch = &j->ch[i];
    ch->job = j;
    ch->index = i;
    ch->prompt = j->prompts[pi];
    ch->n_prompt = j->n_prompt[pi];
    ch->prompt_tokens = (int)ch->n_prompt;
    if (!j->echo) return;
    ch->echo = j->echo_text[pi];
    ch->echo_len = j->echo_len[pi];
    ch->text_off = ch->echo_len;
    if (!j->stream) api_buf_put(&ch->text, ch->echo ? ch->echo : "", ch->echo_len);
}

/* Moves p's prompts into a new job and lays out its choices. NULL when out of memory. */
static struct api_job *job_create(struct api_conn *c, const struct api_engine *e, struct job_params *p,
                                  const struct job_render *render)
{
    struct api_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    check_cond_init(&j->cv); /* waited on with api_wait_ms() */
    j->render = render;
    j->srv = c->srv;
    j->tok = e->tok;
    j->sched = e->sched;
    j->stream = p->stream;
    j->include_usage = p->stream && p->include_usage;
    j->echo = p->echo;
    j->tool_format = p->tool_format;
    j->tools_single = p->tools_single;
    j->logprobs = p->logprobs;
    size_t pause_kib = c->srv->cfg.stream_pause_kib ? c->srv->cfg.stream_pause_kib : PAUSE_KIB_DEFAULT;
    j->sse = (struct api_sse){.mu = &j->mu, .cv = &j->cv, .fd = api_conn_fd(c), .state = stream_state,
                              .release = stream_release, .owner = j, .pause_at = pause_kib << 10,
                              .pause = stream_pause};
    j->owner = job_owner(c);
    j->created = (long long)time(NULL);
    snprintf(j->model, sizeof j->model, "%s", e->model->name ? e->model->name : "model");
    j->n_prompts = p->n_prompts;
    j->n_choices = p->n_prompts * p->n;
    j->n_interventions = p->iv ? p->iv->n : 0;
    bool oom = api_history_new_id(render->id_prefix, tenant_of(c), &j->rid) != ATTND_OK; /* history.h */
    for (int i = 0; i < p->n_prompts; i++) {
        j->prompts[i] = p->prompts[i];
        j->n_prompt[i] = p->n_prompt[i];
        j->prompt_tokens += (int)p->n_prompt[i];
        if (p->echo && tok_decode(e->tok, p->prompts[i], p->n_prompt[i], TOK_DECODE_STRIP_PREFIX, &j->echo_text[i],
                                  &j->echo_len[i]) != ATTND_OK)
            oom = true;
    }
    p->n_prompts = 0; /* the job owns them now */
    for (int i = 0; i < j->n_choices; i++) choice_init(j, i, i / p->n);
    j->refs = 1;
    if (oom) {
        job_unref(j);
        return NULL;
    }
    return j;
}

/* Choice i's max_tokens: the request's, or what the context leaves up to --max-tokens-cap. */
static int choice_max_tokens(const struct api_job *j, const struct api_engine *e, const struct job_params *p, int i)
{
    if (p->max_given) return p->req.max_tokens;
    size_t n_ctx = (size_t)sched_n_ctx(e->sched), n = j->ch[i].n_prompt;
    size_t room = n < n_ctx ? n_ctx - n : 0;
    int cap = j->srv->cfg.max_tokens_cap;
    return room < (size_t)cap ? (int)room : cap;
}

/* The request's work, max_tokens x choices x (1 + logprobs alternatives), against
 * --max-request-work. Returns 0, or 400 with the reason in err. */
static int check_work(const struct api_job *j, const struct api_engine *e, const struct job_params *p, char *err,
                      size_t errlen)
{
    long long cap = j->srv->cfg.max_request_work > 0 ? j->srv->cfg.max_request_work : WORK_DEFAULT;
    long long alts = p->logprobs > 0 ? p->logprobs : 0, work = 0;
    for (int i = 0; i < j->n_choices; i++) work += (long long)choice_max_tokens(j, e, p, i) * (1 + alts);
    if (work <= cap) return 0;
    snprintf(err, errlen,
             "max_tokens x choices (n x prompts: %d) x (1 + logprobs/top_logprobs alternatives: %lld) is %lld; "
             "at most %lld per request (--max-request-work): ask for fewer tokens, choices or alternatives",
             j->n_choices, alts, work, cap);
    return 400;
}

/* Submits choice i. Returns 0 or an HTTP status with the reason in err. */
static int submit(struct api_job *j, const struct api_engine *e, const struct job_params *p, int i, uint64_t seed0,
                  char *err, size_t errlen)
{
    struct job_choice *ch = &j->ch[i];
    struct sched_request req = p->req;
    req.prompt = ch->prompt;
    req.n_prompt = ch->n_prompt;
    req.stops = p->stops;
    req.iv = p->iv; /* sched_submit copies it */
    req.grammar = p->grammar; /* and retains this */
    req.logprobs = p->logprobs < 0 ? 0 : p->logprobs ? p->logprobs : 1; /* 1: the chosen token's own */
    req.sampling.seed = (seed0 + (uint64_t)(i % p->n)) & ((1ull << 53) - 1);
    req.owner = j->owner;
    req.max_tokens = choice_max_tokens(j, e, p, i);
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the scheduler's, released at the choice's last event */
    pthread_mutex_unlock(&j->mu);
    uint64_t id = 0;
    /* j->mu is not held: the scheduler may call back before sched_submit returns */
    attnd_status st = sched_submit(e->sched, &req, on_event, ch, &id, err, errlen);
    pthread_mutex_lock(&j->mu);
    if (st) j->refs--;
    else {
        ch->id = id;
        if (i == 0) j->id0 = id;
    }
    pthread_mutex_unlock(&j->mu);
    return st == ATTND_ERR_BUSY ? 429 : st ? api_status_code(st, false) : 0;
}

/* Waits until the first choice of every prompt has read its prompt (it has a first token, or
 * it ended), so that the other choices find the prompt's full blocks in the prefix cache.
 * False if the client went away meanwhile. */
static bool wait_prompts_read(struct api_job *j, int n)
{
    bool ok = true;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        bool all = true;
        for (int i = 0; i < j->n_choices; i += n) all = all && (j->ch[i].n_toks || j->ch[i].done);
        if (all) break;
        api_wait_ms(&j->cv, &j->mu, WAIT_SLICE_MS);
        if (api_peer_gone(j->sse.fd)) {
            ok = false;
            break;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return ok;
}

/* Submits every choice: the first of each prompt, then, once those have read their prompts, the
 * others, which so share the prompt's KV blocks. Holds the engine (acquired by the caller,
 * released here) only around scheduler calls. Returns 0 or an HTTP status with err (499: the
 * client left); on failure every submitted choice is cancelled. */
static int submit_all(struct api_conn *c, struct api_job *j, struct api_engine *e, const struct job_params *p,
                      char *err, size_t errlen)
{
    uint64_t seed0 = p->seed_given ? p->req.sampling.seed : random_seed();
    int code = 0;
    bool held = true;
    for (int i = 0; i < j->n_choices && !code; i += p->n) code = submit(j, e, p, i, seed0, err, errlen);
    if (!code && p->n > 1) {
        api_engine_release(c->srv);
        held = false;
        if (!wait_prompts_read(j, p->n)) code = 499, snprintf(err, errlen, "the client went away");
        else if (!(held = api_engine_acquire(c->srv, e))) code = 503, snprintf(err, errlen, "the server is stopping");
        for (int i = 0; i < j->n_choices && !code; i++)
            if (i % p->n) code = submit(j, e, p, i, seed0, err, errlen);
    }
    if (code) { /* through the job's own handle: the engine may be detached by now */
        pthread_mutex_lock(&j->mu);
        cancel_running(j);
        pthread_mutex_unlock(&j->mu);
    }
    if (held) api_engine_release(c->srv);
    return code;
}

enum MHD_Result job_run(struct api_conn *c, struct api_engine *e, struct job_params *p, const struct job_render *render)
{
    char err[512] = "";
    int code = 0;
    const char *param = NULL;
    if (sampler_params_validate(&p->req.sampling, err, sizeof err)) code = 400;
    else if (p->n_prompts * p->n > JOB_MAX_CHOICES) {
        code = 400, param = "n";
        snprintf(err, sizeof err, "n x prompts is %d; at most %d choices per request", p->n_prompts * p->n, JOB_MAX_CHOICES);
    }
    struct api_job *j = NULL;
    if (!code && !(j = job_create(c, e, p, render))) code = 503, snprintf(err, sizeof err, "out of memory");
    if (code) api_engine_release(c->srv);
    else if ((code = check_work(j, e, p, err, sizeof err))) {
        param = "max_tokens";
        api_engine_release(c->srv);
    } else {
        j->t_submit = api_now();
        code = submit_all(c, j, e, p, err, sizeof err);
    }
    job_params_free(p);
    if (code) {
        if (j) job_unref(j);
        return code == 499 ? MHD_NO : render->error(c, code, param, err);
    }
    api_inflight_begin(c->srv);
    c->job = j;
    c->job_end = job_end;
    return j->stream ? answer_stream(c, j) : answer_whole(c, j);
}
