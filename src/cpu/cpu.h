/* The CPU world's machinery, shared by the files of src/cpu (internal).
 *
 * The CPU world runs the GPU's schedule and protocols with threads as ranks:
 *   signals      epoch flags are uint32 words read and written with C11 atomics (release on
 *                the writer, acquire on the waiter); every wait is bounded by the world's
 *                timeout (barrier.c).
 *   barrier      the cross-rank barrier on the signal pads of design.md §4 (barrier.c).
 *   copy engine  one helper thread per plan plays the GPU's copy engine: it copies bytes and then
 *                raises an epoch flag, in the order the jobs were queued (copy_engine.c).
 *   gemm         a blocked bf16 GEMM with fp32 accumulation (gemm.c), used by all three
 *                all-gather matmul backends so that they compute bit for bit the same C.
 * The backends: ag_matmul_allgather.c (`nccl`), ag_matmul_ce.c, ag_matmul_fused.c, and
 * all_reduce.c (`nccl`, `one_shot`, `two_shot`). The fp64 references are in reference.h.
 */
#ifndef AGMM_CPU_CPU_H
#define AGMM_CPU_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"
#include "../core/error.h"
#include "../ops/backend.h"

/* ---- signals and barrier (barrier.c) ---- */

/* Monotonic clock in nanoseconds. */
int64_t agmm_cpu_now_ns(void);

/* Raises `flag` to `value` with release order: every write this thread made before is visible to
 * a thread whose acquire wait sees the value. */
void agmm_cpu_flag_raise(uint32_t *flag, uint32_t value);

/* Waits (acquire) until *flag has reached `epoch` ("ready when >= epoch", compared modulo 2^32),
 * at most timeout_s seconds. Spins, then yields, then sleeps in short naps, so that many
 * thread-ranks can share few cores. Returns 1 when reached; 0 on timeout, with the last value
 * seen in *seen (if not NULL). */
int agmm_cpu_flag_wait(const uint32_t *flag, uint32_t epoch, double timeout_s, uint32_t *seen);

/* Cross-rank barrier on the signal pads (ctx->pad). Collective: every rank of the world calls it
 * the same number of times. Bumps ctx->barrier_epoch, writes it (release) into slot[rank] of
 * every rank's pad, then waits (acquire) until every slot of its own pad has reached it. So every
 * write a rank made before the barrier is visible to every rank after it. On timeout returns
 * AGMM_ERR_TIMEOUT and records in ctx->err which rank never arrived, `what` naming the barrier
 * ("ag_matmul/ce opening barrier"); the ranks are then out of step and the world must not be
 * used for further collectives (plan destroys excepted). */
agmm_status agmm_cpu_barrier(agmm_ctx *ctx, const char *what);

/* ---- the copy engine (copy_engine.c) ---- */

typedef struct agmm_cpu_copy_engine agmm_cpu_copy_engine;

/* Starts the copy thread of a plan; `max_jobs` bounds the jobs queued at once. Not collective. */
agmm_status agmm_cpu_ce_create(agmm_ctx *ctx, int max_jobs, agmm_cpu_copy_engine **ce);
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

/* Chunk flags of a plan live one per 64-byte line: flag of chunk c at flags[c * stride]. */
#define AGMM_CPU_FLAG_STRIDE 16

/* Queues the copies of one all-gather run (ce and fused backends), in the order the schedule
 * visits the chunks: peers in rotated order (rank+1, rank+2, ...), each chunk of a peer's shard
 * (agmm_sched_chunk_rows) copied from plan->input->peer[src] into its rows of a_gathered and
 * raising flags[chunk * AGMM_CPU_FLAG_STRIDE] to plan->epoch; then the local shard into its rows,
 * raising no flag (nobody waits for it: local tiles read the shard itself). delay_us and done_ns,
 * if not NULL, are per-chunk arrays passed to the jobs (test hooks). The caller has passed the
 * barrier that makes every shard readable. */
agmm_status agmm_cpu_queue_gather(agmm_plan *plan, agmm_cpu_copy_engine *ce, uint16_t *a_gathered, uint32_t *flags,
                                  const int64_t *delay_us, int64_t *done_ns);

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

/* ---- test hooks of the fused backend (ag_matmul_fused.c) ---- */

/* Makes the copy of chunk `chunk` (src_rank * splits + split) sleep `delay_us` before copying, in
 * every later run of this plan (0 removes it). For tests that prove tiles wait for their chunk.
 * AGMM_ERR_INVALID_ARG if the plan is not a CPU fused ag_matmul or chunk is out of range. Not
 * collective; call it between runs. */
agmm_status agmm_cpu_fused_set_copy_delay(agmm_plan *plan, int chunk, int64_t delay_us);

/* What the last run of a fused plan saw for one chunk (monotonic ns, agmm_cpu_now_ns):
 * copy_done_ns when its copy finished (just before its flag was raised; 0 for the local chunks,
 * which are never waited for), first_tile_ns when the GEMM of its first tile started (after its
 * wait), last_tile_ns when the GEMM of its last tile ended, and the number of its tiles. */
typedef struct {
    int64_t copy_done_ns, first_tile_ns, last_tile_ns;
    int64_t tiles;
} agmm_cpu_chunk_times;

/* Fills *out for `chunk` after a run. Not collective. AGMM_ERR_INVALID_ARG as above. */
agmm_status agmm_cpu_fused_chunk_times(agmm_plan *plan, int chunk, agmm_cpu_chunk_times *out);

/* The tile shape the fused backend picks for a shape (its policy table). */
void agmm_cpu_fused_tile_shape(int64_t m, int64_t n, int splits, int *bm, int *bn, int *group_m);

#endif /* AGMM_CPU_CPU_H */
