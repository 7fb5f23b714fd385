/* test_api.c - the HTTP layer's support modules, without a socket: JSON writing (buf.h) checked
 * by parsing it back with cJSON and against RFC 8259's escapes, the route table (routes.h), the
 * finished-request history (history.h), the status mapping and error shape (errors.h) and the
 * Prometheus text (metrics.h). The daemon over real HTTP is tested in tests/integration. */
#include <cjson/cJSON.h>
#include <string.h>

#include "attnd/sched.h"
#include "server/api/api.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/history.h"
#include "server/api/metrics.h"
#include "server/api/query.h"
#include "server/api/routes.h"
#include "tests/unit/testutil.h"

/* s[0..n) written as a JSON string and parsed back by cJSON; malloc'd, NULL if it does not parse. */
static char *json_roundtrip(const char *s, size_t n, char **written)
{
    struct api_buf b = {0};
    api_buf_json_str(&b, s, n);
    *written = api_buf_take(&b);
    cJSON *v = *written ? cJSON_Parse(*written) : NULL;
    char *out = cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
    cJSON_Delete(v);
    return out;
}

static void test_json_strings(void)
{
    static const char *const valid[] = {"", "plain", "quote \" backslash \\ slash /", "tab\tnl\ncr\r",
                                        "\x01\x1f ctl", "caf\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80"};
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        char *w = NULL, *back = json_roundtrip(valid[i], strlen(valid[i]), &w);
        T_CHECK(back && !strcmp(back, valid[i]), "valid string %zu: wrote %s", i, w ? w : "(null)");
        for (const char *p = w; p && *p; p++) T_CHECK((unsigned char)*p >= 0x20, "raw control byte in %s", w);
        free(back);
        free(w);
    }
    /* RFC 8259 section 7: control characters as \u00XX (or the short forms) */
    char *w = NULL, *back = json_roundtrip("\x01", 1, &w);
    T_CHECK(w && !strcmp(w, "\"\\u0001\""), "U+0001 written as %s", w ? w : "(null)");
    free(back);
    free(w);
    /* bytes that are not UTF-8 (a lone continuation byte, a truncated sequence, an overlong
     * encoding) become U+FFFD, so the output is always valid UTF-8 */
    static const struct {
        const char *in, *want;
    } bad[] = {{"a\x80z", "a\xef\xbf\xbdz"}, {"\xe2\x96", "\xef\xbf\xbd\xef\xbf\xbd"}, {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        back = json_roundtrip(bad[i].in, strlen(bad[i].in), &w);
        T_CHECK(back && !strcmp(back, bad[i].want), "invalid UTF-8 %zu: wrote %s", i, w ? w : "(null)");
        free(back);
        free(w);
    }
    /* an embedded NUL is a control character too */
    back = json_roundtrip("a\0b", 3, &w);
    T_CHECK(w && !strcmp(w, "\"a\\u0000b\""), "NUL written as %s", w ? w : "(null)");
    free(back);
    free(w);
}

static void test_floats(void)
{
    static const float vals[] = {0.0f, 1.0f, -2.5f, 0.1f, 3.14159274f, 1e-30f, 3.4e38f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        struct api_buf b = {0};
        api_buf_float(&b, vals[i]);
        char *s = api_buf_take(&b);
        T_CHECK(s && (float)strtod(s, NULL) == vals[i], "float %g written as %s does not round-trip", vals[i], s);
        free(s);
    }
    struct api_buf b = {0};
    api_buf_float(&b, 1.0 / 0.0);
    api_buf_puts(&b, ",");
    api_buf_float(&b, 0.0 / 0.0);
    T_CHECK(b.p && !strcmp(b.p, "null,null"), "non-finite floats written as %s", b.p);
    api_buf_free(&b);
    /* longer than the printf fast path */
    api_buf_printf(&b, "%0300d", 7);
    T_CHECK(b.len == 300 && b.p[299] == '7' && !b.oom, "long printf: %zu bytes", b.len);
    api_buf_free(&b);
}

static void test_routes(void)
{
    static const struct {
        const char *url, *method;
        bool found, allowed;
    } cases[] = {
        {"/v1/generate", "POST", true, true},   {"/v1/generate", "GET", true, false},
        {"/attention", "GET", true, true},      {"/attention", "HEAD", true, true},
        {"/attention", "DELETE", true, false},  {"/health", "POST", true, false},
        {"/metrics", "GET", true, true},        {"/", "GET", true, true},
        {"/index.html", "GET", true, true},     {"/nope", "GET", false, false},
        {"/v1/generate/", "POST", false, false}, {"/attention", "GE", true, false},
        {"/attention", "", true, false},        {"/v1/chat/completions", "POST", true, true},
        {"/v1/completions", "POST", true, true}, {"/v1/completions", "GET", true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct api_route *r = api_route_find(cases[i].url);
        T_CHECK((r != NULL) == cases[i].found, "%s found: %d", cases[i].url, r != NULL);
        if (r) T_CHECK(api_route_allows(r, cases[i].method) == cases[i].allowed, "%s %s", cases[i].method, cases[i].url);
    }
    const struct api_route *h = api_route_find("/health"), *g = api_route_find("/v1/generate");
    T_CHECK(h && (h->flags & ROUTE_OPEN) && !(h->flags & ROUTE_ENGINE), "/health is open and needs no engine");
    T_CHECK(g && !(g->flags & ROUTE_OPEN) && (g->flags & ROUTE_ENGINE), "/v1/generate needs the key and the engine");
    for (size_t i = 0; i < api_n_routes; i++) T_CHECK(api_routes[i].handler != NULL, "route %zu has no handler", i);
}

static void test_history(void)
{
    struct http_server srv = {0};
    T_CHECK(api_history_create(0, &srv.history) == ATTND_ERR_INVALID && !srv.history, "keep 0 refused");
    T_CHECK(api_history_create(3, &srv.history) == ATTND_OK, "create");
    struct api_history_hit hit = {0};
    T_CHECK(api_history_get(&srv, 0, NULL, 0, &hit) == 404, "empty history: 404");
    struct api_reqid a, b, c;
    T_CHECK(!api_history_new_id("gen", 1, &a) && !api_history_new_id("chatcmpl", 1, &b) &&
                !api_history_new_id("cmpl", 2, &c),
            "ids");
    const int32_t p1[] = {1, 2}, g1[] = {3}, p2[] = {4}, p3[] = {5, 6};
    api_history_remember(&srv, &a, 0, p1, 2, g1, 1);
    api_history_remember(&srv, &b, 1, p2, 1, NULL, 0);
    T_CHECK(api_history_get(&srv, 1, a.id, 0, &hit) == 0 && !strcmp(hit.id, a.id) && hit.n == 3 &&
                hit.tokens[0] == 1 && hit.tokens[2] == 3,
            "request a: prompt then generated tokens");
    free(hit.tokens);
    T_CHECK(api_history_get(&srv, 1, NULL, 0, &hit) == 0 && !strcmp(hit.id, b.id) && hit.index == 1 &&
                hit.tokens[0] == 4,
            "tenant 1's latest is b, choice 1");
    free(hit.tokens);
    T_CHECK(api_history_get(&srv, 1, b.id, 0, &hit) == 404, "b's choice 0 was not kept");
    T_CHECK(api_history_get(&srv, 2, a.id, 0, &hit) == 404 && api_history_get(&srv, 2, NULL, 0, &hit) == 404,
            "tenant 2 finds none of tenant 1's requests, by id or as the latest");
    api_history_remember(&srv, &c, 0, p3, 2, NULL, 0);
    T_CHECK(api_history_get(&srv, 1, NULL, 0, &hit) == 0 && !strcmp(hit.id, b.id), "tenant 1's latest is still b");
    free(hit.tokens);
    T_CHECK(api_history_get(&srv, 2, NULL, 0, &hit) == 0 && !strcmp(hit.id, c.id), "tenant 2's latest is c");
    free(hit.tokens);
    api_history_remember(&srv, &c, 1, p3, 2, NULL, 0);
    T_CHECK(api_history_get(&srv, 1, a.id, 0, &hit) == 404, "the oldest of 3 fell out");
    api_history_destroy(srv.history);
    api_history_destroy(NULL);
}

/* Ids: 128 random bits in hex behind the route's prefix, parsed back as the history keeps them. */
static void test_request_ids(void)
{
    struct api_reqid r1, r2;
    T_CHECK(!api_history_new_id("chatcmpl", 3, &r1) && !api_history_new_id("chatcmpl", 3, &r2), "new ids");
    T_CHECK(strlen(r1.id) == 9 + 32 && !strncmp(r1.id, "chatcmpl-", 9) && strspn(r1.id + 9, "0123456789abcdef") == 32 &&
                r1.tenant == 3,
            "shape: %s", r1.id);
    T_CHECK(strcmp(r1.id, r2.id) != 0, "two ids differ");
    T_CHECK(api_history_new_id("a-prefix-far-too-long", 0, &r2) == ATTND_ERR_INVALID, "prefix too long");
    char hex[33], up[64];
    memcpy(hex, r1.id + 9, 33);
    snprintf(up, sizeof up, "gen-%s", hex);
    for (char *q = up + 4; *q; q++) *q = (char)(*q >= 'a' && *q <= 'f' ? *q - 32 : *q);
    static const struct {
        const char *id, *index, *back;
        unsigned i;
        bool ok;
    } cases[] = {
        {"gen-7", NULL, "gen-7", 0, true},       {"chatcmpl-5", NULL, "chatcmpl-5", 0, true},
        {"chatcmpl-5", "3", "chatcmpl-5", 3, true}, {"cmpl-ab", "255", "cmpl-ab", 255, true},
        {"cmpl-5", "256", NULL, 0, false},       {"gen-7", "1", NULL, 0, false},
        {"chatcmpl-", NULL, NULL, 0, false},     {"chatcmpl-x", NULL, NULL, 0, false},
        {"7", NULL, NULL, 0, false},             {"gen-000000000000000000000000000000000", NULL, NULL, 0, false},
        {"gen-1 ", NULL, NULL, 0, false},        {NULL, "1", NULL, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char id[API_HISTORY_ID_MAX] = "";
        unsigned idx = 99;
        bool ok = api_parse_request_id(cases[i].id, cases[i].index, id, sizeof id, &idx);
        T_CHECK(ok == cases[i].ok, "id %s index %s: %d", cases[i].id ? cases[i].id : "NULL",
                cases[i].index ? cases[i].index : "NULL", ok);
        if (ok) T_CHECK(!strcmp(id, cases[i].back) && idx == cases[i].i, "id %s: %s %u", cases[i].id, id, idx);
    }
    char id[API_HISTORY_ID_MAX];
    unsigned idx;
    char want[64];
    snprintf(want, sizeof want, "gen-%s", hex);
    T_CHECK(api_parse_request_id(hex, NULL, id, sizeof id, &idx) && !strcmp(id, want), "32 bare hex digits: a gen- id");
    T_CHECK(api_parse_request_id(up, NULL, id, sizeof id, &idx) && !strcmp(id, want), "upper-case hex: %s", id);
    T_CHECK(api_parse_request_id(r1.id, "2", id, sizeof id, &idx) && !strcmp(id, r1.id) && idx == 2, "a real id");
}

static void test_errors(void)
{
    T_CHECK(api_status_code(ATTND_ERR_INVALID, false) == 400, "INVALID");
    T_CHECK(api_status_code(ATTND_ERR_RANGE, false) == 400 && api_status_code(ATTND_ERR_RANGE, true) == 413, "RANGE");
    T_CHECK(api_status_code(ATTND_ERR_NOMEM, false) == 503 && api_status_code(ATTND_ERR_UNSUPPORTED, true) == 503,
            "NOMEM, UNSUPPORTED");
    T_CHECK(api_status_code(ATTND_ERR_INTERNAL, true) == 500, "INTERNAL");
    T_CHECK(!strcmp(api_error_type(404), "not_found") && !strcmp(api_error_type(418), "invalid_request") &&
                !strcmp(api_error_type(502), "internal_error"),
            "error types");
    /* the shape, with the count going to the metrics under the same type name */
    const char *const routes[] = {"/a"};
    const struct metrics_labels labels = {routes, 1, api_error_kind_names, API_ERROR_KIND_COUNT};
    struct http_server srv = {0};
    T_CHECK(metrics_create(&labels, &srv.metrics) == ATTND_OK, "metrics_create");
    struct api_buf b = {0};
    api_error_json(&srv, &b, 413, "too \"big\"");
    cJSON *v = cJSON_Parse(b.p), *e = cJSON_GetObjectItem(v, "error");
    T_CHECK(cJSON_GetArraySize(v) == 1 && cJSON_GetArraySize(e) == 3, "one key 'error' with three fields: %s", b.p);
    T_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "code")) == 413, "code");
    T_CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")), "payload_too_large"), "type");
    T_CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "message")), "too \"big\""), "message");
    cJSON_Delete(v);
    api_buf_free(&b);
    T_CHECK(metrics_render(srv.metrics, NULL, NULL, NULL, &b) == ATTND_OK, "render");
    T_CHECK(b.p && strstr(b.p, "\nattnd_errors_total{type=\"payload_too_large\"} 1\n"), "413 counted");
    T_CHECK(b.p && strstr(b.p, "\nattnd_errors_total{type=\"not_found\"} 0\n"), "404 not counted");
    api_buf_free(&b);
    metrics_destroy(srv.metrics);
}

static void test_metrics(void)
{
    const char *const routes[] = {"/x", "/y"}, *const types[] = {"t0", "t1"};
    const struct metrics_labels labels = {routes, 2, types, 2};
    struct metrics *m = NULL;
    T_CHECK(metrics_create(NULL, &m) == ATTND_ERR_INVALID && !m, "no labels refused");
    T_CHECK(metrics_create(&labels, &m) == ATTND_OK, "create");
    metrics_request(m, 1, 200);
    metrics_request(m, 1, 200);
    metrics_request(m, 2, 404); /* no route: "other" */
    metrics_request(m, 3, 200); /* out of range: ignored */
    metrics_request(m, 0, 600); /* not a status: ignored */
    metrics_error(m, 1);
    metrics_error(m, 2); /* out of range: ignored */
    metrics_finish(m, metrics_finish_from("length"));
    metrics_finish(m, metrics_finish_from("bogus"));
    metrics_ttft(m, 0.003);
    struct sched_stats st = {.queued = 3, .kv_blocks_free = 7};
    struct api_buf b = {0};
    T_CHECK(metrics_render(m, &st, "cpu", "a \"b\"", &b) == ATTND_OK, "render");
    static const char *const want[] = {
        "\nattnd_requests_total{route=\"/y\",status=\"200\"} 2\n",
        "\nattnd_requests_total{route=\"other\",status=\"404\"} 1\n",
        "\nattnd_errors_total{type=\"t1\"} 1\n",
        "\nattnd_errors_total{type=\"t0\"} 0\n",
        "\nattnd_generations_total{finish_reason=\"length\"} 1\n",
        "\nattnd_generations_total{finish_reason=\"stop\"} 0\n",
        "\nattnd_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n",
        "\nattnd_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n",
        "\nattnd_queue_depth 3\n",
        "\nattnd_kv_cache_blocks{state=\"free\"} 7\n",
        "\nattnd_model_loaded 1\n",
        "attnd_backend_info{backend=\"cpu\",device=\"a \\\"b\\\"\"} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        T_CHECK(b.p && strstr(b.p, want[i]), "missing line %s", want[i]);
    T_CHECK(b.p && !strstr(b.p, "route=\"/x\""), "a route without requests has no line");
    api_buf_free(&b);
    T_CHECK(metrics_render(m, NULL, NULL, NULL, &b) == ATTND_OK && strstr(b.p, "\nattnd_model_loaded 0\n") &&
                !strstr(b.p, "attnd_backend_info"),
            "no engine: zeros and no backend line");
    api_buf_free(&b);
    metrics_destroy(m);
    metrics_destroy(NULL);
}

int main(void)
{
    test_json_strings();
    test_floats();
    test_routes();
    test_history();
    test_request_ids();
    test_errors();
    test_metrics();
    printf("test_api: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
