/* The GEMM engine's epilogues (device code only): what a consumer does with a unit's
 * accumulators once its mainloop is done (consumer.cuh). An epilogue is a type the kernel is
 * instantiated with: made once per consumer thread with (params, the CTA's staging area, cw,
 * warp, lane), it has store(job, acc) per unit and finish() at the end, and says how much shared
 * memory it needs (smem_bytes, carved by kernel.cuh). A new way of storing (a TMA store from
 * shared memory, a store into a peer's buffer with a per-tile flag) is a new type here; the
 * mainloop and the ring never change for it (docs/gemm_engine.md).
 *
 * epi_store       bf16 to C through the warp's staging, as bulk tensor stores that drain under the
 *                 next unit's mainloop (below).
 * epi_split_tail  the split tail's and stream-K's fix-up (sk_fixup) first; only the piece that
 *                 completes a split tile stores it, as epi_store. */
#ifndef AGMM_KERNELS_GEMM_EPILOGUE_CUH
#define AGMM_KERNELS_GEMM_EPILOGUE_CUH

#include <stdint.h>

#include <cuda_bf16.h>

#include "kernels/gemm/config.cuh"
#include "kernels/gemm/params.h"
#include "kernels/gemm/ring.cuh"
#include "kernels/gemm/tile_sched.cuh"
#include "kernels/hopper_ptx.cuh"

#define EP_ROW_BYTES 144                  /* epi_scatter's padded staging rows: 64 bf16 + 16 B */
#define EP_WARP_BYTES (16 * EP_ROW_BYTES) /* one consumer warp's 16 padded rows */
#define EP_PIECE_BYTES 2048               /* one warp's 16 x 64 bf16 piece, 128B-swizzled */
/* A consumer's WN columns go through the staging rows in pieces of 64; the last is narrower where
 * WN is not a multiple of 64 (the wave-fitted widths, config.cuh): 16, 32 or 48 columns. */
#define EP_PIECES(wn) (((wn) + 63) / 64)
#define EP_PIECE_COLS(wn, ch) ((wn) - 64 * (ch) < 64 ? (wn) - 64 * (ch) : 64)
/* The dynamic shared memory a CTA may have on sm_90 (227 KB), less the kernel's static words. */
#define EP_SMEM_LIMIT (227 * 1024 - 128)

/* Byte offset of 16-byte chunk c (0..7) of row r in a 128B-swizzled piece: the layout C's tensor
 * map reads (its base 1024-aligned, kernel.cuh). */
__device__ __forceinline__ uint32_t ep_swz(int r, int c)
{
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

/* How many of a warp's P pieces per unit epi_store stages at once: all P where the ring leaves
 * room, else the fewest passes that fit, else one piece a pass (whether that fits, with a warp
 * store's padded rows, smem_layout's static_assert says). */
template <class Cfg>
constexpr int ep_buf_pieces(int pieces)
{
    const uint32_t at = (ring_layout<Cfg>::end + 1023u) & ~1023u;
    for (int passes = 1; passes < pieces; passes++) {
        const int buf = (pieces + passes - 1) / passes;
        if (at + 8u * (uint32_t)buf * EP_PIECE_BYTES + 1024u <= EP_SMEM_LIMIT)
            return buf;
    }
    return 1;
}

/* Each consumer warp converts its part of the unit to bf16, 16 rows x 64 columns (a piece) at a
 * time: wgmma's fragment gives this thread rows r, r+8 (r = lane/4 of the warp's 16) and columns
 * 8j + 2(lane%4), +1, written into 2 KB of staging (the 8 rows x 4 lanes of a store hit 32
 * distinct banks). Two ways on from there:
 *   bulk   the pieces in the 128B swizzle; lane 0 stores each with a bulk tensor store through
 *          C's map (cp.async.bulk.tensor, one box per piece; columns past N clipped by the map)
 *          and the warp goes on without waiting: the stores drain under the rest of the epilogue
 *          and the next unit's mainloop, where warp stores kept the tensor cores idle (~20 bytes
 *          per SM clock, 1.7 us per 128 x 256 tile: docs/results). A warp stages BUF pieces a pass
 *          (ep_buf_pieces: all of its pieces where the ring leaves room, e.g. 128 x 128/s6; two of
 *          128 x 256/s4's four; one of 128 x 192/s5's three), and a pass waits only until the
 *          pass before has been read (wait_group.read), never for writes.
 *   warp   the piece in rows padded to EP_ROW_BYTES, read back as 16-byte row pieces and stored
 *          so that each warp store covers 4 whole 128-byte lines of C (direct fragment stores
 *          covered 8 half sectors and cost 10-70% more kernel time), clipped to the tile; N tails
 *          and odd N element by element.
 * Bulk where it is right and measured faster (docs/results, eighteenth session: 1-2% on the
 * cooperative configs of 128 and 256 rows), per config: a consumer width in whole 64-column pieces
 * (a narrower last piece would write a neighbour's columns), cooperative consumers split by rows
 * (ping-pong hides its epilogue already: 128 x 128/pp ran 3% slower on large shapes with bulk
 * stores; the 64-row configs, split by columns, 1-3% slower), no stream-K (its consumers lost
 * registers to it: 256 x 192/stk spilled and ran 7-10% slower); and per unit and warp: N % 8 == 0
 * (c_tma: C's rows 16-byte aligned for TMA), and the warp's rows within the tile unless the tile
 * is C's last (a short tile's next rows belong to another chunk, whose tile may run at the same
 * time). */
template <class Cfg>
struct epi_store {
    static constexpr int EPP = EP_PIECES(Cfg::WN), PIECES = Cfg::MB * EPP;
    static constexpr bool BULK = Cfg::WN % 64 == 0 && !Cfg::PP && Cfg::WGN == 1 && Cfg::SK != 2;
    static constexpr int BUF = BULK ? ep_buf_pieces<Cfg>(PIECES) : 1;
    /* Bulk: BUF swizzled pieces, or the padded rows of a warp store where they are larger, in
     * whole 1024-byte swizzle atoms (every warp's pieces 1024-aligned). */
    static constexpr uint32_t WARP_BYTES =
        BULK ? (((BUF * EP_PIECE_BYTES > EP_WARP_BYTES ? BUF * EP_PIECE_BYTES : EP_WARP_BYTES) + 1023u) & ~1023u)
             : EP_WARP_BYTES;
    static constexpr uint32_t smem_bytes = 8 * WARP_BYTES; /* 1024-aligned (kernel.cuh) */
    const gemm_params &p;
    uint8_t *ep; /* this warp's staging: BUF pieces (bulk), or padded rows (warp stores) */
    int row_off, col_off, warp, lane;

    __device__ __forceinline__ epi_store(const gemm_params &params, uint8_t *area, int cw, int w, int l)
        : p(params), ep(area + (cw * 4 + w) * WARP_BYTES), row_off(cw * Cfg::CW_ROWS), col_off(cw * Cfg::CW_COLS),
          warp(w), lane(l)
    {
    }

    /* Piece ch of a 64-row block's accumulators into staging at `at`: in the 128B swizzle for a
     * bulk store (SWZ), else in rows padded to EP_ROW_BYTES (constant offsets, no swizzle
     * arithmetic: the registers of 256 x 192's 192 accumulators are tight). */
    template <bool SWZ>
    __device__ __forceinline__ void stage(uint8_t *at, const float (&a)[Cfg::WN / 2], int ch) const
    {
        const int width = EP_PIECE_COLS(Cfg::WN, ch); /* a constant once unrolled */
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int j = ch * 8 + jj, r = lane / 4 + 8 * h;
                if (jj * 8 >= width)
                    continue;
                __nv_bfloat162 v = __floats2bfloat162_rn(a[4 * j + 2 * h], a[4 * j + 2 * h + 1]);
                const uint32_t off = SWZ ? ep_swz(r, jj) : r * EP_ROW_BYTES + jj * 16;
                *(__nv_bfloat162 *)(at + off + (lane % 4) * 4) = v;
            }
        }
    }

    __device__ __forceinline__ void store(const tile_job &cur, float (&acc)[Cfg::MB][Cfg::WN / 2]) const
    {
        if constexpr (BULK) {
            const int last_row = row_off + (Cfg::MB - 1) * 64 + warp * 16 + 16; /* past this warp's rows */
            /* The same for every lane; as a vote, the compiler knows it (a plain condition cost the
             * consumers' K loop its uniform datapath: 8-12 more instructions per K block in SASS). */
            const int bulk = p.core.c_tma && (last_row <= cur.rows || cur.row0 + cur.rows == p.core.c_rows);
            if (__all_sync(0xffffffffu, bulk)) {
                store_bulk(cur, acc);
                return;
            }
            staging_free();
        }
        store_warp(cur, acc);
    }

    __device__ __forceinline__ void store_bulk(const tile_job &cur, float (&acc)[Cfg::MB][Cfg::WN / 2]) const
    {
        const uint32_t ep_s = smem_u32(ep);
#pragma unroll
        for (int q0 = 0; q0 < PIECES; q0 += BUF) {
            staging_free();
#pragma unroll
            for (int q = q0; q < q0 + BUF && q < PIECES; q++) {
                const int mb = q / EPP, ch = q % EPP, col_t = ch * 64;
                stage<true>(ep + (q - q0) * EP_PIECE_BYTES, acc[mb], ch);
                /* Every lane's writes, fenced, before lane 0's bulk store reads them. */
                fence_proxy_async_smem();
                __syncwarp();
                if (lane == 0 && col_t < cur.cols) /* a piece wholly past N has nothing to store */
                    tma_store_2d(ep_s + (q - q0) * EP_PIECE_BYTES, &p.core.map_c, (int)(cur.col0 + col_t),
                                 (int)(cur.row0 + row_off + mb * 64 + warp * 16));
            }
            if (lane == 0)
                bulk_commit();
        }
    }

    /* The staging is free once this warp's bulk stores have read it (lane 0 issued them) and every
     * lane has read its warp-store rows (the __syncwarp). */
    __device__ __forceinline__ void staging_free() const
    {
        if (lane == 0)
            bulk_wait<1>();
        __syncwarp();
    }

    __device__ __forceinline__ void store_warp(const tile_job &cur, float (&acc)[Cfg::MB][Cfg::WN / 2]) const
    {
        const int64_t n = p.core.n;
        const int vec_ok = (n & 7) == 0; /* 16-byte aligned row pieces */
#pragma unroll
        for (int mb = 0; mb < Cfg::MB; mb++) {
            const int row_w = row_off + mb * 64 + warp * 16;
            uint16_t *cbase = p.core.c + (cur.row0 + row_w) * n + cur.col0;
#pragma unroll
            for (int ch = 0; ch < EPP; ch++) {
                const int width = EP_PIECE_COLS(Cfg::WN, ch);
                stage<false>(ep, acc[mb], ch);
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
                            for (int e = 0; e < 8; e++)
                                if (tcol + e < cur.cols)
                                    dst[e] = (uint16_t)(w[e / 2] >> (16 * (e & 1)));
                        }
                    }
                }
                __syncwarp(); /* the staging is rewritten by the next piece */
            }
        }
    }

    /* The last bulk stores have read the staging before the CTA's shared memory goes away; their
     * writes complete with the grid, as every store's does (CUTLASS's TMA epilogue ends the same). */
    __device__ __forceinline__ void finish() const
    {
        if constexpr (BULK)
            staging_free();
    }
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
