/* Kernel table row (kernels.h): A from the gathered A (a plain GEMM's A), local tiles from the
 * shard; B row-major. */
#define GEMM_INST_SOURCE a_plain
#define GEMM_INST_B_MN 1
#define GEMM_INST_TABLE agmm_gemm_kernels_plain_brow
#include "kernels/gemm/instantiate.cuh"
