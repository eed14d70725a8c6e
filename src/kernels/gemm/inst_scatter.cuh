/* The body of the inst_scatter_*.cu files: the kernel table row (kernels.h) of the scatter
 * epilogue (epi_scatter.cuh: the fused matmul_reduce_scatter) over the plain A source, for the B
 * layout GEMM_INST_B_MN, under the name GEMM_INST_TABLE. A split-tail or stream-K config's entry is
 * {NULL, 0}: the epilogue stores whole tiles only, and the plan refuses those configs in scatter
 * mode; so is a config the layout cannot take (kernel.cuh, gemm_kernel_row). */
#include "kernels/gemm/epi_scatter.cuh"
#include "kernels/gemm/gemm_configs.h"
#include "kernels/gemm/kernel.cuh"
#include "kernels/gemm/kernels.h"

#define GEMM_SCATTER_ROW_SK0(bm, bn, st, wgn, cl, pp) \
    gemm_kernel_row<bm, bn, st, wgn, GEMM_INST_B_MN, cl, 0, pp, a_plain, epi_scatter>(),
#define GEMM_SCATTER_ROW_SK1(bm, bn, st, wgn, cl, pp) {NULL, 0},
#define GEMM_SCATTER_ROW_SK2(bm, bn, st, wgn, cl, pp) {NULL, 0},
#define GEMM_SCATTER_ROW_SK(sk) GEMM_SCATTER_ROW_SK##sk
#define GEMM_SCATTER_ROW(bm, bn, st, wgn, cl, sk, pp, pick, eff, name) GEMM_SCATTER_ROW_SK(sk)(bm, bn, st, wgn, cl, pp)

const agmm_gemm_kernel GEMM_INST_TABLE[] = {AGMM_GEMM_CONFIGS(GEMM_SCATTER_ROW)};
