/* test_toolcall.c - the tool-call parsers (attnd/toolcall.h) on each format's published examples
 * (the shapes the model cards and the templates in ../shared/templates render), on answers
 * without calls, and on broken calls, which must come back as text. The format detection is
 * checked on the shared templates themselves. */
#include "attnd/toolcall.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

#include "tests/unit/testutil.h"

#define DS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CEND "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

struct want {
    const char *name;
    const char *args; /* as JSON: compared after parsing */
};

/* True if two JSON texts parse to equal values. */
static bool json_equal(const char *a, const char *b)
{
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    bool eq = x && y && cJSON_Compare(x, y, true);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return eq;
}

static void check(enum toolcall_format f, const char *text, const char *content, const struct want *calls, size_t n)
{
    struct toolcall_result r;
    attnd_status st = toolcall_parse(f, text, strlen(text), &r);
    const char *fn = toolcall_format_name(f);
    T_CHECK(st == ATTND_OK, "%s: status %d", fn, st);
    T_CHECK(r.n_calls == n, "%s: %zu calls, want %zu in %s", fn, r.n_calls, n, text);
    for (size_t i = 0; i < n && i < r.n_calls; i++) {
        T_CHECK(!strcmp(r.calls[i].name, calls[i].name), "%s: call %zu is %s", fn, i, r.calls[i].name);
        T_CHECK(json_equal(r.calls[i].arguments, calls[i].args), "%s: call %zu arguments %s", fn, i,
                r.calls[i].arguments);
        T_CHECK(r.calls[i].id && strlen(r.calls[i].id) >= 9, "%s: call %zu id", fn, i);
    }
    if (content) T_CHECK(r.content && !strcmp(r.content, content), "%s: content '%s'", fn, r.content ? r.content : "(null)");
    else T_CHECK(!r.content, "%s: content '%s', want none", fn, r.content);
    toolcall_result_free(&r);
}

static const struct want WEATHER[] = {{"get_weather", "{\"location\":\"Paris\",\"unit\":\"celsius\"}"}};
static const struct want TWO[] = {{"get_weather", "{\"location\":\"Paris\"}"}, {"get_time", "{\"tz\":\"CET\"}"}};

static void test_formats(void)
{
    check(TOOLCALL_HERMES,
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
          NULL, WEATHER, 1);
    check(TOOLCALL_HERMES,
          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>",
          "Let me check.", TWO, 2);
    /* the answer ended at </tool_call>'s stop token: the closing tag never came */
    check(TOOLCALL_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}",
          NULL, WEATHER, 1);
    check(TOOLCALL_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}",
          NULL, WEATHER, 1);
    check(TOOLCALL_LLAMA3,
          "{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}; "
          "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}",
          NULL, TWO, 2);
    static const struct want SEARCH[] = {{"brave_search", "{\"query\":\"weather in Paris\"}"}};
    check(TOOLCALL_LLAMA3, "<|python_tag|>brave_search.call(query=\"weather in Paris\")", NULL, SEARCH, 1);
    check(TOOLCALL_MISTRAL,
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}, "
          "\"id\": \"a1B2c3D4e\"}]",
          NULL, WEATHER, 1);
    check(TOOLCALL_MISTRAL_ARGS,
          "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"tz\": \"CET\"}", NULL, TWO, 2);
    check(TOOLCALL_DEEPSEEK_R1,
          "Sure." DS_BEGIN DS_CALL "function" DS_SEP "get_weather\n```json\n{\"location\": \"Paris\", \"unit\": \"celsius\"}\n```"
          DS_CEND DS_END,
          "Sure.", WEATHER, 1);
    check(TOOLCALL_DEEPSEEK_V3,
          DS_BEGIN DS_CALL "get_weather" DS_SEP "{\"location\": \"Paris\"}" DS_CEND DS_CALL "get_time" DS_SEP
          "{\"tz\": \"CET\"}" DS_CEND DS_END,
          NULL, TWO, 2);
    check(TOOLCALL_FUNCTIONARY,
          "<function=get_weather>{\"location\": \"Paris\"}</function><function=get_time>{\"tz\": \"CET\"}</function>", NULL,
          TWO, 2);
    static const struct want PY[] = {{"python", "{\"code\":\"print(2 + 2)\"}"}};
    check(TOOLCALL_FUNCTIONARY, "<|python_tag|>print(2 + 2)", NULL, PY, 1);
    check(TOOLCALL_COMMAND_R,
          "Plan: look it up.\nAction: ```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n        \"parameters\": "
          "{\"location\": \"Paris\", \"unit\": \"celsius\"}\n    }\n]\n```",
          "Plan: look it up.", WEATHER, 1);
    check(TOOLCALL_FIREFUNCTION,
          " functools[{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}]", NULL,
          WEATHER, 1);
    /* arguments given as a JSON string (the OpenAI shape) are taken too */
    check(TOOLCALL_HERMES,
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"location\\\": \\\"Paris\\\", \\\"unit\\\": \\\"celsius\\\"}\"}\n</tool_call>",
          NULL, WEATHER, 1);
}

static void test_text_and_broken(void)
{
    check(TOOLCALL_HERMES, "  It is sunny in Paris.\n", "It is sunny in Paris.", NULL, 0);
    check(TOOLCALL_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", NULL, 0);
    check(TOOLCALL_NONE, "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>",
          "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>", NULL, 0);
    /* a call that does not parse: the whole answer is text, never a broken tool_calls */
    const char *broken[][2] = {
        {"0", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Par"},
        {"0", "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},
        {"0", "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>"},
        {"0", "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>oops</tool_call>"},
        {"3", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": \"not json\"}]"},
        {"4", "[TOOL_CALLS]get_weather[ARGS]{\"location\""},
        {"6", "<function=get_weather>{\"location\": }</function>"},
        {"9", "functools[]"},
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        enum toolcall_format f = broken[i][0][0] == '0' ? TOOLCALL_HERMES : (enum toolcall_format)(broken[i][0][0] - '0');
        check(f, broken[i][1], broken[i][1], NULL, 0);
    }
    struct toolcall_result r;
    T_CHECK(toolcall_parse(TOOLCALL_HERMES, "", 0, &r) == ATTND_OK && !r.n_calls && !r.content, "empty answer");
    toolcall_result_free(&r);
    toolcall_result_free(NULL);
}

static void test_detection(void)
{
    static const struct {
        const char *file;
        enum toolcall_format f;
    } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", TOOLCALL_HERMES},
        {"Qwen-Qwen3-0.6B.jinja", TOOLCALL_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", TOOLCALL_HERMES},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", TOOLCALL_LLAMA3},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", TOOLCALL_LLAMA3},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", TOOLCALL_MISTRAL},
        {"Mistral-Small-3.2-24B-Instruct-2506.jinja", TOOLCALL_MISTRAL_ARGS},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TOOLCALL_DEEPSEEK_R1},
        {"deepseek-ai-DeepSeek-V3.1.jinja", TOOLCALL_DEEPSEEK_V3},
        {"meetkai-functionary-medium-v3.1.jinja", TOOLCALL_FUNCTIONARY},
        {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", TOOLCALL_COMMAND_R},
        {"fireworks-ai-llama-3-firefunction-v2.jinja", TOOLCALL_FIREFUNCTION},
        {"google-gemma-2-2b-it.jinja", TOOLCALL_NONE},
        {"microsoft-Phi-3.5-mini-instruct.jinja", TOOLCALL_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/templates/%s", t_shared(), cases[i].file);
        char *src = t_slurp(path, NULL);
        T_CHECK(src, "cannot read %s (set SHARED=...)", path);
        if (!src) continue;
        enum toolcall_format f = toolcall_format_for_template(src);
        T_CHECK(f == cases[i].f, "%s: detected %s, want %s", cases[i].file, toolcall_format_name(f),
                toolcall_format_name(cases[i].f));
        free(src);
    }
    T_CHECK(toolcall_format_for_template(NULL) == TOOLCALL_NONE, "no template");
}

int main(void)
{
    test_formats();
    test_text_and_broken();
    test_detection();
    printf("test_toolcall: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
