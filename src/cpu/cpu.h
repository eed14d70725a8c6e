/* The CPU world's device: what the GPU's copy engine, flags and tensor cores are on the GPU, made
 * of threads and host memory (internal). It knows nothing of ranks' worlds or plans; the CPU
 * implementations of the backends (src/backends) drive it.
 *
 *   flags        epoch flags are uint32 words read and written with C11 atomics (release on the
 *                writer, acquire on the waiter); every wait is bounded (flags.c).
 *   copy engine  one helper thread per plan plays the GPU's copy engine: it copies bytes and then
 *                raises an epoch flag, in the order the jobs were queued (copy_engine.c).
 *   gemm         a blocked bf16 GEMM with fp32 accumulation (gemm.c), used by every all-gather
 *                matmul backend so that they compute bit for bit the same C.
 * The fp64 references the tests check against are in reference.h.
 */
#ifndef AGMM_CPU_CPU_H
#define AGMM_CPU_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"
#include "../core/error.h"

/* ---- flags (flags.c) ---- */

/* 1 when `value` has reached `epoch`: value - epoch >= 0 as a wrapping 32-bit difference. */
int agmm_cpu_reached(uint32_t value, uint32_t epoch);

/* Raises `flag` to `value` with release order: every write this thread made before is visible to
 * a thread whose acquire wait sees the value. */
void agmm_cpu_flag_raise(uint32_t *flag, uint32_t value);

/* Adds `value` to `flag` (a counting flag several writers raise, the fused reduce-scatter's tile
 * flags), with release order as agmm_cpu_flag_raise. */
void agmm_cpu_flag_add(uint32_t *flag, uint32_t value);

/* The flag's value, loaded with acquire order. */
uint32_t agmm_cpu_flag_load(const uint32_t *flag);

/* Waits (acquire) until *flag has reached `epoch`, at most timeout_s seconds. Spins, then yields,
 * then sleeps in short naps, so that many thread-ranks can share few cores. Returns 1 when
 * reached; 0 on timeout, with the last value seen in *seen (if not NULL). */
int agmm_cpu_flag_wait(const uint32_t *flag, uint32_t epoch, double timeout_s, uint32_t *seen);

/* ---- the copy engine (copy_engine.c) ---- */

typedef struct agmm_cpu_copy_engine agmm_cpu_copy_engine;

/* Starts a copy thread; `max_jobs` bounds the jobs queued at once. Failures (and later ones of
 * submit and drain) are recorded in *err, naming `rank`. Local. */
agmm_status agmm_cpu_ce_create(int rank, agmm_error *err, int max_jobs, agmm_cpu_copy_engine **ce);
/* Stops and joins the copy thread. The caller has drained it. NULL-safe. */
void agmm_cpu_ce_destroy(agmm_cpu_copy_engine *ce);

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    uint32_t *flag;      /* raised to `epoch` (release) after the copy; NULL: none */
    uint32_t epoch;
    int64_t delay_us;    /* sleep before copying (test hook: a slow link); 0 normally */
    int64_t *done_ns;    /* if not NULL, the time the copy finished, written before the flag */
} agmm_cpu_copy_job;

/* Queues one copy; returns at once. The copies run one after another in queue order. The
 * caller keeps src readable and dst unread until the job's flag is raised or the engine drained.
 * AGMM_ERR_INTERNAL if more than max_jobs are pending. */
agmm_status agmm_cpu_ce_submit(agmm_cpu_copy_engine *ce, const agmm_cpu_copy_job *job);
/* Waits until every queued copy has finished, at most timeout_s seconds (the copy thread never
 * waits for a peer, so only a stuck machine can make this time out). After it returns
 * successfully, everything the copies wrote is visible to the caller. */
agmm_status agmm_cpu_ce_drain(agmm_cpu_copy_engine *ce, double timeout_s);

/* Flags a plan keeps one per 64-byte line: flag i at flags[i * AGMM_CPU_FLAG_STRIDE]. */
#define AGMM_CPU_FLAG_STRIDE 16

/* ---- GEMM (gemm.c) ---- */

/* Scratch of a GEMM for one K: B and A blocks converted to fp32 and an fp32 accumulator. One per
 * thread that runs GEMMs (it is written during a call). */
typedef struct {
    int64_t k;
    float *a_pack, *b_pack, *acc;
    /* The B block b_pack holds (b, layout, n, col0, cols), so that consecutive tiles of one
     * column block (the fused schedule's groups) convert it once; b_packed == NULL: none. */
    const uint16_t *b_packed;
    agmm_layout b_layout;
    int64_t b_n, b_col0, b_cols;
} agmm_cpu_gemm_ws;

agmm_status agmm_cpu_gemm_ws_init(agmm_cpu_gemm_ws *ws, int64_t k, agmm_error *err);
/* What agmm_cpu_gemm_ws_init allocates for this k, in bytes (at most). */
uint64_t agmm_cpu_gemm_ws_bytes(int64_t k);
void agmm_cpu_gemm_ws_free(agmm_cpu_gemm_ws *ws);
/* Forgets the packed B block. Call it at the start of every run: the caller may have written new
 * values into the same B buffer since the last one. */
void agmm_cpu_gemm_ws_forget_b(agmm_cpu_gemm_ws *ws);

/* C[0:rows, 0:cols] = A[0:rows, 0:k] * B[0:k, col0:col0+cols], with k = ws->k. B must not change
 * between calls until agmm_cpu_gemm_ws_forget_b (a block converted earlier may be reused).
 *   a      bf16, row-major, lda elements between rows
 *   b      bf16 K x N: COL_MAJOR means element (kk, nn) at b[nn*k + kk]; ROW_MAJOR b[kk*n + nn]
 *   c      bf16, row-major, ldc elements between rows; c[0] is element (0, col0) of the block
 * Every element is summed in fp32 over kk = 0, 1, ..., k-1 in that order and rounded once to
 * bf16, whatever rows/cols/col0 are: so any tiling of C gives bit for bit the same result. */
void agmm_cpu_gemm_bf16(agmm_cpu_gemm_ws *ws, const uint16_t *a, int64_t lda, int64_t rows, const uint16_t *b,
                        agmm_layout b_layout, int64_t n, int64_t col0, int64_t cols, uint16_t *c, int64_t ldc);

#endif /* AGMM_CPU_CPU_H */
