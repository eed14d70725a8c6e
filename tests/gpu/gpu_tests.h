/* The GPU test cases (agmm-gputest), one group per file; tests/gpu/gpu_main.c lists them. */
#ifndef AGMM_TESTS_GPU_TESTS_H
#define AGMM_TESTS_GPU_TESTS_H

#include <stdatomic.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "agmm.h"

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
 * bound ends in a timeout naming it). */
void test_fused_waits_for_late_chunk(void);
void test_fused_chunk_timeout(void);
/* test_pull.c: the pull backend's ready waits, closing barrier, io.input and timeout. */
void test_pull_protocol_gpu(void);
void test_pull_timeout_gpu(void);
/* test_auto.c: auto measures, agrees across ranks, caches; AGMM_TUNE=0 takes the static rule. */
void test_auto_gpu(void);
/* Timing at W = 1 of ce against nccl on the seed shapes; runs only with AGMM_GPUTEST_PERF=1. */
void test_ag_matmul_perf_w1(void);

/* Written by other engineers; weak so that this binary links whether or not their file is in the
 * build (gpu_main.c skips a missing one loudly). */
void test_gemm_engine(void) __attribute__((weak));   /* tests/gpu/test_gemm_engine.c */
void test_all_reduce_gpu(void) __attribute__((weak)); /* tests/gpu/test_all_reduce.c */

/* Helpers shared by the files above (test_world.c). */
/* A world of `kind` with `nranks` ranks (timeout_s 0: the default); on failure a FAIL line. */
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

/* Sleeps until *flag is set or max_s seconds have passed. */
void gpu_wait_flag(atomic_int *flag, double max_s);

#endif
