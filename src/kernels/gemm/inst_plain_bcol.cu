/* Kernel table row (kernels.h): A from the gathered A (a plain GEMM's A), local tiles from the
 * shard; B column-major. */
#define GEMM_INST_SOURCE a_plain
#define GEMM_INST_B_MN 0
#define GEMM_INST_TABLE agmm_gemm_kernels_plain_bcol
#include "kernels/gemm/instantiate.cuh"
