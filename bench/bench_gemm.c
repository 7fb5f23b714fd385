/* bench_gemm.c - one-thread matrix-product speed of every weight type and CPU variant
 * (every variant cpu_variant_available lists, run through cpu_gemm_variant), in GMAC/s: an 896 x 4864 matrix (Qwen2.5-0.5B's
 * ffn_down, 4.4 M weights; rows of 4864 = 19 super-blocks) against 1 (matrix-vector: generation), 8 (a batched decode step) and
 * 128 (a prompt) activation rows. Weights come from attnd's own quantizer (quantize_row) on
 * Gaussian values (F16 by conversion), so scales are those of a real file; types the quantizer
 * does not write are skipped. The matrix-vector column also gives the
 * weight bytes streamed per second. Prints a markdown table of medians over 7 runs.
 * usage: bench_gemm [reps] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/quantize.h"
#include "attnd/tensor.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_tune.h"
#include "bench/bench_util.h"

#define ROWS 896
#define COLS 4864

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float gauss(void)
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
        u[i] = ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
    }
    return (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    static const enum tensor_type types[] = {TENSOR_F16, TENSOR_Q8_0, TENSOR_Q4_0, TENSOR_Q5_0, TENSOR_Q4_K,
                                             TENSOR_Q5_K, TENSOR_Q6_K, TENSOR_IQ4_XS};
    static const size_t toks[] = {1, 8, 128};
    float *x = xmalloc((size_t)ROWS * COLS * sizeof(float)), *y = xmalloc((size_t)128 * ROWS * sizeof(float));
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++) x[i] = 0.02f * gauss();
    printf("## Matrix products, 1 thread (%d x %d weights; GMAC/s, median of %d; mv GB/s = weight bytes per second)\n\n",
           ROWS, COLS, reps);
    printf("CPU %s; * = the variant the dispatcher runs there (chosen by %s; 0.00 = not available)\n\n",
           cpu_tune_cpu_name(), "measurement, kernels/cpu/cpu_tune.h");
    printf("| type    | variant    | 1 token (mv) | mv GB/s | 8 tokens | 128 tokens |\n");
    printf("|---------|------------|--------------|---------|----------|------------|\n");
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const enum tensor_type t = types[ti], at = cpu_vec_dot_type(t);
        uint64_t wrb = 0, arb = 0;
        tensor_nbytes(t, COLS, &wrb);
        tensor_nbytes(at, COLS, &arb);
        unsigned char *w = xmalloc((size_t)wrb * ROWS), *a = xmalloc((size_t)arb * 128);
        if (t != TENSOR_F16 && !quantize_type_supported(t)) {
            free(w), free(a);
            continue;
        }
        for (size_t r = 0; r < ROWS; r++) {
            if (t == TENSOR_F16) cpu_f32_to_f16_row(x + r * COLS, (uint16_t *)(void *)(w + r * wrb), COLS);
            else if (quantize_row(t, x + r * COLS, w + r * wrb, COLS) != ATTND_OK) return 1;
        }
        for (size_t j = 0; j < 128; j++) cpu_prepare_row(t, x + j * COLS, a + j * arb, COLS);
        cpu_tune(&t, 1, NULL); /* the dispatcher's choice, marked * below */
        for (int vi = 0; vi < CPU_N_VARIANTS; vi++) {
            const enum cpu_variant v = (enum cpu_variant)vi;
            if (!cpu_variant_available(CPU_FAM_GEMM, t, v) && !cpu_variant_available(CPU_FAM_MATVEC, t, v)) continue;
            double rate[3];
            char mark[3][2];
            for (size_t k = 0; k < 3; k++) {
                const enum cpu_family f = cpu_family_of(toks[k]);
                rate[k] = 0.0;
                mark[k][0] = cpu_kernels_choice(f, t) == v ? '*' : ' ', mark[k][1] = 0;
                if (!cpu_variant_available(f, t, v)) continue;
                double r[32];
                int n = reps < 32 ? reps : 32;
                /* the scalar reference is slow: fewer tokens-worth of work, same rate */
                size_t rows = v == CPU_VAR_SCALAR && toks[k] > 1 ? ROWS / 16 : ROWS;
                cpu_gemm_variant(v, t, COLS, w, wrb, 0, rows, a, arb, toks[k], y, ROWS); /* warm-up */
                for (int i = 0; i < n; i++) {
                    double t0 = bench_now();
                    cpu_gemm_variant(v, t, COLS, w, wrb, 0, rows, a, arb, toks[k], y, ROWS);
                    r[i] = (double)rows * COLS * (double)toks[k] / (bench_now() - t0) * 1e-9;
                }
                rate[k] = bench_median(r, n);
            }
            printf("| %-7s | %-10s | %11.2f%s | %7.2f | %7.2f%s | %9.2f%s |\n", tensor_type_name(t), cpu_variant_name(v),
                   rate[0], mark[0], rate[0] * (double)wrb / COLS, rate[1], mark[1], rate[2], mark[2]);
        }
        free(w);
        free(a);
    }
    free(x);
    free(y);
    return 0;
}
