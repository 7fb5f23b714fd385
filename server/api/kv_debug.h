/* kv_debug.h - GET /debug/kv-blocks: the blocks now in the prefix cache, read from the cache
 * itself on the scheduler thread, so a KV-event subscriber can check the view it rebuilt from
 * the events (docs/GATEWAY.md). Needs the API key like every non-open route. */
#ifndef ATTND_API_KV_DEBUG_H
#define ATTND_API_KV_DEBUG_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles GET /debug/kv-blocks on c (no query parameters): 200 with
 *   {"block_size":16,"n_blocks":N,"truncated":false,
 *    "blocks":[{"hash":"<uint64 decimal>","parent_hash":"<uint64 decimal>"|null,"block":B,"ref":R},...]}
 * (hashes as strings: JSON numbers lose integers past 2^53; parent_hash null for a first block
 * under the plain root, as the events send it). 503 while no model is loaded or out of memory.
 * Thread-safe. */
enum MHD_Result api_kv_debug(struct api_conn *c);

#endif
