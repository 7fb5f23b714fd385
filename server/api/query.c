/* query.c - see query.h. */
#include "server/api/query.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/errors.h"
#include "server/api/history.h"

struct query_state {
    const char *const *names;
    const char **val;
    char unknown[64]; /* first unknown parameter */
    char twice[16];   /* first repeated parameter */
};

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct query_state *q = cls;
    int i = 0;
    while (q->names[i] && strcmp(q->names[i], key)) i++;
    if (!q->names[i]) {
        if (!q->unknown[0]) snprintf(q->unknown, sizeof q->unknown, "%s", key[0] ? key : "(empty)");
        return MHD_YES;
    }
    if (q->val[i] && !q->twice[0]) snprintf(q->twice, sizeof q->twice, "%s", key);
    q->val[i] = value ? value : "";
    return MHD_YES;
}

bool api_query_read(struct api_conn *c, const char *const *names, const char **val, enum MHD_Result *ret)
{
    struct query_state q = {.names = names, .val = val};
    for (int i = 0; names[i]; i++) val[i] = NULL;
    MHD_get_connection_values(c->mc, MHD_GET_ARGUMENT_KIND, collect, &q);
    if (q.unknown[0]) {
        char known[256] = "";
        for (int i = 0; names[i]; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", names[i]);
        *ret = api_error(c, 400, "unknown query parameter '%s' (known: %s)", q.unknown, known);
        return false;
    }
    if (q.twice[0]) {
        *ret = api_error(c, 400, "query parameter '%s' is given twice", q.twice);
        return false;
    }
    return true;
}

bool api_parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!s || *s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max) return false;
    *out = v;
    return true;
}

bool api_parse_request_id(const char *s, const char *index, uint64_t *key)
{
    if (!s) return false;
    enum api_history_ns ns = !strncmp(s, "chatcmpl-", 9) ? API_HISTORY_CHAT
                             : !strncmp(s, "cmpl-", 5)   ? API_HISTORY_CMPL
                                                         : API_HISTORY_GEN;
    if (ns != API_HISTORY_GEN) s = strchr(s, '-') + 1;
    else if (!strncmp(s, "gen-", 4)) s += 4;
    unsigned long long n, i = 0;
    if (!api_parse_uint(s, API_HISTORY_MAX_N, &n)) return false;
    if (index && (ns == API_HISTORY_GEN || !api_parse_uint(index, 255, &i))) return false;
    *key = api_history_key(ns, n, (unsigned)i);
    return true;
}
