/* The GEMM kernel lab: the engine (src/kernels/gemm_engine.h) and cuBLASLt side by side, on the
 * same inputs, in one run. Per shape: one untimed run of each on poisoned outputs, compared
 * (relative Frobenius error of ours against cuBLAS, NaN count), then warm-ups and timed calls
 * alternating between the two, each call timed with CUDA events after a 256 MB L2 flush
 * (cudaMemsetAsync), median reported.
 *
 * Shapes: the seed's gathered GEMMs (W*M) x N x K with N = K = M, M in [--min, --max] step
 * --step, for each W in --w (default 1,2,4,8), then LLaMA-70B TP shapes (8192 rows:
 * (N, K) = (3584, 8192) and (8192, 3584)). Host code is C; the one kernel is the comparison.
 *
 *   gemm-lab [--w 1,2,4,8] [--min 256] [--max 4096] [--step 128] [--reps 20] [--warmup 3]
 *            [--layout col|row] [--config -1] [--no-flush] [--no-llama] [--csv file]
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/numeric.h"
#include "kernels/gemm_engine.h"

#define CHECK_CUDA(x)                                                                             \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define CHECK_LT(x)                                                                      \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s -> cublas status %d\n", __FILE__, __LINE__, #x, (int)s_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* sums[0] += (x-y)^2, sums[1] += y^2, sums[2] += NaNs in x. */
__global__ void compare_kernel(const __nv_bfloat16 *x, const __nv_bfloat16 *y, size_t n, double *sums)
{
    double d2 = 0, y2 = 0, nans = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
        if (isnan(a))
            nans += 1;
        else
            d2 += (double)(a - b) * (a - b);
        y2 += (double)b * b;
    }
    for (int o = 16; o > 0; o >>= 1) {
        d2 += __shfl_down_sync(0xffffffffu, d2, o);
        y2 += __shfl_down_sync(0xffffffffu, y2, o);
        nans += __shfl_down_sync(0xffffffffu, nans, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&sums[0], d2);
        atomicAdd(&sums[1], y2);
        atomicAdd(&sums[2], nans);
    }
}

__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, uint64_t seed, uint16_t poison)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (poison) {
            x[i] = __ushort_as_bfloat16(poison);
            continue;
        }
        uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull; /* splitmix64 of the index */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float v = (float)((double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0);
        x[i] = __float2bfloat16(v == 0.0f ? 0.5f : v);
    }
}

typedef struct {
    int ws[8], nw;
    int64_t min_m, max_m, step;
    int reps, warmup, flush, llama, config;
    agmm_layout layout;
    const char *csv;
} options;

typedef struct {
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    void *flush;
    size_t flush_bytes;
    cudaEvent_t e0, e1;
    double *d_sums;
} lab;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* cuBLASLt for row-major C = A B: in its column-major terms C^T (n x rows) = op(B) A^T. */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lb, la, lc;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

static void lt_plan_make(lab *L, lt_plan *P, int64_t rows, int64_t n, int64_t k, agmm_layout lay)
{
    cublasOperation_t ta = lay == AGMM_LAYOUT_COL_MAJOR ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescCreate(&P->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK_LT(cublasLtMatmulDescSetAttribute(P->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_LT(cublasLtMatmulDescSetAttribute(P->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (lay == AGMM_LAYOUT_COL_MAJOR) /* B^T row-major n x k = column-major k x n, ld k */
        CHECK_LT(cublasLtMatrixLayoutCreate(&P->lb, CUDA_R_16BF, k, n, k));
    else /* B row-major k x n = column-major n x k, ld n */
        CHECK_LT(cublasLtMatrixLayoutCreate(&P->lb, CUDA_R_16BF, n, k, n));
    CHECK_LT(cublasLtMatrixLayoutCreate(&P->la, CUDA_R_16BF, k, rows, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&P->lc, CUDA_R_16BF, n, rows, n));
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &L->ws_bytes,
                                                  sizeof L->ws_bytes));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(L->lt, P->op, P->lb, P->la, P->lc, P->lc, pref, 1, &h, &found));
    if (!found) {
        fprintf(stderr, "cuBLASLt found no algorithm\n");
        exit(1);
    }
    P->algo = h.algo;
    cublasLtMatmulPreferenceDestroy(pref);
}

static void lt_plan_free(lt_plan *P)
{
    cublasLtMatrixLayoutDestroy(P->lb);
    cublasLtMatrixLayoutDestroy(P->la);
    cublasLtMatrixLayoutDestroy(P->lc);
    cublasLtMatmulDescDestroy(P->op);
}

static void lt_run(lab *L, lt_plan *P, const void *a, const void *b, void *c)
{
    const float alpha = 1.0f, beta = 0.0f;
    CHECK_LT(cublasLtMatmul(L->lt, P->op, &alpha, b, P->lb, a, P->la, &beta, c, P->lc, c, P->lc, &P->algo, L->ws,
                            L->ws_bytes, 0));
}

/* One shape: returns ours/cuBLAS (median times). */
static double run_shape(lab *L, const options *o, FILE *csv, const char *label, int W, int64_t m_rank, int64_t n,
                        int64_t k, void *d_a, void *d_b, void *d_c, void *d_ref)
{
    const int64_t rows = (int64_t)W * m_rank;
    agmm_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.a = d_a;
    d.b = d_b;
    d.c = d_c;
    d.b_layout = o->layout;
    d.m = rows;
    d.n = n;
    d.k = k;
    d.nranks = 1;
    d.splits = 1;
    d.config = o->config;
    char err[256];
    agmm_gemm_plan *plan = NULL;
    if (agmm_gemm_plan_create(&plan, &d, err, sizeof err) != AGMM_SUCCESS) {
        fprintf(stderr, "plan %s: %s\n", label, err);
        exit(1);
    }
    lt_plan P;
    lt_plan_make(L, &P, rows, n, k, o->layout);

    /* Correctness: both outputs poisoned, one run each, compared on the device. */
    const size_t c_elems = (size_t)(rows * n);
    fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)d_c, c_elems, 0, AGMM_POISON_BF16);
    fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)d_ref, c_elems, 0, AGMM_POISON_BF16);
    if (agmm_gemm_run(plan, 0, 0) != AGMM_SUCCESS) {
        fprintf(stderr, "run %s failed\n", label);
        exit(1);
    }
    lt_run(L, &P, d_a, d_b, d_ref);
    CHECK_CUDA(cudaMemset(L->d_sums, 0, 3 * sizeof(double)));
    compare_kernel<<<1024, 256>>>((const __nv_bfloat16 *)d_c, (const __nv_bfloat16 *)d_ref, c_elems, L->d_sums);
    CHECK_CUDA(cudaGetLastError());
    double sums[3];
    CHECK_CUDA(cudaMemcpy(sums, L->d_sums, sizeof sums, cudaMemcpyDeviceToHost));
    const double rel = sqrt(sums[0] / (sums[1] > 0 ? sums[1] : 1));

    /* Timing: alternate ours / cuBLAS so drift hits both alike. */
    float *t_ours = (float *)malloc(o->reps * sizeof(float)), *t_lt = (float *)malloc(o->reps * sizeof(float));
    for (int i = 0; i < o->warmup; i++) {
        agmm_gemm_run(plan, 0, 0);
        lt_run(L, &P, d_a, d_b, d_ref);
    }
    for (int i = 0; i < o->reps; i++) {
        for (int which = 0; which < 2; which++) {
            if (o->flush)
                CHECK_CUDA(cudaMemsetAsync(L->flush, i & 0xff, L->flush_bytes, 0));
            CHECK_CUDA(cudaEventRecord(L->e0, 0));
            if (which == 0)
                agmm_gemm_run(plan, 0, 0);
            else
                lt_run(L, &P, d_a, d_b, d_ref);
            CHECK_CUDA(cudaEventRecord(L->e1, 0));
            CHECK_CUDA(cudaEventSynchronize(L->e1));
            float ms;
            CHECK_CUDA(cudaEventElapsedTime(&ms, L->e0, L->e1));
            (which == 0 ? t_ours : t_lt)[i] = ms * 1000.0f;
        }
    }
    CHECK_CUDA(cudaGetLastError());
    qsort(t_ours, o->reps, sizeof(float), cmp_float);
    qsort(t_lt, o->reps, sizeof(float), cmp_float);
    const double us_ours = t_ours[o->reps / 2], us_lt = t_lt[o->reps / 2];
    const double flop = 2.0 * rows * n * k;
    const int ok = sums[2] == 0 && rel <= 1e-2;
    printf("%-8s %2d %5lld %6lld %5lld %5lld  %-34s %9.1f %9.1f  %5.3f  %6.1f %6.1f  %.1e %s\n", label, W,
           (long long)m_rank, (long long)rows, (long long)n, (long long)k, agmm_gemm_plan_describe(plan), us_ours, us_lt,
           us_ours / us_lt, flop / us_ours * 1e-6, flop / us_lt * 1e-6, rel, ok ? "ok" : "FAIL");
    fflush(stdout);
    if (csv)
        fprintf(csv, "%s,%d,%lld,%lld,%lld,%lld,%s,%.2f,%.2f,%.4f,%.1f,%.1f,%.3e,%lld\n", label, W, (long long)m_rank,
                (long long)rows, (long long)n, (long long)k, agmm_gemm_plan_describe(plan), us_ours, us_lt,
                us_ours / us_lt, flop / us_ours * 1e-6, flop / us_lt * 1e-6, rel, (long long)sums[2]);
    free(t_ours);
    free(t_lt);
    lt_plan_free(&P);
    agmm_gemm_plan_destroy(plan);
    return ok ? us_ours / us_lt : -1.0;
}

static void parse(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->ws[0] = 1, o->ws[1] = 2, o->ws[2] = 4, o->ws[3] = 8, o->nw = 4;
    o->min_m = 256, o->max_m = 4096, o->step = 128;
    o->reps = 20, o->warmup = 3, o->flush = 1, o->llama = 1, o->config = -1;
    o->layout = AGMM_LAYOUT_COL_MAJOR;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--w")) {
            o->nw = 0;
            for (const char *s = v; *s && o->nw < 8;) {
                o->ws[o->nw++] = atoi(s);
                while (*s && *s != ',')
                    s++;
                if (*s == ',')
                    s++;
            }
            i++;
        } else if (!strcmp(a, "--min"))
            o->min_m = atoll(v), i++;
        else if (!strcmp(a, "--max"))
            o->max_m = atoll(v), i++;
        else if (!strcmp(a, "--step"))
            o->step = atoll(v), i++;
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v), i++;
        else if (!strcmp(a, "--warmup"))
            o->warmup = atoi(v), i++;
        else if (!strcmp(a, "--config"))
            o->config = atoi(v), i++;
        else if (!strcmp(a, "--layout"))
            o->layout = !strcmp(v, "row") ? AGMM_LAYOUT_ROW_MAJOR : AGMM_LAYOUT_COL_MAJOR, i++;
        else if (!strcmp(a, "--csv"))
            o->csv = v, i++;
        else if (!strcmp(a, "--no-flush"))
            o->flush = 0;
        else if (!strcmp(a, "--no-llama"))
            o->llama = 0;
        else {
            fprintf(stderr, "usage: gemm-lab [--w 1,2,4,8] [--min M] [--max M] [--step S] [--reps N] "
                            "[--warmup N] [--layout col|row] [--config C] [--no-flush] [--no-llama] [--csv F]\n");
            exit(2);
        }
    }
    if (o->reps < 1)
        o->reps = 1;
}

int main(int argc, char **argv)
{
    options o;
    parse(argc, argv, &o);
    lab L;
    memset(&L, 0, sizeof L);
    CHECK_LT(cublasLtCreate(&L.lt));
    L.ws_bytes = 32u << 20;
    L.flush_bytes = 256u << 20;
    CHECK_CUDA(cudaMalloc(&L.ws, L.ws_bytes));
    CHECK_CUDA(cudaMalloc(&L.flush, L.flush_bytes));
    CHECK_CUDA(cudaMalloc((void **)&L.d_sums, 3 * sizeof(double)));
    CHECK_CUDA(cudaEventCreate(&L.e0));
    CHECK_CUDA(cudaEventCreate(&L.e1));

    int max_w = 1;
    for (int i = 0; i < o.nw; i++)
        max_w = o.ws[i] > max_w ? o.ws[i] : max_w;
    int64_t max_rows = max_w * o.max_m, max_nk = o.max_m;
    if (o.llama) {
        max_rows = max_rows > 8192 ? max_rows : 8192;
        max_nk = max_nk > 8192 ? max_nk : 8192;
    }
    const size_t a_elems = (size_t)(max_rows * max_nk), b_elems = (size_t)(max_nk * max_nk);
    const size_t c_elems = (size_t)(max_rows * max_nk);
    void *d_a, *d_b, *d_c, *d_ref;
    CHECK_CUDA(cudaMalloc(&d_a, a_elems * 2));
    CHECK_CUDA(cudaMalloc(&d_b, b_elems * 2));
    CHECK_CUDA(cudaMalloc(&d_c, c_elems * 2));
    CHECK_CUDA(cudaMalloc(&d_ref, c_elems * 2));
    fill_kernel<<<4096, 256>>>((__nv_bfloat16 *)d_a, a_elems, 0x1234, 0);
    fill_kernel<<<4096, 256>>>((__nv_bfloat16 *)d_b, b_elems, 0x9876, 0);
    CHECK_CUDA(cudaDeviceSynchronize());

    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    int ver = 0;
    cudaRuntimeGetVersion(&ver);
    printf("# gemm-lab on %s (%d SMs), CUDA runtime %d, cuBLASLt %zu; B %s-major; %s; median of %d after %d "
           "warm-ups\n",
           prop.name, prop.multiProcessorCount, ver, cublasLtGetVersion(),
           o.layout == AGMM_LAYOUT_COL_MAJOR ? "column" : "row", o.flush ? "L2 flushed (256 MB) before each call" : "no flush",
           o.reps, o.warmup);
    printf("%-8s %2s %5s %6s %5s %5s  %-34s %9s %9s  %5s  %6s %6s  %7s\n", "shape", "W", "M", "rows", "N", "K",
           "ours (config)", "ours_us", "cublas_us", "ratio", "TF_us", "TF_cub", "rel_err");
    FILE *csv = o.csv ? fopen(o.csv, "w") : NULL;
    if (csv)
        fprintf(csv, "shape,W,M,rows,N,K,config,ours_us,cublas_us,ratio,ours_tflops,cublas_tflops,rel_err,nans\n");

    int fails = 0;
    for (int wi = 0; wi < o.nw; wi++) {
        double worst = 0, sum_log = 0, worst_big = 0;
        int count = 0;
        for (int64_t m = o.min_m; m <= o.max_m; m += o.step) {
            double r = run_shape(&L, &o, csv, "seed", o.ws[wi], m, m, m, d_a, d_b, d_c, d_ref);
            if (r < 0) {
                fails++;
                continue;
            }
            worst = r > worst ? r : worst;
            if ((int64_t)o.ws[wi] * m >= 8192)
                worst_big = r > worst_big ? r : worst_big;
            sum_log += log(r);
            count++;
        }
        if (count)
            printf("# W=%d: geomean ours/cuBLAS %.3f, worst %.3f, worst at >= 8192 rows %.3f\n", o.ws[wi],
                   exp(sum_log / count), worst, worst_big);
    }
    if (o.llama) {
        if (run_shape(&L, &o, csv, "llama70b", 1, 8192, 3584, 8192, d_a, d_b, d_c, d_ref) < 0)
            fails++;
        if (run_shape(&L, &o, csv, "llama70b", 1, 8192, 8192, 3584, d_a, d_b, d_c, d_ref) < 0)
            fails++;
    }
    if (csv)
        fclose(csv);
    printf("# %s\n", fails ? "SOME SHAPES FAILED the correctness check" : "all shapes match cuBLAS (rel <= 1e-2, no NaN)");
    return fails ? 1 : 0;
}
