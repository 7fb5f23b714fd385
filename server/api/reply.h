/* reply.h - answers built with cJSON (small objects: /health, /v1/models). Bigger answers are
 * written with buf.h and queued with api_respond(). */
#ifndef ATTND_API_REPLY_H
#define ATTND_API_REPLY_H

#include <microhttpd.h>

#include "server/api/api.h"

struct cJSON;

/* Queues obj printed as JSON plus a newline, with status code (obj is deleted; NULL counts as
 * out of memory). Out of memory: a 500 error instead. Returns what MHD_queue_response returned. */
enum MHD_Result api_respond_json(struct api_conn *c, int code, struct cJSON *obj);

#endif
