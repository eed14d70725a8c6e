/* Memory, streams and timers for agmm-bench, on the device of a rank: CUDA where the rank has a
 * GPU, host memory and wall clocks in the CPU world. Keeps the sweep itself free of #ifdefs. */
#ifndef AGMM_TOOLS_BENCH_MEM_H
#define AGMM_TOOLS_BENCH_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"
#include "api/agmm_ext.h"

typedef struct {
    int gpu;             /* 1: CUDA device memory and events */
    void *stream;        /* cudaStream_t, or NULL on the CPU */
    void *flush;         /* 256 MB (GPU) / 64 MB (CPU) buffer overwritten to flush the L2/LLC */
    size_t flush_bytes;
    void *ev_start, *ev_stop;   /* max_timed cudaEvent_t each, or max_timed doubles (CPU) */
    int max_timed;
    int flush_gen;
    char err[256];
} bench_dev;

/* Returns 0, or -1 with dev->err set. */
int bench_dev_init(bench_dev *dev, agmm_ctx *ctx, int flush, int max_timed);
void bench_dev_fini(bench_dev *dev);
void *bench_alloc(bench_dev *dev, size_t bytes);
void bench_free(bench_dev *dev, void *p);
int bench_upload(bench_dev *dev, void *dst, const void *src, size_t bytes);
int bench_download(bench_dev *dev, void *dst, const void *src, size_t bytes);
/* Overwrites `count` bf16 elements with NaN so an element never written is seen. */
int bench_poison_bf16(bench_dev *dev, void *dst, size_t count);
int bench_flush(bench_dev *dev);
int bench_sync(bench_dev *dev);
/* Call i (< max_timed) is timed between start(i) and stop(i); collect waits for all of them and
 * gives microseconds per call. Nothing syncs in between, so the host queues ahead as in the seed. */
int bench_timer_start(bench_dev *dev, int i);
int bench_timer_stop(bench_dev *dev, int i);
int bench_timer_collect(bench_dev *dev, int count, double *us);
/* CUDA graphs on the rank's stream (GPUs only; -1 with dev->err in the CPU world): begin starts a
 * thread-local capture (the other ranks' threads keep calling CUDA), end instantiates what was
 * captured into *exec (the capture is ended even when the work in it failed: ok = 0), launch
 * enqueues one replay, free releases it (NULL-safe). */
int bench_graph_begin(bench_dev *dev);
int bench_graph_end(bench_dev *dev, int ok, void **exec);
int bench_graph_launch(bench_dev *dev, void *exec);
void bench_graph_free(void *exec);
/* The plain GEMM on the gathered shape (tools/bench_gemm.c), rank 0's yardstick: random operands
 * and an output on the device, `lib` with the world's reference GEMM (cuBLASLt on GPUs, the CPU
 * GEMM on the CPU) and `engine` with agmm's GEMM engine (GPUs only); NULL where unavailable.
 * bench_turns.c times them beside the row's backends. */
typedef struct {
    agmm_ext_gemm *lib, *engine;
    void *a, *b, *c;
} bench_gemm;
void bench_gemm_hold(bench_dev *dev, agmm_ctx *ctx, int64_t rows, int64_t n, int64_t k, agmm_layout b_layout,
                     bench_gemm *g);
void bench_gemm_release(bench_dev *dev, bench_gemm *g);

#endif
