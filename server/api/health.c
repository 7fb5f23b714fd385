/* health.c - GET /health. See health.h. */
#include "server/api/health.h"

#include <cjson/cJSON.h>

#include "attnd/sched.h"
#include "server/api/reply.h"

/* {"cpu","isa","chosen_by","fa2":{"prefill","decode"},"matrix":{type:{family: variant}}} */
static cJSON *kernels_json(const struct fwd_kernels *k)
{
    cJSON *o = cJSON_CreateObject(), *mx = cJSON_CreateObject(), *fa = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "cpu", k->cpu);
    cJSON_AddStringToObject(o, "isa", k->isa);
    cJSON_AddStringToObject(o, "chosen_by", k->chosen_by);
    cJSON_AddStringToObject(fa, "prefill", k->fa2_prefill);
    cJSON_AddStringToObject(fa, "decode", k->fa2_decode);
    cJSON_AddItemToObject(o, "fa2", fa);
    for (int i = 0; i < k->n_types; i++) {
        cJSON *t = cJSON_CreateObject();
        for (int f = 0; f < FWD_KERNEL_FAMILIES; f++) cJSON_AddStringToObject(t, k->family[f], k->types[i].variant[f]);
        cJSON_AddItemToObject(mx, k->types[i].type, t);
    }
    cJSON_AddItemToObject(o, "matrix", mx);
    return o;
}

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
        struct fwd_kernels k;
        if (sched_kernels(e.sched, &k)) cJSON_AddItemToObject(o, "kernels", kernels_json(&k));
        api_engine_release(c->srv);
    }
    return api_respond_json(c, st == API_STATE_READY ? 200 : 503, o);
}
