/* The GPU test cases (agmm-gputest), one group per file; tests/gpu/gpu_main.c lists them. */
#ifndef AGMM_TESTS_GPU_TESTS_H
#define AGMM_TESTS_GPU_TESTS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "agmm.h"
#include "../arn_check.h"

/* test_world.c: worlds, the symmetric heap, the stream barrier and its bounded wait. */
void test_world_nccl_one(void);
void test_world_emulated(void);
void test_world_barrier_timeout(void);

/* test_ag_matmul.c: the ag_matmul backends against the fp64 reference and each other. */
void test_ag_matmul_w1(void);
void test_ag_matmul_ce_emulated(void);
void test_ag_matmul_nccl_skipped(void);
void test_ag_matmul_gpu_world(void);
void test_ag_matmul_ce_timeout(void);
void test_all_reduce_nccl_w1(void);
/* test_fused.c: the fused backend's per-chunk waits (a late chunk is waited for; a chunk past the
 * bound ends in a timeout naming it); the engine's refusal reported through it, naming the
 * argument, and a forced tile config. */
void test_fused_waits_for_late_chunk(void);
void test_fused_chunk_timeout(void);
void test_fused_engine_refusal(void);
/* test_nccl_bounds.c: a stalled NCCL operation ends in a timeout, an abort and an unusable world. */
void test_nccl_sync_timeout(void);
/* test_leaks.c: plan and world cycles leave host and device memory, mappings and descriptors flat. */
void test_leaks_gpu(void);
/* test_pull.c: the pull backend's ready waits, closing barrier, io.input and timeout; its map
 * slots under CUDA-graph capture. */
void test_pull_protocol_gpu(void);
void test_pull_timeout_gpu(void);
void test_pull_graph_slots_gpu(void);
/* test_auto.c: auto measures, agrees across ranks, caches; AGMM_TUNE=0 takes the static rule. */
void test_auto_gpu(void);
/* test_matmul_reduce.c: matmul_reduce_scatter and matmul_all_reduce, every backend, W = 1 and
 * emulated W = 2, 3, 4, 8 on odd shapes; a GPU world of every visible GPU; a rank that never runs. */
void test_matmul_reduce_gpu(void);
/* The fused backends on shapes of many tiles straddling the reduce-scatter's blocks, W = 1, 2, 3,
 * 4, 8, and with a rank whose GEMM starts late. */
void test_matmul_reduce_fused(void);
/* The fused backends under every tile config but the split tail's, emulated W = 3. */
void test_matmul_reduce_fused_configs(void);
void test_matmul_reduce_gpu_world(void);
void test_matmul_reduce_timeout(void);
/* test_gemm_engine_pull.c: the engine's pull mode under every tile config and B layout, two ranks
 * on one GPU (ready waits, gathered A stores, closing barrier). */
void test_gemm_engine_pull(void);
/* test_ar_norm.c: all_reduce_rmsnorm's backends against the fp64 reference and the kernels' fp32
 * order (W = 1, emulated 2..4), two runs in one CUDA graph replayed with fresh inputs, a missing
 * rank. */
void test_ar_norm_gpu(void);
void test_ar_norm_graph(void);
void test_ar_norm_timeout(void);
void test_ar_norm_small(int nranks); /* for test_sanitize: two small cases at W = nranks */
/* Timing at W = 1 of ce against nccl on the seed shapes; runs only with AGMM_GPUTEST_PERF=1. */
void test_ag_matmul_perf_w1(void);

/* Written by other engineers; weak so that this binary links whether or not their file is in the
 * build (gpu_main.c skips a missing one loudly). */
void test_gemm_engine(void) __attribute__((weak));   /* tests/gpu/test_gemm_engine.c */
void test_all_reduce_gpu(void) __attribute__((weak)); /* tests/gpu/test_all_reduce.c */

/* Helpers shared by the files above (test_world.c). */
/* A world of `kind` with `nranks` ranks (timeout_s 0: gpu_test_timeout()); on failure a FAIL line. */
agmm_world *gpu_test_world(agmm_world_kind kind, int nranks, double timeout_s);
/* Per-rank outcome of a test body run on every rank's thread: the main thread reports it. */
typedef struct {
    int ok[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][512];
} gpu_rank_results;
/* Records a failure of rank `rank` (first one kept) and returns 0. */
int gpu_rank_fail(gpu_rank_results *res, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* One PASS/FAIL line per rank: "<what> rank r" with the rank's message on failure. */
void gpu_report_ranks(const gpu_rank_results *res, int nranks, const char *what);
/* In a rank's test body: on failure record it for `rank` (RANK_AGMM: the ctx's rank) in the
 * gpu_rank_results *res, with the call and its error, and jump to the body's `done` label. */
#define RANK_CUDA(res, rank, call)                                                                      \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            gpu_rank_fail((res), (rank), "%s:%d: %s -> %s", __FILE__, __LINE__, #call,            \
                          cudaGetErrorString(e_));                                                      \
            goto done;                                                                                  \
        }                                                                                               \
    } while (0)

#define RANK_AGMM(res, ctx, call)                                                                       \
    do {                                                                                                \
        agmm_status s_ = (call);                                                                        \
        if (s_ != AGMM_SUCCESS) {                                                                       \
            gpu_rank_fail((res), agmm_ctx_rank(ctx), "%s -> %s: %s", #call, agmm_status_str(s_),  \
                          agmm_last_error(ctx));                                                        \
            goto done;                                                                                  \
        }                                                                                               \
    } while (0)

/* The stream `which` (0 .. GPU_RANK_STREAMS-1) of rank `rank` on the current device: non-blocking,
 * made at its first use and kept for the process (test_world.c says why); NULL on failure. A case
 * leaves its streams idle (synchronised) for the next one. gpu_main.c releases them all at the end. */
#define GPU_RANK_STREAMS 4
cudaStream_t gpu_rank_stream(int rank, int which);
void gpu_rank_streams_release(void);
/* In a rank's test body: s = gpu_rank_stream(rank, which), or the failure recorded in res and a
 * jump to `done`, as RANK_CUDA. */
#define RANK_STREAM(res, rank, s, which)                                                                \
    do {                                                                                                \
        if (((s) = gpu_rank_stream((rank), (which))) == NULL) {                                         \
            gpu_rank_fail((res), (rank), "%s:%d: no stream %d for rank %d (gpu_rank_stream)", __FILE__, \
                          __LINE__, (which), (rank));                                                   \
            goto done;                                                                                  \
        }                                                                                               \
    } while (0)

/* Sleeps until *flag is set or max_s seconds have passed. */
void gpu_wait_flag(atomic_int *flag, double max_s);
/* The bound of every wait in the tests' worlds unless a test sets its own: AGMM_GPUTEST_TIMEOUT
 * seconds if set (sanitizers slow kernels down by orders of magnitude), else 0 (the library's 5 s). */
double gpu_test_timeout(void);

/* ---- steps of one plan on one rank (steps.c), for test_graph.c and test_steps.c ---- */

typedef struct {
    agmm_op op;
    const char *backend;
    int64_t m, n, k;        /* the matmuls, B column-major; all_reduce_rmsnorm: m = T, n = H */
    int splits;
    int64_t count;          /* all_reduce: elements per rank */
    agmm_dtype dtype;
    int in_place;           /* all_reduce: the output is the input the run reads */
} step_case;

typedef enum {
    STEP_STAGED = 0,        /* each step first copies its input into agmm_plan_input, on its stream */
    STEP_SYMMETRIC          /* step j reads slot j of one agmm_symmetric_alloc buffer (io.input) */
} step_input;

struct step_op;

typedef struct {
    const step_case *sc;
    const struct step_op *op; /* sc's operation in the harness (step_op.h) */
    agmm_ctx *ctx;
    gpu_rank_results *res;  /* where failures go (gpu_rank_fail) */
    int rank, nranks, slots;
    step_input input;
    agmm_plan *plan;
    void *sym;              /* STEP_SYMMETRIC: the slots' inputs */
    size_t in_bytes, in_stride, b_bytes, ag_bytes, out_bytes;
    char *d_stage, *d_b, *d_ag, *d_out;  /* per slot, 256-byte strides */
    char *h_in, *h_b, *h_ag, *h_out;     /* pinned mirrors */
    int8_t *ref;            /* every rank's inputs of one slot, regenerated for checks */
    arn_data arn;           /* all_reduce_rmsnorm: every rank's inputs of one slot and what they give */
    uint64_t seed;          /* of the inputs in the buffers now */
} step_rank;

/* "ag_matmul/ce M=.. N=.. K=.. splits=..", "all_reduce/one_shot n=.. bf16 in place", and so on. */
const char *step_case_name(const step_case *sc, char *buf, size_t len);
/* A step job's start on rank `rank`: its result marked good, *s its stream 0; 0 (the failure
 * recorded) without a stream. The rank still plans after a 0: planning is collective. */
int step_job_start(gpu_rank_results *res, int rank, cudaStream_t *s);
/* Plans (collective) and allocates `slots` step buffers; 0 after recording a failure in res. */
int step_rank_init(step_rank *sr, agmm_ctx *ctx, const step_case *sc, int slots, step_input input,
                   gpu_rank_results *res);
/* Collective (destroys the plan). */
void step_rank_fini(step_rank *sr);
/* The end of a rank's job on one stream: waits for `s` (a kept one: gpu_rank_stream), destroys the
 * graphs of execs (NULL ones skipped), then step_rank_fini; with ok = 0, a rank with no failure of
 * its own records that a peer failed first. */
void step_rank_end(step_rank *sr, cudaStream_t s, const cudaGraphExec_t *execs, int nexecs, int ok);
/* Fresh inputs for every slot from `seed`, uploaded, and the outputs poisoned, on `s` (async). */
int step_fill(step_rank *sr, uint64_t seed, cudaStream_t s);
/* Enqueues step `slot` on `s` (staged: its input copy, then the run). */
agmm_status step_enqueue(step_rank *sr, int slot, cudaStream_t s);
/* Captures steps first .. first+steps-1 into one graph on `s` and instantiates it in *exec; the
 * capture is ended even after a failed step. 0 after recording a failure. */
int step_capture(step_rank *sr, int first, int steps, cudaStream_t s, cudaGraphExec_t *exec);
/* Every slot's outputs to the host (waits for `s`), then agmm_ctx_sync. */
int step_download(step_rank *sr, cudaStream_t s);
/* Slot `slot` exact on this rank; else 0 with the first difference, prefixed by `what`. */
int step_check(step_rank *sr, int slot, const char *what);
/* Whether every rank's ok is 1 (a host exchange): collective work goes on only if so. */
int step_agree(step_rank *sr, int ok);
/* The cases the step tests run in world w (test_graph.c): every backend of the library's table
 * (agmm_backend_name) that w offers, on the shapes of its operation; spread = 0: each on every
 * shape, 1: each shape on one backend, spread over them so that every backend runs one too (the
 * sanitizer's subset). Fills at most max cases; returns how many. */
int gpu_step_cases(const agmm_world *w, int spread, step_case *out, int max);
/* A world of nranks for the step tests: the GPU world (NCCL) for 1, else emulated. */
agmm_world *gpu_step_world(int nranks);
/* One PASS line for a job that agmm_world_run (status `run`) ran on every rank, or one FAIL: the
 * world's failure, else the first rank's own (not one that only saw a peer fail). */
void gpu_report_job(agmm_status run, const gpu_rank_results *res, int nranks, const char *what);

/* test_graph.c: runs captured in CUDA graphs, 1 and 5 steps per graph (inputs staged, or io.input
 * per step), each graph replayed 100 times with fresh inputs, every result checked; every GPU
 * backend of the table, W = 1 and emulated worlds. */
void test_graph_w1(void);
/* A replay pending on one stream, then an eager run on another: ordered after it (W = 1). */
void test_graph_then_eager(void);
/* Replays of captured runs and eager runs in turn, of one plan and of two, W = 1, 2 and 4. */
void test_graph_replays_and_eager(void);
void test_graph_emulated(void);
/* test_steps.c: 200 steps back to back with fresh inputs and one rank slowed at random by a
 * device delay; one plan run on two streams alternately, with no ordering by the caller. */
void test_steps_back_to_back(void);
void test_steps_two_streams(void);
/* sanitize.c: a small subset of every kernel and backend for compute-sanitizer TOOL (memcheck,
 * racecheck, synccheck, initcheck; NULL: no tool) in groups, each group's emulated worlds at W = 1
 * where the tool cannot run them (bench/sanitize.sh); the plan of every tool as markdown. */
void test_sanitize(const char *tool);
int sanitize_known_tool(const char *tool);
void sanitize_plan_print(FILE *f);
/* Pieces of it from the other files. */
void test_gemm_engine_small(void);    /* test_gemm_engine.c: every config on a small shape */
void test_world_small(int nranks);    /* test_world.c: heap, peer reads, barriers at W = nranks */
/* The step cases of a world of cases_of ranks (its backends, as gpu_step_cases) to run in world w;
 * with only_new, and cases_of not w's size, without those w's own cases hold (the caller runs
 * those anyway). graph_cases and steps_cases run the cases of a world of cases_of ranks in one of
 * nranks (test_graph.c, test_steps.c: their own tests pass cases_of = nranks, only_new = 0). */
int gpu_step_cases_of(const agmm_world *w, int cases_of, int only_new, int spread, step_case *out, int max);
void graph_cases(int nranks, int cases_of, int only_new, int nsteps, int replays, int spread);
void steps_cases(int nranks, int cases_of, int only_new, int nsteps, int two_streams, int spread);

#endif
