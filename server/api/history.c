/* history.c - see history.h. */
#include "server/api/history.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"

struct entry {
    uint64_t id;
    int32_t *tokens; /* (n) prompt then generated tokens */
    size_t n;
};

struct api_history {
    pthread_mutex_t mu; /* guards everything below */
    struct entry *ring; /* (keep) */
    int keep, len, next;
};

/* key bits: 0..47 the number, 48..55 the choice, 56..63 the namespace */
uint64_t api_history_key(enum api_history_ns ns, uint64_t n, unsigned index)
{
    if (ns == API_HISTORY_GEN) return n;
    return (n & API_HISTORY_MAX_N) | ((uint64_t)(index & 0xffu) << 48) | ((uint64_t)ns << 56);
}

void api_history_id_str(uint64_t key, char *buf, size_t cap)
{
    unsigned ns = (unsigned)(key >> 56);
    if (ns == API_HISTORY_CHAT || ns == API_HISTORY_CMPL)
        snprintf(buf, cap, "%s-%llu", ns == API_HISTORY_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)(key & API_HISTORY_MAX_N));
    else snprintf(buf, cap, "gen-%llu", (unsigned long long)key);
}

attnd_status api_history_create(int keep, struct api_history **out)
{
    *out = NULL;
    if (keep < 1) return ATTND_ERR_INVALID;
    struct api_history *h = calloc(1, sizeof *h);
    if (!h) return ATTND_ERR_NOMEM;
    if (!(h->ring = calloc((size_t)keep, sizeof *h->ring))) {
        free(h);
        return ATTND_ERR_NOMEM;
    }
    h->keep = keep;
    pthread_mutex_init(&h->mu, NULL);
    *out = h;
    return ATTND_OK;
}

void api_history_destroy(struct api_history *h)
{
    if (!h) return;
    for (int i = 0; i < h->keep; i++) free(h->ring[i].tokens);
    free(h->ring);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void api_history_remember(struct http_server *srv, uint64_t id, const int32_t *prompt, size_t n_prompt,
                          const int32_t *gen, size_t n_gen)
{
    struct api_history *h = srv->history;
    size_t n = n_prompt + n_gen;
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!t) return;
    if (n_prompt) memcpy(t, prompt, n_prompt * sizeof *t);
    if (n_gen) memcpy(t + n_prompt, gen, n_gen * sizeof *t);
    pthread_mutex_lock(&h->mu);
    struct entry *slot = &h->ring[h->next];
    free(slot->tokens);
    *slot = (struct entry){.id = id, .tokens = t, .n = n};
    h->next = (h->next + 1) % h->keep;
    if (h->len < h->keep) h->len++;
    pthread_mutex_unlock(&h->mu);
}

int api_history_get(struct http_server *srv, bool by_id, uint64_t id, uint64_t *out_id, int32_t **tokens, size_t *n)
{
    struct api_history *h = srv->history;
    int code = 404;
    pthread_mutex_lock(&h->mu);
    for (int k = 0; k < h->len; k++) {
        const struct entry *f = &h->ring[(h->next - 1 - k + 2 * h->keep) % h->keep];
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
    pthread_mutex_unlock(&h->mu);
    return code;
}
