/* Kernel table row (kernels.h): A from the peers' shards (pull); B row-major. */
#define GEMM_INST_SOURCE a_peers
#define GEMM_INST_B_MN 1
#define GEMM_INST_TABLE agmm_gemm_kernels_peers_brow
#include "kernels/gemm/instantiate.cuh"
