/* quants_avx512.c - the K-quant, IQ4, Q4_1/Q5_x dots and the int8 panel GEMM for AVX-512 machines
 * with VNNI: quants_avx2.c built again with QUANTS_VNNI (and -mavx512f/bw/vl/dq -mavx512vnni), so
 * its multiply-accumulate steps run on vpdpbusd / vpdpwssd and its functions are named
 * quants_avx512_*. One source for both, so the two cannot drift apart; see quants_avx2.c. */
#define QUANTS_VNNI 1
#include "kernels/cpu/quants_avx2.c"
