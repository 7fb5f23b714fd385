/* health.c - GET /health. See health.h. */
#include "server/api/health.h"

#include <cjson/cJSON.h>

#include "attnd/sched.h"
#include "server/api/reply.h"

enum MHD_Result api_health(struct api_conn *c)
{
    int st = atomic_load(&c->srv->state);
    const char *s = st == API_STATE_READY ? "ok" : st == API_STATE_LOADING ? "loading" : "stopping";
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddStringToObject(o, "status", s);
    struct api_engine e;
    if (o && api_engine_acquire(c->srv, &e)) {
        cJSON_AddStringToObject(o, "backend", sched_backend(e.sched));
        cJSON_AddStringToObject(o, "device", sched_device(e.sched));
        api_engine_release(c->srv);
    }
    return api_respond_json(c, st == API_STATE_READY ? 200 : 503, o);
}
