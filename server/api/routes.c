/* routes.c - the route table. See routes.h. */
#include "server/api/routes.h"

#include <string.h>

#include "server/api/activations.h"
#include "server/api/attention.h"
#include "server/api/embeddings.h"
#include "server/api/generate.h"
#include "server/api/heads.h"
#include "server/api/kv_debug.h"
#include "server/api/health.h"
#include "server/api/logit_lens.h"
#include "server/api/metrics_route.h"
#include "server/api/models.h"
#include "server/api/oai_chat.h"
#include "server/api/oai_completions.h"
#include "server/api/oai_responses.h"
#include "server/api/patching.h"
#include "server/api/web.h"

const struct api_route api_routes[] = {
    /* path                  match        methods      flags                        handler */
    {"/v1/generate",         NULL,        "POST",      ROUTE_ENGINE,               api_generate},
    {"/v1/chat/completions", NULL,        "POST",      ROUTE_ENGINE | ROUTE_OPENAI, oai_chat},
    {"/v1/completions",      NULL,        "POST",      ROUTE_ENGINE | ROUTE_OPENAI, oai_completions},
    {"/v1/responses",        NULL,        "POST",      ROUTE_ENGINE | ROUTE_OPENAI, oai_responses},
    {"/apply-template",      NULL,        "POST",      ROUTE_ENGINE | ROUTE_OPENAI, oai_apply_template},
    {"/v1/activations",      NULL,        "POST",      ROUTE_ENGINE,               api_activations},
    {"/v1/embeddings",       NULL,        "POST",      ROUTE_ENGINE | ROUTE_OPENAI, api_embeddings},
    {"/v1/patching",         NULL,        "POST",      ROUTE_ENGINE,               api_patching},
    {"/attention",           NULL,        "GET, HEAD", ROUTE_ENGINE,               api_attention},
    {"/logit_lens",          NULL,        "GET, HEAD", ROUTE_ENGINE,               api_logit_lens},
    {"/heads",               NULL,        "GET, HEAD", ROUTE_ENGINE,               api_heads},
    {"/health",              NULL,        "GET, HEAD", ROUTE_OPEN,                 api_health},
    {"/v1/models",           NULL,        "GET, HEAD", ROUTE_ENGINE,               api_models},
    {"/v1/models/{id}",      api_models_match, "GET, HEAD", ROUTE_ENGINE | ROUTE_OPENAI, api_model},
    {"/metrics",             NULL,        "GET, HEAD", 0,                          api_metrics},
    {"/debug/kv-blocks",     NULL,        "GET, HEAD", ROUTE_ENGINE,               api_kv_debug},
    /* the playground's static files hold no secrets (the page asks for the key): last, so no
     * file name shadows a route */
    {"/",                    api_web_has, "GET, HEAD", ROUTE_OPEN,                 api_web},
};

const size_t api_n_routes = sizeof api_routes / sizeof api_routes[0];

const struct api_route *api_route_find(const char *url)
{
    for (size_t i = 0; i < api_n_routes; i++) {
        const struct api_route *r = &api_routes[i];
        if (r->match ? r->match(url) : !strcmp(url, r->path)) return r;
    }
    return NULL;
}

bool api_route_allows(const struct api_route *r, const char *method)
{
    size_t n = strlen(method);
    if (!n) return false;
    for (const char *p = r->methods; (p = strstr(p, method)) != NULL; p += n)
        if ((p == r->methods || p[-1] == ' ') && (p[n] == 0 || p[n] == ',')) return true;
    return false;
}
