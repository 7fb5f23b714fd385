/* reply.c - see reply.h. */
#include "server/api/reply.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/errors.h"

enum MHD_Result api_respond_json(struct api_conn *c, int code, cJSON *obj)
{
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!s) return api_error(c, 500, "out of memory");
    size_t len = strlen(s);
    /* cJSON allocates with malloc (the default hooks), so MHD may free() it */
    char *body = realloc(s, len + 2);
    if (!body) {
        free(s);
        return api_error(c, 500, "out of memory");
    }
    body[len++] = '\n';
    body[len] = 0;
    return api_respond(c, code, "application/json", body, len, NULL);
}

enum MHD_Result api_respond_buf(struct api_conn *c, struct api_buf *b)
{
    size_t len = b->len;
    char *body = api_buf_take(b);
    if (!body) return api_error_retry(c, 503, "out of memory while writing the answer");
    return api_respond(c, 200, "application/json", body, len, NULL);
}
