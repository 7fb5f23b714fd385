/* oai_common.c - the OpenAI-compatible routes' shared machinery. See oai_common.h.
 *
 * A job (struct oai_job) is shared by the connection (one reference, released when MHD is done
 * with the request), each choice's scheduler request (one reference each, released at its last
 * event) and, for a stream, the MHD response (released by its free callback). The scheduler's
 * callbacks write under job.mu and signal job.cv; the connection thread waits on it, polling
 * the socket so a vanished client gets its choices cancelled.
 */
#include "server/api/oai_common.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/chat_template.h"
#include "attnd/check.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "server/api/history.h"
#include "server/api/sse.h"
#include "server/api/errors.h"
#include "server/api/generate.h"
#include "server/api/metrics.h"

#define WAIT_SLICE_MS 200 /* how often a waiting connection checks its socket */
#define PIECE_CAP 512     /* one token's text */

/* ==============================================================================================
 * Errors and the body
 * ============================================================================================== */

static const char *oai_error_type(int status)
{
    if (status == 401) return "authentication_error";
    if (status == 404) return "not_found_error";
    if (status == 429 || status == 503) return "server_overloaded";
    return status >= 400 && status < 500 ? "invalid_request_error" : "server_error";
}

static void put_null_or_str(struct api_buf *b, const char *s)
{
    if (s) api_buf_json_str(b, s, strlen(s));
    else api_buf_puts(b, "null");
}

/* Appends the error object and counts it (under attnd's own type names, as every route does). */
static void put_error(struct http_server *srv, struct api_buf *b, int status, const char *param, const char *code,
                      const char *msg)
{
    api_buf_puts(b, "{\"error\":{\"message\":");
    api_buf_json_str(b, msg, strlen(msg));
    api_buf_printf(b, ",\"type\":\"%s\",\"param\":", oai_error_type(status));
    put_null_or_str(b, param);
    api_buf_puts(b, ",\"code\":");
    put_null_or_str(b, code);
    api_buf_puts(b, "}}");
    api_error_count(srv, status);
}

enum MHD_Result oai_error(struct api_conn *c, int status, const char *param, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct api_buf b = {0};
    put_error(c->srv, &b, status, param, code, msg);
    api_buf_puts(&b, "\n");
    size_t len = b.len;
    char *body = api_buf_take(&b);
    if (!body) return MHD_NO;
    static const char *const retry[] = {"Retry-After", "1", NULL};
    return api_respond(c, status, "application/json", body, len, status == 503 ? retry : NULL);
}

cJSON *oai_parse_body(struct api_conn *c, enum MHD_Result *ret)
{
    char err[256];
    cJSON *root = api_json_body(c, err, sizeof err);
    if (!root) {
        *ret = oai_error(c, 400, NULL, NULL, "%s", err);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        *ret = oai_error(c, 400, NULL, NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

void oai_params_init(struct oai_params *p)
{
    memset(p, 0, sizeof *p);
    p->req.sampling = sampler_params_default();
    struct sampler_params *sp = &p->req.sampling;
    sp->temperature = 1.0f;
    sp->top_p = 1.0f;
    sp->top_k = 0;
    sp->min_p = 0.0f;
    p->n = 1;
    p->logprobs = -1;
}

void oai_params_free(struct oai_params *p)
{
    for (int i = 0; i < p->n_prompts; i++) free(p->prompts[i]);
    p->n_prompts = 0;
}

int oai_common_field(const cJSON *root, const cJSON *it, struct oai_params *p, char *err, size_t errlen)
{
    const char *k = it->string ? it->string : "";
    if (api_json_repeated(root, it, err, errlen)) return 400;
    if (!strcmp(k, "stream")) {
        if (!cJSON_IsBool(it) && !cJSON_IsNull(it)) {
            snprintf(err, errlen, "'stream' must be true or false");
            return 400;
        }
        p->stream = cJSON_IsTrue(it);
        return 0;
    }
    if (strcmp(k, "stream_options")) return -1;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(it, "include_usage");
    if (!cJSON_IsNull(it) && (!cJSON_IsObject(it) || (u && !cJSON_IsBool(u)))) {
        snprintf(err, errlen, "'stream_options' must be an object like {\"include_usage\":true}");
        return 400;
    }
    p->include_usage = cJSON_IsTrue(u);
    return 0;
}

enum MHD_Result oai_route(struct api_conn *c, enum oai_kind kind, oai_parse_fn parse)
{
    enum MHD_Result ret;
    cJSON *root = oai_parse_body(c, &ret);
    if (!root) return ret;
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) {
        cJSON_Delete(root);
        return oai_error(c, 503, NULL, NULL, "no model is loaded");
    }
    struct oai_params p;
    oai_params_init(&p);
    p.kind = kind;
    char err[512] = "", pbuf[64] = "";
    const char *param = NULL;
    int code = parse(c, &e, root, &p, &param, err, sizeof err);
    if (code) {
        api_engine_release(c->srv);
        oai_params_free(&p);
        if (param) snprintf(pbuf, sizeof pbuf, "%s", param); /* param points into root */
        cJSON_Delete(root);
        return oai_error(c, code, param ? pbuf : NULL, NULL, "%s", err);
    }
    ret = oai_run(c, &e, &p); /* releases the engine; root holds the stop strings until then */
    cJSON_Delete(root);
    return ret;
}

int oai_chat_family(const struct http_server *srv, const struct api_engine *e)
{
    if (srv->cfg.chat_template >= 0 && srv->cfg.chat_template < CHAT_FAMILY_COUNT) return srv->cfg.chat_template;
    return (int)chat_family_for_model(e->model->gguf, false);
}

/* ==============================================================================================
 * The job
 * ============================================================================================== */

struct oai_tok { /* one generated token's log-probabilities */
    int id;
    float lp;
    int n_top;
    int top_ids[SCHED_MAX_LOGPROBS];
    float top_lps[SCHED_MAX_LOGPROBS];
};

struct oai_choice {
    struct oai_job *job;
    int index;
    uint64_t id;               /* the scheduler's */
    const int32_t *prompt;     /* job->prompts[...] */
    size_t n_prompt;
    int32_t *toks;             /* (n_toks) generated ids */
    struct oai_tok *lps;       /* (n_toks) when the job wants logprobs */
    size_t n_toks, cap;
    struct api_buf text;       /* the generated bytes (whole answers; the echoed prompt first) */
    const char *echo;          /* legacy echo: the prompt's text (job->echo_text[...]), or NULL */
    size_t echo_len;
    size_t text_off;           /* legacy logprobs: bytes of text before the next token */
    bool done, role_sent;
    char finish[16];
    int completion_tokens;
};

struct oai_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    struct http_server *srv;
    const struct tokenizer *tok;
    struct sched *sched;
    enum oai_kind kind;
    bool stream, include_usage, echo;
    int logprobs;
    uint64_t id0;              /* the response's number (choice 0's scheduler id) */
    long long created;
    char model[128];
    int n_choices, n_done;
    struct oai_choice ch[OAI_MAX_CHOICES];
    int32_t *prompts[OAI_MAX_CHOICES];
    size_t n_prompt[OAI_MAX_CHOICES];
    char *echo_text[OAI_MAX_CHOICES];
    size_t echo_len[OAI_MAX_CHOICES];
    int n_prompts;
    int prompt_tokens;         /* each distinct prompt once */
    bool failed, closed, oom;  /* closed: the stream has its [DONE] */
    int err_code;
    char err_msg[256];
    struct api_sse sse;        /* stream: the bytes on their way to the client, the socket */
};

static void job_unref(struct oai_job *j)
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


/* ---- JSON pieces ----------------------------------------------------------------------------- */

static void put_head(struct api_buf *b, const struct oai_job *j, bool chunk)
{
    const char *obj = j->kind == OAI_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    api_buf_printf(b, "{\"id\":\"%s-%llu\",\"object\":\"%s\",\"created\":%lld,\"model\":",
                   j->kind == OAI_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)j->id0, obj, j->created);
    api_buf_json_str(b, j->model, strlen(j->model));
    api_buf_puts(b, ",\"system_fingerprint\":\"attnd\",\"choices\":[");
}

static void put_usage(struct api_buf *b, const struct oai_job *j)
{
    int comp = 0;
    for (int i = 0; i < j->n_choices; i++) comp += j->ch[i].completion_tokens;
    api_buf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}", j->prompt_tokens,
                   comp, j->prompt_tokens + comp);
}

/* A token's text (special tokens rendered, so EOS shows) into buf; returns its length. */
static size_t piece(const struct oai_job *j, int id, char *buf)
{
    size_t n = tok_decode_token(j->tok, id, buf, PIECE_CAP, true);
    return n > PIECE_CAP ? PIECE_CAP : n;
}

static void put_bytes(struct api_buf *b, const char *s, size_t n)
{
    api_buf_puts(b, "[");
    for (size_t i = 0; i < n; i++) api_buf_printf(b, "%s%u", i ? "," : "", (unsigned char)s[i]);
    api_buf_puts(b, "]");
}

/* Chat: {"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}...]} */
static void put_chat_lp(struct api_buf *b, const struct oai_job *j, const struct oai_tok *t)
{
    char buf[PIECE_CAP];
    for (int k = -1; k < j->logprobs; k++) {
        int id = k < 0 ? t->id : t->top_ids[k];
        float lp = k < 0 ? t->lp : t->top_lps[k];
        size_t n = piece(j, id, buf);
        api_buf_puts(b, k < 0 ? "{\"token\":" : k ? ",{\"token\":" : "{\"token\":");
        api_buf_json_str(b, buf, n);
        api_buf_puts(b, ",\"logprob\":");
        api_buf_float(b, lp);
        api_buf_puts(b, ",\"bytes\":");
        put_bytes(b, buf, n);
        if (k < 0) api_buf_puts(b, j->logprobs ? ",\"top_logprobs\":[" : ",\"top_logprobs\":[]}");
        else api_buf_puts(b, k == j->logprobs - 1 ? "}]}" : "}");
    }
}

/* Legacy: the four parallel arrays of tokens [from, to) of choice c. */
static void put_text_lps(struct api_buf *b, const struct oai_job *j, const struct oai_choice *c, size_t from, size_t to,
                         size_t text_off)
{
    char buf[PIECE_CAP];
    api_buf_puts(b, "{\"tokens\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) api_buf_puts(b, ",");
        api_buf_json_str(b, buf, piece(j, c->lps[i].id, buf));
    }
    api_buf_puts(b, "],\"token_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) api_buf_puts(b, ",");
        api_buf_float(b, c->lps[i].lp);
    }
    api_buf_puts(b, "],\"top_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        api_buf_puts(b, i > from ? ",{" : "{");
        for (int k = 0; k < j->logprobs; k++) {
            if (k) api_buf_puts(b, ",");
            api_buf_json_str(b, buf, piece(j, c->lps[i].top_ids[k], buf));
            api_buf_puts(b, ":");
            api_buf_float(b, c->lps[i].top_lps[k]);
        }
        api_buf_puts(b, "}");
    }
    api_buf_puts(b, "],\"text_offset\":[");
    for (size_t i = from; i < to; i++) {
        api_buf_printf(b, "%s%zu", i > from ? "," : "", text_off);
        text_off += piece(j, c->lps[i].id, buf);
    }
    api_buf_puts(b, "]}");
}

/* ---- stream chunks (job.mu held) -------------------------------------------------------------- */

/* One chunk of choice c: text[0..n) as its content, the logprobs of tokens [from, to) of c,
 * finish (NULL while running). */
static void put_chunk(struct oai_job *j, struct oai_choice *c, const char *text, size_t n, size_t from, size_t to,
                      const char *finish)
{
    struct api_buf *b = &j->sse.out;
    api_buf_puts(b, "data: ");
    put_head(b, j, true);
    api_buf_printf(b, "{\"index\":%d,", c->index);
    if (j->kind == OAI_CHAT) {
        api_buf_puts(b, "\"delta\":{");
        if (!c->role_sent) api_buf_puts(b, "\"role\":\"assistant\"");
        if (text) {
            api_buf_puts(b, c->role_sent ? "\"content\":" : ",\"content\":");
            api_buf_json_str(b, text, n);
        }
        api_buf_puts(b, "},");
        c->role_sent = true;
    } else {
        struct api_buf t = {0}; /* the first chunk carries the echoed prompt */
        if (c->echo && !c->role_sent) api_buf_put(&t, c->echo, c->echo_len);
        api_buf_put(&t, text ? text : "", text ? n : 0);
        api_buf_puts(b, "\"text\":");
        api_buf_json_str(b, t.p ? t.p : "", t.len);
        api_buf_puts(b, ",");
        if (t.oom) b->oom = true;
        api_buf_free(&t);
        c->role_sent = true;
    }
    api_buf_puts(b, "\"logprobs\":");
    if (j->logprobs < 0 || from == to) api_buf_puts(b, "null");
    else if (j->kind == OAI_TEXT) put_text_lps(b, j, c, from, to, c->text_off);
    else {
        api_buf_puts(b, "{\"content\":[");
        for (size_t i = from; i < to; i++) {
            if (i > from) api_buf_puts(b, ",");
            put_chat_lp(b, j, &c->lps[i]);
        }
        api_buf_puts(b, "],\"refusal\":null}");
    }
    api_buf_puts(b, ",\"finish_reason\":");
    put_null_or_str(b, finish);
    api_buf_puts(b, "}]");
    if (j->include_usage) api_buf_puts(b, ",\"usage\":null");
    api_buf_puts(b, "}\n\n");
}

static void put_stream_end(struct oai_job *j)
{
    if (j->include_usage) {
        api_buf_puts(&j->sse.out, "data: ");
        put_head(&j->sse.out, j, true);
        api_buf_puts(&j->sse.out, "],");
        put_usage(&j->sse.out, j);
        api_buf_puts(&j->sse.out, "}\n\n");
    }
    api_buf_puts(&j->sse.out, "data: [DONE]\n\n");
    j->closed = true;
}

/* ==============================================================================================
 * The scheduler's callback (scheduler thread)
 * ============================================================================================== */

static bool grow(struct oai_choice *c)
{
    if (c->n_toks < c->cap) return true;
    size_t nc = c->cap ? c->cap * 2 : 64;
    int32_t *t = realloc(c->toks, nc * sizeof *t);
    if (!t) return false;
    c->toks = t;
    if (c->job->logprobs >= 0) {
        struct oai_tok *l = realloc(c->lps, nc * sizeof *l);
        if (!l) return false;
        c->lps = l;
    }
    c->cap = nc;
    return true;
}

static void on_token(struct oai_job *j, struct oai_choice *c, const struct sched_event *ev)
{
    if (!grow(c)) {
        j->oom = true;
        return;
    }
    size_t i = c->n_toks++;
    c->toks[i] = ev->token;
    if (j->logprobs >= 0) {
        struct oai_tok *t = &c->lps[i];
        t->id = ev->token;
        t->lp = ev->logprob;
        t->n_top = ev->n_top < SCHED_MAX_LOGPROBS ? ev->n_top : SCHED_MAX_LOGPROBS;
        for (int k = 0; k < t->n_top; k++) t->top_ids[k] = ev->top_ids[k], t->top_lps[k] = ev->top_logprobs[k];
    }
    if (!j->stream) {
        api_buf_put(&c->text, ev->text, ev->text_len);
        return;
    }
    if (j->closed || (!ev->text_len && j->logprobs < 0)) return;
    put_chunk(j, c, ev->text, ev->text_len, j->logprobs >= 0 ? i : 0, j->logprobs >= 0 ? i + 1 : 0, NULL);
    if (j->logprobs >= 0) {
        char buf[PIECE_CAP];
        c->text_off += piece(j, ev->token, buf);
    }
}

static void on_last(struct oai_job *j, struct oai_choice *c, const struct sched_event *ev)
{
    c->done = true;
    j->n_done++;
    if (ev->kind == SCHED_EV_ERROR) {
        j->failed = true;
        j->err_code = api_status_code(ev->status, false);
        snprintf(j->err_msg, sizeof j->err_msg, "%s", ev->message ? ev->message : attnd_status_str(ev->status));
        for (int i = 0; i < j->n_choices; i++)
            if (!j->ch[i].done && j->ch[i].id) sched_cancel(j->sched, j->ch[i].id);
        if (j->stream && !j->closed) {
            api_buf_puts(&j->sse.out, "data: ");
            put_error(j->srv, &j->sse.out, j->err_code, NULL, NULL, j->err_msg);
            api_buf_puts(&j->sse.out, "\n\ndata: [DONE]\n\n");
            j->closed = true;
        }
        return;
    }
    snprintf(c->finish, sizeof c->finish, "%s", ev->finish_reason ? ev->finish_reason : "stop");
    c->completion_tokens = ev->completion_tokens;
    if (!j->stream) {
        api_buf_put(&c->text, ev->final_text, ev->final_text_len);
        return;
    }
    if (j->closed) return;
    if (ev->final_text_len) put_chunk(j, c, ev->final_text, ev->final_text_len, 0, 0, NULL);
    put_chunk(j, c, NULL, 0, 0, 0, c->finish);
    if (j->n_done == j->n_choices) put_stream_end(j);
}

static void on_event(void *ud, const struct sched_event *ev)
{
    struct oai_choice *c = ud;
    struct oai_job *j = c->job;
    bool last = ev->kind != SCHED_EV_TOKEN;
    if (last) {
        /* before the answer can go out: a client that has it finds the choice in /attention */
        metrics_finish(j->srv->metrics, ev->kind == SCHED_EV_DONE ? metrics_finish_from(ev->finish_reason ? ev->finish_reason : "stop")
                                                                  : METRICS_FINISH_ERROR);
        if (ev->kind == SCHED_EV_DONE) {
            metrics_tokens(j->srv->metrics, ev->prompt_tokens, ev->completion_tokens);
            pthread_mutex_lock(&j->mu);
            uint64_t key = api_history_key(j->kind == OAI_CHAT ? API_HISTORY_CHAT : API_HISTORY_CMPL,
                                           c->index ? j->id0 : ev->id, (unsigned)c->index);
            pthread_mutex_unlock(&j->mu);
            api_history_remember(j->srv, key, c->prompt, c->n_prompt, c->toks, c->n_toks);
        }
    }
    pthread_mutex_lock(&j->mu);
    c->id = ev->id;
    if (!c->index) j->id0 = ev->id;
    if (ev->kind == SCHED_EV_TOKEN) on_token(j, c, ev);
    else on_last(j, c, ev);
    if (j->sse.out.oom) j->oom = true;
    if (last || j->stream) pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (last) job_unref(j);
}

/* ==============================================================================================
 * Connection side
 * ============================================================================================== */

/* MHD is done with the request: cancel the choices still running, then let go. */
static void job_end(struct api_conn *c, bool ok)
{
    struct oai_job *j = c->job;
    struct http_server *srv = c->srv;
    uint64_t ids[OAI_MAX_CHOICES];
    int n = 0, comp = 0;
    pthread_mutex_lock(&j->mu);
    for (int i = 0; i < j->n_choices; i++) {
        if (!j->ch[i].done && j->ch[i].id) ids[n++] = j->ch[i].id;
        comp += (int)j->ch[i].n_toks;
    }
    c->prompt_tokens = j->prompt_tokens;
    c->completion_tokens = comp;
    pthread_mutex_unlock(&j->mu);
    if (n) {
        struct api_engine e;
        if (api_engine_acquire(srv, &e)) {
            for (int i = 0; i < n; i++) sched_cancel(e.sched, ids[i]);
            api_engine_release(srv);
        }
        log_info("%s-%llu: client went away, %d choice(s) cancelled", j->kind == OAI_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long long)j->id0, n);
    }
    api_inflight_end(srv);
    c->job = NULL;
    c->job_end = NULL;
    job_unref(j);
}

/* The stream's end (sse.h): [DONE] is queued (every choice ended, or an error closed it), or
 * the answer ran out of memory. */
static int stream_state(void *owner)
{
    const struct oai_job *j = owner;
    return j->oom ? -1 : j->n_done == j->n_choices || j->closed ? 1 : 0;
}

static void stream_release(void *owner) { job_unref(owner); }

static enum MHD_Result answer_stream(struct api_conn *c, struct oai_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the response's */
    pthread_mutex_unlock(&j->mu);
    struct MHD_Response *r = api_sse_response(&j->sse);
    if (!r) {
        job_unref(j);
        return oai_error(c, 503, NULL, NULL, "out of memory");
    }
    return api_sse_queue(c, r);
}

static void put_choice(struct api_buf *b, const struct oai_job *j, const struct oai_choice *c)
{
    api_buf_printf(b, "%s{\"index\":%d,", c->index ? "," : "", c->index);
    const char *text = c->text.p ? c->text.p : "";
    if (j->kind == OAI_CHAT) {
        api_buf_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
        api_buf_json_str(b, text, c->text.len);
        api_buf_puts(b, ",\"refusal\":null},");
    } else {
        api_buf_puts(b, "\"text\":");
        api_buf_json_str(b, text, c->text.len);
        api_buf_puts(b, ",");
    }
    api_buf_puts(b, "\"logprobs\":");
    if (j->logprobs < 0) api_buf_puts(b, "null");
    else if (j->kind == OAI_TEXT) put_text_lps(b, j, c, 0, c->n_toks, c->text_off);
    else {
        api_buf_puts(b, "{\"content\":[");
        for (size_t i = 0; i < c->n_toks; i++) {
            if (i) api_buf_puts(b, ",");
            put_chat_lp(b, j, &c->lps[i]);
        }
        api_buf_puts(b, "],\"refusal\":null}");
    }
    api_buf_printf(b, ",\"finish_reason\":\"%s\"}", c->finish);
}

static enum MHD_Result answer_whole(struct api_conn *c, struct oai_job *j)
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
    if (j->failed) return oai_error(c, j->err_code, NULL, NULL, "generation failed: %s", j->err_msg);
    if (j->oom) return oai_error(c, 503, NULL, NULL, "out of memory while collecting the answer");
    struct api_buf b = {0};
    put_head(&b, j, false);
    for (int i = 0; i < j->n_choices; i++) put_choice(&b, j, &j->ch[i]);
    api_buf_puts(&b, "],");
    put_usage(&b, j);
    api_buf_puts(&b, "}\n");
    size_t len = b.len;
    char *body = api_buf_take(&b);
    if (!body) return oai_error(c, 503, NULL, NULL, "out of memory while writing the answer");
    return api_respond(c, 200, "application/json", body, len, NULL);
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

/* Moves p's prompts into a new job and lays out its choices. NULL when out of memory. */
static struct oai_job *job_create(struct api_conn *c, const struct api_engine *e, struct oai_params *p)
{
    struct oai_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    check_cond_init(&j->cv); /* waited on with api_wait_ms() */
    j->srv = c->srv;
    j->tok = e->tok;
    j->sched = e->sched;
    j->kind = p->kind;
    j->stream = p->stream;
    j->include_usage = p->stream && p->include_usage;
    j->echo = p->echo;
    j->logprobs = p->logprobs;
    j->sse = (struct api_sse){.mu = &j->mu, .cv = &j->cv, .fd = api_conn_fd(c), .state = stream_state,
                              .release = stream_release, .owner = j};
    j->created = (long long)time(NULL);
    snprintf(j->model, sizeof j->model, "%s", e->model->name ? e->model->name : "model");
    j->n_prompts = p->n_prompts;
    j->n_choices = p->n_prompts * p->n;
    bool oom = false;
    for (int i = 0; i < p->n_prompts; i++) {
        j->prompts[i] = p->prompts[i];
        j->n_prompt[i] = p->n_prompt[i];
        j->prompt_tokens += (int)p->n_prompt[i];
        if (p->echo && tok_decode(e->tok, p->prompts[i], p->n_prompt[i], TOK_DECODE_STRIP_PREFIX, &j->echo_text[i],
                                  &j->echo_len[i]) != ATTND_OK)
            oom = true;
    }
    p->n_prompts = 0; /* the job owns them now */
    for (int i = 0; i < j->n_choices; i++) {
        struct oai_choice *ch = &j->ch[i];
        int pi = i / p->n;
        ch->job = j;
        ch->index = i;
        ch->prompt = j->prompts[pi];
        ch->n_prompt = j->n_prompt[pi];
        if (j->echo) {
            ch->echo = j->echo_text[pi];
            ch->echo_len = j->echo_len[pi];
            ch->text_off = ch->echo_len;
            if (!j->stream) api_buf_put(&ch->text, ch->echo ? ch->echo : "", ch->echo_len);
        }
    }
    j->refs = 1;
    if (oom) {
        job_unref(j);
        return NULL;
    }
    return j;
}

/* Submits choice i. Returns 0 or an HTTP status with the reason in err. */
static int submit(struct oai_job *j, const struct api_engine *e, const struct oai_params *p, int i, uint64_t seed0,
                  char *err, size_t errlen)
{
    struct oai_choice *ch = &j->ch[i];
    struct sched_request req = p->req;
    req.prompt = ch->prompt;
    req.n_prompt = ch->n_prompt;
    req.stops = p->stops;
    req.logprobs = p->logprobs < 0 ? 0 : p->logprobs ? p->logprobs : 1; /* 1: the chosen token's own */
    req.sampling.seed = (seed0 + (uint64_t)(i % p->n)) & ((1ull << 53) - 1);
    if (!p->max_given) {
        size_t room = (size_t)sched_n_ctx(e->sched) - ch->n_prompt;
        int cap = j->srv->cfg.max_tokens_cap;
        req.max_tokens = room < (size_t)cap ? (int)room : cap;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the scheduler's, released at the choice's last event */
    pthread_mutex_unlock(&j->mu);
    uint64_t id = 0;
    attnd_status st = sched_submit(e->sched, &req, on_event, ch, &id, err, errlen);
    pthread_mutex_lock(&j->mu);
    if (st) j->refs--;
    else {
        ch->id = id;
        if (i == 0) j->id0 = id;
    }
    pthread_mutex_unlock(&j->mu);
    return st ? api_status_code(st, false) : 0;
}

/* Waits until the first choice of every prompt has read its prompt (it has a first token, or
 * it ended), so that the other choices find the prompt's full blocks in the prefix cache.
 * False if the client went away meanwhile. */
static bool wait_prompts_read(struct oai_job *j, int n)
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
static int submit_all(struct api_conn *c, struct oai_job *j, struct api_engine *e, const struct oai_params *p,
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
    if (code && (held || (held = api_engine_acquire(c->srv, e)))) {
        uint64_t ids[OAI_MAX_CHOICES];
        int n = 0;
        pthread_mutex_lock(&j->mu);
        for (int i = 0; i < j->n_choices; i++)
            if (j->ch[i].id && !j->ch[i].done) ids[n++] = j->ch[i].id;
        pthread_mutex_unlock(&j->mu);
        for (int i = 0; i < n; i++) sched_cancel(e->sched, ids[i]);
    }
    if (held) api_engine_release(c->srv);
    return code;
}

enum MHD_Result oai_run(struct api_conn *c, struct api_engine *e, struct oai_params *p)
{
    char err[512] = "";
    int code = 0;
    const char *param = NULL;
    if (sampler_params_validate(&p->req.sampling, err, sizeof err)) code = 400;
    else if (p->n_prompts * p->n > OAI_MAX_CHOICES) {
        code = 400, param = "n";
        snprintf(err, sizeof err, "n x prompts is %d; at most %d choices per request", p->n_prompts * p->n, OAI_MAX_CHOICES);
    }
    struct oai_job *j = NULL;
    if (!code && !(j = job_create(c, e, p))) code = 503, snprintf(err, sizeof err, "out of memory");
    if (code) api_engine_release(c->srv);
    else code = submit_all(c, j, e, p, err, sizeof err);
    oai_params_free(p);
    if (code) {
        if (j) job_unref(j);
        return code == 499 ? MHD_NO : oai_error(c, code, param, NULL, "%s", err);
    }
    api_inflight_begin(c->srv);
    c->job = j;
    c->job_end = job_end;
    return j->stream ? answer_stream(c, j) : answer_whole(c, j);
}
