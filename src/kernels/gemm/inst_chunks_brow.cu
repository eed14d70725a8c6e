/* Kernel table row (kernels.h): A after each chunk's flag (fused); B row-major. */
#define GEMM_INST_SOURCE a_chunks
#define GEMM_INST_B_MN 1
#define GEMM_INST_TABLE agmm_gemm_kernels_chunks_brow
#include "kernels/gemm/instantiate.cuh"
