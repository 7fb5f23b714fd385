/* kv_debug.c - GET /debug/kv-blocks. See kv_debug.h. */
#include "server/api/kv_debug.h"

#include <inttypes.h>
#include <stdlib.h>

#include "attnd/kvcache.h"
#include "attnd/sched.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/query.h"

#define KV_DEBUG_MAX_BLOCKS ((size_t)1 << 20) /* listed at most (24 MiB of rows); more: truncated */

/* The JSON answer for blocks[0..n) of total. Returns NULL when out of memory. */
static char *render(const struct sched_kv_block *blocks, size_t n, size_t total, size_t *len)
{
    struct api_buf b = {0};
    api_buf_printf(&b, "{\"block_size\":%d,\"n_blocks\":%zu,\"truncated\":%s,\"blocks\":[", KV_BLOCK_SIZE, total,
                   total > n ? "true" : "false");
    for (size_t i = 0; i < n; i++) {
        const struct sched_kv_block *k = &blocks[i];
        api_buf_printf(&b, "%s{\"hash\":\"%" PRIu64 "\",\"parent_hash\":", i ? "," : "", k->hash);
        if (k->parent < 0 && k->parent_hash == KV_HASH_ROOT) api_buf_puts(&b, "null");
        else api_buf_printf(&b, "\"%" PRIu64 "\"", k->parent_hash);
        api_buf_printf(&b, ",\"block\":%d,\"ref\":%d}", (int)k->block, (int)k->ref);
    }
    api_buf_puts(&b, "]}");
    *len = b.len;
    return api_buf_take(&b);
}

enum MHD_Result api_kv_debug(struct api_conn *c)
{
    static const char *const names[] = {NULL};
    const char *val[API_QUERY_MAX];
    enum MHD_Result ret;
    if (!api_query_read(c, names, val, &ret)) return ret;
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) return api_error_retry(c, 503, "no model is loaded");
    struct sched_stats st;
    sched_get_stats(e.sched, &st);
    size_t cap = st.kv_blocks_total < KV_DEBUG_MAX_BLOCKS ? (size_t)st.kv_blocks_total : KV_DEBUG_MAX_BLOCKS;
    struct sched_kv_block *blocks = malloc((cap ? cap : 1) * sizeof *blocks);
    size_t n = 0;
    attnd_status rc = blocks ? sched_kv_blocks(e.sched, blocks, cap, &n) : ATTND_ERR_NOMEM;
    api_engine_release(c->srv);
    size_t len = 0;
    char *body = rc ? NULL : render(blocks, n < cap ? n : cap, n, &len);
    free(blocks);
    if (!body) return api_error_retry(c, 503, "cannot list the KV blocks: %s", attnd_status_str(rc ? rc : ATTND_ERR_NOMEM));
    return api_respond(c, 200, "application/json", body, len, NULL);
}
