/* test_golden.c - the CPU forward pass against the reference outputs in $SHARED/golden (see
 * golden_check.h): every model, every case; the first case again with 1 thread, with the prompt
 * in chunks of 3 tokens (same numbers), and with an F16 KV cache within max(tol, 0.05). */
#include "golden_check.h"

int main(void)
{
    golden_run(FWD_BACKEND_CPU, NULL);
    return t_finish("test_golden");
}
