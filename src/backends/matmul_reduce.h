/* What the backends of the row-parallel matmuls share (internal): matmul_reduce_scatter_*.c and
 * matmul_all_reduce_*.c. docs/matmul_reduce.md has their protocols.
 *
 * Every backend computes this rank's partial P_r = A_r * B_r (fp32 accumulation, rounded to bf16)
 * and then sums partials in fp32 in rank order 0..W-1 (agmm.h). What they share:
 *
 *   shape   m, n, k, b_layout of either descriptor, with W, this rank, and R = ceil(M/W) rows per
 *           block (core/row_split.h: block q = rows [q*R, (q+1)*R) clipped to M, rank q's rows of
 *           a reduce-scatter).
 *   slots   a buffer of W slots of `slot_bytes` = R*N*2 rounded up to 16 bytes, slot q holding
 *           rows of block q (rows(q) x N bf16, row-major), each slot 16-byte aligned so that the
 *           sum kernels load 16-byte vectors. Where R*N*2 is a multiple of 16 the slots are
 *           back to back and the buffer is the M x N partial itself (plus zero rows up to W*R):
 *           one GEMM of M rows fills it. reduce-scatter backends hold the partials per block in
 *           such buffers: one_shot its own partial (peers pull slot q of it), ce the blocks it
 *           receives (slot p: rank p's partial of my rows).
 *   GEMMs   the CPU world's GEMM (src/cpu: every backend bit for bit the same partial), or on
 *           GPUs cuBLASLt plans for the whole M rows and for blocks (matmul_reduce_gpu.h).
 *   sums    the CPU world's rank-ordered sum (all_reduce_cpu.h) over slots or partials. */
#ifndef AGMM_BACKENDS_MATMUL_REDUCE_H
#define AGMM_BACKENDS_MATMUL_REDUCE_H

#include <stdint.h>

#include "backend.h"
#include "../core/row_split.h"
#include "../cpu/cpu.h"

typedef struct {
    int64_t m, n, k;
    agmm_layout layout;
    int nranks, rank;
    int64_t block_rows;   /* R = ceil(m / W) */
    size_t slot_bytes;    /* R*N*2 rounded up to 16 */
} agmm_mr_shape;

/* The plan's shape (either operation). */
agmm_mr_shape agmm_mr_shape_of(const agmm_plan *plan);
/* Rows of block q, and its first row in *row0 (if not NULL). */
static inline int64_t agmm_mr_block(const agmm_mr_shape *s, int q, int64_t *row0)
{
    return agmm_split_rows(s->m, s->nranks, q, row0);
}
/* 1 when the W slots are the M x N partial itself (R*N*2 a multiple of 16). */
static inline int agmm_mr_slots_contiguous(const agmm_mr_shape *s)
{
    return s->slot_bytes == (size_t)(s->block_rows * s->n) * 2;
}

/* A run's operands, either operation: out is this rank's rows (reduce-scatter) or all of S. */
typedef struct {
    const uint16_t *a, *b;
    uint16_t *out;
} agmm_mr_io;
agmm_mr_io agmm_mr_io_of(const agmm_plan *plan, const void *io);

/* ---- CPU world (matmul_reduce_cpu.c) ---- */

/* rows x N of the partial, from A_r's rows [row0, row0 + rows), into dst (row-major, ld = N). */
void agmm_mr_cpu_gemm(agmm_cpu_gemm_ws *ws, const agmm_mr_shape *s, const agmm_mr_io *io, int64_t row0, int64_t rows,
                      uint16_t *dst);
/* The whole partial into the W slots at base (slot q: block q). */
void agmm_mr_cpu_gemm_slots(agmm_cpu_gemm_ws *ws, const agmm_mr_shape *s, const agmm_mr_io *io, void *base);

/* The pull protocol both reduce-scatter `one_shot` and the CPU world's `nccl` stand-in run, with
 * the plan's symmetric slots `sym` (state of agmm_mr_cpu_pull_create):
 *   GEMM            my partial into my slots (slot q: the rows rank q gets)
 *   barrier 1       every rank's partial is written
 *   sum             out = sum over p of slot `rank` of rank p's buffer, in rank order
 *   barrier 2       nobody reads my slots any more: my next run's GEMM may overwrite them
 * And the matmul_all_reduce version (`one_shot`, `nccl` stand-in): the same with one slot of the
 * whole M x N partial, every rank summing all of it. */
typedef struct {
    agmm_cpu_gemm_ws ws;
    agmm_symm_buf *sym;
} agmm_mr_cpu_pull;
agmm_status agmm_mr_cpu_pull_create(agmm_plan *plan);
void agmm_mr_cpu_pull_destroy(agmm_plan *plan);
void agmm_mr_cpu_pull_mem_need(const agmm_plan *plan, agmm_mem_need *need);
agmm_status agmm_mr_cpu_pull_run(agmm_plan *plan, const void *io, const char *what);

/* The symmetric bytes the pull protocol needs: W slots (reduce-scatter) or the M x N partial
 * rounded up to 16 bytes (all-reduce). */
uint64_t agmm_mr_sym_bytes(const agmm_plan *plan);

#endif
