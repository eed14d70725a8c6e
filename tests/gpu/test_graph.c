/* GPU tests of CUDA-graph capture (agmm.h, "CUDA graphs"). Every rank captures `steps` steps of
 * one plan (each step: its input copied into agmm_plan_input on the stream, then the run) into a
 * graph, instantiates it, and replays it `replays` times; before every replay it writes fresh
 * inputs for every step and poisons every output (steps.c), and after it every step's outputs are
 * checked exactly on every rank. Graphs of 1 step and of `steps` steps, every GPU backend at W = 1
 * (NCCL world) and the backends without NCCL in emulated worlds of 2 and 4 ranks.
 *
 * Why this can fail: a value frozen into the graph at capture (an epoch, a sequence number, a
 * flag value) makes the second replay pass a barrier early or wait for a flag that never comes:
 * wrong sums or NaN rows (checked), or a timeout (agmm_ctx_sync after each replay). In fused plans
 * one peer chunk's copy starts 200 us late, so a chunk flag left raised by the previous step would
 * let the GEMM read that chunk's rows before they land: NaN in C. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backends/ag_matmul_fused.h"
#include "gpu_tests.h"
#include "world/world.h"
#include "../harness.h"

#define FUSED_DELAY_NS 200000

/* The cases of the step tests (test_steps.c runs them too): odd m and n, splits that cut the
 * shard, both dtypes and in-place runs; the NCCL ones run only where the world has NCCL. */
const step_case gpu_step_cases[] = {
    {AGMM_OP_AG_MATMUL, "ce", 40, 72, 64, 2, 0, AGMM_DTYPE_BF16, 0},
    {AGMM_OP_AG_MATMUL, "fused", 40, 72, 64, 2, 0, AGMM_DTYPE_BF16, 0},
    {AGMM_OP_AG_MATMUL, "nccl", 40, 72, 64, 1, 0, AGMM_DTYPE_BF16, 0},
    {AGMM_OP_ALL_REDUCE, "one_shot", 0, 0, 0, 0, 4093, AGMM_DTYPE_BF16, 1},
    {AGMM_OP_ALL_REDUCE, "one_shot", 0, 0, 0, 0, 4093, AGMM_DTYPE_F32, 0},
    {AGMM_OP_ALL_REDUCE, "two_shot", 0, 0, 0, 0, 8193, AGMM_DTYPE_BF16, 0},
    {AGMM_OP_ALL_REDUCE, "two_shot", 0, 0, 0, 0, 4093, AGMM_DTYPE_F32, 1},
    {AGMM_OP_ALL_REDUCE, "nccl", 0, 0, 0, 0, 4093, AGMM_DTYPE_BF16, 1},
    {AGMM_OP_ALL_REDUCE, "nccl_plain", 0, 0, 0, 0, 4093, AGMM_DTYPE_F32, 0},
};
const int gpu_step_ncases = (int)(sizeof gpu_step_cases / sizeof gpu_step_cases[0]);

typedef struct {
    const step_case *sc;
    int steps, replays;
    uint64_t seed;
    gpu_rank_results res;
} graph_job;

/* Captures every step into one graph on `s`; the capture is ended even after a failed step. */
static int capture(step_rank *sr, int steps, cudaStream_t s, cudaGraphExec_t *exec)
{
    cudaGraph_t graph = NULL;
    /* Thread-local: the other ranks' threads keep calling CUDA while this one captures. */
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
    int ok = 1;
    for (int i = 0; i < steps && ok; i++)
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

static agmm_status graph_rank(agmm_ctx *ctx, void *arg)
{
    graph_job *j = arg;
    const int rank = agmm_ctx_rank(ctx);
    j->res.ok[rank] = 1;
    cudaStream_t s = NULL;
    cudaGraphExec_t exec = NULL;
    step_rank sr;
    int ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
    if (!ok)
        gpu_rank_fail(&j->res, rank, "cudaStreamCreateWithFlags failed");
    /* Collective: every rank plans, whatever failed before. */
    ok = step_rank_init(&sr, ctx, j->sc, j->steps, STEP_STAGED, &j->res) && ok;
    const int W = agmm_ctx_info(ctx)->nranks;
    if (ok && W > 1 && strcmp(j->sc->backend, "fused") == 0 &&
        agmm_fused_set_copy_delay(sr.plan, ((rank + 1) % W) * j->sc->splits, FUSED_DELAY_NS) != AGMM_SUCCESS)
        ok = gpu_rank_fail(&j->res, rank, "copy delay: %s", agmm_last_error(ctx));
    ok = ok && capture(&sr, j->steps, s, &exec);
    /* Instantiation may synchronise the device: nobody replays before everyone has a graph. */
    ok = step_agree(&sr, ok);
    for (int rep = 0; rep < j->replays && ok; rep++) {
        ok = step_fill(&sr, j->seed + (uint64_t)rep * 7919u, s);
        cudaError_t e = ok ? cudaGraphLaunch(exec, s) : cudaSuccess;
        if (e != cudaSuccess)
            ok = gpu_rank_fail(&j->res, rank, "replay %d: cudaGraphLaunch: %s", rep, cudaGetErrorString(e));
        ok = ok && step_download(&sr, s);
        for (int i = 0; i < j->steps && ok; i++) {
            char what[64];
            snprintf(what, sizeof what, "replay %d, step %d", rep, i);
            ok = step_check(&sr, i, what);
        }
    }
    if (s)
        cudaStreamSynchronize(s);
    if (exec)
        cudaGraphExecDestroy(exec);
    step_rank_fini(&sr);
    if (s)
        cudaStreamDestroy(s);
    if (!ok && j->res.ok[rank])
        gpu_rank_fail(&j->res, rank, "a peer failed first");
    return AGMM_SUCCESS;
}

void gpu_report_job(agmm_status run, const gpu_rank_results *res, int nranks, const char *what)
{
    if (run != AGMM_SUCCESS) {
        agmm_check(0, "%s: agmm_world_run -> %s", what, agmm_status_str(run));
        return;
    }
    for (int r = 0; r < nranks; r++)
        if (!res->ok[r] && strcmp(res->msg[r], "a peer failed first") != 0) {
            agmm_check(0, "%s: rank %d: %s", what, r, res->msg[r]);
            return;
        }
    for (int r = 0; r < nranks; r++)
        if (!res->ok[r]) {
            agmm_check(0, "%s: rank %d: %s", what, r, res->msg[r]);
            return;
        }
    agmm_check(1, "%s", what);
}

agmm_world *gpu_step_world(int nranks)
{
    return gpu_test_world(nranks == 1 ? AGMM_WORLD_GPU : AGMM_WORLD_EMULATED, nranks, 0);
}

void graph_cases(int nranks, int steps, int replays)
{
    agmm_world *w = gpu_step_world(nranks);
    if (w == NULL)
        return;
    const int counts[2] = {1, steps};
    for (int c = 0; c < gpu_step_ncases; c++) {
        const step_case *sc = &gpu_step_cases[c];
        if (!agmm_backend_available(w, sc->op, sc->backend, NULL, 0))
            continue;
        for (int g = 0; g < 2; g++) {
            graph_job *j = calloc(1, sizeof *j);
            char name[128], what[320];
            snprintf(what, sizeof what, "graph %s W=%d: %d step%s captured, %d replays with fresh inputs, all %d "
                     "results exact on every rank", step_case_name(sc, name, sizeof name), nranks, counts[g],
                     counts[g] > 1 ? "s" : "", replays, counts[g] * replays);
            if (j == NULL) {
                agmm_check(0, "%s: out of host memory", what);
                continue;
            }
            *j = (graph_job){.sc = sc, .steps = counts[g], .replays = replays,
                             .seed = 0x6a09e667ull * (uint64_t)(c + 1) + (uint64_t)(nranks * 10 + g)};
            gpu_report_job(agmm_world_run(w, graph_rank, j), &j->res, nranks, what);
            free(j);
        }
    }
    agmm_world_destroy(w);
}

void test_graph_w1(void) { graph_cases(1, 5, 100); }

void test_graph_emulated(void)
{
    graph_cases(2, 5, 100);
    graph_cases(4, 5, 100);
}
