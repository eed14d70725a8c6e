/* The body of every inst_*.cu file: one row of the kernel table (kernels.h), a kernel per tile
 * config of gemm_configs.h, for the A source GEMM_INST_SOURCE and the B layout GEMM_INST_B_MN
 * that the including file defines, under the name GEMM_INST_TABLE. Six small files instead of
 * one large one, so the instantiations compile in parallel. A config the layout cannot take (a
 * width that is not a multiple of 64 with row-major B: config.cuh) is {NULL, 0}, which the plan
 * refuses. */
#include "kernels/gemm/gemm_configs.h"
#include "kernels/gemm/kernel.cuh"
#include "kernels/gemm/kernels.h"

#define GEMM_INST_ROW(bm, bn, st, wgn, cl, sk, pp, name)                                                 \
    gemm_kernel_row<bm, bn, st, wgn, GEMM_INST_B_MN, cl, sk, pp, GEMM_INST_SOURCE>(),

const agmm_gemm_kernel GEMM_INST_TABLE[] = {AGMM_GEMM_CONFIGS(GEMM_INST_ROW)};
