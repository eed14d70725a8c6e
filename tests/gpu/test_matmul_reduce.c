/* GPU tests of the row-parallel matmuls (matmul_reduce_scatter, matmul_all_reduce): every backend
 * of the library's table a world offers, at W = 1 (a GPU world: the nccl backends too), in
 * emulated worlds of 2, 3, 4 and 8 ranks sharing one GPU, and in a GPU world of every visible GPU
 * (skipped below 2 GPUs).
 *
 * Every plan runs three times with fresh inputs and its output poisoned (0xff: NaN) before each:
 *   1. small integers (|partial| <= 256, exact in bf16; sums exact in fp32): the output must be
 *      the integer sum rounded to bf16, bit for bit, on every backend (nccl at W > 1: within
 *      1e-2, since NCCL rounds partial sums to bf16 at every hop of its own order);
 *   2. and 3. the same uniform inputs twice: within 1e-2 relative Frobenius of the fp64 sum, and
 *      run 3 bit for bit equal to run 2 (no atomics, a fixed order); for matmul_all_reduce every
 *      rank's S bit for bit equal to rank 0's.
 * Shapes: M = 1, 7, 37, 130 (fewer rows than ranks, not divisible by W), odd N, K = 64, 72, 128,
 * both layouts of B. And a rank that never runs: its peer's run ends in AGMM_ERR_TIMEOUT naming it.
 *
 * The fused backends (their GEMM's epilogue scatters tiles and sums as they land) also on shapes
 * of many tiles, whose row tiles straddle the reduce-scatter's blocks of 2, 3, 4 and 8 ranks (and
 * are taller than a block at W = 8): M = 1000, 777, 3000, 256; and with one rank's GEMM 30 ms late
 * in every run (the delay hook), which its peers' sums must wait for; and under every tile config
 * of the engine but the split tail's. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backends/matmul_reduce_fused.h"
#include "core/numeric.h"
#include "cpu/reference.h"
#include "kernels/gemm/policy.h"
#include "gpu_tests.h"
#include "../harness.h"

#define TOL 1e-2
#define RUNS 3

typedef struct {
    int64_t m, n, k;
    agmm_layout layout;
} mr_shape;

static const mr_shape shapes[] = {
    {1, 40, 64, AGMM_LAYOUT_COL_MAJOR},
    {7, 33, 72, AGMM_LAYOUT_COL_MAJOR},
    {130, 72, 64, AGMM_LAYOUT_ROW_MAJOR},
    {37, 200, 128, AGMM_LAYOUT_COL_MAJOR},
};

typedef struct {
    agmm_op op;
    mr_shape sh;
    const char *backend;
    int nranks;
    int late_rank, late_ms;        /* fused: this rank's GEMM starts late_ms late (-1: none) */
    int config;                    /* fused: the engine's tile config (-1: its policy's) */
    uint16_t *a[2][AGMM_MAX_RANKS], *b[2][AGMM_MAX_RANKS]; /* [0]: small integers, [1]: uniform */
    uint16_t *exact;               /* M x N: the integer sum rounded to bf16 */
    double *isum;                  /* M x N: the integer sum */
    double *sum;                   /* M x N: the fp64 sum of the uniform inputs */
    uint16_t *got[RUNS][AGMM_MAX_RANKS];
    gpu_rank_results res;
} mr_job;

static int64_t rows_of(const mr_job *j, int rank, int64_t *row0)
{
    *row0 = 0;
    if (j->op == AGMM_OP_MATMUL_ALL_REDUCE)
        return j->sh.m;
    return agmm_matmul_reduce_scatter_rows(j->sh.m, j->nranks, rank, row0);
}

static agmm_status mr_rank(agmm_ctx *ctx, void *arg)
{
    mr_job *j = arg;
    gpu_rank_results *res = &j->res;
    const int rank = agmm_ctx_rank(ctx);
    const mr_shape *sh = &j->sh;
    int64_t row0, rows = rows_of(j, rank, &row0);
    const size_t a_bytes = (size_t)(sh->m * sh->k) * 2, b_bytes = (size_t)(sh->k * sh->n) * 2;
    const size_t out_bytes = (size_t)(rows * sh->n) * 2;
    agmm_plan *plan = NULL;
    cudaStream_t s = NULL;
    void *d_a = NULL, *d_b = NULL, *d_out = NULL;
    uint16_t *h_in = NULL, *h_out = NULL;
    res->ok[rank] = 1;
    /* Everything allocated and uploaded before planning (ranks sharing a GPU: no device-wide
     * synchronising call while a peer's run may wait in a barrier for this rank). */
    RANK_STREAM(res, rank, s, 0);
    RANK_CUDA(res, rank, cudaMalloc(&d_a, 2 * a_bytes));
    RANK_CUDA(res, rank, cudaMalloc(&d_b, 2 * b_bytes));
    RANK_CUDA(res, rank, cudaMalloc(&d_out, out_bytes + 16));
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_in, 2 * (a_bytes + b_bytes)));
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_out, out_bytes + 16));
    for (int v = 0; v < 2; v++) {
        memcpy((char *)h_in + (size_t)v * a_bytes, j->a[v][rank], a_bytes);
        memcpy((char *)h_in + 2 * a_bytes + (size_t)v * b_bytes, j->b[v][rank], b_bytes);
    }
    RANK_CUDA(res, rank, cudaMemcpyAsync(d_a, h_in, 2 * a_bytes, cudaMemcpyHostToDevice, s));
    RANK_CUDA(res, rank, cudaMemcpyAsync(d_b, (char *)h_in + 2 * a_bytes, 2 * b_bytes, cudaMemcpyHostToDevice, s));
    RANK_CUDA(res, rank, cudaStreamSynchronize(s));
    if (j->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_desc d = {.m = sh->m, .n = sh->n, .k = sh->k, .b_layout = sh->layout,
                                         .backend = j->backend};
        RANK_AGMM(res, ctx, agmm_plan_matmul_all_reduce(&plan, ctx, &d));
    } else {
        agmm_matmul_reduce_scatter_desc d = {.m = sh->m, .n = sh->n, .k = sh->k, .b_layout = sh->layout,
                                             .backend = j->backend};
        RANK_AGMM(res, ctx, agmm_plan_matmul_reduce_scatter(&plan, ctx, &d));
    }
    if (rank == j->late_rank)
        RANK_AGMM(res, ctx, agmm_mr_fused_set_delay(plan, (int64_t)j->late_ms * 1000000, 0));
    if (j->config >= 0) /* collective: every rank, the same config */
        RANK_AGMM(res, ctx, agmm_mr_fused_set_gemm_config(plan, j->config));
    for (int run = 0; run < RUNS; run++) {
        const int v = run == 0 ? 0 : 1;
        const void *a = (char *)d_a + (size_t)v * a_bytes, *b = (char *)d_b + (size_t)v * b_bytes;
        RANK_CUDA(res, rank, cudaMemsetAsync(d_out, 0xff, out_bytes + 16, s));
        if (j->op == AGMM_OP_MATMUL_ALL_REDUCE) {
            agmm_matmul_all_reduce_io io = {.a = a, .b = b, .c = d_out};
            RANK_AGMM(res, ctx, agmm_matmul_all_reduce(plan, &io, s));
        } else {
            agmm_matmul_reduce_scatter_io io = {.a = a, .b = b, .out = rows ? d_out : NULL};
            RANK_AGMM(res, ctx, agmm_matmul_reduce_scatter(plan, &io, s));
        }
        RANK_CUDA(res, rank, cudaMemcpyAsync(h_out, d_out, out_bytes + 16, cudaMemcpyDeviceToHost, s));
        RANK_CUDA(res, rank, cudaStreamSynchronize(s));
        RANK_AGMM(res, ctx, agmm_ctx_sync(ctx));
        memcpy(j->got[run][rank], h_out, out_bytes + 16);
    }
done:
    if (s)
        cudaStreamSynchronize(s);
    agmm_plan_destroy(plan); /* collective (the ranks meet first): after a failure too */
    cudaFree(d_a);
    cudaFree(d_b);
    cudaFree(d_out);
    cudaFreeHost(h_in);
    cudaFreeHost(h_out);
    return AGMM_SUCCESS;
}

/* Every rank's inputs and the references of one shape. 0 if out of memory. */
static int make_inputs(mr_job *j, uint64_t seed)
{
    const mr_shape *sh = &j->sh;
    const int64_t mn = sh->m * sh->n;
    const int range = sh->k <= 64 ? 2 : 1; /* |partial| <= range^2 * K <= 256: exact in bf16 */
    double *isum = j->isum = calloc((size_t)mn, sizeof *isum), *prod = malloc((size_t)mn * sizeof *prod);
    j->exact = malloc((size_t)mn * 2);
    j->sum = calloc((size_t)mn, sizeof *j->sum);
    int ok = isum && prod && j->exact && j->sum;
    for (int r = 0; ok && r < j->nranks; r++)
        for (int v = 0; ok && v < 2; v++) {
            j->a[v][r] = malloc((size_t)(sh->m * sh->k) * 2);
            j->b[v][r] = malloc((size_t)(sh->k * sh->n) * 2);
            if (!(ok = j->a[v][r] && j->b[v][r]))
                break;
            uint64_t sa = seed * 977 + (uint64_t)(r * 2 + v), sb = sa ^ 0x5bd1e995;
            for (int64_t i = 0; i < sh->m * sh->k; i++)
                j->a[v][r][i] = agmm_f32_to_bf16(v ? agmm_rng_uniform(&sa) : (float)agmm_rng_small_int(&sa, range));
            for (int64_t i = 0; i < sh->k * sh->n; i++)
                j->b[v][r][i] = agmm_f32_to_bf16(v ? agmm_rng_uniform(&sb) : (float)agmm_rng_small_int(&sb, range));
            ok = agmm_ref_gemm_bf16(j->a[v][r], j->b[v][r], sh->layout, sh->m, sh->n, sh->k, prod, NULL) ==
                 AGMM_SUCCESS;
            for (int64_t i = 0; ok && i < mn; i++)
                (v ? j->sum : isum)[i] += prod[i];
        }
    for (int64_t i = 0; ok && i < mn; i++)
        j->exact[i] = agmm_ref_f64_to_bf16(isum[i]);
    for (int run = 0; ok && run < RUNS; run++)
        for (int r = 0; ok && r < j->nranks; r++)
            ok = (j->got[run][r] = malloc((size_t)mn * 2 + 16)) != NULL;
    free(prod);
    return ok;
}

static void free_inputs(mr_job *j)
{
    for (int r = 0; r < AGMM_MAX_RANKS; r++) {
        for (int v = 0; v < 2; v++)
            free(j->a[v][r]), free(j->b[v][r]);
        for (int run = 0; run < RUNS; run++)
            free(j->got[run][r]);
    }
    free(j->exact), free(j->sum), free(j->isum);
}

/* The checks of the header comment, on every rank's outputs; "" or the first failure in why. */
static void check_job(const mr_job *j, char *why, size_t len)
{
    const int64_t n = j->sh.n;
    double worst = 0;
    why[0] = '\0';
    for (int r = 0; r < j->nranks && !why[0]; r++) {
        int64_t row0, rows = rows_of(j, r, &row0), count = rows * n;
        const int nccl_order = strcmp(j->backend, "nccl") == 0 && j->nranks > 1;
        int64_t bad = nccl_order ? -1 : agmm_ref_first_mismatch(j->got[0][r], j->exact + row0 * n, count, 2);
        double ierr = count ? agmm_ref_rel_frobenius(j->got[0][r], AGMM_DTYPE_BF16, j->isum + row0 * n, count) : 0;
        if (nccl_order && !(ierr <= TOL))
            snprintf(why, len, "rank %d, small integers: rel_fro %.2e > %.0e", r, ierr, TOL);
        else if (bad >= 0)
            snprintf(why, len, "rank %d, small integers: row %lld col %lld is %#x, want %#x", r,
                     (long long)(row0 + bad / n), (long long)(bad % n), j->got[0][r][bad], j->exact[row0 * n + bad]);
        else if ((bad = agmm_ref_first_mismatch(j->got[2][r], j->got[1][r], count, 2)) >= 0)
            snprintf(why, len, "rank %d: run 3 differs from run 2 (same inputs) at row %lld col %lld", r,
                     (long long)(row0 + bad / n), (long long)(bad % n));
        else if (j->op == AGMM_OP_MATMUL_ALL_REDUCE &&
                 (bad = agmm_ref_first_mismatch(j->got[1][r], j->got[1][0], count, 2)) >= 0)
            snprintf(why, len, "rank %d's S differs from rank 0's at row %lld col %lld", r, (long long)(bad / n),
                     (long long)(bad % n));
        double err = count ? agmm_ref_rel_frobenius(j->got[1][r], AGMM_DTYPE_BF16, j->sum + row0 * n, count) : 0;
        if (!(err <= worst))
            worst = err;
    }
    if (!why[0] && !(worst <= TOL))
        snprintf(why, len, "uniform inputs: rel_fro %.2e > %.0e", worst, TOL);
}

/* Every backend of the table the world offers (or only `only`) on every shape; late_rank and
 * config as in mr_job. */
static void run_shapes(agmm_world *w, int nranks, const char *label, const mr_shape *list, size_t count,
                       const char *only, int late_rank, int config)
{
    const agmm_op ops[2] = {AGMM_OP_MATMUL_REDUCE_SCATTER, AGMM_OP_MATMUL_ALL_REDUCE};
    for (int o = 0; o < 2; o++)
        for (size_t si = 0; si < count; si++)
            for (int bi = 0; agmm_backend_name(ops[o], bi) != NULL; bi++) {
                const char *name = agmm_backend_name(ops[o], bi);
                char why[512] = "";
                if (only && strcmp(name, only) != 0)
                    continue;
                if (!agmm_backend_available(w, ops[o], name, why, sizeof why)) {
                    if (si == 0)
                        printf("  %s %s/%s: %s\n", label, agmm_op_name(ops[o]), name, why);
                    continue;
                }
                mr_job *j = calloc(1, sizeof *j);
                j->op = ops[o], j->sh = list[si], j->backend = name, j->nranks = nranks;
                j->late_rank = late_rank, j->late_ms = 30, j->config = config;
                int ok = make_inputs(j, 31 * si + (uint64_t)nranks);
                agmm_status st = ok ? agmm_world_run(w, mr_rank, j) : AGMM_ERR_NO_MEMORY;
                int ran = st == AGMM_SUCCESS;
                for (int r = 0; ran && r < nranks; r++)
                    if (!j->res.ok[r])
                        ran = 0, snprintf(why, sizeof why, "rank %d: %s", r, j->res.msg[r]);
                if (ran)
                    check_job(j, why, sizeof why);
                else if (!why[0])
                    snprintf(why, sizeof why, "%s", agmm_status_str(st));
                agmm_check(ran && !why[0],
                           "%s %s/%s W=%d M=%lld N=%lld K=%lld B=%s%s: exact on small integers, rel_fro <= 1e-2 and "
                           "repeatable bits on uniform%s%s%s",
                           label, agmm_op_name(ops[o]), name, nranks, (long long)j->sh.m, (long long)j->sh.n,
                           (long long)j->sh.k, j->sh.layout == AGMM_LAYOUT_ROW_MAJOR ? "row" : "col",
                           late_rank >= 0 ? ", rank 1's GEMM 30 ms late" : "",
                           ops[o] == AGMM_OP_MATMUL_ALL_REDUCE ? ", every rank the same S" : "", why[0] ? ": " : "",
                           why);
                free_inputs(j);
                free(j);
            }
}

static void run_world(agmm_world *w, int nranks, const char *label)
{
    run_shapes(w, nranks, label, shapes, sizeof shapes / sizeof *shapes, NULL, -1, -1);
}

void test_matmul_reduce_gpu(void)
{
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w) {
        run_world(w, 1, "W=1 (GPU world)");
        agmm_world_destroy(w);
    }
    const int emulated[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof emulated / sizeof *emulated; i++) {
        if ((w = gpu_test_world(AGMM_WORLD_EMULATED, emulated[i], 0)) == NULL)
            continue;
        run_world(w, emulated[i], "emulated");
        agmm_world_destroy(w);
    }
}

void test_matmul_reduce_fused(void)
{
    static const mr_shape tiled[] = {
        {1000, 520, 136, AGMM_LAYOUT_COL_MAJOR},
        {777, 264, 256, AGMM_LAYOUT_ROW_MAJOR},
        {3000, 136, 64, AGMM_LAYOUT_COL_MAJOR},
        {256, 1000, 72, AGMM_LAYOUT_COL_MAJOR},
    };
    const size_t count = sizeof tiled / sizeof *tiled;
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w) {
        run_shapes(w, 1, "W=1 (GPU world)", tiled, count, "fused", -1, -1);
        agmm_world_destroy(w);
    }
    const int emulated[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof emulated / sizeof *emulated; i++) {
        if ((w = gpu_test_world(AGMM_WORLD_EMULATED, emulated[i], 0)) == NULL)
            continue;
        run_shapes(w, emulated[i], "emulated", tiled, count, "fused", -1, -1);
        if (emulated[i] == 3)
            run_shapes(w, 3, "emulated", tiled, 1, "fused", 1, -1);
        agmm_world_destroy(w);
    }
}

/* The scatter epilogue under every tile config scatter mode takes (agmm_gemm_scatter_config: not
 * the split tail's or stream-K's, not 256 x 192's; forced through the backend's hook: cooperative
 * and ping-pong consumers, 64- to 256-row tiles, B-multicast pairs), both operations, emulated
 * W = 3, the two layouts of B in turn. */
void test_matmul_reduce_fused_configs(void)
{
    static const mr_shape two[] = {{1000, 520, 136, AGMM_LAYOUT_COL_MAJOR}, {777, 264, 256, AGMM_LAYOUT_ROW_MAJOR}};
    agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, 3, 0);
    if (w == NULL)
        return;
    for (int c = 0; c < agmm_gemm_num_configs(); c++) {
        if (agmm_gemm_scatter_config(c) != c)
            continue;
        char label[96];
        snprintf(label, sizeof label, "emulated, config %d %s:", c, agmm_gemm_config_name(c));
        /* The two layouts in turn, column-major where the config takes no other (config.cuh). */
        const int row_ok = agmm_gemm_config_takes(agmm_gemm_config_at(c), 1);
        run_shapes(w, 3, label, two + (row_ok ? c % 2 : 0), 1, "fused", -1, c);
    }
    agmm_world_destroy(w);
}

void test_matmul_reduce_gpu_world(void)
{
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev < 2) {
        agmm_skip("matmul_reduce_gpu_world: %d GPU visible, a GPU world needs 2 or more", ndev);
        return;
    }
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, ndev, 0);
    if (w) {
        run_world(w, ndev, "GPU world");
        agmm_world_destroy(w);
    }
}

/* ---- a rank that never runs ---- */

typedef struct {
    const char *backend;
    agmm_op op;
    gpu_rank_results res;
    atomic_int rank0_done;
} timeout_job;

/* Both ranks plan; rank 0 runs, rank 1 never does: rank 0's run ends in a timeout naming rank 1,
 * and a later run is refused (the ranks are out of step). */
static agmm_status timeout_rank(agmm_ctx *ctx, void *arg)
{
    timeout_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    gpu_rank_results *res = &j->res;
    agmm_plan *plan = NULL;
    cudaStream_t s = NULL;
    void *d_a = NULL, *d_b = NULL, *d_out = NULL;
    res->ok[rank] = 1;
    RANK_STREAM(res, rank, s, 0);
    RANK_CUDA(res, rank, cudaMalloc(&d_a, 128 * 128 * 2));
    RANK_CUDA(res, rank, cudaMalloc(&d_b, 128 * 128 * 2));
    RANK_CUDA(res, rank, cudaMalloc(&d_out, 128 * 128 * 2));
    agmm_status st;
    if (j->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_desc d = {.m = 128, .n = 128, .k = 128, .backend = j->backend};
        RANK_AGMM(res, ctx, agmm_plan_matmul_all_reduce(&plan, ctx, &d));
    } else {
        agmm_matmul_reduce_scatter_desc d = {.m = 128, .n = 128, .k = 128, .backend = j->backend};
        RANK_AGMM(res, ctx, agmm_plan_matmul_reduce_scatter(&plan, ctx, &d));
    }
    if (rank != 0) {
        gpu_wait_flag(&j->rank0_done, 30.0);
        goto done;
    }
    agmm_matmul_reduce_scatter_io rio = {.a = d_a, .b = d_b, .out = d_out};
    agmm_matmul_all_reduce_io aio = {.a = d_a, .b = d_b, .c = d_out};
    for (int run = 0; run < 2; run++) {
        st = j->op == AGMM_OP_MATMUL_ALL_REDUCE ? agmm_matmul_all_reduce(plan, &aio, s)
                                                : agmm_matmul_reduce_scatter(plan, &rio, s);
        if (run == 0) {
            RANK_AGMM(res, ctx, st);
            st = agmm_ctx_sync(ctx);
            if (st != AGMM_ERR_TIMEOUT || !strstr(agmm_last_error(ctx), "rank 1")) {
                gpu_rank_fail(res, rank, "agmm_ctx_sync -> %s '%s' (want a timeout naming rank 1)",
                              agmm_status_str(st), agmm_last_error(ctx));
                goto done;
            }
            printf("  rank 0 reported: %s\n", agmm_last_error(ctx));
        } else if (st != AGMM_ERR_TIMEOUT) {
            gpu_rank_fail(res, rank, "a run after the timeout -> %s (want AGMM_ERR_TIMEOUT: out of step)",
                          agmm_status_str(st));
        }
    }
done:
    if (rank == 0)
        atomic_store(&j->rank0_done, 1);
    if (s)
        cudaStreamSynchronize(s);
    agmm_plan_destroy(plan);
    cudaFree(d_a);
    cudaFree(d_b);
    cudaFree(d_out);
    return AGMM_SUCCESS;
}

void test_matmul_reduce_timeout(void)
{
    static const struct {
        agmm_op op;
        const char *backend;
    } cases[] = {{AGMM_OP_MATMUL_REDUCE_SCATTER, "ce"},
                 {AGMM_OP_MATMUL_REDUCE_SCATTER, "one_shot"},
                 {AGMM_OP_MATMUL_REDUCE_SCATTER, "fused"},
                 {AGMM_OP_MATMUL_ALL_REDUCE, "one_shot"},
                 {AGMM_OP_MATMUL_ALL_REDUCE, "two_shot"},
                 {AGMM_OP_MATMUL_ALL_REDUCE, "fused"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, 2, 0.25);
        if (w == NULL)
            return;
        timeout_job j;
        memset(&j, 0, sizeof j);
        j.op = cases[i].op, j.backend = cases[i].backend;
        agmm_status st = agmm_world_run(w, timeout_rank, &j);
        char what[160];
        snprintf(what, sizeof what, "%s/%s W=2 with a rank that never runs ends in AGMM_ERR_TIMEOUT naming it (%s)",
                 agmm_op_name(cases[i].op), cases[i].backend, agmm_status_str(st));
        gpu_report_ranks(&j.res, 2, what);
        agmm_world_destroy(w);
    }
}
