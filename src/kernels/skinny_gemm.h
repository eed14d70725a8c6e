/* The skinny GEMM: C (m x n, row-major bf16) = A (m x k, row-major bf16) * B, where B is column-
 * major (B^T is n x k contiguous: nn.Linear's weight), fp32 accumulation, for m <= 64 rows: the
 * token counts of decode, where a GEMM is a stream over B and the GEMM engine's 128-row tiles
 * load 16 KB of mostly zero-filled A per 8 KB of B (docs/gemm_engine.md, "Decode: the skinny
 * kernel beside the engine").
 *
 * Plain C header: the plan (agmm_skinny_plan, skinny_plan.c) and the lane map below are tested on
 * the CPU (tests/test_skinny.c); the kernel and its launcher are in skinny_gemm.cu.
 *
 * The kernel. A CTA has nb * ks warps: warp w owns the 8 columns of n8 block blockIdx.x * nb +
 * w % nb and every ks-th 32-wide K chunk from w / nb. In a chunk, a lane loads 16 bytes of one
 * column of B (8 consecutive k, straight from memory into registers: nothing goes through shared
 * memory) and the same 8 k of its rows of A, and feeds them to two mma.m16n8k16 per 16-row tile of
 * A (mt tiles cover m). The mma's fragments expect k in another order than the loads deliver; both
 * operands take the same permutation of k (agmm_skinny_operands), so the dot product is the same
 * sum. The ks warps of an n8 block then add their accumulators in warp order through shared memory
 * and the first stores bf16 pairs: no atomics and no workspace, so every run gives the same bits.
 * Enough bytes in flight to stream B at HBM speed come from the loads of U chunks issued before
 * their mmas, in 2 CTAs of up to 16 warps per SM. */
#ifndef AGMM_KERNELS_SKINNY_GEMM_H
#define AGMM_KERNELS_SKINNY_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"
#include "../core/hd.h"

#define AGMM_SKINNY_MAX_ROWS 64    /* m: four 16-row tiles */
#define AGMM_SKINNY_WARPS 16       /* nb * ks, at most */
#define AGMM_SKINNY_CHUNK 32       /* k per chunk */

typedef struct {
    int mt;      /* 16-row tiles of A: 1, 2 or 4 */
    int nb;      /* n8 blocks per CTA */
    int ks;      /* warps that share an n8 block's K */
    int grid;    /* CTAs: ceil(ceil(n / 8) / nb) */
    int threads; /* 32 * nb * ks */
    int smem;    /* bytes of the warps' sum: (ks - 1) * nb * mt * 4 * 32 floats */
} agmm_skinny_shape;

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel's shape for C (m x n) = A (m x k) * B (k x n, b_layout) on a GPU of `sms` SMs, where
 * it applies: m in 1..64, n even (C is stored in pairs), k a positive multiple of 8, B column-
 * major, and A and C pointers 16-byte aligned (align, as gemm_lt.h's align_bytes). Returns 0 and
 * fills *out; else -1 with the reason in why. */
int agmm_skinny_plan(int64_t m, int64_t n, int64_t k, agmm_layout b_layout, unsigned align, int sms,
                     agmm_skinny_shape *out, char *why, size_t why_len);

#ifdef AGMM_HAVE_CUDA
#include <cuda_runtime_api.h>
/* Enqueues C = A * B with a shape from agmm_skinny_plan for the same m, n, k. */
cudaError_t agmm_skinny_launch(const agmm_skinny_shape *sh, const void *a, const void *b, void *c, int64_t m,
                               int64_t n, int64_t k, cudaStream_t stream);
#endif

#ifdef __cplusplus
}
#endif

/* ---- a lane's part of a chunk (lane 0..31), as the kernel loads and stores it ---- */

/* The 8 consecutive k of the chunk the lane loads, from this offset. */
AGMM_HD int agmm_skinny_lane_k(int lane) { return 8 * (lane & 3); }
/* The column of its n8 block whose B it loads, and the row of each 16-row tile whose A it loads
 * (with row + 8) and whose C it stores (with row + 8). */
AGMM_HD int agmm_skinny_lane_row(int lane) { return lane >> 2; }
AGMM_HD int agmm_skinny_lane_col(int lane) { return lane >> 2; }
/* The first of the two adjacent columns of C it stores. */
AGMM_HD int agmm_skinny_lane_out_col(int lane) { return 2 * (lane & 3); }

/* The mma operands of step s (0 or 1) of a chunk, from the lane's three 16-byte pieces as words of
 * two bf16 (the lower k in the low half): lo of its row, hi of row + 8, b of its column. Step s
 * takes words 2s and 2s + 1 of each. For the lane with l % 4 = t, the fragment's k = 2t + j is
 * loaded k 8t + 4s + j and k = 2t + 8 + j is loaded k 8t + 4s + 2 + j (j = 0, 1): the same
 * bijection for A's rows and B's columns, and steps 0 and 1 cover the chunk's 32 k once. */
AGMM_HD void agmm_skinny_operands(const uint32_t lo[4], const uint32_t hi[4], const uint32_t b[4], int s,
                                  uint32_t a_reg[4], uint32_t b_reg[2])
{
    a_reg[0] = lo[2 * s];     /* fragment (row, k 2t, 2t+1) */
    a_reg[1] = hi[2 * s];     /* (row + 8, k 2t, 2t+1) */
    a_reg[2] = lo[2 * s + 1]; /* (row, k 2t+8, 2t+9) */
    a_reg[3] = hi[2 * s + 1]; /* (row + 8, k 2t+8, 2t+9) */
    b_reg[0] = b[2 * s];      /* (k 2t, 2t+1; column) */
    b_reg[1] = b[2 * s + 1];  /* (k 2t+8, 2t+9; column) */
}

#endif
