/* heads.h - GET /heads: the head census of the loaded model (census.h), computed on first
 * request and cached until the model changes. */
#ifndef ATTND_API_HEADS_H
#define ATTND_API_HEADS_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles GET /heads on c (no query parameters). 503 while no model is loaded or when out of
 * memory, 500 if the census fails. Thread-safe: concurrent first requests compute it once. */
enum MHD_Result api_heads(struct api_conn *c);

#endif
