/* all_reduce_rmsnorm kernels (all_reduce_rmsnorm.h has the contract, the rows of a block and the
 * grid; core/rmsnorm.h the epilogue's fp32 order). No NVLink multicast: plain loads and stores
 * through peer pointers, flags on the signal pad of pad_barrier.cuh.
 *
 * arn_norm_kernel       grid = args.grid, block = 256, smem = 8 floats. The epilogue alone, on the
 *                       sum an ncclAllReduce left (`nccl`). No waits.
 * arn_one_shot_kernel   grid = args.grid, block = 256, smem = W pointers + 8 floats.
 *   1. opening barrier (2e-1): every rank's input is complete before anyone loads it.
 *   2. for each row of the block: every thread loads its vectors of the row from all W inputs
 *      (16-byte .cg loads, up to 8 peers in flight), sums them in fp32 in rank order and runs the
 *      epilogue on the sums in registers; r' and y go straight to this rank's outputs, which never
 *      overlap the input, so nothing waits for the closing barrier.
 *   3. closing barrier (2e): no rank returns, so no caller rewrites an input, while a peer's block
 *      still loads from it.
 * arn_two_shot_kernel   same grid and block, smem = 2W pointers + 8 floats.
 *   1. opening barrier (2e-1): inputs complete; also, every peer's block b has finished run e-1
 *      (it arrives here only from a new launch), so nobody still pulls this block's rows of res.
 *   2. reduce-scatter by loads, epilogue included: rank r's block b takes rows lo(r) + b + k*grid,
 *      sums each from all W inputs and normalises it; y and r' go to this rank's outputs and to
 *      its result buffer res[r] (y rows, then r' rows, at the row's own index).
 *   3. middle barrier (2e): block b of every rank has its rows in its res, and has finished reading
 *      every input (its step 2).
 *   4. all-gather by loads: for every q != r, starting with r+1 so ranks spread their reads, rank
 *      r's block b pulls rows lo(q) + b + k*grid of y and r' from res[q]: exactly the rows block b
 *      of rank q wrote, so the per-block barrier covers them.
 *   No closing barrier: after step 3 no peer reads this rank's input again in this run, and res
 *   is next written after the next run's opening barrier, which block b of rank q passes only when
 *   block b of every rank has left this run's step 4.
 *
 * Flags: one uint32 per (block, source rank) in each rank's pad, written by the source block with
 * st.release.sys, waited on by the owner block with relaxed polling and a final ld.acquire.sys,
 * never reset (values only grow with the epoch). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "all_reduce_rmsnorm.h"
#include "core/rmsnorm.h"
#include "dev_error.h"
#include "pad_barrier.cuh"

namespace {

constexpr int kLanes = AGMM_ARN_THREADS;
constexpr int kWarps = kLanes / 32;
/* Vectors a thread keeps in registers between the sum and y: rows of H <= 8 * 256 * 4 = 8192.
 * Longer rows re-read their r' from residual_out (the thread's own stores: program order). */
constexpr int kHeld = 4;
/* Peers' vectors loaded before their sum starts: loads in flight. */
constexpr int kBatch = 8;

static_assert(kLanes == AGMM_RMSNORM_LANES && AGMM_RMSNORM_WARP == 32 && AGMM_RMSNORM_VEC == 8,
              "the kernels' row layout is core/rmsnorm.h's order");

__device__ __forceinline__ void unpack(uint4 v, float f[8])
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint4 pack(const float f[8])
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i]));
        const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1]));
        w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* acc = the fp32 sum of vector idx over the nsrc sources, in source order (ranks 0..W-1). Up to
 * kBatch loads are issued before the first add so that they are in flight together; .cg (L2, not
 * L1): peer data is read once and must never come from a stale L1 line. */
__device__ __forceinline__ void sum_sources(const uint4 *const *src, int nsrc, int64_t idx, float acc[8])
{
    for (int p0 = 0; p0 < nsrc; p0 += kBatch) {
        uint4 x[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; j++)
            x[j] = p0 + j < nsrc ? __ldcg(src[p0 + j] + idx) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < kBatch; j++) {
            if (p0 + j < nsrc) {
                float f[8];
                unpack(x[j], f);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc[e] = p0 + j == 0 ? f[e] : __fadd_rn(acc[e], f[e]);
            }
        }
    }
}

/* Vector v of row t: r' = bf16(acc + bias + residual) (core/rmsnorm.h step 1), its squares added
 * to this thread's partial ss (steps 2a, 2b). */
__device__ __forceinline__ uint4 make_r(const agmm_arn_args &a, int64_t t, int64_t v, int64_t nv, float acc[8],
                                        float &ss)
{
    float f[8];
    if (a.bias) {
        unpack(__ldg(static_cast<const uint4 *>(a.bias) + v), f);
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[e] = __fadd_rn(acc[e], f[e]);
    }
    if (a.residual) {
        /* A plain load: residual may be residual_out, which this kernel writes. */
        unpack(static_cast<const uint4 *>(a.residual)[t * nv + v], f);
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[e] = __fadd_rn(acc[e], f[e]);
    }
    const uint4 r = pack(acc);
    unpack(r, f);
    float p = __fmul_rn(f[0], f[0]);
#pragma unroll
    for (int e = 1; e < 8; e++)
        p = __fadd_rn(p, __fmul_rn(f[e], f[e]));
    ss = __fadd_rn(ss, p);
    return r;
}

/* y of one vector (step 4): bf16((r' * rstd) * gamma). */
__device__ __forceinline__ uint4 make_y(uint4 r, float rstd, uint4 g)
{
    float f[8], w[8];
    unpack(r, f);
    unpack(g, w);
#pragma unroll
    for (int e = 0; e < 8; e++)
        f[e] = __fmul_rn(__fmul_rn(f[e], rstd), w[e]);
    return pack(f);
}

/* One row t, by the whole block (every thread calls it for the same rows): sums from the sources,
 * the epilogue, r' and y to this rank's outputs and, where res_y/res_r are given (two_shot), to
 * those rows of its result buffer too. s_warp: the block's kWarps floats. */
__device__ __forceinline__ void norm_row(const agmm_arn_args &a, const uint4 *const *src, int nsrc, int64_t t,
                                         uint4 *res_y, uint4 *res_r, float *s_warp)
{
    const int64_t nv = a.hidden / 8;
    const int j = threadIdx.x;
    uint4 *y = static_cast<uint4 *>(a.y) + t * nv, *r_out = static_cast<uint4 *>(a.residual_out) + t * nv;
    const uint4 *gamma = static_cast<const uint4 *>(a.gamma);
    float ss = 0.0f;
    uint4 held[kHeld] = {};
#pragma unroll
    for (int k = 0; k < kHeld; k++) {
        const int64_t v = j + (int64_t)k * kLanes;
        if (v < nv) {
            float acc[8];
            sum_sources(src, nsrc, t * nv + v, acc);
            held[k] = make_r(a, t, v, nv, acc, ss);
            r_out[v] = held[k];
            if (res_r)
                res_r[v] = held[k];
        }
    }
    for (int64_t v = j + (int64_t)kHeld * kLanes; v < nv; v += kLanes) {
        float acc[8];
        sum_sources(src, nsrc, t * nv + v, acc);
        const uint4 r = make_r(a, t, v, nv, acc, ss);
        r_out[v] = r;
        if (res_r)
            res_r[v] = r;
    }
    /* Steps 2c and 2d: the warp's butterfly (lane i adds lane i^m's value: the same bits in both
     * lanes), then the warps' totals in order. */
    float w = ss;
#pragma unroll
    for (int m = 16; m >= 1; m /= 2)
        w = __fadd_rn(w, __shfl_xor_sync(0xffffffffu, w, m));
    if ((j & 31) == 0)
        s_warp[j >> 5] = w;
    __syncthreads();
    float total = s_warp[0];
#pragma unroll
    for (int i = 1; i < kWarps; i++)
        total = __fadd_rn(total, s_warp[i]);
    __syncthreads(); /* every thread has read s_warp before the next row overwrites it */
    const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)a.hidden), a.eps)));
#pragma unroll
    for (int k = 0; k < kHeld; k++) {
        const int64_t v = j + (int64_t)k * kLanes;
        if (v < nv) {
            const uint4 out = make_y(held[k], rstd, __ldg(gamma + v));
            y[v] = out;
            if (res_y)
                res_y[v] = out;
        }
    }
    for (int64_t v = j + (int64_t)kHeld * kLanes; v < nv; v += kLanes) {
        const uint4 out = make_y(r_out[v], rstd, __ldg(gamma + v));
        y[v] = out;
        if (res_y)
            res_y[v] = out;
    }
}

__device__ __forceinline__ agmm_pad_sync pad_sync(const agmm_arn_args &a)
{
    return agmm_pad_sync{a.pad, a.rank, a.nranks, a.err, a.timeout_ns};
}

__global__ void __launch_bounds__(kLanes) arn_norm_kernel(const agmm_arn_args a)
{
    __shared__ float s_warp[kWarps];
    const uint4 *sum[1] = {static_cast<const uint4 *>(a.sum)};
    for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x)
        norm_row(a, sum, 1, t, nullptr, nullptr, s_warp);
}

/* W = 1: no peer, so no barrier, no epoch and no pad (a.pad is NULL): stream order alone makes
 * the input complete and keeps the caller from rewriting it while it is read. */
__global__ void __launch_bounds__(kLanes, 1) arn_one_shot_kernel(const agmm_arn_args a)
{
    const agmm_pad_sync sync = pad_sync(a);
    const bool peers = a.nranks > 1;
    const uint32_t e = peers ? agmm_pad_run_epoch(sync) : 0u;
    __shared__ const uint4 *s_in[AGMM_MAX_RANKS];
    __shared__ float s_warp[kWarps];
    for (int p = threadIdx.x; p < a.nranks; p += kLanes)
        s_in[p] = reinterpret_cast<const uint4 *>(static_cast<const unsigned char *>(a.in[p]) + a.in_offset);
    /* Opening barrier (its __syncthreads also publishes s_in to the block). Inputs were written by
     * earlier work on each rank's stream, complete before that rank's kernel started. */
    if (peers && !agmm_pad_barrier(sync, e, 2u * e - 1u))
        return;
    if (!peers)
        __syncthreads();
    for (int64_t t = blockIdx.x; t < a.tokens; t += a.grid)
        norm_row(a, s_in, a.nranks, t, nullptr, nullptr, s_warp);
    /* Closing barrier: no rank returns while a peer's block may still load its input. */
    if (peers)
        (void)agmm_pad_barrier(sync, e, 2u * e);
}

/* W = 1: as one_shot (no barrier, no pad), and nothing goes to res: no peer reads it. */
__global__ void __launch_bounds__(kLanes, 1) arn_two_shot_kernel(const agmm_arn_args a)
{
    const agmm_pad_sync sync = pad_sync(a);
    const bool peers = a.nranks > 1;
    const uint32_t e = peers ? agmm_pad_run_epoch(sync) : 0u;
    __shared__ const uint4 *s_in[AGMM_MAX_RANKS];
    __shared__ const uint4 *s_res[AGMM_MAX_RANKS];
    __shared__ float s_warp[kWarps];
    const int W = a.nranks, r = a.rank;
    const int64_t T = a.tokens, nv = a.hidden / 8;
    for (int p = threadIdx.x; p < W; p += kLanes) {
        s_in[p] = reinterpret_cast<const uint4 *>(static_cast<const unsigned char *>(a.in[p]) + a.in_offset);
        s_res[p] = peers ? static_cast<const uint4 *>(a.res[p]) : nullptr;
    }
    /* Opening barrier: inputs complete everywhere, and every peer's block b is past run e-1's
     * all-gather (no pull of this block's rows of our res is pending) before we overwrite them. */
    if (peers && !agmm_pad_barrier(sync, e, 2u * e - 1u))
        return;
    if (!peers) {
        __syncthreads(); /* s_in to the block */
        for (int64_t t = blockIdx.x; t < T; t += a.grid)
            norm_row(a, s_in, 1, t, nullptr, nullptr, s_warp);
        return;
    }

    /* Reduce-scatter with the epilogue: our rows of this block. */
    uint4 *res_y = const_cast<uint4 *>(s_res[r]), *res_r = res_y + T * nv;
    for (int64_t t = T * r / W + blockIdx.x; t < T * (r + 1) / W; t += a.grid)
        norm_row(a, s_in, W, t, res_y + t * nv, res_r + t * nv, s_warp);
    /* Middle barrier: releases our rows in res (and the end of our input reads) to every peer;
     * acquires theirs. */
    if (!agmm_pad_barrier(sync, e, 2u * e))
        return;

    /* All-gather: the rows block b of every other rank finished, from its res. */
    uint4 *y = static_cast<uint4 *>(a.y), *r_out = static_cast<uint4 *>(a.residual_out);
    for (int jq = 1; jq < W; jq++) {
        const int q = r + jq < W ? r + jq : r + jq - W;
        const uint4 *peer_y = s_res[q], *peer_r = peer_y + T * nv;
        for (int64_t t = T * q / W + blockIdx.x; t < T * (q + 1) / W; t += a.grid) {
#pragma unroll 4
            for (int64_t v = threadIdx.x; v < nv; v += kLanes) {
                const int64_t i = t * nv + v;
                const uint4 yv = __ldcg(peer_y + i), rv = __ldcg(peer_r + i);
                y[i] = yv;
                r_out[i] = rv;
            }
        }
    }
}

} /* namespace */

extern "C" cudaError_t agmm_arn_norm_launch(const agmm_arn_args *args, cudaStream_t stream)
{
    arn_norm_kernel<<<args->grid, kLanes, 0, stream>>>(*args);
    return cudaGetLastError();
}

extern "C" cudaError_t agmm_arn_one_shot_launch(const agmm_arn_args *args, cudaStream_t stream)
{
    arn_one_shot_kernel<<<args->grid, kLanes, 0, stream>>>(*args);
    return cudaGetLastError();
}

extern "C" cudaError_t agmm_arn_two_shot_launch(const agmm_arn_args *args, cudaStream_t stream)
{
    arn_two_shot_kernel<<<args->grid, kLanes, 0, stream>>>(*args);
    return cudaGetLastError();
}
