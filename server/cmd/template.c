/* template.c - `attnd template (--file T.jinja | --gguf MODEL.gguf [--variant NAME]) --cases C.json`:
 * renders a chat template (jinja.h) for every case of C.json as Hugging Face transformers'
 * apply_chat_template does, and prints a JSON list of {"name", "prompt"} or {"name", "error"},
 * the format of shared/tools/render_chat.py, so the two can be compared byte for byte.
 * C.json: [{"name", "messages", "tools"?, "add_generation_prompt"?, "bos_token"?, ...}]; every
 * key but "name" is a template variable (defaults: add_generation_prompt true, bos_token "<s>",
 * eos_token "</s>"). strftime_now's clock is fixed at 2026-12-01 09:30:00, as the reference's. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "attnd/file.h"
#include "attnd/gguf.h"
#include "attnd/jinja.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

#define MAX_FILE ((size_t)64 << 20)


/* The template text of --file, or of the GGUF's tokenizer.chat_template[.VARIANT]. */
static char *load_template(const char *file, const char *gguf_path, const char *variant, size_t *len)
{
    if (file) return file_read_all(file, MAX_FILE, len);
    struct gguf *g = NULL;
    char err[256], key[128];
    if (gguf_open(gguf_path, &g, err, sizeof err)) {
        fprintf(stderr, "attnd template: %s: %s\n", gguf_path, err);
        return NULL;
    }
    snprintf(key, sizeof key, "tokenizer.chat_template%s%s", variant ? "." : "", variant ? variant : "");
    struct gguf_str s = {0};
    char *out = NULL;
    if (gguf_get_str(g, key, &s) == ATTND_OK && s.ptr && (out = malloc((size_t)s.len + 1))) {
        memcpy(out, s.ptr, (size_t)s.len);
        out[s.len] = 0;
        *len = (size_t)s.len;
    } else {
        fprintf(stderr, "attnd template: %s has no %s\n", gguf_path, key);
    }
    gguf_close(g);
    return out;
}

/* One case's result object. */
static cJSON *render_case(const jinja_tpl *t, const cJSON *c, const struct tm *now)
{
    cJSON *ctx = cJSON_Duplicate(c, 1), *res = cJSON_CreateObject();
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    if (!ctx || !res) goto oom;
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "name");
    if (!cJSON_HasObjectItem(ctx, "add_generation_prompt")) cJSON_AddTrueToObject(ctx, "add_generation_prompt");
    if (!cJSON_HasObjectItem(ctx, "bos_token")) cJSON_AddStringToObject(ctx, "bos_token", "<s>");
    if (!cJSON_HasObjectItem(ctx, "eos_token")) cJSON_AddStringToObject(ctx, "eos_token", "</s>");
    cJSON_AddStringToObject(res, "name", cJSON_IsString(name) ? name->valuestring : "");
    struct jinja_opts o = {.now = now};
    struct jinja_output out;
    char err[1024];
    if (jinja_render(t, ctx, &o, &out, NULL, err, sizeof err) == ATTND_OK) {
        cJSON_AddStringToObject(res, "prompt", out.text);
        jinja_output_free(&out);
    } else {
        cJSON_AddStringToObject(res, "error", err);
    }
    cJSON_Delete(ctx);
    return res;
oom:
    cJSON_Delete(ctx);
    cJSON_Delete(res);
    return NULL;
}

static int run_cases(const char *src, size_t len, const char *cases_path)
{
    size_t clen = 0;
    char *ctext = file_read_all(cases_path, MAX_FILE, &clen), err[512];
    cJSON *cases = ctext ? cJSON_ParseWithLength(ctext, clen) : NULL, *outl = cJSON_CreateArray();
    free(ctext);
    jinja_tpl *t = NULL;
    int rc = 1;
    if (!cJSON_IsArray(cases)) {
        fprintf(stderr, "attnd template: %s: not a JSON list\n", cases_path);
    } else {
        bool parsed = jinja_parse(src, len, &t, err, sizeof err) == ATTND_OK;
        struct tm now = {.tm_year = 126, .tm_mon = 11, .tm_mday = 1, .tm_hour = 9, .tm_min = 30};
        time_t tt = timegm(&now);
        gmtime_r(&tt, &now);
        const cJSON *c;
        cJSON_ArrayForEach(c, cases) /* a template that does not parse refuses every case, as the reference does */
        {
            cJSON *r = parsed ? render_case(t, c, &now) : cJSON_CreateObject();
            if (!parsed && r) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
                cJSON_AddStringToObject(r, "name", cJSON_IsString(name) ? name->valuestring : "");
                cJSON_AddStringToObject(r, "error", err);
            }
            cJSON_AddItemToArray(outl, r);
        }
        char *s = cJSON_Print(outl);
        if (s) {
            puts(s);
            rc = 0;
        }
        free(s);
    }
    jinja_free(t);
    cJSON_Delete(cases);
    cJSON_Delete(outl);
    return rc;
}

int cmd_template(int argc, char **argv)
{
    const char *file = NULL, *gguf_path = NULL, *variant = NULL, *cases = NULL;
    const struct cli_opt opts[] = {
        {CLI_OPT("--file", "-f", CLI_STR, &file, "PATH", "the Jinja template to render")},
        {CLI_OPT("--gguf", "-m", CLI_STR, &gguf_path, "PATH", "render the template a GGUF file carries")},
        {CLI_OPT("--variant", NULL, CLI_STR, &variant, "NAME",
                 "with --gguf: the named template tokenizer.chat_template.NAME (e.g. tool_use)")},
        {CLI_OPT("--cases", "-c", CLI_STR, &cases, "PATH", "JSON list of cases (required)")},
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "template", .usage = "attnd template (--file T.jinja | --gguf MODEL.gguf) --cases CASES.json",
        .opts = opts,
        .footer = "  Renders the chat template for each case and prints [{\"name\", \"prompt\" | \"error\"}]\n"
                  "  (the output of shared/tools/render_chat.py). The clock is fixed at 2026-12-01 09:30.\n"};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO) return rc;
    if (!cases || !!file == !!gguf_path) {
        cli_usage(&cmd, stderr);
        return 2;
    }
    size_t len = 0;
    char *src = load_template(file, gguf_path, variant, &len);
    if (!src) {
        if (file) fprintf(stderr, "attnd template: cannot read %s\n", file);
        return 1;
    }
    rc = run_cases(src, len, cases);
    free(src);
    return rc;
}
