/* Kernel table row (kernels.h): the scatter epilogue (fused matmul_reduce_scatter), A plain; B
 * row-major. */
#define GEMM_INST_B_MN 1
#define GEMM_INST_TABLE agmm_gemm_kernels_scatter_brow
#include "kernels/gemm/inst_scatter.cuh"
