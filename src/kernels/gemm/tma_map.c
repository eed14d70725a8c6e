/* The GEMM engine's tensor maps (plan_impl.h): cuTensorMapEncodeTiled, taken from the driver
 * through the runtime (cudaGetDriverEntryPointByVersion: no libcuda link). */
#ifdef AGMM_HAVE_CUDA
#include "kernels/gemm/plan_impl.h"

agmm_status agmm_gemm_tma_init(agmm_gemm_plan *pl, agmm_error *err)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t ce = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (ce != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
        return AGMM_FAIL(err, AGMM_ERR_CUDA,
                         "gemm engine: cuTensorMapEncodeTiled not found in the driver (%s, query %d)",
                         cudaGetErrorString(ce), (int)q);
    pl->encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    return AGMM_SUCCESS;
}

/* Rank 2: a matrix; rank 3: `blocks` matrices, a box of one block. */
static agmm_status encode(const agmm_gemm_plan *pl, CUtensorMap *map, const void *ptr, cuuint32_t rank, uint64_t inner,
                          uint64_t outer, uint64_t blocks, uint32_t box_inner, uint32_t box_outer, const char *what,
                          agmm_error *err)
{
    cuuint64_t dims[3] = {inner, outer, blocks};
    cuuint64_t strides[2] = {inner * 2, inner * outer * 2};
    cuuint32_t box[3] = {box_inner, box_outer, 1};
    cuuint32_t estr[3] = {1, 1, 1};
    CUresult r = pl->encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, (void *)ptr, dims, strides, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return AGMM_FAIL(err, AGMM_ERR_CUDA,
                         "gemm engine: cuTensorMapEncodeTiled(%s at %p: %llu x %llu x %llu, box %u x %u) failed: "
                         "CUresult %d",
                         what, ptr, (unsigned long long)blocks, (unsigned long long)outer, (unsigned long long)inner,
                         box_outer, box_inner, (int)r);
    return AGMM_SUCCESS;
}

agmm_status agmm_gemm_tma_matrix(const agmm_gemm_plan *pl, CUtensorMap *map, const void *ptr, uint64_t inner,
                                 uint64_t outer, uint32_t box_inner, uint32_t box_outer, const char *what,
                                 agmm_error *err)
{
    return encode(pl, map, ptr, 2, inner, outer, 1, box_inner, box_outer, what, err);
}

agmm_status agmm_gemm_tma_blocks(const agmm_gemm_plan *pl, CUtensorMap *map, const void *ptr, uint64_t inner,
                                 uint64_t outer, uint64_t blocks, uint32_t box_inner, uint32_t box_outer,
                                 const char *what, agmm_error *err)
{
    return encode(pl, map, ptr, 3, inner, outer, blocks, box_inner, box_outer, what, err);
}
#endif /* AGMM_HAVE_CUDA */
