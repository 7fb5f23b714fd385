/* web.c - serves the embedded playground files. See web.h. */
#include "server/api/web.h"

#include <stdlib.h>
#include <string.h>

#include "server/api/errors.h"

/* The asset for url, or NULL. "/" is index.html; names never contain '/'. */
static const struct api_web_asset *web_find(const char *url)
{
    if (!url || url[0] != '/') return NULL;
    const char *name = url[1] ? url + 1 : "index.html";
    if (strchr(name, '/')) return NULL;
    for (size_t i = 0; i < api_web_n_assets; i++)
        if (!strcmp(api_web_assets[i].name, name)) return &api_web_assets[i];
    return NULL;
}

static const char *web_ctype(const char *name)
{
    static const struct {
        const char *ext, *ctype;
    } types[] = {
        {".html", "text/html; charset=utf-8"},  {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},    {".json", "application/json"},
        {".png", "image/png"},                  {".svg", "image/svg+xml"},
        {".ico", "image/x-icon"},               {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dot, types[i].ext)) return types[i].ctype;
    return "application/octet-stream";
}

bool api_web_has(const char *url) { return web_find(url) != NULL; }

enum MHD_Result api_web(struct api_conn *c)
{
    const struct api_web_asset *a = web_find(c->path);
    if (!a) return api_error(c, 404, "no route %s", c->path);
    char *body = malloc(a->len ? a->len : 1);
    if (!body) return api_error_hdr(c, 503, "Retry-After", "1", "out of memory");
    if (a->len) memcpy(body, a->data, a->len);
    /* the page loads nothing from elsewhere: say so, so a browser refuses anything else */
    static const char *const hdrs[] = {
        "Cache-Control", "no-cache",
        "X-Content-Type-Options", "nosniff",
        "Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
        NULL,
    };
    return api_respond(c, 200, web_ctype(a->name), body, a->len, hdrs);
}
