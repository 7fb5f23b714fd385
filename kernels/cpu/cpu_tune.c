/* cpu_tune.c - the measured choice of matrix-product variants and its cache file. See cpu_tune.h. */
#include "kernels/cpu/cpu_tune.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attnd/check.h"
#include "attnd/log.h"

/* The kernels' build: the Makefile passes a hash of kernels/cpu's sources and the build variant, so
 * a rebuild with changed kernels (or an ASan build beside a release one) measures again instead of
 * trusting times taken of other code. */
#ifndef ATTND_KERNELS_ID
#define ATTND_KERNELS_ID "unknown"
#endif
#define TUNE_MAGIC "attnd-cpu-tune 4 " ATTND_KERNELS_ID
#define TUNE_N 2048                   /* row length: a multiple of every block size */
#define TUNE_W_BYTES (24u << 20)      /* weights: more than most last-level cache slices */
#define TUNE_MAX_TOK 64
#define TUNE_MIN_S 0.002 /* each timed run lasts at least this long (or covers every row) */
#define TUNE_REPS 5

static const int tune_tokens[CPU_N_FAMILIES] = {1, 8, TUNE_MAX_TOK};

static double g_time[CPU_N_FAMILIES][TENSOR_TYPE_MAX][CPU_N_VARIANTS]; /* ns per row-token; < 0: none */
static int g_time_init;
static enum cpu_tune_source g_source = CPU_TUNE_RULES;
static char g_path[512];
static char g_cpu[64];


static void times_init(void)
{
    if (g_time_init) return;
    for (int f = 0; f < CPU_N_FAMILIES; f++)
        for (int t = 0; t < TENSOR_TYPE_MAX; t++)
            for (int v = 0; v < CPU_N_VARIANTS; v++) g_time[f][t][v] = -1.0;
    g_time_init = 1;
}

const char *cpu_tune_cpu_name(void)
{
    if (g_cpu[0]) return g_cpu;
    snprintf(g_cpu, sizeof g_cpu, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return g_cpu;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) break;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t len = strcspn(c, "\n");
        while (len && c[len - 1] == ' ') len--;
        if (len >= sizeof g_cpu) len = sizeof g_cpu - 1;
        for (size_t i = 0; i < len; i++) g_cpu[i] = c[i] == '\t' ? ' ' : c[i];
        g_cpu[len] = 0;
        break;
    }
    fclose(f);
    return g_cpu;
}

/* ================================================================ measurement */

/* Synthetic operands, made once: weight bytes in [0x20, 0x3b] (every f16/bf16/f32 they form is a
 * finite normal number below 1, so no run meets denormals or NaN), activations in [-1, 1). */
struct tune_bufs {
    unsigned char *w, *a;
    float *y;
};
static struct tune_bufs g_bufs;

static int bufs_ready(void)
{
    if (g_bufs.w) return 1;
    const size_t a_bytes = (size_t)TUNE_MAX_TOK * TUNE_N * sizeof(float) * 2;
    unsigned char *w = malloc(TUNE_W_BYTES), *a = malloc(a_bytes);
    float *y = malloc((size_t)TUNE_MAX_TOK * (TUNE_W_BYTES / 512) * sizeof(float)); /* rows >= 512 B */
    if (!w || !a || !y) {
        free(w), free(a), free(y);
        return 0;
    }
    uint32_t s = 0x9e3779b9u;
    for (size_t i = 0; i < TUNE_W_BYTES; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        w[i] = (unsigned char)(0x20 + s % 28);
    }
    g_bufs = (struct tune_bufs){w, a, y};
    return 1;
}

/* Prepares TUNE_MAX_TOK activation rows for t into g_bufs.a; returns the prepared row's bytes. */
static size_t prepare_acts(enum tensor_type t)
{
    uint64_t arb = 0;
    if (tensor_nbytes(cpu_vec_dot_type(t), TUNE_N, &arb)) return 0;
    float x[TUNE_N];
    uint32_t s = 12345u + (uint32_t)t;
    for (int j = 0; j < TUNE_MAX_TOK; j++) {
        for (int i = 0; i < TUNE_N; i++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            x[i] = (float)(s >> 8) * 0x1p-23f - 1.0f;
        }
        cpu_prepare_row(t, x, g_bufs.a + (size_t)j * arb, TUNE_N);
    }
    return (size_t)arb;
}

static double timed_run(enum cpu_variant v, enum tensor_type t, size_t wrb, size_t arb, size_t rows, size_t ntok)
{
    const double t0 = check_now_s();
    cpu_gemm_variant(v, t, TUNE_N, g_bufs.w, wrb, 0, rows, g_bufs.a, arb, ntok, g_bufs.y, rows);
    return check_now_s() - t0;
}

/* The row slice over which one run of v lasts TUNE_MIN_S (or every row); 0 if v cannot run. */
static size_t calibrate(enum cpu_variant v, enum tensor_type t, size_t wrb, size_t arb, size_t ntok)
{
    const size_t all = TUNE_W_BYTES / wrb;
    size_t rows = all < 64 ? all : 64;
    double dt = timed_run(v, t, wrb, arb, rows, ntok);
    while (dt < TUNE_MIN_S && rows < all) {
        size_t next = dt > 0 ? (size_t)((double)rows * TUNE_MIN_S * 1.2 / dt) : rows * 8;
        if (next < rows * 2) next = rows * 2;
        rows = next < all ? next : all;
        dt = timed_run(v, t, wrb, arb, rows, ntok);
    }
    return rows;
}

/* ns[v] for every variant of (f, t), -1 for those not available. The variants take turns, run by
 * run, so a slow spell of the machine falls on all of them; each keeps its best run. */
static void measure_family(enum cpu_family f, enum tensor_type t, double ns[CPU_N_VARIANTS])
{
    uint64_t wrb = 0;
    size_t rows[CPU_N_VARIANTS] = {0}, arb = 0;
    const size_t ntok = (size_t)tune_tokens[f];
    for (int v = 0; v < CPU_N_VARIANTS; v++) ns[v] = -1.0;
    if (tensor_nbytes(t, TUNE_N, &wrb) || !bufs_ready() || !(arb = prepare_acts(t))) return;
    for (int v = 0; v < CPU_N_VARIANTS; v++)
        if (cpu_variant_available(f, t, (enum cpu_variant)v)) rows[v] = calibrate((enum cpu_variant)v, t, wrb, arb, ntok);
    for (int r = 0; r < TUNE_REPS; r++)
        for (int v = 0; v < CPU_N_VARIANTS; v++) {
            if (!rows[v]) continue;
            const double d = timed_run((enum cpu_variant)v, t, wrb, arb, rows[v], ntok) * 1e9 /
                             ((double)rows[v] * (double)ntok);
            if (ns[v] < 0 || d < ns[v]) ns[v] = d;
        }
}

/* ================================================================ cache file */

static int type_by_name(const char *s)
{
    for (int t = 0; t < TENSOR_TYPE_MAX; t++)
        if (cpu_type_supported((enum tensor_type)t) && !strcmp(tensor_type_name((uint32_t)t), s)) return t;
    return -1;
}

static int index_by_name(const char *s, const char *(*name)(int), int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(name(i), s)) return i;
    return -1;
}

static const char *fam_name_i(int i) { return cpu_family_name((enum cpu_family)i); }
static const char *var_name_i(int i) { return cpu_variant_name((enum cpu_variant)i); }

static void cpu_line(char *buf, size_t n)
{
    snprintf(buf, n, "cpu\t%s\t%s\n", cpu_tune_cpu_name(), cpu_isa_name(cpu_kernels_max_isa()));
}

static void default_path(char *buf, size_t n)
{
    buf[0] = 0;
    const char *env = getenv("ATTND_TUNE_CACHE");
    if (env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    char dir[384];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/attnd", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/attnd", home);
    else return;
    char cpu[64];
    snprintf(cpu, sizeof cpu, "%s", cpu_tune_cpu_name());
    for (char *p = cpu; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '-';
    snprintf(buf, n, "%s/cpu-tune-%s.tsv", dir, cpu);
}

/* Reads the times of a file written for this CPU; returns how many it read (0 for no file, or
 * one for another CPU or version). */
static int cache_read(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256], want[160];
    cpu_line(want, sizeof want);
    int n = 0;
    if (!fgets(line, sizeof line, f) || strcmp(line, TUNE_MAGIC "\n") || !fgets(line, sizeof line, f) ||
        strcmp(line, want)) {
        fclose(f);
        log_info("cpu tune: %s is for another CPU, version or build of the kernels; measuring again", path);
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        char fam[16], type[16], var[16];
        double ns;
        if (sscanf(line, "%15s %15s %15s %lf", fam, type, var, &ns) != 4 || !(ns > 0) || !isfinite(ns)) continue;
        const int fi = index_by_name(fam, fam_name_i, CPU_N_FAMILIES), ti = type_by_name(type),
                  vi = index_by_name(var, var_name_i, CPU_N_VARIANTS);
        if (fi < 0 || ti < 0 || vi < 0) continue;
        g_time[fi][ti][vi] = ns;
        n++;
    }
    fclose(f);
    return n;
}

static void mkdir_parents(const char *path)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0755) && errno != EEXIST) return;
        *p = '/';
    }
}

/* Writes every recorded time (a temporary file renamed over the old one: readers never see half). */
static void cache_write(const char *path)
{
    char tmp[600], head[160];
    mkdir_parents(path);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        log_warn("cpu tune: cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    cpu_line(head, sizeof head);
    fprintf(f, "%s\n%s", TUNE_MAGIC, head);
    for (int fi = 0; fi < CPU_N_FAMILIES; fi++)
        for (int t = 0; t < TENSOR_TYPE_MAX; t++)
            for (int v = 0; v < CPU_N_VARIANTS; v++)
                if (g_time[fi][t][v] > 0)
                    fprintf(f, "%s\t%s\t%s\t%.4f\n", cpu_family_name((enum cpu_family)fi),
                            tensor_type_name((uint32_t)t), cpu_variant_name((enum cpu_variant)v), g_time[fi][t][v]);
    if (fclose(f) || rename(tmp, path)) {
        log_warn("cpu tune: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}

/* ================================================================ choice */

/* The fastest available variant of (f, t); the rule's unless another beats it by the margin. */
static enum cpu_variant fastest(enum cpu_family f, enum tensor_type t)
{
    enum cpu_variant best = cpu_kernels_rule(f, t);
    double bt = g_time[f][t][best];
    for (int v = 0; v < CPU_N_VARIANTS; v++) {
        const double tv = g_time[f][t][v];
        if (tv <= 0 || !cpu_variant_available(f, t, (enum cpu_variant)v)) continue;
        if (bt <= 0 || tv < bt * (1.0 - CPU_TUNE_MARGIN)) best = (enum cpu_variant)v, bt = tv;
    }
    return best;
}

enum cpu_tune_source cpu_tune(const enum tensor_type *types, int n, const char *cache)
{
    times_init();
    const char *off = getenv("ATTND_TUNE");
    if (off && !strcmp(off, "0")) {
        g_source = CPU_TUNE_RULES;
        return g_source;
    }
    if (cache) snprintf(g_path, sizeof g_path, "%s", cache);
    else default_path(g_path, sizeof g_path);
    if (g_path[0]) cache_read(g_path);
    int measured = 0;
    const double t0 = check_now_s();
    for (int i = 0; i < n; i++) {
        const enum tensor_type t = types[i];
        if ((unsigned)t >= TENSOR_TYPE_MAX || !cpu_type_supported(t)) continue;
        for (int f = 0; f < CPU_N_FAMILIES; f++) {
            int missing = 0;
            for (int v = 0; v < CPU_N_VARIANTS; v++)
                missing += g_time[f][t][v] <= 0 && cpu_variant_available(f, t, (enum cpu_variant)v);
            if (missing) { /* all of the family again, so its times come from one interleaved run */
                double ns[CPU_N_VARIANTS];
                measure_family(f, t, ns);
                for (int v = 0; v < CPU_N_VARIANTS; v++)
                    if (ns[v] > 0) g_time[f][t][v] = ns[v], measured++;
            }
            cpu_kernels_choose(f, t, fastest(f, t));
        }
    }
    if (measured) {
        log_info("cpu tune: %d measurements in %.2f s%s%s", measured, check_now_s() - t0, g_path[0] ? ", cached in " : "",
                 g_path);
        if (g_path[0]) cache_write(g_path);
    }
    if (measured || g_source != CPU_TUNE_MEASURED) g_source = measured ? CPU_TUNE_MEASURED : CPU_TUNE_CACHED;
    return g_source;
}

double cpu_tune_time(enum cpu_family f, enum tensor_type t, enum cpu_variant v)
{
    times_init();
    if ((unsigned)f >= CPU_N_FAMILIES || (unsigned)t >= TENSOR_TYPE_MAX || (unsigned)v >= CPU_N_VARIANTS)
        return -1.0;
    return g_time[f][t][v];
}

void cpu_tune_forget(void)
{
    g_time_init = 0;
    times_init();
    cpu_kernels_clear_choices();
    g_source = CPU_TUNE_RULES;
}

enum cpu_tune_source cpu_tune_source(void) { return g_source; }

const char *cpu_tune_source_name(enum cpu_tune_source s)
{
    switch (s) {
    case CPU_TUNE_RULES: return "rules";
    case CPU_TUNE_CACHED: return "cached";
    case CPU_TUNE_MEASURED: return "measured";
    }
    return "unknown";
}

const char *cpu_tune_cache_path(void) { return g_path; }
