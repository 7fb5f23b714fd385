/* models.c - GET /v1/models. See models.h. */
#include "server/api/models.h"

#include <cjson/cJSON.h>

#include "attnd/model.h"
#include "attnd/sched.h"
#include "server/api/errors.h"
#include "server/api/reply.h"

enum MHD_Result api_models(struct api_conn *c)
{
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    const struct model *m = e.model;
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *it = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, it);
    cJSON_AddStringToObject(it, "id", m->name ? m->name : "model");
    cJSON_AddStringToObject(it, "object", "model");
    cJSON_AddNumberToObject(it, "created", 0);
    cJSON_AddStringToObject(it, "owned_by", "attnd");
    cJSON_AddStringToObject(it, "arch", m->hp.arch_name);
    cJSON_AddNumberToObject(it, "context_length", sched_n_ctx(e.sched));
    cJSON_AddNumberToObject(it, "n_ctx_train", m->hp.n_ctx_train);
    cJSON_AddNumberToObject(it, "n_vocab", m->hp.n_vocab);
    cJSON_AddNumberToObject(it, "n_layer", m->hp.n_layer);
    cJSON_AddNumberToObject(it, "n_head", m->hp.n_head);
    cJSON_AddNumberToObject(it, "n_head_kv", m->hp.n_head_kv);
    cJSON_AddNumberToObject(it, "head_dim", m->hp.head_dim);
    cJSON_AddNumberToObject(it, "n_params", (double)model_n_params(m));
    api_engine_release(c->srv);
    return api_respond_json(c, 200, o);
}
