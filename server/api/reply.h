/* reply.h - answers built with cJSON (small objects: /health, /v1/models). Bigger answers are
 * written with buf.h and queued with api_respond(). */
#ifndef ATTND_API_REPLY_H
#define ATTND_API_REPLY_H

#include <microhttpd.h>

#include "server/api/api.h"
#include "server/api/buf.h"

struct cJSON;

/* Queues obj printed as JSON plus a newline, with status code (obj is deleted; NULL counts as
 * out of memory). Out of memory: a 500 error instead. Returns what MHD_queue_response returned. */
enum MHD_Result api_respond_json(struct api_conn *c, int code, struct cJSON *obj);

/* Queues b's bytes as a 200 application/json answer (b is emptied: the body passes to MHD). Out of
 * memory (b.oom or the take failing): a 503 with Retry-After in the route's error shape. */
enum MHD_Result api_respond_buf(struct api_conn *c, struct api_buf *b);

#endif
