/* gemm-lab's yardstick: cuBLASLt's heuristic algorithms and cublasGemmEx (lab_cublas.h). */
#include "lab_cublas.h"

void lab_cublas_init(lab_cublas *Y, void *ws, size_t ws_bytes, const void *a, const void *b)
{
    CHECK_LT(cublasLtCreate(&Y->lt));
    CHECK_LT(cublasCreate(&Y->blas));
    CHECK_LT(cublasSetWorkspace(Y->blas, ws, ws_bytes));
    Y->ws = ws, Y->ws_bytes = ws_bytes, Y->a = a, Y->b = b;
}

/* Appends to P each of its first `base` algorithms with the cluster shapes below forced, where
 * cuBLASLt's check accepts the result within the workspace. */
static void lt_add_clusters(const lab_cublas *Y, lt_set *P, int base)
{
    const uint16_t shapes[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                               CUBLASLT_CLUSTER_SHAPE_2x2x1};
    for (int i = 0; i < base; i++)
        for (size_t j = 0; j < sizeof shapes / sizeof shapes[0] && P->count < MAX_LT; j++) {
            cublasLtMatmulHeuristicResult_t r = P->h[i];
            uint16_t id = 0;
            size_t got = 0;
            if (r.state != CUBLAS_STATUS_SUCCESS ||
                (cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &id, sizeof id,
                                                      &got) == CUBLAS_STATUS_SUCCESS &&
                 id == shapes[j]) ||
                cublasLtMatmulAlgoConfigSetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &shapes[j],
                                                     sizeof shapes[j]) != CUBLAS_STATUS_SUCCESS)
                continue;
            cublasLtMatmulHeuristicResult_t check;
            if (cublasLtMatmulAlgoCheck(Y->lt, P->op, P->lb, P->la, P->lc, P->lc, &r.algo, &check) !=
                    CUBLAS_STATUS_SUCCESS ||
                check.workspaceSize > Y->ws_bytes)
                continue;
            r.workspaceSize = check.workspaceSize;
            P->h[P->count++] = r;
        }
}

void lt_set_make(const lab_cublas *Y, lt_set *P, int64_t rows, int64_t n, int64_t k, int b_col_major, int want,
                 int clusters)
{
    cublasOperation_t ta = b_col_major ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    P->ta = ta;
    P->rows = rows, P->n = n, P->k = k, P->ldb = b_col_major ? k : n;
    CHECK_LT(cublasLtMatmulDescCreate(&P->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK_LT(cublasLtMatmulDescSetAttribute(P->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_LT(cublasLtMatmulDescSetAttribute(P->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (b_col_major) /* B^T row-major n x k = column-major k x n, ld k */
        CHECK_LT(cublasLtMatrixLayoutCreate(&P->lb, CUDA_R_16BF, k, n, k));
    else /* B row-major k x n = column-major n x k, ld n */
        CHECK_LT(cublasLtMatrixLayoutCreate(&P->lb, CUDA_R_16BF, n, k, n));
    CHECK_LT(cublasLtMatrixLayoutCreate(&P->la, CUDA_R_16BF, k, rows, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&P->lc, CUDA_R_16BF, n, rows, n));
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &Y->ws_bytes,
                                                  sizeof Y->ws_bytes));
    P->count = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(Y->lt, P->op, P->lb, P->la, P->lc, P->lc, pref, want, P->h, &P->count));
    cublasLtMatmulPreferenceDestroy(pref);
    if (P->count < 1) {
        fprintf(stderr, "cuBLASLt found no algorithm for %lld x %lld x %lld\n", (long long)rows, (long long)n,
                (long long)k);
        exit(1);
    }
    if (clusters)
        lt_add_clusters(Y, P, P->count);
}

void lt_set_free(lt_set *P)
{
    cublasLtMatrixLayoutDestroy(P->lb);
    cublasLtMatrixLayoutDestroy(P->la);
    cublasLtMatrixLayoutDestroy(P->lc);
    cublasLtMatmulDescDestroy(P->op);
}

cublasStatus_t lt_run(const lab_cublas *Y, const lt_set *P, int i, void *c)
{
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(Y->lt, P->op, &alpha, Y->b, P->lb, Y->a, P->la, &beta, c, P->lc, c, P->lc, &P->h[i].algo,
                          Y->ws, Y->ws_bytes, 0);
}

/* The same call as cuBLASLt's above, through cuBLAS's own choice of kernel. */
cublasStatus_t blas_run(const lab_cublas *Y, const lt_set *P, void *c)
{
    const float alpha = 1.0f, beta = 0.0f;
    return cublasGemmEx(Y->blas, P->ta, CUBLAS_OP_N, (int)P->n, (int)P->rows, (int)P->k, &alpha, Y->b, CUDA_R_16BF,
                        (int)P->ldb, Y->a, CUDA_R_16BF, (int)P->k, &beta, c, CUDA_R_16BF, (int)P->n,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

void lt_algo_name(const lt_set *P, int i, char *out, size_t len)
{
    int v[5] = {0, 0, 0, 0, 0};
    const cublasLtMatmulAlgoConfigAttributes_t attr[5] = {CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                          CUBLASLT_ALGO_CONFIG_SPLITK_NUM, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                          CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
    for (int j = 0; j < 5; j++) {
        size_t got = 0;
        uint32_t x = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&P->h[i].algo, attr[j], &x, sizeof x, &got) == CUBLAS_STATUS_SUCCESS)
            v[j] = (int)x;
    }
    snprintf(out, len, "id=%d:tile=%d:sk=%d:st=%d:cl=%d", v[0], v[1], v[2], v[3], v[4]);
}
