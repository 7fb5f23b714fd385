/* routes.h - the route table: what a route is (path, methods, whether it needs the API key and
 * the engine, its handler) is written once, in one line of routes.c; the dispatcher (http.c)
 * walks the table. Adding a route: one line in routes.c and a handler in its own file. */
#ifndef ATTND_API_ROUTES_H
#define ATTND_API_ROUTES_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/api/api.h"

/* What a route's line says about it. */
enum api_route_flag {
    ROUTE_OPEN = 1u << 0,   /* answered without the API key */
    ROUTE_ENGINE = 1u << 1, /* needs the engine: 503 while the model loads or the server stops */
    ROUTE_OPENAI = 1u << 2, /* its errors, those answered before it runs too, take the OpenAI API's
                               shape {"error":{message,type,param,code}} */
};

struct api_route {
    const char *path;                       /* the exact path; also the route's metrics label */
    bool (*match)(const char *url);         /* NULL: url must equal path; else it decides (many files) */
    const char *methods;                    /* allowed methods as the Allow header lists them, "GET, HEAD" */
    unsigned flags;                         /* ROUTE_* below, or'ed */
    enum MHD_Result (*handler)(struct api_conn *c); /* called once the body is complete */
};

/* The table, in matching order, and its length. */
extern const struct api_route api_routes[];
extern const size_t api_n_routes;

/* The first route that url matches, or NULL. Thread-safe. */
const struct api_route *api_route_find(const char *url);

/* True if method is one of r's methods. */
bool api_route_allows(const struct api_route *r, const char *method);

#endif
