/* heads.c - GET /heads. See heads.h.
 *
 * The census costs 2 * n_layer * n_head attention recomputations, so its JSON is kept: one
 * cache entry for the model it was computed on (compared by pointer and path: a model swapped
 * in later gets its own census). g_mu serialises the first computation, so concurrent first
 * requests wait for one census instead of running several.
 */
#include "server/api/heads.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/census.h"
#include "attnd/model.h"
#include "server/api/errors.h"
#include "server/api/query.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const struct model *model;
    char *path;
    char *json;
    size_t len;
} g_cache;

static bool cache_matches(const struct model *m)
{
    return g_cache.json && g_cache.model == m && g_cache.path && m->path && !strcmp(g_cache.path, m->path);
}

/* Returns a malloc'd copy of the census JSON of e's model (computed if not cached), or NULL
 * with *st set. Called with g_mu held and the engine acquired. */
static char *census_of(const struct api_engine *e, size_t *len, attnd_status *st)
{
    if (!cache_matches(e->model)) {
        struct census *cs = NULL;
        char *json = NULL, *path = e->model->path ? strdup(e->model->path) : NULL;
        size_t n = 0;
        *st = census_run(e->sched, e->model, e->tok, &cs);
        if (!*st) *st = census_json(cs, e->model->name, &json, &n);
        census_destroy(cs);
        if (!*st && !path) *st = ATTND_ERR_NOMEM;
        if (*st) {
            free(json);
            free(path);
            return NULL;
        }
        free(g_cache.json);
        free(g_cache.path);
        g_cache.model = e->model, g_cache.path = path, g_cache.json = json, g_cache.len = n;
    }
    char *copy = malloc(g_cache.len + 1);
    if (!copy) {
        *st = ATTND_ERR_NOMEM;
        return NULL;
    }
    memcpy(copy, g_cache.json, g_cache.len + 1);
    *len = g_cache.len;
    return copy;
}

enum MHD_Result api_heads(struct api_conn *c)
{
    static const char *const names[] = {NULL};
    const char *val[API_QUERY_MAX];
    enum MHD_Result ret;
    if (!api_query_read(c, names, val, &ret)) return ret;
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) return api_error_retry(c, 503, "no model is loaded");
    attnd_status st = ATTND_OK;
    size_t len = 0;
    pthread_mutex_lock(&g_mu);
    char *body = census_of(&e, &len, &st);
    pthread_mutex_unlock(&g_mu);
    api_engine_release(c->srv);
    if (!body) {
        return api_error_retry(c, st == ATTND_ERR_NOMEM ? 503 : 500, "head census failed: %s", attnd_status_str(st));
    }
    return api_respond(c, 200, "application/json", body, len, NULL);
}
