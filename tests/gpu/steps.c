/* Steps of one plan on one rank, shared by the tests of CUDA graphs, of steps back to back and of
 * two streams (test_graph.c, test_steps.c): a plan, `slots` sets of step buffers, fresh inputs for
 * every step, the enqueueing of one step and the check of its result. What differs per operation
 * (its plan, inputs, run and check) is its step_op (step_op.h), one file each, found in step_ops.
 *
 * Inputs are small integers, so every result is exact in bf16 and fp32 and is compared bit for
 * bit (all_reduce_rmsnorm's y: within one bf16 rounding of fp64 too). Every rank derives every
 * rank's inputs from the same seed, so each checks its own outputs alone. Outputs are poisoned
 * (0xff bytes: NaN in bf16 and fp32) before every step's inputs are uploaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/numeric.h"
#include "step_op.h"
#include "world/world.h"

static const step_op *const step_ops[] = {&step_ag_matmul, &step_all_reduce, &step_matmul_reduce_scatter,
                                          &step_matmul_all_reduce, &step_all_reduce_rmsnorm};

static const step_op *op_of(agmm_op op)
{
    for (size_t i = 0; i < sizeof step_ops / sizeof step_ops[0]; i++)
        if (step_ops[i]->op == op)
            return step_ops[i];
    return NULL;
}

uint64_t step_input_state(uint64_t seed, int slot, int rank, int what)
{
    uint64_t s = seed ^ ((uint64_t)slot << 40) ^ ((uint64_t)rank << 24) ^ (uint64_t)what;
    return agmm_rng_next(&s);
}

void step_gen_small(int8_t *x, size_t count, uint64_t state, int span)
{
    for (size_t i = 0; i < count; i++)
        x[i] = (int8_t)agmm_rng_small_int(&state, span);
}

void step_to_dtype(const int8_t *x, size_t count, agmm_dtype dt, void *out)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == AGMM_DTYPE_F32)
            ((float *)out)[i] = (float)x[i];
        else
            ((uint16_t *)out)[i] = agmm_f32_to_bf16((float)x[i]);
    }
}

void step_fill_ab(step_rank *sr, int slot, char *in, char *b)
{
    const size_t na = (size_t)(sr->sc->m * sr->sc->k), nb = (size_t)(sr->sc->k * sr->sc->n);
    step_gen_small(sr->ref, na, step_input_state(sr->seed, slot, sr->rank, 'A'), 1);
    step_to_dtype(sr->ref, na, AGMM_DTYPE_BF16, in);
    step_gen_small(sr->ref, nb, step_input_state(sr->seed, slot, sr->rank, 'B'), 1);
    step_to_dtype(sr->ref, nb, AGMM_DTYPE_BF16, b);
}

int step_planned(step_rank *sr, agmm_status st)
{
    if (st != AGMM_SUCCESS)
        return gpu_rank_fail(sr->res, sr->rank, "plan: %s: %s", agmm_status_str(st), agmm_last_error(sr->ctx));
    return 1;
}

const char *step_case_name(const step_case *sc, char *buf, size_t len)
{
    const step_op *op = op_of(sc->op);
    if (op)
        op->name(sc, buf, len);
    else
        snprintf(buf, len, "%s/%s (no step_op)", agmm_op_name(sc->op), sc->backend);
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
    sr->op = op_of(sc->op);
    sr->ctx = ctx;
    sr->res = res;
    sr->rank = agmm_ctx_rank(ctx);
    sr->nranks = agmm_ctx_info(ctx)->nranks;
    sr->slots = slots;
    sr->input = input;
    const int rank = sr->rank;
    if (sr->op == NULL) /* a case-table error, the same on every rank: none plans */
        return gpu_rank_fail(res, rank, "%s: no step_op in steps.c's step_ops", agmm_op_name(sc->op));
    size_t ref_bytes = 0;
    if (!sr->op->plan(sr, &ref_bytes))
        return 0;
    sr->in_stride = step_round_up(sr->in_bytes);
    if (input == STEP_SYMMETRIC) {
        agmm_status st = agmm_symmetric_alloc(ctx, (size_t)slots * sr->in_stride, &sr->sym);
        if (st != AGMM_SUCCESS)
            return gpu_rank_fail(res, rank, "agmm_symmetric_alloc: %s", agmm_last_error(ctx));
    }
    size_t n_in = (size_t)slots * sr->in_stride, n_b = (size_t)slots * step_round_up(sr->b_bytes);
    size_t n_ag = (size_t)slots * step_round_up(sr->ag_bytes), n_out = (size_t)slots * step_round_up(sr->out_bytes);
    sr->ref = malloc(ref_bytes);
    if (sr->ref == NULL || cudaMalloc((void **)&sr->d_stage, n_in) != cudaSuccess ||
        (n_b && cudaMalloc((void **)&sr->d_b, n_b) != cudaSuccess) ||
        (n_ag && cudaMalloc((void **)&sr->d_ag, n_ag) != cudaSuccess) ||
        cudaMalloc((void **)&sr->d_out, n_out + STEP_ALIGN) != cudaSuccess ||
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
        return sr->op->plan_input ? agmm_plan_input(sr->plan) : sr->d_stage + (size_t)slot * sr->in_stride;
    return (char *)sr->sym + (size_t)slot * sr->in_stride;
}

static char *step_output_ptr(const step_rank *sr, int slot)
{
    if (sr->sc->op == AGMM_OP_ALL_REDUCE && sr->sc->in_place && sr->input == STEP_SYMMETRIC)
        return step_input_ptr(sr, slot);
    return sr->d_out + (size_t)slot * step_round_up(sr->out_bytes);
}

int step_fill(step_rank *sr, uint64_t seed, cudaStream_t s)
{
    sr->seed = seed;
    for (int j = 0; j < sr->slots; j++)
        sr->op->fill(sr, j, sr->h_in + (size_t)j * sr->in_stride,
                     sr->h_b ? sr->h_b + (size_t)j * step_round_up(sr->b_bytes) : NULL);
    char *in_dst = sr->input == STEP_STAGED ? sr->d_stage : sr->sym;
    cudaError_t e = cudaMemcpyAsync(in_dst, sr->h_in, (size_t)sr->slots * sr->in_stride, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && sr->b_bytes)
        e = cudaMemcpyAsync(sr->d_b, sr->h_b, (size_t)sr->slots * step_round_up(sr->b_bytes), cudaMemcpyHostToDevice,
                            s);
    if (e == cudaSuccess && sr->ag_bytes)
        e = cudaMemsetAsync(sr->d_ag, 0xff, (size_t)sr->slots * step_round_up(sr->ag_bytes), s);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(sr->d_out, 0xff, (size_t)sr->slots * step_round_up(sr->out_bytes), s);
    if (e != cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "step inputs: %s", cudaGetErrorString(e));
    return 1;
}

agmm_status step_enqueue(step_rank *sr, int slot, cudaStream_t s)
{
    char *in = step_input_ptr(sr, slot), *out = step_output_ptr(sr, slot);
    const void *io_input = sr->input == STEP_SYMMETRIC ? in : NULL;
    /* Staged: this step's input goes into the plan's buffer on the step's stream, right after the
     * previous step has passed on it (agmm.h: no peer reads it any more). */
    if (sr->input == STEP_STAGED && sr->op->plan_input &&
        cudaMemcpyAsync(in, sr->d_stage + (size_t)slot * sr->in_stride, sr->in_bytes, cudaMemcpyDeviceToDevice, s) !=
            cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "step %d: input copy failed", slot), AGMM_ERR_CUDA;
    const char *b = sr->d_b ? sr->d_b + (size_t)slot * step_round_up(sr->b_bytes) : NULL;
    agmm_status st = sr->op->run(sr, slot, in, io_input, b, out, s);
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
        e = cudaMemcpyAsync(sr->h_out + (size_t)j * step_round_up(sr->out_bytes), step_output_ptr(sr, j), sr->out_bytes,
                            cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess && sr->ag_bytes)
            e = cudaMemcpyAsync(sr->h_ag + (size_t)j * step_round_up(sr->ag_bytes),
                                sr->d_ag + (size_t)j * step_round_up(sr->ag_bytes), sr->ag_bytes,
                                cudaMemcpyDeviceToHost, s);
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

int step_check(step_rank *sr, int slot, const char *what)
{
    return sr->op->check(sr, slot, sr->h_out + (size_t)slot * step_round_up(sr->out_bytes), what);
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
