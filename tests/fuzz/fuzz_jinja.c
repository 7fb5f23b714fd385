/* fuzz_jinja.c - the Jinja engine (jinja.h) on arbitrary template bytes: parse, then render with a
 * small fixed chat context (system / user / assistant with tool_calls / tool messages, tools,
 * bos_token, eos_token, add_generation_prompt) under tight caps. Seeds: the real chat templates
 * (tests/fuzz/corpus/fuzz_jinja, copies of $SHARED/templates). Contracts (jinja.h):
 *  - jinja_parse returns ATTND_OK with a handle, or an error with a message and no handle;
 *  - jinja_render returns ATTND_OK with a NUL-terminated text of the stated length whose data
 *    spans are in order, not overlapping and inside the text, or an error with a message and
 *    the output zeroed;
 *  - rendering is deterministic: a second render gives the same status and bytes;
 *  - nothing crashes, leaks or runs past libFuzzer's timeout (the caps end every render). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "attnd/jinja.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"What is the weather in Paris? é <|im_end|>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\","
    " \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21 C\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nok\\n</think>\\n\\nIt is 21 C.\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static cJSON *g_ctx;
static struct tm g_now = {.tm_year = 126, .tm_mon = 11, .tm_mday = 1, .tm_hour = 9, .tm_min = 30, .tm_wday = 2, .tm_yday = 334};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_quiet();
    g_ctx = cJSON_Parse(k_ctx);
    FZ_REQUIRE(g_ctx != NULL, "the fixed context parses");
    return 0;
}

static void check_output(const struct jinja_output *o)
{
    FZ_REQUIRE(o->text != NULL && o->text[o->len] == 0, "the text is NUL-terminated at its length");
    size_t end = 0;
    for (size_t i = 0; i < o->n_data; i++) {
        FZ_REQUIRE(o->data[i].len > 0 && o->data[i].off >= end, "data spans in order, not overlapping");
        end = o->data[i].off + o->data[i].len;
        FZ_REQUIRE(end <= o->len, "data spans inside the text");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    jinja_tpl *t = (jinja_tpl *)&err; /* must be set to NULL on failure */
    attnd_status st = jinja_parse((const char *)data, size, &t, err, sizeof err);
    if (st) {
        FZ_REQUIRE(t == NULL && err[0], "a parse error leaves no handle and says why");
        return 0;
    }
    FZ_REQUIRE(t != NULL, "a parsed template");
    struct jinja_opts opts = {.max_output = 65536, .max_steps = 200000, .max_depth = 16, .max_memory = (size_t)16 << 20,
                              .now = &g_now};
    struct jinja_output a, b;
    char err2[256] = "";
    attnd_status s1 = jinja_render(t, g_ctx, &opts, &a, NULL, err, sizeof err);
    attnd_status s2 = jinja_render(t, g_ctx, &opts, &b, NULL, err2, sizeof err2);
    FZ_REQUIRE(s1 == s2, "rendering is deterministic (status)");
    if (s1 == ATTND_OK) {
        check_output(&a);
        check_output(&b);
        FZ_REQUIRE(a.len == b.len && !memcmp(a.text, b.text, a.len) && a.n_data == b.n_data,
                   "rendering is deterministic (bytes)");
    } else {
        FZ_REQUIRE(err[0] && !strcmp(err, err2), "an error says why, the same way each time");
        FZ_REQUIRE(a.text == NULL && a.len == 0 && a.data == NULL && a.n_data == 0, "a failed render leaves no output");
    }
    jinja_output_free(&a);
    jinja_output_free(&b);
    jinja_free(t);
    return 0;
}
