/* metrics_route.c - GET /metrics. See metrics_route.h. */
#include "server/api/metrics_route.h"

#include <stdio.h>

#include "attnd/sched.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/metrics.h"

enum MHD_Result api_metrics(struct api_conn *c)
{
    struct sched_stats st;
    bool have = false;
    struct api_engine e;
    char backend[16] = "", device[256] = "";
    if (api_engine_acquire(c->srv, &e)) {
        sched_get_stats(e.sched, &st);
        snprintf(backend, sizeof backend, "%s", sched_backend(e.sched));
        snprintf(device, sizeof device, "%s", sched_device(e.sched));
        api_engine_release(c->srv);
        have = true;
    }
    struct api_buf b = {0};
    if (metrics_render(c->srv->metrics, have ? &st : NULL, backend, device, &b)) {
        api_buf_free(&b);
        return api_error(c, 500, "out of memory");
    }
    size_t len = b.len;
    char *body = api_buf_take(&b);
    if (!body) return api_error(c, 500, "out of memory");
    return api_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, NULL);
}
