/* web.h - the playground page: GET / (web/index.html) and the other files of web/ (style.css,
 * app.js and the ES modules it imports, e.g. api.js: each served at "/" + its name, .js as
 * text/javascript so browsers run them as modules), embedded in the binary at build time.
 * tools/embed.sh turns web/'s files into a generated C file (build/VARIANT/gen/web_assets.c)
 * that defines api_web_assets. */
#ifndef ATTND_API_WEB_H
#define ATTND_API_WEB_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/api/api.h"

/* One embedded file. */
struct api_web_asset {
    const char *name;          /* file name in web/, e.g. "app.js"; served at "/" + name */
    const unsigned char *data; /* its bytes (len), NUL-terminated for convenience */
    size_t len;
};

/* Defined by the generated file: every file of web/, sorted by name. */
extern const struct api_web_asset api_web_assets[];
extern const size_t api_web_n_assets;

/* True if url names an embedded file: "/" (index.html) or "/NAME". Thread-safe. */
bool api_web_has(const char *url);

/* Handles GET/HEAD of an embedded file (c->path): answers it with its Content-Type, or 404
 * through api_error() when there is no such file. */
enum MHD_Result api_web(struct api_conn *c);

#endif
