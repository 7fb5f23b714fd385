/* test_golden_formats.c - the CPU forward pass on every file of $SHARED/models/formats (every
 * K-quant, IQ4_NL/IQ4_XS, Q4_1/Q5_0/Q5_1 with their per-tensor type mixes, qwen3, Llama 3.1
 * rope_freqs) against $SHARED/golden/formats by teacher forcing (golden_check.h): F32 within 1e-3,
 * quantized within 0.15, greedy equal where the gap allows. Runs once with the scalar reference
 * kernels and once with the best SIMD ISA this CPU has. */
#include "golden_check.h"

#include "kernels/cpu/cpu_kernels.h"

int main(void)
{
    const enum cpu_isa best = cpu_kernels_set_isa(CPU_ISA_AVX512);
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa += (best > CPU_ISA_SCALAR ? (int)best : 1)) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        fprintf(stderr, "--- ISA %s\n", cpu_isa_name((enum cpu_isa)isa));
        int n = golden_run_in(FWD_BACKEND_CPU, "formats", NULL);
        T_CHECK(n == 16, "expected the 16 format models, found %d", n);
    }
    return t_finish("test_golden_formats");
}
