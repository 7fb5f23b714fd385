/* test_tune.c - the measured dispatcher (kernels/cpu/cpu_tune.h): it measures every available
 * variant of every family, runs the fastest (never one slower than the rule's beyond the margin),
 * keeps the times in its cache file and takes them from there on the next start, ignores a file
 * made for another CPU and lines it cannot read, and leaves the rules alone with ATTND_TUNE=0 or
 * under an ISA cap. The variants' results themselves are checked in test_kernels/test_quants. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/tensor.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_tune.h"
#include "tests/unit/testutil.h"

static const enum tensor_type k_types[] = {TENSOR_Q8_0, TENSOR_Q4_K, TENSOR_F16};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    T_CHECK(f != NULL, "write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Every available (family, type, variant) has a time, and the choice is within the margin of the
 * fastest. */
static void check_choices(const char *what)
{
    for (int i = 0; i < N_TYPES; i++)
        for (int f = 0; f < CPU_N_FAMILIES; f++) {
            double best = INFINITY;
            for (int v = 0; v < CPU_N_VARIANTS; v++) {
                if (!cpu_variant_available((enum cpu_family)f, k_types[i], (enum cpu_variant)v)) continue;
                const double ns = cpu_tune_time((enum cpu_family)f, k_types[i], (enum cpu_variant)v);
                T_CHECK(ns > 0 && isfinite(ns), "%s: %s %s %s has a time (%g)", what,
                        cpu_family_name((enum cpu_family)f), tensor_type_name(k_types[i]),
                        cpu_variant_name((enum cpu_variant)v), ns);
                if (ns < best) best = ns;
            }
            const enum cpu_variant c = cpu_kernels_choice((enum cpu_family)f, k_types[i]);
            const double tc = cpu_tune_time((enum cpu_family)f, k_types[i], c);
            T_CHECK(cpu_variant_available((enum cpu_family)f, k_types[i], c), "%s: choice available", what);
            T_CHECK(tc * (1.0 - CPU_TUNE_MARGIN) <= best * (1.0 + 1e-9), "%s: %s %s runs %s (%g ns) but the best is %g",
                    what, cpu_family_name((enum cpu_family)f), tensor_type_name(k_types[i]), cpu_variant_name(c), tc,
                    best);
        }
}

int main(void)
{
    char dir[] = "/tmp/attnd-tune-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/sub/cpu-tune.tsv", dir); /* the missing folder is made */
    unsetenv("ATTND_TUNE");

    /* 1. nothing cached: everything is measured and written */
    T_CHECK(cpu_tune(k_types, N_TYPES, path) == CPU_TUNE_MEASURED, "first tune measures");
    check_choices("measured");
    const char *file = slurp(path);
    T_CHECK(file && !strncmp(file, "attnd-cpu-tune 4 ", 17) && strstr(file, "\ncpu\t") == strchr(file, '\n'),
            "cache header: %.60s", file ? file : "(none)");
    const char *cpu_line = file ? strchr(file, '\n') + 1 : "";
    int lines = 0;
    for (const char *p = file; p && *p; p++) lines += *p == '\n';
    int want = 2;
    for (int i = 0; i < N_TYPES; i++)
        for (int f = 0; f < CPU_N_FAMILIES; f++)
            for (int v = 0; v < CPU_N_VARIANTS; v++)
                want += cpu_variant_available((enum cpu_family)f, k_types[i], (enum cpu_variant)v);
    T_CHECK(lines == want, "cache has %d lines, want %d", lines, want);

    /* 2. the next start reads the file, and the times there decide: make the scalar matrix-vector
     * for q8_0 the fastest on paper and it is chosen */
    char *edited = malloc(strlen(file) + 256);
    const char *nl = strchr(strchr(file, '\n') + 1, '\n') + 1; /* past the two header lines */
    memcpy(edited, file, (size_t)(nl - file));
    edited[nl - file] = 0;
    strcat(edited, "matvec\tq8_0\tscalar\t0.0001\n");
    strcat(edited, "garbage line\nmatvec\tq8_0\tavx9\t1\nmatvec\tnope\tscalar\t1\ngemm\tq8_0\tscalar\t-3\n"
                   "gemm\tq8_0\tscalar\tnan\n");
    for (const char *p = nl; *p;) {
        const char *e = strchr(p, '\n');
        if (strncmp(p, "matvec\tq8_0\tscalar\t", 19)) strncat(edited, p, (size_t)(e - p + 1));
        p = e + 1;
    }
    spit(path, edited);
    cpu_tune_forget();
    T_CHECK(cpu_kernels_choice(CPU_FAM_MATVEC, TENSOR_Q8_0) == cpu_kernels_rule(CPU_FAM_MATVEC, TENSOR_Q8_0),
            "forget: the rule again");
    T_CHECK(cpu_tune(k_types, N_TYPES, path) == CPU_TUNE_CACHED, "second start reads the cache");
    T_CHECK(cpu_kernels_choice(CPU_FAM_MATVEC, TENSOR_Q8_0) == CPU_VAR_SCALAR, "the cached times decide: %s",
            cpu_variant_name(cpu_kernels_choice(CPU_FAM_MATVEC, TENSOR_Q8_0)));
    T_CHECK(cpu_tune_time(CPU_FAM_GEMM, TENSOR_Q8_0, CPU_VAR_SCALAR) > 0, "bad lines skipped, good ones kept");
    check_choices("cached");

    /* 3. an ISA cap wins over the cache: only what it allows runs */
    if (cpu_kernels_max_isa() >= CPU_ISA_AVX2) {
        cpu_kernels_set_isa(CPU_ISA_SCALAR);
        for (int f = 0; f < CPU_N_FAMILIES; f++)
            T_CHECK(cpu_kernels_choice((enum cpu_family)f, TENSOR_Q4_K) == CPU_VAR_SCALAR, "capped at scalar");
        cpu_kernels_set_isa(CPU_ISA_AMX);
    }

    /* 4. a file for another CPU is ignored and rewritten */
    spit(path, "attnd-cpu-tune 4 x\ncpu\tSome Other CPU\tavx2\nmatvec\tq8_0\tscalar\t0.0001\n");
    cpu_tune_forget();
    T_CHECK(cpu_tune(k_types, N_TYPES, path) == CPU_TUNE_MEASURED, "another CPU's file: measured again");
    check_choices("remeasured");
    file = slurp(path);
    T_CHECK(file && !strstr(file, "Some Other CPU"), "the file is rewritten for this CPU");

    /* 4b. a file for this CPU written by another build of the kernels is measured again too */
    char *other = malloc(strlen(cpu_line) + 64);
    snprintf(other, strlen(cpu_line) + 64, "attnd-cpu-tune 4 release-000000000000\n%.*s",
             (int)(strchr(cpu_line, '\n') - cpu_line + 1), cpu_line);
    strcat(other, "matvec\tq8_0\tscalar\t0.0001\n");
    spit(path, other);
    cpu_tune_forget();
    T_CHECK(cpu_tune(k_types, N_TYPES, path) == CPU_TUNE_MEASURED, "another build's file: measured again");
    T_CHECK(cpu_kernels_choice(CPU_FAM_MATVEC, TENSOR_Q8_0) != CPU_VAR_SCALAR || cpu_kernels_max_isa() == CPU_ISA_SCALAR,
            "another build's times are not used");
    free(other);

    /* 5. ATTND_TUNE=0: the rules */
    cpu_tune_forget();
    setenv("ATTND_TUNE", "0", 1);
    T_CHECK(cpu_tune(k_types, N_TYPES, path) == CPU_TUNE_RULES, "ATTND_TUNE=0: rules");
    for (int f = 0; f < CPU_N_FAMILIES; f++)
        T_CHECK(cpu_kernels_choice((enum cpu_family)f, TENSOR_Q4_K) == cpu_kernels_rule((enum cpu_family)f, TENSOR_Q4_K),
                "rules kept");
    unsetenv("ATTND_TUNE");

    /* 6. no cache ("" ) still measures, and writes nothing */
    cpu_tune_forget();
    unlink(path);
    T_CHECK(cpu_tune(k_types, 1, "") == CPU_TUNE_MEASURED, "no cache: measured");
    T_CHECK(access(path, F_OK) != 0, "no cache: no file");

    free(edited);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    T_CHECK(system(cmd) == 0, "cleanup");
    return t_finish("test_tune");
}
