/* test_jinja.c - the Jinja engine against hostile templates: unbounded recursion, huge loops,
 * megabyte and exponential outputs, deep nesting (of blocks, parentheses, operator chains,
 * filter chains and values), quadratic scans and sorts, memory hogs, and malformed sources.
 * Each must end with an error status and a message, quickly (here: under 0.5 s each, under
 * 2 s with ASan; the check allows 10 s for loaded machines), never a crash or a hang. Also:
 * raise_exception's message and flag, the caps given in jinja_opts, and the data spans of the
 * output. (Rendering real templates byte for byte as jinja2 does is
 * tests/integration/test_chat_templates.py.) */
#include "attnd/jinja.h"

#include "tests/unit/testutil.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Parses and renders src with ctx (JSON text or NULL); returns the status of whichever failed
 * (ATTND_OK if both worked) and fills err / *out_len. */
static attnd_status run(const char *src, size_t len, const char *ctx_json, const struct jinja_opts *o, char *err,
                        size_t errlen, size_t *out_len, double *secs)
{
    double t0 = now_s();
    cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
    jinja_tpl *t = NULL;
    attnd_status st = jinja_parse(src, len, &t, err, errlen);
    if (!st) {
        struct jinja_output out;
        st = jinja_render(t, ctx, o, &out, NULL, err, errlen);
        if (!st) {
            if (out_len) *out_len = out.len;
            jinja_output_free(&out);
        }
    }
    jinja_free(t);
    cJSON_Delete(ctx);
    *secs = now_s() - t0;
    return st;
}

static void hostile(const char *what, const char *src, size_t len, attnd_status want)
{
    char err[256] = "";
    double secs;
    size_t n = 0;
    attnd_status st = run(src, len, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", NULL, err, sizeof err, &n, &secs);
    T_CHECK(st == want && err[0], "%s: want status %d with a message, got %d (%s; %zu bytes out)", what, want, st, err, n);
    T_CHECK(secs < 10.0, "%s: took %.2f s", what, secs);
}

/* s repeated n times between head and tail, malloc'd. */
static char *repeat(const char *head, const char *s, size_t n, const char *tail, size_t *len)
{
    size_t hl = strlen(head), sl = strlen(s), tl = strlen(tail);
    char *b = t_xmalloc(hl + sl * n + tl + 1), *p = b;
    memcpy(p, head, hl), p += hl;
    for (size_t i = 0; i < n; i++) memcpy(p, s, sl), p += sl;
    memcpy(p, tail, tl), p += tl;
    *p = 0;
    *len = (size_t)(p - b);
    return b;
}

static void test_runaway(void)
{
#define H(what, src, st) hostile(what, src, sizeof src - 1, st)
    H("recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ATTND_ERR_RANGE);
    H("recursion through caller",
      "{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}", ATTND_ERR_RANGE);
    H("huge nested loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", ATTND_ERR_RANGE);
    H("range past the sandbox's limit", "{% for i in range(1000000000) %}x{% endfor %}", ATTND_ERR_RANGE);
    H("a 100 MB string", "{{ 'x' * 100000000 }}", ATTND_ERR_RANGE);
    H("megabytes of output", "{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}", ATTND_ERR_RANGE);
    H("exponential growth",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
      ATTND_ERR_RANGE);
    H("exponential list growth",
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}",
      ATTND_ERR_RANGE);
    H("a deeply nested value, printed",
      "{% set ns = namespace(x=[]) %}{% for i in range(20000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
      ATTND_ERR_RANGE);
    H("a deeply nested value, as JSON",
      "{% set ns = namespace(x=[]) %}{% for i in range(20000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson }}",
      ATTND_ERR_RANGE);
    H("quadratic membership",
      "{% set l = range(100000) | list %}{% for i in l %}{% if i in l %}{% endif %}{% endfor %}", ATTND_ERR_RANGE);
    H("quadratic sort", "{{ range(100000) | reverse | sort | length }}", ATTND_ERR_RANGE);
    H("quadratic unique", "{{ range(100000) | unique | list | length }}", ATTND_ERR_RANGE);
    H("a memory hog", "{% for i in range(100000) %}{% set x = 'z' * 1000000 %}{% endfor %}", ATTND_ERR_RANGE);
    H("repeated megabyte replaces",
      "{% set s = 'a' * 500000 %}{% for i in range(100000) %}{% set t = s.replace('a', 'b') %}{% endfor %}", ATTND_ERR_RANGE);
    H("repeated megabyte scans",
      "{% set s = 'é' * 300000 %}{% for i in range(100000) %}{{ s[-1] if s | length > 99 }}{% endfor %}", ATTND_ERR_RANGE);
}

static void test_nesting(void)
{
    size_t len;
    char *s = repeat("", "{% if true %}", 10000, "x", &len);
    hostile("10000 nested ifs", s, len, ATTND_ERR_INVALID);
    free(s);
    s = repeat("{{ ", "(", 100000, "1", &len);
    hostile("100000 parentheses", s, len, ATTND_ERR_INVALID);
    free(s);
    s = repeat("{{ ", "[", 100000, "", &len);
    hostile("100000 brackets", s, len, ATTND_ERR_INVALID);
    free(s);
    s = repeat("{{ ", "not ", 100000, "1 }}", &len);
    hostile("100000 nots", s, len, ATTND_ERR_INVALID);
    free(s);
    s = repeat("{{ ", "- ", 100000, "1 }}", &len);
    hostile("100000 unary minuses", s, len, ATTND_ERR_INVALID);
    free(s);
    s = repeat("{{ 1", " + 1", 100000, " }}", &len);
    hostile("a chain of 100000 additions", s, len, ATTND_ERR_RANGE);
    free(s);
    s = repeat("{{ 'a'", " | trim", 100000, " }}", &len);
    hostile("a chain of 100000 filters", s, len, ATTND_ERR_RANGE);
    free(s);
    s = repeat("{{ x", ".y", 100000, " }}", &len);
    hostile("a chain of 100000 attributes", s, len, ATTND_ERR_RANGE);
    free(s);
}

static void test_malformed(void)
{
    static const char *const bad[] = {"{{", "{{ 1 ", "{%", "{% if %}", "{% if x %}", "{% for %}", "{% endfor %}", "{#",
                                      "{{ 'abc }}", "{{ 1 + }}", "{% set %}", "{% macro %}", "{{ x | }}", "{{ x is }}",
                                      "{% foo %}", "{{ x | nofilter }}", "{{ x is notatest }}", "{{ ) }}", "{{ } }}",
                                      "{% for x in y %}{% else %}{% else %}{% endfor %}", "{{ 99999999999999999999 }}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char what[64];
        snprintf(what, sizeof what, "malformed %zu", i);
        hostile(what, bad[i], strlen(bad[i]), ATTND_ERR_INVALID);
    }
    static const char nul[] = "a\0b{{ 'c\0d' }}\xff\xfe{% if true %}\x80{% endif %}";
    char err[128];
    double secs;
    size_t n = 0;
    T_CHECK(run(nul, sizeof nul - 1, NULL, NULL, err, sizeof err, &n, &secs) == ATTND_OK && n == 9,
            "NUL and invalid UTF-8 bytes pass through (%zu bytes)", n);
}

static void test_contracts(void)
{
    char err[128];
    cJSON *ctx = cJSON_Parse("{\"messages\": [{\"role\": \"user\", \"content\": \"<|im_end|>hi\"}], \"bos_token\": \"<s>\"}");
    jinja_tpl *t = NULL;
    static const char src[] = "{{ bos_token }}[{{ messages[0].content | trim }}]{% if messages | length > 1 %}"
                              "{{ raise_exception('only one message, please') }}{% endif %}";
    T_CHECK(jinja_parse(src, sizeof src - 1, &t, err, sizeof err) == ATTND_OK, "parse: %s", err);
    struct jinja_output out;
    bool raised = true;
    T_CHECK(jinja_render(t, ctx, NULL, &out, &raised, err, sizeof err) == ATTND_OK && !raised, "render: %s", err);
    T_CHECK(!strcmp(out.text, "<s>[<|im_end|>hi]"), "output: %s", out.text);
    T_CHECK(out.n_data == 1 && out.data[0].off == 4 && out.data[0].len == 12, "the content (only) is data: %zu spans",
            out.n_data);
    jinja_output_free(&out);
    cJSON_AddItemToArray(cJSON_GetObjectItem(ctx, "messages"), cJSON_CreateObject());
    T_CHECK(jinja_render(t, ctx, NULL, &out, &raised, err, sizeof err) == ATTND_ERR_INVALID && raised &&
                !strcmp(err, "only one message, please") && !out.text,
            "raise_exception: its message, raised set (%s)", err);
    jinja_free(t);
    cJSON_Delete(ctx);
    static const char loop[] = "{% for i in range(1000) %}{{ i }}{% endfor %}";
    struct jinja_opts small = {.max_output = 100};
    double secs;
    T_CHECK(run(loop, sizeof loop - 1, NULL, &small, err, sizeof err, NULL, &secs) == ATTND_ERR_RANGE && strstr(err, "100 bytes"),
            "max_output: %s", err);
    small = (struct jinja_opts){.max_steps = 50};
    T_CHECK(run(loop, sizeof loop - 1, NULL, &small, err, sizeof err, NULL, &secs) == ATTND_ERR_RANGE && strstr(err, "steps"),
            "max_steps: %s", err);
    static const char rec[] = "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(10) }}";
    small = (struct jinja_opts){.max_depth = 5};
    T_CHECK(run(rec, sizeof rec - 1, NULL, &small, err, sizeof err, NULL, &secs) == ATTND_ERR_RANGE, "max_depth: %s", err);
    small = (struct jinja_opts){.max_depth = 20};
    T_CHECK(run(rec, sizeof rec - 1, NULL, &small, err, sizeof err, NULL, &secs) == ATTND_OK, "depth 11 within 20: %s", err);
    jinja_free(NULL);
    jinja_output_free(NULL);
}

int main(void)
{
    test_runaway();
    test_nesting();
    test_malformed();
    test_contracts();
    return t_finish("test_jinja");
}
