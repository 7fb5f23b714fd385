/* info.c - `attnd info [--json] FILE`: dumps a GGUF file's header (a debugging aid).
 * `attnd info --cpu [FILE]`: the CPU, and for each weight type (the file's matrices, or every
 * type the kernels take) the time of every kernel variant per family and the one chosen
 * (cpu_tune.h: measured once per CPU, then read from the cache file).
 *
 * --json prints one object that tests/js/check_gguf.mjs compares with an independent parser:
 *   {"version","alignment","data_offset","file_size",
 *    "kv":{key: scalar or string value, arrays as {"type": element type, "n": count}},
 *    "kv_types":{key: value type name},
 *    "tensors":[{"name","type","type_id","ne":[...],"offset" (absolute),"nbytes"}],
 *    "types":{type name: {"tensors": count, "bytes": total}}}
 * The text form ends with the same per-type summary, so a user sees which quantization a file holds.
 * Integers are written as exact decimal literals (a u64 above 2^53 does not survive a double),
 * floats with 17 significant digits (NaN and infinities as null); strings are escaped byte by
 * byte, so NUL and control bytes survive. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/model.h"
#include "attnd/tensor.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_tune.h"
#include "kernels/cpu/fa2.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

static void print_str(struct gguf_str s, size_t max)
{
    putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch < 0x20 || ch == '"' || ch == '\\') printf("\\x%02x", ch);
        else putchar(ch);
    }
    if (s.len > max) printf("...");
    putchar('"');
}

/* Per tensor type: how many tensors and how many bytes (ids are < TENSOR_TYPE_MAX: the reader
 * rejects unknown ones). */
struct type_sum {
    uint64_t count[TENSOR_TYPE_MAX], bytes[TENSOR_TYPE_MAX];
};

static void sum_types(const struct gguf *g, struct type_sum *ts)
{
    memset(ts, 0, sizeof *ts);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        if (t->type >= TENSOR_TYPE_MAX) continue;
        ts->count[t->type]++;
        ts->bytes[t->type] += t->nbytes;
    }
}

static void print_types(const struct gguf *g)
{
    struct type_sum ts;
    sum_types(g, &ts);
    printf("  types:");
    for (int t = 0; t < TENSOR_TYPE_MAX; t++)
        if (ts.count[t])
            printf(" %s %" PRIu64 " tensors %.2f MB;", tensor_type_name((uint32_t)t), ts.count[t],
                   (double)ts.bytes[t] / 1e6);
    putchar('\n');
}

static int print_text(const struct gguf *g)
{
    printf("GGUF v%u, %" PRIu64 " bytes, alignment %u, data at %" PRIu64 "\n", gguf_version(g), gguf_file_size(g),
           gguf_alignment(g), gguf_data_offset(g));
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        enum gguf_vtype t = gguf_kv_type(g, i);
        printf("  %-44s %-6s ", gguf_kv_key(g, i), gguf_vtype_name(t));
        if (t == GGUF_STRING) print_str(gguf_kv_str(g, i), 60);
        else if (t == GGUF_F32 || t == GGUF_F64) printf("%g", gguf_kv_float(g, i));
        else if (t == GGUF_ARRAY) {
            enum gguf_vtype et = gguf_arr_type(g, i);
            uint64_t n = gguf_arr_n(g, i);
            printf("[%" PRIu64 " x %s]", n, gguf_vtype_name(et));
            for (uint64_t j = 0; j < n && j < 4; j++) {
                putchar(' ');
                if (et == GGUF_STRING) print_str(gguf_arr_str(g, i, j), 20);
                else if (et == GGUF_F32 || et == GGUF_F64) printf("%g", gguf_arr_float(g, i, j));
                else printf("%" PRId64, gguf_arr_int(g, i, j));
            }
        } else printf("%" PRId64, gguf_kv_int(g, i));
        putchar('\n');
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        printf("  tensor %-32s %-5s [", t->name, tensor_type_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%" PRIu64, d ? ", " : "", t->ne[d]);
        printf("] @%" PRIu64 " (%" PRIu64 " bytes)\n", t->offset, t->nbytes);
    }
    print_types(g);
    return 0;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static cJSON *json_u64(uint64_t v)
{
    char b[24];
    snprintf(b, sizeof b, "%" PRIu64, v);
    return cJSON_CreateRaw(b);
}

static cJSON *json_i64(int64_t v)
{
    char b[24];
    snprintf(b, sizeof b, "%" PRId64, v);
    return cJSON_CreateRaw(b);
}

/* Shortest-safe exact text of a double (%.17g round-trips); JSON has no NaN/Inf, so null. */
static cJSON *json_f64(double v)
{
    char b[32];
    if (!isfinite(v)) return cJSON_CreateNull();
    snprintf(b, sizeof b, "%.17g", v);
    return cJSON_CreateRaw(b);
}

/* A JSON string literal for s (which may hold any byte, NUL included); bytes >= 0x80 are
 * copied as they are, so valid UTF-8 stays valid. */
static cJSON *json_str(struct gguf_str s)
{
    size_t cap = (size_t)s.len * 6 + 3;
    char *b = malloc(cap), *o = b;
    if (!b) return NULL;
    *o++ = '"';
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            o += snprintf(o, 7, "\\u%04x", ch);
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    *o = 0;
    cJSON *j = cJSON_CreateRaw(b);
    free(b);
    return j;
}

static cJSON *json_kv_value(const struct gguf *g, int64_t i)
{
    enum gguf_vtype t = gguf_kv_type(g, i);
    switch (t) {
    case GGUF_STRING: return json_str(gguf_kv_str(g, i));
    case GGUF_F32: case GGUF_F64: return json_f64(gguf_kv_float(g, i));
    case GGUF_BOOL: return cJSON_CreateBool(gguf_kv_int(g, i) != 0);
    case GGUF_U64: return json_u64((uint64_t)gguf_kv_int(g, i)); /* kv_int keeps the bits */
    case GGUF_ARRAY: {
        cJSON *a = cJSON_CreateObject();
        if (!a) return NULL;
        cJSON_AddStringToObject(a, "type", gguf_vtype_name(gguf_arr_type(g, i)));
        cJSON_AddItemToObject(a, "n", json_u64(gguf_arr_n(g, i)));
        return a;
    }
    default: return json_i64(gguf_kv_int(g, i));
    }
}

static int print_json(const struct gguf *g)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) goto oom;
    cJSON_AddItemToObject(root, "version", json_u64(gguf_version(g)));
    cJSON_AddItemToObject(root, "alignment", json_u64(gguf_alignment(g)));
    cJSON_AddItemToObject(root, "data_offset", json_u64(gguf_data_offset(g)));
    cJSON_AddItemToObject(root, "file_size", json_u64(gguf_file_size(g)));
    cJSON *kv = cJSON_AddObjectToObject(root, "kv");
    cJSON *kv_types = cJSON_AddObjectToObject(root, "kv_types");
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    if (!kv || !kv_types || !tensors) goto oom;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        cJSON *v = json_kv_value(g, i);
        if (!v || !cJSON_AddItemToObject(kv, key, v)) {
            cJSON_Delete(v);
            goto oom;
        }
        cJSON_AddStringToObject(kv_types, key, gguf_vtype_name(gguf_kv_type(g, i)));
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(tensors, o)) {
            cJSON_Delete(o);
            goto oom;
        }
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "type", tensor_type_name(t->type));
        cJSON_AddItemToObject(o, "type_id", json_u64(t->type));
        cJSON *ne = cJSON_AddArrayToObject(o, "ne");
        if (!ne) goto oom;
        for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(ne, json_u64(t->ne[d]));
        cJSON_AddItemToObject(o, "offset", json_u64(t->offset));
        cJSON_AddItemToObject(o, "nbytes", json_u64(t->nbytes));
    }
    struct type_sum ts;
    sum_types(g, &ts);
    cJSON *types = cJSON_AddObjectToObject(root, "types");
    if (!types) goto oom;
    for (int t = 0; t < TENSOR_TYPE_MAX; t++) {
        if (!ts.count[t]) continue;
        cJSON *o = cJSON_AddObjectToObject(types, tensor_type_name((uint32_t)t));
        if (!o) goto oom;
        cJSON_AddItemToObject(o, "tensors", json_u64(ts.count[t]));
        cJSON_AddItemToObject(o, "bytes", json_u64(ts.bytes[t]));
    }
    char *s = cJSON_Print(root);
    if (!s) goto oom;
    puts(s);
    cJSON_free(s);
    cJSON_Delete(root);
    return 0;
oom:
    cJSON_Delete(root);
    fprintf(stderr, "attnd info: out of memory\n");
    return 1;
}

/* The 2-D tensors' types of g (g NULL: every type the CPU kernels take); returns the count. */
static int matrix_types(const struct gguf *g, enum tensor_type *out)
{
    int n = 0, seen[TENSOR_TYPE_MAX] = {0};
    for (int t = 0; t < TENSOR_TYPE_MAX; t++) {
        if (!g) seen[t] = cpu_type_supported((enum tensor_type)t);
    }
    for (int64_t i = 0; g && i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        if (t->type < TENSOR_TYPE_MAX && t->n_dims == 2 && cpu_type_supported((enum tensor_type)t->type))
            seen[t->type] = 1;
    }
    for (int t = 0; t < TENSOR_TYPE_MAX; t++)
        if (seen[t]) out[n++] = (enum tensor_type)t;
    return n;
}

static int print_cpu(const struct gguf *g)
{
    enum tensor_type types[TENSOR_TYPE_MAX];
    const int n = matrix_types(g, types);
    const enum cpu_tune_source src = cpu_tune(types, n, NULL);
    printf("cpu: %s, ISA %s (widest supported: %s)\n", cpu_tune_cpu_name(), cpu_isa_name(cpu_kernels_init()),
           cpu_isa_name(cpu_kernels_max_isa()));
    printf("kernels chosen by: %s%s%s\n", cpu_tune_source_name(src), cpu_tune_cache_path()[0] ? ", cache " : "",
           cpu_tune_cache_path());
    struct model_hparams hp;
    char why[256];
    if (g && src != CPU_TUNE_RULES && model_read_hparams(g, &hp, why, sizeof why) == ATTND_OK) {
        fa2_tune(hp.head_dim, hp.n_head, hp.n_head_kv);
        printf("attention (fa2): %s at prefill, %s at decode, measured for this model's heads (size %d, %d query / "
               "%d KV heads)\n",
               fa2_variant_name(hp.head_dim, FA2_PREFILL), fa2_variant_name(hp.head_dim, FA2_DECODE), hp.head_dim,
               hp.n_head, hp.n_head_kv);
    } else {
        printf("attention (fa2), by rule: %s for head sizes that are multiples of 8, %s otherwise\n",
               fa2_variant_name(64, FA2_PREFILL), fa2_variant_name(60, FA2_PREFILL));
    }
    printf("\n%-8s %-7s %-11s", "type", "family", "chosen");
    for (int v = 0; v < CPU_N_VARIANTS; v++) printf(" %11s", cpu_variant_name((enum cpu_variant)v));
    printf("   (ns per row and token, %d-element rows)\n", 2048);
    for (int i = 0; i < n; i++)
        for (int f = 0; f < CPU_N_FAMILIES; f++) {
            printf("%-8s %-7s %-11s", tensor_type_name(types[i]), cpu_family_name((enum cpu_family)f),
                   cpu_variant_name(cpu_kernels_choice((enum cpu_family)f, types[i])));
            for (int v = 0; v < CPU_N_VARIANTS; v++) {
                const double ns = cpu_tune_time((enum cpu_family)f, types[i], (enum cpu_variant)v);
                if (ns > 0) printf(" %11.3f", ns);
                else printf(" %11s", "-");
            }
            putchar('\n');
        }
    return 0;
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, cpu = 0;
    const struct cli_opt opts[] = {
        {CLI_OPT("--json", NULL, CLI_FLAG, &json, NULL, "print one JSON object (tests/js/check_gguf.mjs reads it)")},
        {CLI_OPT("--cpu", NULL, CLI_FLAG, &cpu, NULL,
                 "the CPU kernels: every variant's time per weight type and family, and the one chosen")},
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {.name = "info", .usage = "attnd info [--json] FILE.gguf | attnd info --cpu [FILE.gguf]", .opts = opts, .positional = &path};
    int parsed = cli_parse(&cmd, argc, argv);
    if (parsed != CLI_GO) return parsed;
    if (cpu && !path) return print_cpu(NULL);
    if (!path) {
        cli_usage(&cmd, stderr);
        return 2;
    }
    char err[512];
    struct gguf *g;
    if (gguf_open(path, &g, err, sizeof err) != ATTND_OK) {
        fprintf(stderr, "attnd info: %s: %s\n", path, err);
        return 1;
    }
    int rc = cpu ? print_cpu(g) : json ? print_json(g) : print_text(g);
    gguf_close(g);
    return rc;
}
