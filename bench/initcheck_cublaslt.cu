/* Does compute-sanitizer's initcheck see cuBLASLt's stores? For each shape: C = A * B by cuBLASLt
 * (bf16, the heuristic's first algorithm) into memory nothing else has written, then a D2D copy
 * of C; then the control, C2 written by a kernel of ours, copied the same way. Each step prints a
 * line to stderr, so that the tool's reports fall between the lines of the step that caused them.
 *
 *   make initcheck-lab && compute-sanitizer --tool initcheck build/initcheck-lab
 *
 * H200, 2026-12-04 (docs/results; run as a first draft of this program, the same steps): every
 * byte of C copied after the GEMMs of 256^3, 1000x136x64 and 1024^3 was reported uninitialised
 * (78132 reports of 32 bytes: all of the three), none after 12x114x64 and 8x171x64, none for the
 * control: the tool misses the stores of cuBLASLt's larger kernels, so a copy of a GEMM's output
 * from memory never written otherwise is a false report. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>

__global__ void fill_ones(unsigned short *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = 0x3f80; /* bf16 1.0 */
}

/* Row-major C (m x n) = A (m x k) * B, B stored as B^T (n x k): column-major C^T = B^T^T A^T. */
static int gemm(cublasLtHandle_t lt, int m, int n, int k, const void *a, const void *b, void *c, void *ws,
                size_t ws_bytes)
{
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    cublasOperation_t trans = CUBLAS_OP_T;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0, ok = 0;
    const float one = 1.0f, zero = 0.0f;
    cublasLtMatmulAlgoGetHeuristic(lt, desc, lb, la, lc, lc, pref, 8, res, &found);
    for (int i = 0; i < found && !ok; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS)
            ok = cublasLtMatmul(lt, desc, &one, b, lb, a, la, &zero, c, lc, c, lc, &res[i].algo, ws, ws_bytes, 0) ==
                 CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    return ok;
}

int main(void)
{
    static const int shapes[][3] = {{12, 114, 64}, {8, 171, 64}, {256, 256, 256}, {1000, 136, 64}, {1024, 1024, 1024}};
    const size_t ws_bytes = (size_t)32 << 20;
    cublasLtHandle_t lt;
    void *ws;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(&ws, ws_bytes) != cudaSuccess) {
        fprintf(stderr, "initcheck-lab: no GPU or no cuBLASLt\n");
        return 1;
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        const size_t c_bytes = (size_t)m * n * 2;
        void *a, *b, *c, *c2, *d;
        cudaMalloc(&a, (size_t)m * k * 2);
        cudaMalloc(&b, (size_t)n * k * 2);
        cudaMalloc(&c, c_bytes);
        cudaMalloc(&c2, c_bytes);
        cudaMalloc(&d, c_bytes);
        cudaMemset(a, 0x3c, (size_t)m * k * 2);
        cudaMemset(b, 0x3c, (size_t)n * k * 2);
        fprintf(stderr, "== %d x %d x %d: cuBLASLt writes C, then C is copied\n", m, n, k);
        const int ok = gemm(lt, m, n, k, a, b, c, ws, ws_bytes);
        cudaMemcpy(d, c, c_bytes, cudaMemcpyDeviceToDevice);
        fprintf(stderr, "== %d x %d x %d: GEMM %s; control: our kernel writes C2, then C2 is copied\n", m, n, k,
                ok ? "ran" : "FAILED");
        fill_ones<<<64, 256>>>((unsigned short *)c2, c_bytes / 2);
        cudaMemcpy(d, c2, c_bytes, cudaMemcpyDeviceToDevice);
        fprintf(stderr, "== %d x %d x %d: done (%s)\n", m, n, k, cudaGetErrorString(cudaDeviceSynchronize()));
        cudaFree(a);
        cudaFree(b);
        cudaFree(c);
        cudaFree(c2);
        cudaFree(d);
    }
    cudaFree(ws);
    cublasLtDestroy(lt);
    return 0;
}
