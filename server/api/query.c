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

/* n hex digits at s, then the end. */
static bool all_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F'))) return false;
    return s[n] == 0;
}

bool api_parse_request_id(const char *s, const char *index, char *id, size_t cap, unsigned *out_index)
{
    static const char *const prefixes[] = {"gen-", "chatcmpl-", "cmpl-", "resp-"};
    if (!s) return false;
    size_t p = 0, len = strlen(s);
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++)
        if (!strncmp(s, prefixes[k], strlen(prefixes[k]))) p = strlen(prefixes[k]);
    /* prefixed: 1..32 hex digits (a shorter one is well formed, and simply not found); bare:
     * exactly 32, read as a gen- id */
    size_t digits = len - p;
    if (!digits || digits > API_HISTORY_ID_HEX || (!p && digits != API_HISTORY_ID_HEX) || !all_hex(s + p, digits))
        return false;
    bool choices = p && (s[0] == 'c'); /* chatcmpl-, cmpl-: n choices; gen-, resp-: one */
    unsigned long long i = 0;
    if (index && (!choices || !api_parse_uint(index, API_HISTORY_MAX_INDEX, &i))) return false;
    if (cap < 4 + len + 1) return false;
    size_t o = 0;
    if (!p) memcpy(id, "gen-", 4), o = 4;
    for (size_t k = 0; k <= len; k++) id[o + k] = (char)(k >= p && s[k] >= 'A' && s[k] <= 'F' ? s[k] + 32 : s[k]);
    *out_index = (unsigned)i;
    return true;
}
