/* The body of the inst_scatter_*.cu files: the kernel table row (kernels.h) of the scatter
 * epilogue (epi_scatter.cuh: the fused matmul_reduce_scatter) over the plain A source, for the B
 * layout GEMM_INST_B_MN, under the name GEMM_INST_TABLE. A split-tail or stream-K config's entry is
 * {NULL, 0}: the epilogue stores whole tiles only, and the plan refuses those configs in scatter
 * mode; so is a config the layout cannot take (kernel.cuh, gemm_kernel_row), and one of more
 * accumulators per thread than scatter mode takes (policy.h, agmm_gemm_scatter_config). */
#include "kernels/gemm/epi_scatter.cuh"
#include "kernels/gemm/gemm_configs.h"
#include "kernels/gemm/kernel.cuh"
#include "kernels/gemm/kernels.h"
#include "kernels/gemm/policy.h"

/* A whole-tile config's row; {NULL, 0} past the accumulators scatter mode takes (policy.h). */
template <int BM, int BN, int ST, int WGN, int CL, int PP>
inline agmm_gemm_kernel gemm_scatter_row()
{
    /* gemm_cfg's NACC, without instantiating a config the layout may not take */
    if constexpr ((PP ? BM : WGN == 1 ? BM / 2 : BM) * (PP ? BN : BN / WGN) / 128 > AGMM_GEMM_SCATTER_MAX_ACC)
        return agmm_gemm_kernel{NULL, 0};
    else
        return gemm_kernel_row<BM, BN, ST, WGN, GEMM_INST_B_MN, CL, 0, PP, a_plain, epi_scatter>();
}

#define GEMM_SCATTER_ROW_SK0(bm, bn, st, wgn, cl, pp) gemm_scatter_row<bm, bn, st, wgn, cl, pp>(),
#define GEMM_SCATTER_ROW_SK1(bm, bn, st, wgn, cl, pp) {NULL, 0},
#define GEMM_SCATTER_ROW_SK2(bm, bn, st, wgn, cl, pp) {NULL, 0},
#define GEMM_SCATTER_ROW_SK(sk) GEMM_SCATTER_ROW_SK##sk
#define GEMM_SCATTER_ROW(bm, bn, st, wgn, cl, sk, pp, name) GEMM_SCATTER_ROW_SK(sk)(bm, bn, st, wgn, cl, pp)

const agmm_gemm_kernel GEMM_INST_TABLE[] = {AGMM_GEMM_CONFIGS(GEMM_SCATTER_ROW)};
