/* Kernel table row (kernels.h): A after each chunk's flag (fused); B column-major. */
#define GEMM_INST_SOURCE a_chunks
#define GEMM_INST_B_MN 0
#define GEMM_INST_TABLE agmm_gemm_kernels_chunks_bcol
#include "kernels/gemm/instantiate.cuh"
