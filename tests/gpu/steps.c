/* Steps of one plan on one rank, shared by the tests of CUDA graphs, of steps back to back and of
 * two streams (test_graph.c, test_steps.c): a plan, `slots` sets of step buffers, fresh inputs for
 * every step, the enqueueing of one step and the check of its result.
 *
 * Inputs are small integers (A and B in {-1, 0, 1}, all-reduce elements in -4..4), so every result
 * is exact in bf16 and fp32 and is compared bit for bit: C with the integer product, the gathered
 * A with every rank's shard, a sum with the integer sum, a row-parallel matmul's rows with the
 * integer sum of the ranks' products rounded once to bf16 (each partial, |.| <= K, is exact).
 * all_reduce_rmsnorm (with bias and residual) gets tests/arn_check.h's small-integer inputs and
 * checks: r' and y bit for bit against the kernels' fp32 order, and y within one bf16 rounding of
 * the fp64 reference. Its slot of B holds gamma, bias and residual, its output y then r'. The
 * row-parallel matmuls have no plan input: "staged" steps read A_r from their own device buffer,
 * "symmetric" ones from a slot of the symmetric buffer (any memory will do for io.a). Every rank
 * derives every rank's inputs from the same seed, so each checks its own outputs alone. Outputs are
 * poisoned (0xff bytes: NaN in bf16 and fp32) before every step's inputs are uploaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/numeric.h"
#include "gpu_tests.h"
#include "world/world.h"

#define ALIGN 256

static size_t round_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* Value i of input `what` ('A' shard, 'B', 'V' all-reduce vector) of rank `rank` in slot `slot`. */
static uint64_t input_state(uint64_t seed, int slot, int rank, int what)
{
    uint64_t s = seed ^ ((uint64_t)slot << 40) ^ ((uint64_t)rank << 24) ^ (uint64_t)what;
    return agmm_rng_next(&s);
}

static void gen_small(int8_t *x, size_t count, uint64_t state, int span)
{
    for (size_t i = 0; i < count; i++)
        x[i] = (int8_t)agmm_rng_small_int(&state, span);
}

static void to_dtype(const int8_t *x, size_t count, agmm_dtype dt, void *out)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == AGMM_DTYPE_F32)
            ((float *)out)[i] = (float)x[i];
        else
            ((uint16_t *)out)[i] = agmm_f32_to_bf16((float)x[i]);
    }
}

/* matmul_reduce_scatter or matmul_all_reduce: A_r and B_r per rank, no plan input. */
static int row_parallel(const step_case *sc)
{
    return sc->op == AGMM_OP_MATMUL_REDUCE_SCATTER || sc->op == AGMM_OP_MATMUL_ALL_REDUCE;
}

static int ar_norm(const step_case *sc) { return sc->op == AGMM_OP_ALL_REDUCE_RMSNORM; }

/* The arn_check case of an all_reduce_rmsnorm step: bias, residual, small integers. */
static arn_case arn_case_of(const step_case *sc)
{
    return (arn_case){.tokens = sc->m, .hidden = sc->n, .eps = 1e-5, .bias = 1, .residual = 1, .exact = 1};
}

/* The rows of S a rank's output holds: its block (reduce-scatter) or all (all-reduce). */
static int64_t out_rows(const step_case *sc, int rank, int nranks, int64_t *row0)
{
    *row0 = 0;
    if (sc->op == AGMM_OP_MATMUL_REDUCE_SCATTER)
        return agmm_matmul_reduce_scatter_rows(sc->m, nranks, rank, row0);
    return sc->m;
}

const char *step_case_name(const step_case *sc, char *buf, size_t len)
{
    if (row_parallel(sc))
        snprintf(buf, len, "%s/%s M=%lld N=%lld K=%lld", agmm_op_name(sc->op), sc->backend, (long long)sc->m,
                 (long long)sc->n, (long long)sc->k);
    else if (sc->op == AGMM_OP_AG_MATMUL)
        snprintf(buf, len, "ag_matmul/%s M=%lld N=%lld K=%lld splits=%d", sc->backend, (long long)sc->m,
                 (long long)sc->n, (long long)sc->k, sc->splits);
    else if (ar_norm(sc))
        snprintf(buf, len, "all_reduce_rmsnorm/%s T=%lld H=%lld bias residual", sc->backend, (long long)sc->m,
                 (long long)sc->n);
    else
        snprintf(buf, len, "all_reduce/%s n=%lld %s %s", sc->backend, (long long)sc->count,
                 sc->dtype == AGMM_DTYPE_F32 ? "fp32" : "bf16", sc->in_place ? "in place" : "out of place");
    return buf;
}

int step_job_start(gpu_rank_results *res, int rank, cudaStream_t *s)
{
    res->ok[rank] = 1;
    *s = gpu_rank_stream(rank, 0);
    return *s != NULL || gpu_rank_fail(res, rank, "no stream (gpu_rank_stream)");
}

int step_rank_init(step_rank *sr, agmm_ctx *ctx, const step_case *sc, int slots, step_input input,
                   gpu_rank_results *res)
{
    memset(sr, 0, sizeof *sr);
    sr->sc = sc;
    sr->ctx = ctx;
    sr->res = res;
    sr->rank = agmm_ctx_rank(ctx);
    sr->nranks = agmm_ctx_info(ctx)->nranks;
    sr->slots = slots;
    sr->input = input;
    const int W = sr->nranks, rank = sr->rank;
    agmm_status st;
    if (sc->op == AGMM_OP_AG_MATMUL) {
        agmm_ag_matmul_desc d = {.m = sc->m, .n = sc->n, .k = sc->k, .splits = sc->splits, .backend = sc->backend};
        st = agmm_plan_ag_matmul(&sr->plan, ctx, &d);
        sr->in_bytes = (size_t)(sc->m * sc->k) * 2;
        sr->b_bytes = (size_t)(sc->k * sc->n) * 2;
        sr->ag_bytes = (size_t)W * sr->in_bytes;
        sr->out_bytes = (size_t)((int64_t)W * sc->m * sc->n) * 2;
    } else if (row_parallel(sc)) {
        int64_t row0;
        if (sc->op == AGMM_OP_MATMUL_REDUCE_SCATTER) {
            agmm_matmul_reduce_scatter_desc d = {.m = sc->m, .n = sc->n, .k = sc->k, .backend = sc->backend};
            st = agmm_plan_matmul_reduce_scatter(&sr->plan, ctx, &d);
        } else {
            agmm_matmul_all_reduce_desc d = {.m = sc->m, .n = sc->n, .k = sc->k, .backend = sc->backend};
            st = agmm_plan_matmul_all_reduce(&sr->plan, ctx, &d);
        }
        sr->in_bytes = (size_t)(sc->m * sc->k) * 2;
        sr->b_bytes = (size_t)(sc->k * sc->n) * 2;
        sr->out_bytes = (size_t)(out_rows(sc, rank, W, &row0) * sc->n) * 2;
    } else if (ar_norm(sc)) {
        const arn_case c = arn_case_of(sc);
        agmm_all_reduce_rmsnorm_desc d = {.tokens = c.tokens, .hidden = c.hidden, .eps = c.eps, .backend = sc->backend};
        st = agmm_plan_all_reduce_rmsnorm(&sr->plan, ctx, &d);
        if (arn_data_init(&sr->arn, &c, W, rank, arn_expect_for(sc->backend, 1, W)) != 0)
            return gpu_rank_fail(res, rank, "all_reduce_rmsnorm check data: out of host memory");
        sr->in_bytes = (size_t)(sc->m * sc->n) * 2;
        sr->b_bytes = (size_t)(2 * sc->n + sc->m * sc->n) * 2; /* gamma, bias, residual */
        sr->out_bytes = 2 * sr->in_bytes;                     /* y, r' */
    } else {
        agmm_all_reduce_desc d = {.n = sc->count, .dtype = sc->dtype, .backend = sc->backend};
        st = agmm_plan_all_reduce(&sr->plan, ctx, &d);
        sr->in_bytes = sr->out_bytes = (size_t)sc->count * (sc->dtype == AGMM_DTYPE_F32 ? 4 : 2);
    }
    if (st != AGMM_SUCCESS)
        return gpu_rank_fail(res, rank, "plan: %s: %s", agmm_status_str(st), agmm_last_error(ctx));
    sr->in_stride = round_up(sr->in_bytes);
    if (input == STEP_SYMMETRIC) {
        st = agmm_symmetric_alloc(ctx, (size_t)slots * sr->in_stride, &sr->sym);
        if (st != AGMM_SUCCESS)
            return gpu_rank_fail(res, rank, "agmm_symmetric_alloc: %s", agmm_last_error(ctx));
    }
    size_t n_in = (size_t)slots * sr->in_stride, n_b = (size_t)slots * round_up(sr->b_bytes);
    size_t n_ag = (size_t)slots * round_up(sr->ag_bytes), n_out = (size_t)slots * round_up(sr->out_bytes);
    size_t elems = sc->op == AGMM_OP_AG_MATMUL ? (size_t)(W * sc->m * sc->k) + (size_t)(sc->k * sc->n)
                   : row_parallel(sc)          ? (size_t)W * (size_t)(sc->m * sc->k + sc->k * sc->n)
                   : ar_norm(sc)               ? 1 /* sr->arn holds its inputs */
                                               : (size_t)W * (size_t)sc->count;
    sr->ref = malloc(elems);
    if (sr->ref == NULL || cudaMalloc((void **)&sr->d_stage, n_in) != cudaSuccess ||
        (n_b && cudaMalloc((void **)&sr->d_b, n_b) != cudaSuccess) ||
        (n_ag && cudaMalloc((void **)&sr->d_ag, n_ag) != cudaSuccess) ||
        cudaMalloc((void **)&sr->d_out, n_out + ALIGN) != cudaSuccess ||
        cudaMallocHost((void **)&sr->h_in, n_in) != cudaSuccess ||
        (n_b && cudaMallocHost((void **)&sr->h_b, n_b) != cudaSuccess) ||
        (n_ag && cudaMallocHost((void **)&sr->h_ag, n_ag) != cudaSuccess) ||
        cudaMallocHost((void **)&sr->h_out, n_out) != cudaSuccess)
        return gpu_rank_fail(res, rank, "step buffers (%d slots): allocation failed", slots);
    return 1;
}

void step_rank_fini(step_rank *sr)
{
    agmm_plan_destroy(sr->plan); /* collective: the ranks meet first, so nothing of theirs is in flight */
    if (sr->sym)
        agmm_symmetric_free(sr->ctx, sr->sym);
    cudaFree(sr->d_stage);
    cudaFree(sr->d_b);
    cudaFree(sr->d_ag);
    cudaFree(sr->d_out);
    cudaFreeHost(sr->h_in);
    cudaFreeHost(sr->h_b);
    cudaFreeHost(sr->h_ag);
    cudaFreeHost(sr->h_out);
    free(sr->ref);
    arn_data_fini(&sr->arn);
    memset(sr, 0, sizeof *sr);
}

void step_rank_end(step_rank *sr, cudaStream_t s, const cudaGraphExec_t *execs, int nexecs, int ok)
{
    gpu_rank_results *res = sr->res;
    const int rank = sr->rank;
    if (s)
        cudaStreamSynchronize(s);
    for (int i = 0; i < nexecs; i++)
        if (execs[i])
            cudaGraphExecDestroy(execs[i]);
    step_rank_fini(sr);
    if (!ok && res->ok[rank])
        gpu_rank_fail(res, rank, "a peer failed first");
}

/* Where step `slot` reads its input, and where it leaves its output. */
static char *step_input_ptr(const step_rank *sr, int slot)
{
    if (sr->input == STEP_STAGED)
        return row_parallel(sr->sc) ? sr->d_stage + (size_t)slot * sr->in_stride : agmm_plan_input(sr->plan);
    return (char *)sr->sym + (size_t)slot * sr->in_stride;
}

static char *step_output_ptr(const step_rank *sr, int slot)
{
    if (sr->sc->op == AGMM_OP_ALL_REDUCE && sr->sc->in_place && sr->input == STEP_SYMMETRIC)
        return step_input_ptr(sr, slot);
    return sr->d_out + (size_t)slot * round_up(sr->out_bytes);
}

int step_fill(step_rank *sr, uint64_t seed, cudaStream_t s)
{
    const step_case *sc = sr->sc;
    sr->seed = seed;
    for (int j = 0; j < sr->slots; j++) {
        if (sc->op == AGMM_OP_AG_MATMUL || row_parallel(sc)) {
            size_t na = (size_t)(sc->m * sc->k), nb = (size_t)(sc->k * sc->n);
            gen_small(sr->ref, na, input_state(seed, j, sr->rank, 'A'), 1);
            to_dtype(sr->ref, na, AGMM_DTYPE_BF16, sr->h_in + (size_t)j * sr->in_stride);
            gen_small(sr->ref, nb, input_state(seed, j, sr->rank, 'B'), 1);
            to_dtype(sr->ref, nb, AGMM_DTYPE_BF16, sr->h_b + (size_t)j * round_up(sr->b_bytes));
        } else if (ar_norm(sc)) {
            const size_t h = (size_t)sc->n * 2, rows = sr->in_bytes;
            char *b = sr->h_b + (size_t)j * round_up(sr->b_bytes);
            arn_data_fill(&sr->arn, input_state(seed, j, 0, 'N'));
            memcpy(sr->h_in + (size_t)j * sr->in_stride, arn_data_mine(&sr->arn), rows);
            memcpy(b, sr->arn.gamma, h);
            memcpy(b + h, sr->arn.bias, h);
            memcpy(b + 2 * h, sr->arn.residual, rows);
        } else {
            gen_small(sr->ref, (size_t)sc->count, input_state(seed, j, sr->rank, 'V'), 4);
            to_dtype(sr->ref, (size_t)sc->count, sc->dtype, sr->h_in + (size_t)j * sr->in_stride);
        }
    }
    char *in_dst = sr->input == STEP_STAGED ? sr->d_stage : sr->sym;
    cudaError_t e = cudaMemcpyAsync(in_dst, sr->h_in, (size_t)sr->slots * sr->in_stride, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && sr->b_bytes)
        e = cudaMemcpyAsync(sr->d_b, sr->h_b, (size_t)sr->slots * round_up(sr->b_bytes), cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && sr->ag_bytes)
        e = cudaMemsetAsync(sr->d_ag, 0xff, (size_t)sr->slots * round_up(sr->ag_bytes), s);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(sr->d_out, 0xff, (size_t)sr->slots * round_up(sr->out_bytes), s);
    if (e != cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "step inputs: %s", cudaGetErrorString(e));
    return 1;
}

agmm_status step_enqueue(step_rank *sr, int slot, cudaStream_t s)
{
    const step_case *sc = sr->sc;
    char *in = step_input_ptr(sr, slot), *out = step_output_ptr(sr, slot);
    const void *io_input = sr->input == STEP_SYMMETRIC ? in : NULL;
    /* Staged: this step's input goes into the plan's buffer on the step's stream, right after the
     * previous step has passed on it (agmm.h: no peer reads it any more). */
    if (sr->input == STEP_STAGED && !row_parallel(sc) &&
        cudaMemcpyAsync(in, sr->d_stage + (size_t)slot * sr->in_stride, sr->in_bytes, cudaMemcpyDeviceToDevice, s) !=
            cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "step %d: input copy failed", slot), AGMM_ERR_CUDA;
    agmm_status st;
    const void *b = sr->d_b + (size_t)slot * round_up(sr->b_bytes);
    if (sc->op == AGMM_OP_MATMUL_REDUCE_SCATTER) {
        agmm_matmul_reduce_scatter_io io = {.a = in, .b = b, .out = sr->out_bytes ? out : NULL};
        st = agmm_matmul_reduce_scatter(sr->plan, &io, s);
    } else if (sc->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_io io = {.a = in, .b = b, .c = out};
        st = agmm_matmul_all_reduce(sr->plan, &io, s);
    } else if (sc->op == AGMM_OP_AG_MATMUL) {
        agmm_ag_matmul_io io = {.b = sr->d_b + (size_t)slot * round_up(sr->b_bytes),
                                .a_gathered = sr->d_ag + (size_t)slot * round_up(sr->ag_bytes),
                                .c = out,
                                .input = io_input};
        st = agmm_ag_matmul(sr->plan, &io, s);
    } else if (ar_norm(sc)) {
        const size_t h = (size_t)sc->n * 2;
        agmm_all_reduce_rmsnorm_io io = {.y = out,
                                         .residual_out = out + sr->in_bytes,
                                         .gamma = b,
                                         .bias = (const char *)b + h,
                                         .residual = (const char *)b + 2 * h,
                                         .input = io_input};
        st = agmm_all_reduce_rmsnorm(sr->plan, &io, s);
    } else {
        agmm_all_reduce_io io = {.out = sc->in_place ? in : out, .input = io_input};
        st = agmm_all_reduce(sr->plan, &io, s);
        /* In place on the plan's buffer: the next step overwrites it, so keep the sum now. */
        if (st == AGMM_SUCCESS && sc->in_place && sr->input == STEP_STAGED &&
            cudaMemcpyAsync(out, in, sr->out_bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
            return gpu_rank_fail(sr->res, sr->rank, "step %d: result copy failed", slot), AGMM_ERR_CUDA;
    }
    if (st != AGMM_SUCCESS)
        gpu_rank_fail(sr->res, sr->rank, "step %d: run: %s: %s", slot, agmm_status_str(st), agmm_last_error(sr->ctx));
    return st;
}

int step_capture(step_rank *sr, int first, int steps, cudaStream_t s, cudaGraphExec_t *exec)
{
    cudaGraph_t graph = NULL;
    /* Thread-local: the other ranks' threads keep calling CUDA while this one captures. */
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
    int ok = 1;
    for (int i = first; i < first + steps && ok; i++)
        ok = step_enqueue(sr, i, s) == AGMM_SUCCESS;
    e = cudaStreamEndCapture(s, &graph);
    if (ok && e == cudaSuccess)
        e = cudaGraphInstantiate(exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (ok && e != cudaSuccess)
        ok = gpu_rank_fail(sr->res, sr->rank, "capture of %d steps: %s", steps, cudaGetErrorString(e));
    return ok;
}

int step_download(step_rank *sr, cudaStream_t s)
{
    cudaError_t e = cudaSuccess;
    for (int j = 0; j < sr->slots && e == cudaSuccess; j++) {
        e = cudaMemcpyAsync(sr->h_out + (size_t)j * round_up(sr->out_bytes), step_output_ptr(sr, j), sr->out_bytes,
                            cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess && sr->ag_bytes)
            e = cudaMemcpyAsync(sr->h_ag + (size_t)j * round_up(sr->ag_bytes),
                                sr->d_ag + (size_t)j * round_up(sr->ag_bytes), sr->ag_bytes, cudaMemcpyDeviceToHost,
                                s);
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "download: %s", cudaGetErrorString(e));
    agmm_status st = agmm_ctx_sync(sr->ctx);
    if (st != AGMM_SUCCESS)
        return gpu_rank_fail(sr->res, sr->rank, "agmm_ctx_sync: %s: %s", agmm_status_str(st),
                             agmm_last_error(sr->ctx));
    return 1;
}

/* What a wrong shard in the gathered A holds instead, for the failure message: the poison (never
 * copied), zeros (copied before its rank first wrote it), that rank's input of another step
 * (copied too early or too late: the barriers let the ranks out of step), or none of these. */
static const char *shard_holds(const step_rank *sr, const uint16_t *got, int p, char *buf, size_t len)
{
    const size_t count = (size_t)(sr->sc->m * sr->sc->k);
    int poison = 1, zero = 1;
    for (size_t i = 0; i < count; i++) {
        poison &= got[i] == 0xffff;
        zero &= got[i] == 0;
    }
    if (poison || zero)
        return poison ? "all of its rows hold the poison (never copied)" : "all of its rows are zero";
    int8_t *x = malloc(count);
    int match = -1;
    for (int j = 0; x != NULL && j < sr->slots && match < 0; j++) {
        gen_small(x, count, input_state(sr->seed, j, p, 'A'), 1);
        size_t i = 0;
        while (i < count && agmm_bf16_to_f32(got[i]) == (float)x[i])
            i++;
        if (i == count)
            match = j;
    }
    free(x);
    if (match < 0)
        return "its rows are none of that rank's inputs of this replay, nor zero, nor the poison";
    snprintf(buf, len, "its rows are that rank's input of step %d", match);
    return buf;
}

/* ag_matmul: the gathered A against every rank's shard, C against the integer product. */
static int check_ag_matmul(step_rank *sr, int slot, const char *what)
{
    const step_case *sc = sr->sc;
    const int W = sr->nranks;
    const int64_t rows = W * sc->m, shard = sc->m * sc->k;
    int8_t *a = sr->ref, *b = sr->ref + rows * sc->k;
    const uint16_t *ag = (const uint16_t *)(sr->h_ag + (size_t)slot * round_up(sr->ag_bytes));
    const uint16_t *c = (const uint16_t *)(sr->h_out + (size_t)slot * round_up(sr->out_bytes));
    for (int p = 0; p < W; p++)
        gen_small(a + p * shard, (size_t)shard, input_state(sr->seed, slot, p, 'A'), 1);
    gen_small(b, (size_t)(sc->k * sc->n), input_state(sr->seed, slot, sr->rank, 'B'), 1);
    for (int64_t i = 0; i < rows * sc->k; i++)
        if (agmm_bf16_to_f32(ag[i]) != (float)a[i]) {
            const int p = (int)(i / shard);
            char holds[96];
            return gpu_rank_fail(sr->res, sr->rank, "%s: gathered A[%lld][%lld] = %g, want %d (rank %d's shard; %s)",
                                 what, (long long)(i / sc->k), (long long)(i % sc->k), agmm_bf16_to_f32(ag[i]), a[i],
                                 p, shard_holds(sr, ag + p * shard, p, holds, sizeof holds));
        }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < sc->n; j++) {
            int acc = 0;
            for (int64_t kk = 0; kk < sc->k; kk++)
                acc += a[i * sc->k + kk] * b[j * sc->k + kk]; /* B column-major: B^T is n x k */
            float got = agmm_bf16_to_f32(c[i * sc->n + j]);
            if (got != (float)acc)
                return gpu_rank_fail(sr->res, sr->rank, "%s: C[%lld][%lld] = %g, want %d", what, (long long)i,
                                     (long long)j, got, acc);
        }
    return 1;
}

/* A row-parallel matmul: this rank's rows of sum_p A_p * B_p (B column-major), exact integers
 * rounded once to bf16. */
static int check_row_parallel(step_rank *sr, int slot, const char *what)
{
    const step_case *sc = sr->sc;
    const int W = sr->nranks;
    const int64_t na = sc->m * sc->k, nb = sc->k * sc->n;
    int8_t *a = sr->ref, *b = sr->ref + W * na;
    const uint16_t *got = (const uint16_t *)(sr->h_out + (size_t)slot * round_up(sr->out_bytes));
    for (int p = 0; p < W; p++) {
        gen_small(a + p * na, (size_t)na, input_state(sr->seed, slot, p, 'A'), 1);
        gen_small(b + p * nb, (size_t)nb, input_state(sr->seed, slot, p, 'B'), 1);
    }
    int64_t row0, rows = out_rows(sc, sr->rank, W, &row0);
    for (int64_t i = row0; i < row0 + rows; i++)
        for (int64_t j = 0; j < sc->n; j++) {
            int acc = 0;
            for (int p = 0; p < W; p++)
                for (int64_t kk = 0; kk < sc->k; kk++)
                    acc += a[p * na + i * sc->k + kk] * b[p * nb + j * sc->k + kk];
            const uint16_t want = agmm_f32_to_bf16((float)acc), g = got[(i - row0) * sc->n + j];
            if (g != want)
                return gpu_rank_fail(sr->res, sr->rank, "%s: S[%lld][%lld] = %g, want %g", what, (long long)i,
                                     (long long)j, agmm_bf16_to_f32(g), agmm_bf16_to_f32(want));
        }
    return 1;
}

static int check_all_reduce(step_rank *sr, int slot, const char *what)
{
    const step_case *sc = sr->sc;
    const int64_t n = sc->count;
    const char *out = sr->h_out + (size_t)slot * round_up(sr->out_bytes);
    int8_t *x = sr->ref;
    for (int p = 0; p < sr->nranks; p++)
        gen_small(x + p * n, (size_t)n, input_state(sr->seed, slot, p, 'V'), 4);
    for (int64_t i = 0; i < n; i++) {
        int sum = 0;
        for (int p = 0; p < sr->nranks; p++)
            sum += x[p * n + i];
        float got = sc->dtype == AGMM_DTYPE_F32 ? ((const float *)out)[i]
                                                : agmm_bf16_to_f32(((const uint16_t *)out)[i]);
        if (got != (float)sum)
            return gpu_rank_fail(sr->res, sr->rank, "%s: element %lld = %g, want %d", what, (long long)i, got, sum);
    }
    return 1;
}

/* all_reduce_rmsnorm: y and r' by arn_check.h, against the inputs of this slot. */
static int check_ar_norm(step_rank *sr, int slot, const char *what)
{
    const char *out = sr->h_out + (size_t)slot * round_up(sr->out_bytes);
    arn_data_fill(&sr->arn, input_state(sr->seed, slot, 0, 'N'));
    memcpy(sr->arn.y_got, out, sr->in_bytes);
    memcpy(sr->arn.r_got, out + sr->in_bytes, sr->in_bytes);
    double r_err, y_err;
    char why[320];
    const char *bad = arn_data_check(&sr->arn, &r_err, &y_err, why, sizeof why);
    if (bad)
        return gpu_rank_fail(sr->res, sr->rank, "%s: %s", what, bad);
    return 1;
}

int step_check(step_rank *sr, int slot, const char *what)
{
    if (row_parallel(sr->sc))
        return check_row_parallel(sr, slot, what);
    if (ar_norm(sr->sc))
        return check_ar_norm(sr, slot, what);
    return sr->sc->op == AGMM_OP_AG_MATMUL ? check_ag_matmul(sr, slot, what) : check_all_reduce(sr, slot, what);
}

int step_agree(step_rank *sr, int ok)
{
    int all[AGMM_MAX_RANKS];
    if (agmm_host_exchange(sr->ctx, &ok, sizeof ok, all) != AGMM_SUCCESS)
        return gpu_rank_fail(sr->res, sr->rank, "host exchange: %s", agmm_last_error(sr->ctx));
    for (int p = 0; p < sr->nranks; p++)
        ok &= all[p];
    return ok;
}
