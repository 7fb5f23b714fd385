/* test_golden_formats.c - the CPU forward pass on every file of $SHARED/models/formats (every
 * K-quant, IQ4_NL/IQ4_XS, Q4_1/Q5_0/Q5_1 with their per-tensor type mixes, qwen3, Llama 3.1
 * rope_freqs) against $SHARED/golden/formats by teacher forcing (golden_check.h): F32 within 1e-3,
 * quantized within 0.15, greedy equal where the gap allows. The best SIMD ISA this CPU has runs
 * every case (plus the 1-thread, chunked-prompt and F16 KV passes); each ISA below it (AVX2 on an
 * AVX-512 machine, whose quantized kernels are the VNNI build) and the scalar reference kernels
 * run the three text cases (the 301-token one adds minutes and no new code path). Under
 * AddressSanitizer both run the first case only: there the point is memory safety. */
#include "golden_check.h"

#include "kernels/cpu/cpu_kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#define CASES_BEST 1
#define CASES_SCALAR 1
#else
#define CASES_BEST 0 /* all */
#define CASES_SCALAR 3
#endif

int main(void)
{
    /* the best ISA on every case; below it (AVX2 on an AVX-512 machine, then scalar) the text cases */
    const enum cpu_isa best = cpu_kernels_set_isa(CPU_ISA_AMX);
    for (int isa = (int)best; isa >= (int)CPU_ISA_SCALAR; isa--) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        fprintf(stderr, "--- ISA %s\n", cpu_isa_name((enum cpu_isa)isa));
        int n = golden_run_in(FWD_BACKEND_CPU, "formats", NULL, isa == (int)best ? CASES_BEST : CASES_SCALAR);
        T_CHECK(n == 16, "expected the 16 format models, found %d", n);
    }
    return t_finish("test_golden_formats");
}
