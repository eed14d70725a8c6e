/* The row-parallel matmuls in a world of processes (agmm-proctest, tests/test_process.c): one
 * backend on odd shapes (M = 1, 7, 130: fewer rows than ranks, and not divisible by W; N = 8, 33;
 * K = 8, 72; both layouts of B where N allows), each plan run twice with fresh small-integer
 * inputs and poisoned outputs, compared bit for bit with the fp64 sum rounded to bf16 (exact:
 * every partial is an integer of magnitude <= 256, exact in bf16, and every sum exact in fp32). Every rank regenerates every rank's inputs from
 * seeds, so no data crosses processes but through the library. Works in the CPU world and on GPUs
 * (emulated ranks are processes sharing a GPU: bench/process_run.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/numeric.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"
#ifdef AGMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static void *dev_alloc(int gpu, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    void *p = NULL;
    if (gpu)
        return cudaMalloc(&p, bytes ? bytes : 16) == cudaSuccess ? p : NULL;
#endif
    return malloc(bytes ? bytes : 16);
}

static void dev_free(int gpu, void *p)
{
#ifdef AGMM_HAVE_CUDA
    if (gpu) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/* A copy ordered on the rank's stream and waited for; 0 on success. */
static int dev_copy(int gpu, void *stream, void *dst, const void *src, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    if (gpu)
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream) != cudaSuccess ||
               cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess;
#endif
    memcpy(dst, src, bytes);
    return 0;
}

typedef struct {
    agmm_ctx *ctx;
    int rank, nranks, gpu;
    void *stream;
    agmm_op op;
    int64_t m, n, k, rows, row0;
    agmm_layout layout;
    uint16_t *a, *b, *out, *want; /* host: this rank's A and B, its output, the reference */
    double *sum;
    void *d_a, *d_b, *d_out;
} mr_proc;

/* One run with fresh inputs; NULL when exact, else what differed. */
static const char *run_once(mr_proc *x, agmm_plan *plan, uint64_t seed, int run, char *why, size_t len)
{
    const int64_t mn = x->m * x->n, count = x->rows * x->n;
    double *prod = malloc((size_t)mn * sizeof *prod);
    uint16_t *a = malloc((size_t)(x->m * x->k) * 2), *b = malloc((size_t)(x->k * x->n) * 2);
    if (!prod || !a || !b) {
        free(prod), free(a), free(b);
        return "allocation failed";
    }
    memset(x->sum, 0, (size_t)mn * sizeof *x->sum);
    const int range = x->k <= 64 ? 2 : 1; /* |partial| <= range^2 * K <= 256 */
    for (int r = 0; r < x->nranks; r++) {
        test_fill_bf16(a, x->m * x->k, test_seed_of(seed, r, run, 'a'), range);
        test_fill_bf16(b, x->k * x->n, test_seed_of(seed, r, run, 'b'), range);
        agmm_ref_gemm_bf16(a, b, x->layout, x->m, x->n, x->k, prod, NULL);
        for (int64_t i = 0; i < mn; i++)
            x->sum[i] += prod[i];
        if (r == x->rank) {
            memcpy(x->a, a, (size_t)(x->m * x->k) * 2);
            memcpy(x->b, b, (size_t)(x->k * x->n) * 2);
        }
    }
    free(prod), free(a), free(b);
    for (int64_t i = 0; i < count; i++)
        x->want[i] = agmm_ref_f64_to_bf16(x->sum[x->row0 * x->n + i]);
    test_poison_bf16(x->out, count);
    if (dev_copy(x->gpu, x->stream, x->d_a, x->a, (size_t)(x->m * x->k) * 2) ||
        dev_copy(x->gpu, x->stream, x->d_b, x->b, (size_t)(x->k * x->n) * 2) ||
        (count && dev_copy(x->gpu, x->stream, x->d_out, x->out, (size_t)count * 2)))
        return "upload failed";
    agmm_status st;
    if (x->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_io io = {.a = x->d_a, .b = x->d_b, .c = x->d_out};
        st = agmm_matmul_all_reduce(plan, &io, x->stream);
    } else {
        agmm_matmul_reduce_scatter_io io = {.a = x->d_a, .b = x->d_b, .out = count ? x->d_out : NULL};
        st = agmm_matmul_reduce_scatter(plan, &io, x->stream);
    }
    if (st != AGMM_SUCCESS || agmm_ctx_sync(x->ctx) != AGMM_SUCCESS) {
        snprintf(why, len, "run %d: %s", run, agmm_last_error(x->ctx));
        return why;
    }
    if (count && dev_copy(x->gpu, x->stream, x->out, x->d_out, (size_t)count * 2))
        return "download failed";
    int64_t bad = agmm_ref_first_mismatch(x->out, x->want, count, 2);
    if (bad < 0)
        return NULL;
    snprintf(why, len, "run %d: row %lld col %lld is %#x, want %#x", run, (long long)(x->row0 + bad / x->n),
             (long long)(bad % x->n), x->out[bad], x->want[bad]);
    return why;
}

static const char *one_shape(mr_proc *x, const char *backend, int *cases, char *why, size_t len)
{
    const int64_t mn = x->m * x->n;
    x->rows = x->m, x->row0 = 0;
    if (x->op == AGMM_OP_MATMUL_REDUCE_SCATTER)
        x->rows = agmm_matmul_reduce_scatter_rows(x->m, x->nranks, x->rank, &x->row0);
    const size_t out_bytes = (size_t)(x->rows * x->n) * 2;
    x->a = malloc((size_t)(x->m * x->k) * 2), x->b = malloc((size_t)(x->k * x->n) * 2);
    x->out = malloc(out_bytes + 16), x->want = malloc(out_bytes + 16), x->sum = malloc((size_t)mn * sizeof(double));
    x->d_a = dev_alloc(x->gpu, (size_t)(x->m * x->k) * 2), x->d_b = dev_alloc(x->gpu, (size_t)(x->k * x->n) * 2);
    x->d_out = dev_alloc(x->gpu, out_bytes);
    const char *bad = x->a && x->b && x->out && x->want && x->sum && x->d_a && x->d_b && x->d_out ? NULL
                                                                                                : "allocation failed";
    for (int layout = 0; layout < 2 && !bad; layout++) {
        if (layout == AGMM_LAYOUT_ROW_MAJOR && x->n % 8 != 0)
            continue;
        x->layout = (agmm_layout)layout;
        agmm_plan *plan = NULL;
        agmm_status st;
        if (x->op == AGMM_OP_MATMUL_ALL_REDUCE) {
            agmm_matmul_all_reduce_desc d = {.m = x->m, .n = x->n, .k = x->k, .b_layout = x->layout, .backend = backend};
            st = agmm_plan_matmul_all_reduce(&plan, x->ctx, &d);
        } else {
            agmm_matmul_reduce_scatter_desc d = {.m = x->m, .n = x->n, .k = x->k, .b_layout = x->layout,
                                                 .backend = backend};
            st = agmm_plan_matmul_reduce_scatter(&plan, x->ctx, &d);
        }
        if (st != AGMM_SUCCESS) {
            snprintf(why, len, "plan: %s", agmm_last_error(x->ctx));
            bad = why;
            break;
        }
        uint64_t seed = (uint64_t)(x->m * 1000 + x->n * 10 + x->k) * 2 + (uint64_t)layout;
        for (int run = 0; run < 2 && !bad; run++)
            bad = run_once(x, plan, seed, run, why, len);
        agmm_plan_destroy(plan);
        (*cases)++;
    }
    free(x->a), free(x->b), free(x->out), free(x->want), free(x->sum);
    dev_free(x->gpu, x->d_a), dev_free(x->gpu, x->d_b), dev_free(x->gpu, x->d_out);
    return bad;
}

void proc_matmul_reduce(agmm_ctx *ctx, int nranks, int gpu, void *stream, agmm_op op, const char *backend)
{
    static const int64_t ms[] = {1, 7, 130}, ns[] = {8, 33}, ks[] = {8, 72};
    mr_proc x = {.ctx = ctx, .rank = agmm_ctx_rank(ctx), .nranks = nranks, .gpu = gpu, .stream = stream, .op = op};
    for (size_t im = 0; im < 3; im++)
        for (size_t in = 0; in < 2; in++)
            for (size_t ik = 0; ik < 2; ik++) {
                x.m = ms[im], x.n = ns[in], x.k = ks[ik];
                char why[640] = "";
                int cases = 0;
                const char *bad = one_shape(&x, backend, &cases, why, sizeof why);
                agmm_check(bad == NULL, "rank %d: %s/%s W=%d M=%lld N=%lld K=%lld (%d layouts, 2 runs each): exact%s%s",
                           x.rank, agmm_op_name(op), backend, x.nranks, (long long)x.m, (long long)x.n, (long long)x.k,
                           cases, bad ? ": " : "", bad ? bad : "");
            }
}
