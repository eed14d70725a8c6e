/* agmm-gputest: the GPU tests. Without a visible GPU it says so loudly and exits 0 with the
 * summary line, so CI machines without GPUs pass through. `agmm-gputest [filter]` runs the cases
 * whose name contains filter; `agmm-gputest sanitize TOOL` the small subset for compute-sanitizer
 * TOOL (sanitize.c), `agmm-gputest sanitize-plan` prints what that subset runs under each tool
 * (no GPU needed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include "world/gpu_headers.h"

#include "gpu_tests.h"
#include "../harness.h"

static void gemm_engine(void)
{
    if (test_gemm_engine)
        test_gemm_engine();
    else
        agmm_skip("gemm_engine: tests/gpu/test_gemm_engine.c is not in this build");
}

static void all_reduce_gpu(void)
{
    if (test_all_reduce_gpu)
        test_all_reduce_gpu();
    else
        agmm_skip("all_reduce_gpu: tests/gpu/test_all_reduce.c is not in this build");
}

static const agmm_test_case cases[] = {
    {"world_nccl_one", test_world_nccl_one},
    {"world_emulated", test_world_emulated},
    {"world_barrier_timeout", test_world_barrier_timeout},
    {"ag_matmul_w1", test_ag_matmul_w1},
    {"ag_matmul_ce_emulated", test_ag_matmul_ce_emulated},
    {"ag_matmul_nccl_skipped", test_ag_matmul_nccl_skipped},
    {"ag_matmul_gpu_world", test_ag_matmul_gpu_world},
    {"ag_matmul_ce_timeout", test_ag_matmul_ce_timeout},
    {"ag_matmul_fused_late_chunk", test_fused_waits_for_late_chunk},
    {"ag_matmul_fused_chunk_timeout", test_fused_chunk_timeout},
    {"ag_matmul_fused_engine_refusal", test_fused_engine_refusal},
    {"ag_matmul_pull_protocol", test_pull_protocol_gpu},
    {"ag_matmul_pull_timeout", test_pull_timeout_gpu},
    {"ag_matmul_pull_graph_slots", test_pull_graph_slots_gpu},
    {"auto", test_auto_gpu},
    {"all_reduce_nccl_w1", test_all_reduce_nccl_w1},
    {"matmul_reduce_gpu", test_matmul_reduce_gpu},
    {"matmul_reduce_fused", test_matmul_reduce_fused},
    {"matmul_reduce_fused_configs", test_matmul_reduce_fused_configs},
    {"matmul_reduce_gpu_world", test_matmul_reduce_gpu_world},
    {"matmul_reduce_timeout", test_matmul_reduce_timeout},
    {"gemm_engine", gemm_engine},
    {"gemm_engine_pull", test_gemm_engine_pull},
    {"all_reduce_gpu", all_reduce_gpu},
    {"ar_norm_gpu", test_ar_norm_gpu},
    {"ar_norm_graph", test_ar_norm_graph},
    {"ar_norm_timeout", test_ar_norm_timeout},
    {"leaks", test_leaks_gpu},
    {"graph_w1", test_graph_w1},
    {"graph_emulated", test_graph_emulated},
    {"graph_then_eager", test_graph_then_eager},
    {"graph_replays_and_eager", test_graph_replays_and_eager},
    {"steps_back_to_back", test_steps_back_to_back},
    {"steps_two_streams", test_steps_two_streams},
    {"ag_matmul_perf_w1", test_ag_matmul_perf_w1},
    {"nccl_sync_timeout", test_nccl_sync_timeout}, /* last: it aborts a communicator */
};

/* `agmm-gputest sanitize TOOL` runs this alone: small shapes of every kernel and backend, for
 * compute-sanitizer (bench/sanitize.sh). It is no part of the full run, which covers it. */
static const char *sanitize_tool;
static void sanitize(void) { test_sanitize(sanitize_tool); }
static const agmm_test_case sanitize_case[] = {{"sanitize", sanitize}};

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "sanitize-plan") == 0) {
        sanitize_plan_print(stdout);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "sanitize") == 0) {
        sanitize_tool = argc > 2 ? argv[2] : NULL;
        if (sanitize_tool && !sanitize_known_tool(sanitize_tool)) {
            fprintf(stderr, "agmm-gputest: sanitize %s: the tool must be memcheck, racecheck, synccheck or "
                            "initcheck (or none: every group at every W)\n",
                    sanitize_tool);
            return 2;
        }
    }
    /* Before the first CUDA call: the emulated worlds here share one GPU, and a kernel loaded
     * lazily at its first launch waits for the whole context, where a peer's kernel may be
     * spinning until this rank arrives (world_gpu.c sets the same, but CUDA starts right below). */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        agmm_skip("no GPU visible (%s): the GPU tests did not run",
                  e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return agmm_test_summary();
    }
    struct cudaDeviceProp prop;
    int nccl = 0;
    cudaGetDeviceProperties(&prop, 0);
    ncclGetVersion(&nccl);
    printf("agmm-gputest: %d x %s (sm_%d%d, %d SMs); NCCL library %d, headers %d; NCCL_NVLS_ENABLE=%s\n", ndev,
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, nccl, NCCL_VERSION_CODE,
           getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "(unset: agmm sets 0)");
    fflush(stdout);
    const int rc = argc > 1 && strcmp(argv[1], "sanitize") == 0
                       ? agmm_test_main(sanitize_case, 1, NULL)
                       : agmm_test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc > 1 ? argv[1] : NULL);
    gpu_rank_streams_release(); /* the streams every group kept (gpu_rank_stream) */
    return rc;
}
