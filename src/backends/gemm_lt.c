/* The cuBLASLt wrapper of gemm_lt.h. */
#ifdef AGMM_HAVE_CUDA
#include "gemm_lt.h"

#include <stdlib.h>

#include "../world/gpu_check.h"

struct agmm_gemm_lt {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay_b, lay_a, lay_c;
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes;
    int64_t rows, n, k;
};

unsigned agmm_gemm_lt_align(uint64_t bytes)
{
    unsigned a = 16;
    while (a > 1 && bytes % a != 0)
        a /= 2;
    return a;
}

/* CTAs per cluster of an algorithm's cluster shape (cublasLt.h's CUBLASLT_CLUSTER_SHAPE_*): 1 or
 * 2 for the shapes named here, 0 for any other (AUTO included: unknown, so not known small). */
static int cluster_ctas(const cublasLtMatmulAlgo_t *algo)
{
    uint16_t id = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &id, sizeof id, &written) !=
            CUBLAS_STATUS_SUCCESS ||
        written != sizeof id)
        return 0;
    switch (id) {
    case CUBLASLT_CLUSTER_SHAPE_1x1x1: return 1;
    case CUBLASLT_CLUSTER_SHAPE_2x1x1:
    case CUBLASLT_CLUSTER_SHAPE_1x2x1: return 2;
    default: return 0;
    }
}

/* The algorithm to run: the heuristic's first result; with shared_device (gemm_lt.h says why) the
 * first whose clusters are known to be at most 2 CTAs, else the first with its cluster shape
 * forced to 1x1x1 where cuBLASLt accepts that, else the first as it is. 0, or -1 when the
 * heuristic found nothing. */
static int pick_algo(const agmm_gemm_lt *g, const cublasLtMatmulHeuristicResult_t *res, int found,
                     int shared_device, cublasLtMatmulAlgo_t *algo)
{
    int first = -1;
    for (int i = 0; i < found && first < 0; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS)
            first = i;
    if (first < 0)
        return -1;
    *algo = res[first].algo;
    if (!shared_device)
        return 0;
    for (int i = first; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && cluster_ctas(&res[i].algo) > 0) {
            *algo = res[i].algo;
            return 0;
        }
    cublasLtMatmulAlgo_t one = res[first].algo;
    const uint16_t id = CUBLASLT_CLUSTER_SHAPE_1x1x1;
    cublasLtMatmulHeuristicResult_t check;
    if (cublasLtMatmulAlgoConfigSetAttribute(&one, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &id, sizeof id) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoCheck(g->lt, g->desc, g->lay_b, g->lay_a, g->lay_c, g->lay_c, &one, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= g->workspace_bytes)
        *algo = one;
    return 0;
}

agmm_status agmm_gemm_lt_create(agmm_gemm_lt **out, cublasLtHandle_t lt, int64_t rows, int64_t n, int64_t k,
                                agmm_layout b_layout, unsigned align_bytes, size_t workspace_bytes,
                                int shared_device, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    cublasLtMatmulPreference_t pref = NULL;
    *out = NULL;
    agmm_gemm_lt *g = calloc(1, sizeof *g);
    if (g == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "GEMM plan allocation failed");
    g->lt = lt;
    g->workspace_bytes = workspace_bytes;
    g->rows = rows;
    g->n = n;
    g->k = k;
    cublasOperation_t op_b = b_layout == AGMM_LAYOUT_COL_MAJOR ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = CUBLAS_OP_N;
    AGMM_LT_TRY(st, err, cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    AGMM_LT_TRY(st, err, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    AGMM_LT_TRY(st, err, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    if (b_layout == AGMM_LAYOUT_COL_MAJOR)
        AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k));
    else
        AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_b, CUDA_R_16BF, (uint64_t)n, (uint64_t)k, n));
    AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_a, CUDA_R_16BF, (uint64_t)k, (uint64_t)rows, k));
    AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_c, CUDA_R_16BF, (uint64_t)n, (uint64_t)rows, n));

    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceCreate(&pref));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &workspace_bytes, sizeof workspace_bytes));
    /* cuBLASLt assumes 256-byte aligned pointers unless told: chunk pointers into C and A are less. */
    uint32_t align_b = 16, align_ac = align_bytes;
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                              &align_b, sizeof align_b));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                              &align_ac, sizeof align_ac));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                              &align_ac, sizeof align_ac));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                              &align_ac, sizeof align_ac));
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    AGMM_LT_TRY(st, err,
                cublasLtMatmulAlgoGetHeuristic(lt, g->desc, g->lay_b, g->lay_a, g->lay_c, g->lay_c, pref,
                                               shared_device ? 8 : 1, res, &found));
    if (pick_algo(g, res, found, shared_device, &g->algo) < 0) {
        st = AGMM_FAIL(err, AGMM_ERR_CUBLAS,
                       "cuBLASLt has no bf16 algorithm for C(%lld x %lld) = A(%lld x %lld) * B (%s, %u-byte aligned "
                       "A/C pointers)",
                       (long long)rows, (long long)n, (long long)rows, (long long)k,
                       b_layout == AGMM_LAYOUT_COL_MAJOR ? "column-major" : "row-major", align_bytes);
        goto fail;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    *out = g;
    return AGMM_SUCCESS;
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    agmm_gemm_lt_destroy(g);
    return st;
}

agmm_status agmm_gemm_lt_run(const agmm_gemm_lt *g, const void *a, const void *b, void *c, void *workspace,
                             cudaStream_t stream, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    const float one = 1.0f, zero = 0.0f;
    AGMM_LT_TRY(st, err,
                cublasLtMatmul(g->lt, g->desc, &one, b, g->lay_b, a, g->lay_a, &zero, c, g->lay_c, c, g->lay_c,
                               &g->algo, workspace, g->workspace_bytes, stream));
fail:
    return st;
}

agmm_status agmm_gemm_lt_warm(const agmm_gemm_lt *g, const void *a, const void *b, void *c, void *workspace,
                              cudaStream_t stream, agmm_error *err)
{
    agmm_status st = agmm_gemm_lt_run(g, a, b, c, workspace, stream, err);
    if (st != AGMM_SUCCESS)
        return st;
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(stream));
fail:
    return st;
}

void agmm_gemm_lt_destroy(agmm_gemm_lt *g)
{
    if (g == NULL)
        return;
    if (g->lay_c)
        cublasLtMatrixLayoutDestroy(g->lay_c);
    if (g->lay_a)
        cublasLtMatrixLayoutDestroy(g->lay_a);
    if (g->lay_b)
        cublasLtMatrixLayoutDestroy(g->lay_b);
    if (g->desc)
        cublasLtMatmulDescDestroy(g->desc);
    free(g);
}
#endif /* AGMM_HAVE_CUDA */
