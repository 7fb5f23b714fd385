/* models.h - GET /v1/models: the loaded model as an OpenAI-style list of one, with its shape
 * (arch, context, vocabulary, layers, heads, parameters); GET /v1/models/{id}: that object alone
 * (404 for any other id). */
#ifndef ATTND_API_MODELS_H
#define ATTND_API_MODELS_H

#include <microhttpd.h>
#include <stdbool.h>

#include "server/api/api.h"

/* Handles GET /v1/models on c; 503 when no model is loaded. */
enum MHD_Result api_models(struct api_conn *c);

/* True for a path /v1/models/{id} (the route table's matcher). */
bool api_models_match(const char *url);
/* Handles GET /v1/models/{id} on c: the model's object, 404 naming the served model for another
 * id, 503 when no model is loaded. */
enum MHD_Result api_model(struct api_conn *c);

#endif
