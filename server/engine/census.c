/* census.c - the head census (see census.h for the probes and the score definitions).
 *
 * Every score comes from sched_attention(): the same forward pass and attention weights as
 * generation and GET /attention, so a client can recompute each number from /attention maps.
 * Weights arrive packed row by row (row i has i + 1 entries, starting at i(i+1)/2).
 */
#include "attnd/census.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"

static size_t row0(size_t i) { return i * (i + 1) / 2; }

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* BOS (or token 0 without one) then len random NORMAL tokens, then the same len again. */
static attnd_status make_rep(const struct tokenizer *tok, int n_vocab, int len, int32_t **out)
{
    int32_t *normal = malloc((size_t)n_vocab * sizeof *normal), *rep = malloc((size_t)(2 * len + 1) * sizeof *rep);
    if (!normal || !rep) {
        free(normal);
        free(rep);
        return ATTND_ERR_NOMEM;
    }
    int nn = 0, bos = tok_bos(tok);
    for (int id = 0; id < n_vocab; id++)
        if (tok_token_type(tok, id) == TOK_TYPE_NORMAL && id != bos) normal[nn++] = id;
    uint64_t seed = CENSUS_SEED;
    rep[0] = bos >= 0 ? bos : 0;
    for (int i = 0; i < len; i++) {
        uint64_t r = splitmix64(&seed);
        rep[1 + i] = nn ? normal[r % (uint64_t)nn] : (int32_t)(r % (uint64_t)n_vocab);
        rep[1 + len + i] = rep[1 + i];
    }
    free(normal);
    *out = rep;
    return ATTND_OK;
}

static void text_scores(const float *w, size_t n, struct census_head *h)
{
    double prev = 0, sink = 0, self = 0, ent = 0;
    for (size_t i = 1; i < n; i++) {
        const float *r = w + row0(i);
        prev += r[i - 1];
        sink += r[0];
        self += r[i];
        for (size_t j = 0; j <= i; j++)
            if (r[j] > 0) ent -= r[j] * log(r[j]);
    }
    double k = n > 1 ? (double)(n - 1) : 1;
    h->prev = prev / k, h->sink = sink / k, h->self = self / k, h->entropy = ent / k;
}

static double induction_score(const float *w, int L)
{
    double s = 0;
    for (int i = L + 1; i <= 2 * L; i++) s += w[row0((size_t)i) + (size_t)(i - L + 1)];
    return s / L;
}

static const char *role_of(const struct census_head *h)
{
    const char *r = "induction";
    double best = h->induction;
    if (h->prev > best) best = h->prev, r = "previous-token";
    if (h->sink > best) best = h->sink, r = "first-token";
    if (h->self > best) best = h->self, r = "self";
    return best >= CENSUS_ROLE_MIN ? r : "diffuse";
}

/* Tokenizes CENSUS_TEXT (BOS first) and cuts it to cap tokens. */
static attnd_status make_text(const struct tokenizer *tok, size_t cap, int32_t **out, size_t *n)
{
    attnd_status st = tok_encode(tok, CENSUS_TEXT, strlen(CENSUS_TEXT), true, false, out, n);
    if (!st && *n > cap) *n = cap;
    return st;
}

attnd_status census_run(struct sched *s, const struct model *m, const struct tokenizer *tok, struct census **out)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    size_t cap = CENSUS_MAX_TOKENS;
    if ((size_t)sched_n_ctx(s) < cap) cap = (size_t)sched_n_ctx(s);
    if (hp->n_ctx_train > 0 && (size_t)hp->n_ctx_train < cap) cap = (size_t)hp->n_ctx_train;
    if (cap < 8) return ATTND_ERR_RANGE;
    struct census *c = calloc(1, sizeof *c);
    float *w = NULL;
    attnd_status st = ATTND_ERR_NOMEM;
    if (!c) return st;
    c->n_layer = hp->n_layer, c->n_head = hp->n_head, c->n_head_kv = hp->n_head_kv;
    c->rep_len = (int)((cap - 1) / 2 < CENSUS_REP_LEN ? (cap - 1) / 2 : CENSUS_REP_LEN);
    c->n_rep = (size_t)(2 * c->rep_len + 1);
    c->heads = calloc((size_t)hp->n_layer * (size_t)hp->n_head, sizeof *c->heads);
    w = malloc(row0(cap) * sizeof *w + cap * sizeof *w);
    if (!c->heads || !w) goto fail;
    if ((st = make_text(tok, cap, &c->text, &c->n_text)) || (st = make_rep(tok, hp->n_vocab, c->rep_len, &c->rep)))
        goto fail;
    for (int l = 0; l < hp->n_layer; l++) {
        for (int h = 0; h < hp->n_head; h++) {
            struct census_head *e = &c->heads[(size_t)l * (size_t)hp->n_head + (size_t)h];
            e->layer = l, e->head = h, e->kv_head = h / (hp->n_head / hp->n_head_kv);
            if ((st = sched_attention(s, c->text, c->n_text, l, h, w, NULL, NULL))) goto fail;
            text_scores(w, c->n_text, e);
            if ((st = sched_attention(s, c->rep, c->n_rep, l, h, w, NULL, NULL))) goto fail;
            e->induction = induction_score(w, c->rep_len);
            e->role = role_of(e);
            int i = l * hp->n_head + h;
            if (i == 0 || e->prev > c->heads[c->best_prev].prev) c->best_prev = i;
            if (i == 0 || e->induction > c->heads[c->best_induction].induction) c->best_induction = i;
        }
    }
    free(w);
    *out = c;
    return ATTND_OK;
fail:
    free(w);
    census_destroy(c);
    return st;
}

void census_destroy(struct census *c)
{
    if (!c) return;
    free(c->text);
    free(c->rep);
    free(c->heads);
    free(c);
}

/* ---- JSON (cJSON builds it: the engine has no buffer helpers of its own) ---------------------- */

static cJSON *ids_json(const int32_t *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static double head_score(const struct census_head *h)
{
    if (!strcmp(h->role, "induction")) return h->induction;
    if (!strcmp(h->role, "previous-token")) return h->prev;
    if (!strcmp(h->role, "first-token")) return h->sink;
    if (!strcmp(h->role, "self")) return h->self;
    return h->entropy;
}

static cJSON *head_json(const struct census_head *h)
{
    char label[96];
    snprintf(label, sizeof label, "L%d H%d %s %.2f", h->layer, h->head,
             !strcmp(h->role, "diffuse") ? "diffuse, entropy" : h->role, head_score(h));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "layer", h->layer);
    cJSON_AddNumberToObject(o, "head", h->head);
    cJSON_AddNumberToObject(o, "kv_head", h->kv_head);
    cJSON_AddNumberToObject(o, "previous_token", h->prev);
    cJSON_AddNumberToObject(o, "induction", h->induction);
    cJSON_AddNumberToObject(o, "first_token", h->sink);
    cJSON_AddNumberToObject(o, "self", h->self);
    cJSON_AddNumberToObject(o, "entropy", h->entropy);
    cJSON_AddStringToObject(o, "role", h->role);
    cJSON_AddStringToObject(o, "label", label);
    return o;
}

static cJSON *best_json(const struct census_head *h, double score)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "layer", h->layer);
    cJSON_AddNumberToObject(o, "head", h->head);
    cJSON_AddNumberToObject(o, "score", score);
    return o;
}

attnd_status census_json(const struct census *c, const char *model_name, char **out, size_t *len)
{
    cJSON *root = cJSON_CreateObject(), *probes = cJSON_CreateObject(), *heads = cJSON_CreateArray(),
          *best = cJSON_CreateObject();
    if (!root || !probes || !heads || !best) {
        cJSON_Delete(root), cJSON_Delete(probes), cJSON_Delete(heads), cJSON_Delete(best);
        return ATTND_ERR_NOMEM;
    }
    cJSON_AddItemToObject(root, "model", model_name ? cJSON_CreateString(model_name) : cJSON_CreateNull());
    cJSON_AddNumberToObject(root, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(root, "n_head", c->n_head);
    cJSON_AddNumberToObject(root, "n_head_kv", c->n_head_kv);
    cJSON_AddNumberToObject(root, "role_min", CENSUS_ROLE_MIN);
    cJSON_AddItemToObject(probes, "text", ids_json(c->text, c->n_text));
    cJSON_AddItemToObject(probes, "repeated", ids_json(c->rep, c->n_rep));
    cJSON_AddNumberToObject(probes, "repeat_len", c->rep_len);
    cJSON_AddItemToObject(root, "probes", probes);
    for (int i = 0; heads && i < c->n_layer * c->n_head; i++) cJSON_AddItemToArray(heads, head_json(&c->heads[i]));
    cJSON_AddItemToObject(root, "heads", heads);
    const struct census_head *bp = &c->heads[c->best_prev], *bi = &c->heads[c->best_induction];
    cJSON_AddItemToObject(best, "previous_token", best_json(bp, bp->prev));
    cJSON_AddItemToObject(best, "induction", best_json(bi, bi->induction));
    cJSON_AddItemToObject(root, "best", best);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return ATTND_ERR_NOMEM;
    *len = strlen(text);
    /* the callers free() it: cJSON allocates with malloc unless told otherwise (cJSON_InitHooks is
     * never called here) */
    *out = text;
    return ATTND_OK;
}
