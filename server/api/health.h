/* health.h - GET /health: {"status":"ok"|"loading"|"stopping"[,"backend","device"]}, 200 once
 * the model is loaded and 503 before and while stopping. Needs no API key. */
#ifndef ATTND_API_HEALTH_H
#define ATTND_API_HEALTH_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles GET /health on c. */
enum MHD_Result api_health(struct api_conn *c);

#endif
