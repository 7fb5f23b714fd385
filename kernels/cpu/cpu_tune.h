/* cpu_tune.h - chooses each matrix-product variant by measuring it on this CPU.
 *
 * cpu_tune() times every variant cpu_variant_available() allows, for every family (matrix-vector,
 * small batch, GEMM; cpu_kernels.h) and each weight type asked for, on one thread with synthetic
 * weights of the type (the family's variants take turns, best of 5 runs each), and makes the
 * fastest the choice (cpu_kernels_choose). A variant replaces
 * the rule's only when it is more than CPU_TUNE_MARGIN faster, so noise cannot swap in a slower
 * path. The times are kept in a cache file per CPU, which later starts read instead of measuring
 * (a few hundred milliseconds per type); the user may delete it at any time.
 *
 * Cache: $ATTND_TUNE_CACHE if set (empty: no cache), else $XDG_CACHE_HOME/attnd/, else
 * ~/.cache/attnd/, file cpu-tune-<cpu>.tsv. Text: a header line "attnd-cpu-tune 4 <kernels id>"
 * (a hash of the kernel sources and the build variant), a line "cpu\t<model name>\t<isa>", then
 * "family\ttype\tvariant\tns" lines (ns per row and token). A file whose header or cpu line differ
 * (another CPU, format or build of the kernels) is ignored and rewritten. $ATTND_TUNE=0 keeps the rules.
 * Not thread-safe against itself: call it from one thread (the engine does, at load). */
#ifndef ATTND_CPU_TUNE_H
#define ATTND_CPU_TUNE_H

#include <stddef.h>

#include "attnd/tensor.h"
#include "kernels/cpu/cpu_kernels.h"

#define CPU_TUNE_MARGIN 0.03 /* a variant must beat the rule's by 3 % to replace it */

enum cpu_tune_source {
    CPU_TUNE_RULES,    /* nothing measured: $ATTND_TUNE=0, or not asked yet */
    CPU_TUNE_CACHED,   /* every time came from the cache file */
    CPU_TUNE_MEASURED, /* some were measured now */
};

/* Chooses the variants for the n types (duplicates and unsupported types are skipped). cache: a
 * path, "" for none, NULL for the default above. Returns how the choices were made. */
enum cpu_tune_source cpu_tune(const enum tensor_type *types, int n, const char *cache);
/* The recorded time of (f, t, v) from the last cpu_tune, or a negative value. */
double cpu_tune_time(enum cpu_family f, enum tensor_type t, enum cpu_variant v);
/* Forgets every time and choice (the rules apply; the next cpu_tune reads the cache or measures). */
void cpu_tune_forget(void);
/* How the current choices were made. */
enum cpu_tune_source cpu_tune_source(void);
const char *cpu_tune_source_name(enum cpu_tune_source s);
/* The cache file the last cpu_tune used ("" for none). */
const char *cpu_tune_cache_path(void);
/* The CPU's model name from /proc/cpuinfo ("unknown" if none), at most 63 characters. */
const char *cpu_tune_cpu_name(void);

#endif
