/* history.c - see history.h. */
#include "server/api/history.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "server/api/api.h"

struct entry {
    struct api_reqid rid; /* rid.id[0] == 0: empty slot */
    unsigned index;
    int32_t *tokens; /* (n) prompt then generated tokens */
    size_t n;
};

struct api_history {
    pthread_mutex_t mu; /* guards everything below */
    struct entry *ring; /* (keep) */
    int keep, len, next;
};

/* Fills buf[0..n) from getrandom(), retrying short reads and EINTR. False if it fails. */
static bool random_bytes(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        got += (size_t)r;
    }
    return true;
}

attnd_status api_history_new_id(const char *prefix, int tenant, struct api_reqid *rid)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char bits[API_HISTORY_ID_HEX / 2];
    size_t plen = strlen(prefix);
    rid->id[0] = 0;
    rid->tenant = tenant;
    if (plen + 1 + API_HISTORY_ID_HEX + 1 > sizeof rid->id) return ATTND_ERR_INVALID;
    if (!random_bytes(bits, sizeof bits)) return ATTND_ERR_IO;
    memcpy(rid->id, prefix, plen);
    char *p = rid->id + plen;
    *p++ = '-';
    for (size_t i = 0; i < sizeof bits; i++) {
        *p++ = hex[bits[i] >> 4];
        *p++ = hex[bits[i] & 15];
    }
    *p = 0;
    return ATTND_OK;
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

void api_history_remember(struct http_server *srv, const struct api_reqid *rid, unsigned index, const int32_t *prompt,
                          size_t n_prompt, const int32_t *gen, size_t n_gen)
{
    struct api_history *h = srv->history;
    size_t n = n_prompt + n_gen;
    if (!rid->id[0]) return;
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!t) return;
    if (n_prompt) memcpy(t, prompt, n_prompt * sizeof *t);
    if (n_gen) memcpy(t + n_prompt, gen, n_gen * sizeof *t);
    pthread_mutex_lock(&h->mu);
    struct entry *slot = &h->ring[h->next];
    free(slot->tokens);
    *slot = (struct entry){.rid = *rid, .index = index, .tokens = t, .n = n};
    h->next = (h->next + 1) % h->keep;
    if (h->len < h->keep) h->len++;
    pthread_mutex_unlock(&h->mu);
}

int api_history_get(struct http_server *srv, int tenant, const char *id, unsigned index, struct api_history_hit *out)
{
    struct api_history *h = srv->history;
    int code = 404;
    pthread_mutex_lock(&h->mu);
    for (int k = 0; k < h->len; k++) {
        const struct entry *f = &h->ring[(h->next - 1 - k + 2 * h->keep) % h->keep];
        /* the tenant first: another tenant's ids are never even compared */
        if (f->rid.tenant != tenant) continue;
        if (id && (f->index != index || strcmp(f->rid.id, id))) continue;
        out->tokens = malloc((f->n ? f->n : 1) * sizeof *out->tokens);
        if (!out->tokens) {
            code = 503;
            break;
        }
        if (f->n) memcpy(out->tokens, f->tokens, f->n * sizeof *out->tokens);
        out->n = f->n;
        out->index = f->index;
        memcpy(out->id, f->rid.id, sizeof out->id);
        code = 0;
        break;
    }
    pthread_mutex_unlock(&h->mu);
    return code;
}
