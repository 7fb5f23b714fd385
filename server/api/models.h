/* models.h - GET /v1/models: the loaded model as an OpenAI-style list of one, with its shape
 * (arch, context, vocabulary, layers, heads, parameters). */
#ifndef ATTND_API_MODELS_H
#define ATTND_API_MODELS_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles GET /v1/models on c; 503 when no model is loaded. */
enum MHD_Result api_models(struct api_conn *c);

#endif
