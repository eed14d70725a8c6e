/* The GEMM engine's epilogues (device code only): what a consumer does with a unit's
 * accumulators once its mainloop is done (consumer.cuh). An epilogue is a type the kernel is
 * instantiated with: made once per consumer thread with (params, the CTA's staging area, cw,
 * warp, lane), it has store(job, acc) per unit and finish() at the end, and says how much shared
 * memory it needs (smem_bytes, carved by kernel.cuh). A new way of storing (a TMA store from
 * shared memory, a store into a peer's buffer with a per-tile flag) is a new type here; the
 * mainloop and the ring never change for it (docs/gemm_engine.md).
 *
 * epi_store       bf16 to C, 64 columns at a time through the warp's staging rows (below).
 * epi_split_tail  the split tail's and stream-K's fix-up (sk_fixup) first; only the piece that
 *                 completes a split tile stores it, as epi_store. */
#ifndef AGMM_KERNELS_GEMM_EPILOGUE_CUH
#define AGMM_KERNELS_GEMM_EPILOGUE_CUH

#include <stdint.h>

#include <cuda_bf16.h>

#include "kernels/gemm/config.cuh"
#include "kernels/gemm/params.h"
#include "kernels/gemm/tile_sched.cuh"

#define EP_ROW_BYTES 144                  /* 64 bf16 + 16 B of padding */
#define EP_WARP_BYTES (16 * EP_ROW_BYTES) /* one consumer warp's 16 rows */
/* A consumer's WN columns go through the staging rows in pieces of 64; the last is narrower where
 * WN is not a multiple of 64 (the wave-fitted widths, config.cuh): 16, 32 or 48 columns. */
#define EP_PIECES(wn) (((wn) + 63) / 64)
#define EP_PIECE_COLS(wn, ch) ((wn) - 64 * (ch) < 64 ? (wn) - 64 * (ch) : 64)

/* Each consumer warp converts its 16 x 64 piece to bf16 into its staging rows: wgmma's fragment
 * gives this thread rows r, r+8 (r = lane/4 of the warp's 16) and columns 8j + 2(lane%4), +1;
 * written to smem (row stride 144 B: the 8 rows x 4 lanes of a store hit 32 distinct banks), read
 * back as 16-byte row pieces and stored so that each warp store covers 4 whole 128-byte lines of C
 * (direct fragment stores covered 8 half sectors, and cost 10-70% more kernel time). Clipped to
 * the tile: a short tile's next rows belong to another chunk, whose tile may run at the same time.
 * N tails and odd N fall back to scalar stores. A width that is not a multiple of 64 ends in a
 * narrower piece (EP_PIECE_COLS): its staging rows are only partly written and read. */
template <class Cfg>
struct epi_store {
    static constexpr uint32_t smem_bytes = 8 * EP_WARP_BYTES;
    const gemm_params &p;
    uint8_t *ep; /* this warp's staging rows */
    int row_off, col_off, warp, lane;

    __device__ __forceinline__ epi_store(const gemm_params &params, uint8_t *area, int cw, int w, int l)
        : p(params), ep(area + (cw * 4 + w) * EP_WARP_BYTES), row_off(cw * Cfg::CW_ROWS), col_off(cw * Cfg::CW_COLS),
          warp(w), lane(l)
    {
    }

    __device__ __forceinline__ void store(const tile_job &cur, float (&acc)[Cfg::MB][Cfg::WN / 2]) const
    {
        const int64_t n = p.core.n;
        const int vec_ok = (n & 7) == 0; /* 16-byte aligned row pieces */
#pragma unroll
        for (int mb = 0; mb < Cfg::MB; mb++) {
            const int row_w = row_off + mb * 64 + warp * 16;
            uint16_t *cbase = p.core.c + (cur.row0 + row_w) * n + cur.col0;
#pragma unroll
            for (int ch = 0; ch < EP_PIECES(Cfg::WN); ch++) {
                const int width = EP_PIECE_COLS(Cfg::WN, ch); /* a constant once unrolled */
#pragma unroll
                for (int jj = 0; jj < 8; jj++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int j = ch * 8 + jj;
                        if (jj * 8 >= width)
                            continue;
                        __nv_bfloat162 v = __floats2bfloat162_rn(acc[mb][4 * j + 2 * h], acc[mb][4 * j + 2 * h + 1]);
                        *(__nv_bfloat162 *)(ep + (lane / 4 + 8 * h) * EP_ROW_BYTES + (jj * 8 + (lane % 4) * 2) * 2) = v;
                    }
                }
                __syncwarp();
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int r = lane / 8 + 4 * i, c = (lane % 8) * 8;
                    const uint4 v = *(const uint4 *)(ep + r * EP_ROW_BYTES + c * 2);
                    const int tcol = col_off + ch * 64 + c;
                    if (c < width && row_w + r < cur.rows && tcol < cur.cols) {
                        uint16_t *dst = cbase + (int64_t)r * n + tcol;
                        if (vec_ok && tcol + 8 <= cur.cols) {
                            *(uint4 *)dst = v;
                        } else {
                            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                            for (int q = 0; q < 8; q++)
                                if (tcol + q < cur.cols)
                                    dst[q] = (uint16_t)(w[q / 2] >> (16 * (q & 1)));
                        }
                    }
                }
                __syncwarp(); /* the staging rows are rewritten by the next 64 columns */
            }
        }
    }

    __device__ __forceinline__ void finish() const {}
};

/* Split-tail and stream-K fix-up of one consumer warp's part (slot = consumer * 4 + warp) of a
 * tile cut into j.pieces pieces: every piece stores its fp32 accumulators to the workspace, then
 * counts itself in; the piece that counts last sums all pieces in piece order (so the result does
 * not depend on which piece finished last) into acc and returns 1: it stores the rows. The others
 * return 0. Nobody waits for another CTA, so residency never matters. Workspace: [index][slot]
 * [NACC/4][32 lanes] float4s, the tile's pieces at indexes j.ws0 + piece (the split tail's
 * sk * split + piece; stream-K's, stream_k.h); counter: one per (sk, slot), zero between runs (the
 * last piece resets it; nobody touches it again in this run). A plan's runs share the workspace:
 * they must not overlap (one stream). */
template <int NACC>
__device__ __forceinline__ int sk_fixup(const gemm_core &p, const tile_job &j, int slot, int lane, float (&acc)[NACC])
{
    constexpr size_t PART = (size_t)NACC * 32; /* floats of one warp's part */
    float *tile_ws = p.sk_ws + (size_t)j.ws0 * 8 * PART + (size_t)slot * PART;
    float4 *mine = (float4 *)(tile_ws + (size_t)j.piece * 8 * PART);
#pragma unroll
    for (int i = 0; i < NACC / 4; i++)
        mine[i * 32 + lane] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
    /* Release: every lane's partials are visible GPU-wide before lane 0's count says so. */
    __threadfence();
    __syncwarp();
    uint32_t last = 0;
    if (lane == 0) {
        uint32_t *ctr = p.sk_ctr + (size_t)j.sk * 8 + slot;
        last = atomicAdd(ctr, 1u) == (uint32_t)j.pieces - 1;
        if (last)
            *ctr = 0;
        /* Acquire: the other pieces' partials (fenced before their counts) before our reads. */
        __threadfence();
    }
    last = __shfl_sync(0xffffffffu, last, 0);
    __syncwarp();
    if (!last)
        return 0;
    for (int q = 0; q < j.pieces; q++) {
        const float4 *src = (const float4 *)(tile_ws + (size_t)q * 8 * PART);
#pragma unroll
        for (int i = 0; i < NACC / 4; i++) {
            const float4 v = __ldcg(src + i * 32 + lane); /* L2: written by other SMs */
            acc[4 * i] = (q ? acc[4 * i] : 0.0f) + v.x;
            acc[4 * i + 1] = (q ? acc[4 * i + 1] : 0.0f) + v.y;
            acc[4 * i + 2] = (q ? acc[4 * i + 2] : 0.0f) + v.z;
            acc[4 * i + 3] = (q ? acc[4 * i + 3] : 0.0f) + v.w;
        }
    }
    return 1;
}

template <class Cfg>
struct epi_split_tail {
    static constexpr uint32_t smem_bytes = epi_store<Cfg>::smem_bytes;
    epi_store<Cfg> out;
    int slot;

    __device__ __forceinline__ epi_split_tail(const gemm_params &params, uint8_t *area, int cw, int w, int l)
        : out(params, area, cw, w, l), slot(cw * 4 + w)
    {
    }

    __device__ __forceinline__ void store(const tile_job &cur, float (&acc)[Cfg::MB][Cfg::WN / 2]) const
    {
        /* A stream-K segment that is a whole tile (pieces = 1) stores it as it is. */
        if (cur.sk >= 0 && (Cfg::SK == 1 || cur.pieces > 1) &&
            !sk_fixup<Cfg::NACC>(out.p.core, cur, slot, out.lane, reinterpret_cast<float(&)[Cfg::NACC]>(acc)))
            return; /* another piece of this tile stores it */
        out.store(cur, acc);
    }

    __device__ __forceinline__ void finish() const { out.finish(); }
};

#endif /* AGMM_KERNELS_GEMM_EPILOGUE_CUH */
