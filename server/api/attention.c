/* attention.c - GET /attention and the history of finished requests it reads. See attention.h.
 *
 * The history is a ring of cfg.keep_requests entries in struct http_server, guarded by srv->mu.
 * The weights are computed by the scheduler thread (sched_attention); this file only checks the
 * query, looks the request up and writes the JSON (by hand: a 2048-token map is two million
 * numbers, and "%.9g" keeps every float exact at a third of cJSON's output size).
 */
#include "server/api/attention.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"

void api_attention_remember(struct http_server *srv, uint64_t id, const int32_t *prompt, size_t n_prompt,
                            const int32_t *gen, size_t n_gen)
{
    size_t n = n_prompt + n_gen;
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!t) return;
    if (n_prompt) memcpy(t, prompt, n_prompt * sizeof *t);
    if (n_gen) memcpy(t + n_prompt, gen, n_gen * sizeof *t);
    pthread_mutex_lock(&srv->mu);
    struct api_finished *slot = &srv->history[srv->hist_next];
    free(slot->tokens);
    *slot = (struct api_finished){.id = id, .tokens = t, .n = n};
    srv->hist_next = (srv->hist_next + 1) % srv->cfg.keep_requests;
    if (srv->hist_len < srv->cfg.keep_requests) srv->hist_len++;
    pthread_mutex_unlock(&srv->mu);
}

int api_history_get(struct http_server *srv, bool by_id, uint64_t id, uint64_t *out_id, int32_t **tokens,
                       size_t *n)
{
    int code = 404;
    pthread_mutex_lock(&srv->mu);
    const int keep = srv->cfg.keep_requests;
    for (int k = 0; k < srv->hist_len; k++) {
        const struct api_finished *f = &srv->history[(srv->hist_next - 1 - k + 2 * keep) % keep];
        if (by_id && f->id != id) continue;
        *tokens = malloc((f->n ? f->n : 1) * sizeof **tokens);
        if (!*tokens) {
            code = 503;
            break;
        }
        if (f->n) memcpy(*tokens, f->tokens, f->n * sizeof **tokens);
        *n = f->n;
        *out_id = f->id;
        code = 0;
        break;
    }
    pthread_mutex_unlock(&srv->mu);
    return code;
}

/* ---- the query string ------------------------------------------------------------------------ */

struct query_state {
    const char *const *names;
    const char **val;
    char unknown[64]; /* first unknown parameter */
    char twice[16];   /* first repeated parameter */
};

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct query_state *q = cls;
    int i = 0;
    while (q->names[i] && strcmp(q->names[i], key)) i++;
    if (!q->names[i]) {
        if (!q->unknown[0]) snprintf(q->unknown, sizeof q->unknown, "%s", key[0] ? key : "(empty)");
        return MHD_YES;
    }
    if (q->val[i] && !q->twice[0]) snprintf(q->twice, sizeof q->twice, "%s", key);
    q->val[i] = value ? value : "";
    return MHD_YES;
}

bool api_query_read(struct api_conn *c, const char *const *names, const char **val, enum MHD_Result *ret)
{
    struct query_state q = {.names = names, .val = val};
    for (int i = 0; names[i]; i++) val[i] = NULL;
    MHD_get_connection_values(c->mc, MHD_GET_ARGUMENT_KIND, collect, &q);
    if (q.unknown[0]) {
        char known[256] = "";
        for (int i = 0; names[i]; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", names[i]);
        *ret = api_error(c, 400, "unknown query parameter '%s' (known: %s)", q.unknown, known);
        return false;
    }
    if (q.twice[0]) {
        *ret = api_error(c, 400, "query parameter '%s' is given twice", q.twice);
        return false;
    }
    return true;
}

bool api_parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!s || *s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max) return false;
    *out = v;
    return true;
}

/* ---- output ---------------------------------------------------------------------------------- */

static void put_rows(struct api_buf *b, const char *name, const float *m, size_t rows, size_t cols)
{
    api_buf_printf(b, ",\"%s\":[", name);
    for (size_t i = 0; i < rows; i++) {
        api_buf_puts(b, i ? ",[" : "[");
        for (size_t j = 0; j < cols; j++) {
            if (j) api_buf_put(b, ",", 1);
            api_buf_float(b, m[i * cols + j]);
        }
        api_buf_put(b, "]", 1);
    }
    api_buf_put(b, "]", 1);
}

enum MHD_Result api_attention(struct api_conn *c)
{
    struct http_server *srv = c->srv;
    static const char *const names[] = {"layer", "head", "id", "values", NULL};
    struct {
        const char *layer, *head, *id, *values;
    } q;
    const char *val[API_QUERY_MAX];
    enum MHD_Result ret;
    if (!api_query_read(c, names, val, &ret)) return ret;
    q.layer = val[0], q.head = val[1], q.id = val[2], q.values = val[3];
    if (!q.layer || !q.head) return api_error(c, 400, "'layer' and 'head' are required, e.g. /attention?layer=0&head=0");
    unsigned long long layer, head, id = 0;
    if (!api_parse_uint(q.layer, 1u << 20, &layer)) return api_error(c, 400, "'layer' must be a non-negative integer");
    if (!api_parse_uint(q.head, 1u << 20, &head)) return api_error(c, 400, "'head' must be a non-negative integer");
    bool by_id = q.id != NULL, want_values = false;
    if (by_id) {
        const char *s = q.id;
        if (!strncmp(s, "gen-", 4)) s += 4;
        if (!api_parse_uint(s, UINT64_MAX, &id)) return api_error(c, 400, "'id' must look like gen-N (as /v1/generate answers)");
    }
    if (q.values) {
        if (!strcmp(q.values, "1") || !strcmp(q.values, "true")) want_values = true;
        else if (strcmp(q.values, "0") && strcmp(q.values, "false"))
            return api_error(c, 400, "'values' must be 0, 1, true or false");
    }

    struct api_engine e;
    if (!api_engine_acquire(srv, &e)) return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    const struct model_hparams hp = e.model->hp;
    const size_t n_ctx = (size_t)sched_n_ctx(e.sched);
    api_engine_release(srv);
    if (layer >= (unsigned long long)hp.n_layer)
        return api_error(c, 400, "'layer' %llu is out of range (the model has layers 0..%d)", layer, hp.n_layer - 1);
    if (head >= (unsigned long long)hp.n_head)
        return api_error(c, 400, "'head' %llu is out of range (the model has query heads 0..%d)", head, hp.n_head - 1);

    int32_t *tokens = NULL;
    size_t n = 0;
    uint64_t rid = 0;
    int code = api_history_get(srv, by_id, id, &rid, &tokens, &n);
    if (code == 404) {
        if (by_id)
            return api_error(c, 404, "no finished request gen-%llu (the last %d finished requests are kept)", id,
                             srv->cfg.keep_requests);
        return api_error(c, 404, "no request has finished yet");
    }
    if (code) return api_error_hdr(c, 503, "Retry-After", "1", "out of memory");
    if (n > (size_t)srv->cfg.attention_max_tokens) {
        free(tokens);
        return api_error(c, 413, "request gen-%llu has %zu tokens; /attention maps at most %d (--attention-max-tokens)",
                         (unsigned long long)rid, n, srv->cfg.attention_max_tokens);
    }
    /* the last generated token may never have been evaluated, and a full context has no room
     * for it: map the first n_ctx tokens (rows are causal, so they do not depend on the rest) */
    bool truncated = n > n_ctx;
    if (truncated) n = n_ctx;
    if (n == 0) {
        free(tokens);
        return api_error(c, 404, "request gen-%llu has no tokens", (unsigned long long)rid);
    }

    const size_t hd = (size_t)hp.head_dim;
    float *w = malloc(n * (n + 1) / 2 * sizeof *w);
    float *vals = want_values ? malloc(n * hd * sizeof *vals) : NULL;
    float *outp = want_values ? malloc(n * hd * sizeof *outp) : NULL;
    struct api_buf pieces = {0};
    char *piece = NULL;
    int hc = 0;
    const char *why = NULL;
    if (!w || (want_values && (!vals || !outp))) {
        hc = 503;
        why = "out of memory";
    } else if (!api_engine_acquire(srv, &e)) {
        hc = 503;
        why = "no model is loaded";
    } else {
        attnd_status st = sched_attention(e.sched, tokens, n, (int)layer, (int)head, w, vals, outp);
        size_t cap = tok_max_piece(e.tok) + 8;
        if (!st && !(piece = malloc(cap))) st = ATTND_ERR_NOMEM;
        for (size_t i = 0; !st && i < n; i++) {
            size_t len = tok_decode_token(e.tok, tokens[i], piece, cap, true);
            if (i) api_buf_put(&pieces, ",", 1);
            api_buf_json_str(&pieces, piece, len < cap ? len : cap);
        }
        api_engine_release(srv);
        if (!st && pieces.oom) st = ATTND_ERR_NOMEM;
        if (st) {
            hc = st == ATTND_ERR_INVALID ? 400 : st == ATTND_ERR_RANGE ? 413 : st == ATTND_ERR_INTERNAL || st == ATTND_ERR_NUMERIC ? 500 : 503;
            why = attnd_status_str(st);
        }
    }

    enum MHD_Result r;
    if (hc) {
        r = hc == 503 ? api_error_hdr(c, 503, "Retry-After", "1", "attention map failed: %s", why)
                      : api_error(c, hc, "attention map failed: %s", why);
    } else {
        struct api_buf b = {0};
        api_buf_printf(&b, "{\"id\":\"gen-%llu\",\"layer\":%llu,\"head\":%llu,\"kv_head\":%llu,\"n_tokens\":%zu,"
                           "\"head_dim\":%zu,\"truncated\":%s,\"token_ids\":[",
                       (unsigned long long)rid, layer, head, head / (unsigned long long)(hp.n_head / hp.n_head_kv), n, hd,
                       truncated ? "true" : "false");
        for (size_t i = 0; i < n; i++) api_buf_printf(&b, "%s%d", i ? "," : "", tokens[i]);
        api_buf_puts(&b, "],\"tokens\":[");
        api_buf_put(&b, pieces.p ? pieces.p : "", pieces.len);
        api_buf_puts(&b, "],\"weights\":[");
        for (size_t i = 0; i < n; i++) {
            const float *row = w + i * (i + 1) / 2;
            api_buf_puts(&b, i ? ",[" : "[");
            for (size_t j = 0; j <= i; j++) {
                if (j) api_buf_put(&b, ",", 1);
                api_buf_float(&b, row[j]);
            }
            api_buf_put(&b, "]", 1);
        }
        api_buf_put(&b, "]", 1);
        if (want_values) {
            put_rows(&b, "values", vals, n, hd);
            put_rows(&b, "output", outp, n, hd);
        }
        api_buf_puts(&b, "}\n");
        size_t len = b.len;
        char *body = api_buf_take(&b);
        r = body ? api_respond(c, 200, "application/json", body, len, NULL)
                 : api_error_hdr(c, 503, "Retry-After", "1", "out of memory for the answer");
    }
    free(piece);
    api_buf_free(&pieces);
    free(w);
    free(vals);
    free(outp);
    free(tokens);
    return r;
}
