/* models.c - GET /v1/models. See models.h. */
#include "server/api/models.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "attnd/model.h"
#include "attnd/sched.h"
#include "server/api/errors.h"
#include "server/api/reply.h"

#define MODELS_PREFIX "/v1/models/"

bool api_models_match(const char *url)
{
    return !strncmp(url, MODELS_PREFIX, strlen(MODELS_PREFIX)) && url[strlen(MODELS_PREFIX)];
}

/* The served model's object, in the API's shape plus its hyper-parameters. */
static cJSON *model_object(const struct api_engine *e)
{
    const struct model *m = e->model;
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", m->name ? m->name : "model");
    cJSON_AddStringToObject(it, "object", "model");
    cJSON_AddNumberToObject(it, "created", 0);
    cJSON_AddStringToObject(it, "owned_by", "attnd");
    cJSON_AddStringToObject(it, "arch", m->hp.arch_name);
    cJSON_AddNumberToObject(it, "context_length", sched_n_ctx(e->sched));
    cJSON_AddNumberToObject(it, "n_ctx_train", m->hp.n_ctx_train);
    cJSON_AddNumberToObject(it, "n_vocab", m->hp.n_vocab);
    cJSON_AddNumberToObject(it, "n_layer", m->hp.n_layer);
    cJSON_AddNumberToObject(it, "n_head", m->hp.n_head);
    cJSON_AddNumberToObject(it, "n_head_kv", m->hp.n_head_kv);
    cJSON_AddNumberToObject(it, "head_dim", m->hp.head_dim);
    cJSON_AddNumberToObject(it, "n_params", (double)model_n_params(m));
    return it;
}

enum MHD_Result api_models(struct api_conn *c)
{
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, model_object(&e));
    api_engine_release(c->srv);
    return api_respond_json(c, 200, o);
}

enum MHD_Result api_model(struct api_conn *c)
{
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    const char *id = c->path + strlen(MODELS_PREFIX);
    const char *name = e.model->name ? e.model->name : "model";
    if (strcmp(id, name)) {
        api_engine_release(c->srv);
        return api_error(c, 404, "no model '%s' here (this server serves '%s')", id, name);
    }
    cJSON *it = model_object(&e);
    api_engine_release(c->srv);
    return api_respond_json(c, 200, it);
}
