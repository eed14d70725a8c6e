/* Symmetric-memory all-reduce: one_shot and two_shot (all_reduce.h has the contract, the
 * partition and the signal-pad protocol). No NVLink multicast: plain loads and stores through
 * peer pointers only.
 *
 * all_reduce_one_shot_kernel   grid = args.grid, block = AGMM_AR_THREADS, static smem = W pointers.
 *   1. opening barrier (value 2e-1): every rank's input is complete before anyone loads it.
 *   2. every thread loads its vectors from all W inputs (16-byte loads, up to 8 peers in flight),
 *      sums in fp32 in rank order and keeps or stores the result (see "stage" below).
 *   3. closing barrier (value 2e): no rank returns, so no caller rewrites an input, while a peer's
 *      block still reads it. In place, the sum may overwrite this rank's input only now.
 *   stage NONE (out of place): sums go straight to out, before the closing barrier.
 *   stage REGS (in place, <= AGMM_AR_REG_VECS vectors per thread): sums wait in registers.
 *   stage SCRATCH (in place, larger): sums go to local scratch, copied to out after the barrier
 *   by the thread that wrote them (program order is enough there).
 *
 * all_reduce_two_shot_kernel   same grid and block, smem = 2W pointers + W+1 slice bounds.
 *   1. opening barrier (2e-1): inputs complete; also, every peer finished run e-1 (its blocks
 *      arrive here only from a new launch), so nobody still pulls this rank's result buffer.
 *   2. reduce-scatter by loads: rank r sums its slice r from all W inputs and stores it to its own
 *      result buffer res[r] and to out. Slice r of any input is read by rank r alone, so writing
 *      out[slice r] in place is safe at once (the same thread read those elements).
 *   3. middle barrier (2e): every slice is in its owner's res, and every peer has finished
 *      reading this rank's input (its step 2).
 *   4. all-gather by loads: pull slice q from res[q] for every q != r into out. In place this
 *      overwrites input slice q, which only rank q read, before the middle barrier.
 *   No closing barrier: after step 3 no peer reads this rank's input again in this run, and res
 *   is next written after the next run's opening barrier.
 *
 * Flags: one uint32 per (block, source rank) in each rank's pad, written by the source block with
 * st.release.sys, waited on by the owner block with relaxed polling and a final ld.acquire.sys,
 * never reset (values only grow with the epoch). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "all_reduce.h"
#include "bounded_wait.cuh"
#include "dev_error.h"
#include "pad_barrier.cuh"

namespace {

constexpr int kThreads = AGMM_AR_THREADS;
constexpr int kBatch = 8;  /* peer vectors loaded before their sum starts: loads in flight */
constexpr int kRegVecs = AGMM_AR_REG_VECS;

/* Per-dtype lane handling of a 16-byte vector; the accumulator is always fp32. */
template <typename T> struct lanes;

template <> struct lanes<__nv_bfloat16> {
    static constexpr int kVec = 8;
    static __device__ __forceinline__ void unpack(uint4 v, float f[kVec])
    {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
    static __device__ __forceinline__ uint4 pack(const float f[kVec])
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
    static __device__ __forceinline__ float load_elem(const void *p, int64_t i)
    {
        return __uint_as_float((uint32_t)__ldcg(static_cast<const unsigned short *>(p) + i) << 16);
    }
    /* Stores lane e (compile-time after unrolling) of v as element i of p. */
    static __device__ __forceinline__ void store_lane(void *p, int64_t i, uint4 v, int e)
    {
        const uint32_t w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
        static_cast<unsigned short *>(p)[i] = (unsigned short)((e & 1) ? w >> 16 : w & 0xffffu);
    }
};

template <> struct lanes<float> {
    static constexpr int kVec = 4;
    static __device__ __forceinline__ void unpack(uint4 v, float f[kVec])
    {
        f[0] = __uint_as_float(v.x);
        f[1] = __uint_as_float(v.y);
        f[2] = __uint_as_float(v.z);
        f[3] = __uint_as_float(v.w);
    }
    static __device__ __forceinline__ uint4 pack(const float f[kVec])
    {
        return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
    }
    static __device__ __forceinline__ float load_elem(const void *p, int64_t i)
    {
        return __ldcg(static_cast<const float *>(p) + i);
    }
    static __device__ __forceinline__ void store_lane(void *p, int64_t i, uint4 v, int e)
    {
        static_cast<uint32_t *>(p)[i] = e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
    }
};

/* Elements of vector v (kVec except for a partial last vector). */
template <typename T> __device__ __forceinline__ int vec_elems(int64_t v, int64_t n)
{
    const int64_t left = n - v * lanes<T>::kVec;
    return left < lanes<T>::kVec ? (int)left : lanes<T>::kVec;
}

/* acc = x (first) or acc + x, lane by lane, in fp32. */
template <typename T> __device__ __forceinline__ void accumulate(float acc[], uint4 x, bool first)
{
    float f[lanes<T>::kVec];
    lanes<T>::unpack(x, f);
#pragma unroll
    for (int e = 0; e < lanes<T>::kVec; e++)
        acc[e] = first ? f[e] : acc[e] + f[e];
}

/* The sum of vector v over all W inputs, in rank order, rounded once. Up to kBatch peers' loads
 * are issued before the first add so that they are in flight together. Loads are .cg (L2, not
 * L1): peer data is read once and must never come from a stale L1 line. */
template <typename T>
__device__ __forceinline__ uint4 reduce_vec(const unsigned char *const *in, int nranks, int64_t v, int elems)
{
    constexpr int kVec = lanes<T>::kVec;
    float acc[kVec];
#pragma unroll
    for (int e = 0; e < kVec; e++)
        acc[e] = 0.0f;
    if (elems == kVec) {
        for (int p0 = 0; p0 < nranks; p0 += kBatch) {
            uint4 x[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; j++)
                x[j] = p0 + j < nranks ? __ldcg(reinterpret_cast<const uint4 *>(in[p0 + j]) + v) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < kBatch; j++)
                if (p0 + j < nranks)
                    accumulate<T>(acc, x[j], p0 + j == 0);
        }
    } else {
        for (int p = 0; p < nranks; p++) {
#pragma unroll
            for (int e = 0; e < kVec; e++) {
                if (e < elems) {
                    const float f = lanes<T>::load_elem(in[p], v * kVec + e);
                    acc[e] = p == 0 ? f : acc[e] + f;
                }
            }
        }
    }
    return lanes<T>::pack(acc);
}

/* Writes the first `elems` lanes of val as vector v of dst: one 16-byte store when whole and
 * aligned, else element by element. */
template <typename T>
__device__ __forceinline__ void store_vec(void *dst, int64_t v, uint4 val, int elems, bool aligned)
{
    constexpr int kVec = lanes<T>::kVec;
    if (aligned && elems == kVec) {
        reinterpret_cast<uint4 *>(dst)[v] = val;
        return;
    }
#pragma unroll
    for (int e = 0; e < kVec; e++)
        if (e < elems)
            lanes<T>::store_lane(dst, v * kVec + e, val, e);
}

/* The plan's barrier on its signal pad (pad_barrier.cuh has the protocol and the ordering). */
__device__ __forceinline__ agmm_pad_sync pad_sync(const agmm_all_reduce_args &a)
{
    return agmm_pad_sync{a.pad, a.rank, a.nranks, a.err, a.timeout_ns};
}

__device__ __forceinline__ uint32_t run_epoch(const agmm_all_reduce_args &a) { return agmm_pad_run_epoch(pad_sync(a)); }

__device__ __forceinline__ bool block_barrier(const agmm_all_reduce_args &a, uint32_t epoch, uint32_t value)
{
    return agmm_pad_barrier(pad_sync(a), epoch, value);
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) all_reduce_one_shot_kernel(const agmm_all_reduce_args a)
{
    const uint32_t e = run_epoch(a);
    __shared__ const unsigned char *s_in[AGMM_MAX_RANKS];
    for (int p = threadIdx.x; p < a.nranks; p += kThreads)
        s_in[p] = static_cast<const unsigned char *>(a.in[p]) + a.in_offset;
    /* Opening barrier (its __syncthreads also publishes s_in to the block). Inputs were written
     * by earlier work on each rank's stream, complete before that rank's kernel started. */
    if (!block_barrier(a, e, 2u * e - 1u))
        return;

    const int64_t nvec = (a.n + lanes<T>::kVec - 1) / lanes<T>::kVec;
    const int64_t stride = (int64_t)a.grid * kThreads;
    const int64_t first = (int64_t)blockIdx.x * kThreads + threadIdx.x;

    if (a.stage == AGMM_AR_STAGE_REGS) {
        uint4 held[kRegVecs];
#pragma unroll
        for (int k = 0; k < kRegVecs; k++) {
            const int64_t v = first + k * stride;
            held[k] = v < nvec ? reduce_vec<T>(s_in, a.nranks, v, vec_elems<T>(v, a.n)) : make_uint4(0, 0, 0, 0);
        }
        /* Closing barrier: every peer's block has loaded these elements of our input. */
        if (!block_barrier(a, e, 2u * e))
            return;
#pragma unroll
        for (int k = 0; k < kRegVecs; k++) {
            const int64_t v = first + k * stride;
            if (v < nvec)
                store_vec<T>(a.out, v, held[k], vec_elems<T>(v, a.n), true);
        }
        return;
    }

    const bool scratch = a.stage == AGMM_AR_STAGE_SCRATCH;
    void *dst = scratch ? a.scratch : a.out;
    const bool dst_aligned = scratch || ((uintptr_t)a.out % AGMM_AR_VEC_BYTES) == 0;
    for (int64_t v = first; v < nvec; v += stride) {
        const int elems = vec_elems<T>(v, a.n);
        store_vec<T>(dst, v, reduce_vec<T>(s_in, a.nranks, v, elems), elems, dst_aligned);
    }
    /* Closing barrier: no rank returns while a peer's block may still load its input. */
    if (!block_barrier(a, e, 2u * e))
        return;
    if (scratch) {
        /* In place: our input is ours again. Each thread copies back the vectors it wrote. */
        for (int64_t v = first; v < nvec; v += stride)
            store_vec<T>(a.out, v, __ldcg(static_cast<const uint4 *>(a.scratch) + v), vec_elems<T>(v, a.n), true);
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) all_reduce_two_shot_kernel(const agmm_all_reduce_args a)
{
    const uint32_t e = run_epoch(a);
    __shared__ const unsigned char *s_in[AGMM_MAX_RANKS];
    __shared__ const uint4 *s_res[AGMM_MAX_RANKS];
    __shared__ int64_t s_lo[AGMM_MAX_RANKS + 1];
    const int W = a.nranks, r = a.rank;
    const int64_t nvec = (a.n + lanes<T>::kVec - 1) / lanes<T>::kVec;
    for (int p = threadIdx.x; p <= W; p += kThreads) {
        if (p < W) {
            s_in[p] = static_cast<const unsigned char *>(a.in[p]) + a.in_offset;
            s_res[p] = static_cast<const uint4 *>(a.res[p]);
        }
        s_lo[p] = nvec * p / W;   /* slice p is vectors [s_lo[p], s_lo[p+1]) */
    }
    /* Opening barrier: inputs complete everywhere, and every peer's run e-1 is over (no pull of
     * our res from it is pending) before we overwrite res below. */
    if (!block_barrier(a, e, 2u * e - 1u))
        return;

    const int64_t stride = (int64_t)a.grid * kThreads;
    const int64_t first = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    const bool out_aligned = ((uintptr_t)a.out % AGMM_AR_VEC_BYTES) == 0;

    /* Reduce-scatter: our slice, from every input. */
    uint4 *res_mine = const_cast<uint4 *>(s_res[r]);
    const int64_t lo = s_lo[r], len = s_lo[r + 1] - s_lo[r];
    for (int64_t off = first; off < len; off += stride) {
        const int64_t v = lo + off;
        const int elems = vec_elems<T>(v, a.n);
        const uint4 sum = reduce_vec<T>(s_in, W, v, elems);
        res_mine[v] = sum;
        store_vec<T>(a.out, v, sum, elems, out_aligned);
    }
    /* Middle barrier: releases our res writes (and the end of our input reads) to every peer;
     * acquires theirs. */
    if (!block_barrier(a, e, 2u * e))
        return;

    /* All-gather: pull every other slice, starting with rank r+1's so ranks spread their loads. */
    const int64_t max_len = (nvec + W - 1) / W;
    for (int64_t off = first; off < max_len; off += stride) {
        for (int j0 = 1; j0 < W; j0 += kBatch) {
            uint4 x[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; j++) {
                int q = r + j0 + j;
                q = q >= W ? q - W : q;
                x[j] = j0 + j < W && off < s_lo[q + 1] - s_lo[q] ? __ldcg(s_res[q] + s_lo[q] + off) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < kBatch; j++) {
                int q = r + j0 + j;
                q = q >= W ? q - W : q;
                if (j0 + j < W && off < s_lo[q + 1] - s_lo[q]) {
                    const int64_t v = s_lo[q] + off;
                    store_vec<T>(a.out, v, x[j], vec_elems<T>(v, a.n), out_aligned);
                }
            }
        }
    }
}

/* out = the sum of the slots, vector by vector (agmm_sum_slots_launch): reduce_vec over slot
 * pointers instead of peers' inputs, no barrier. */
__global__ void __launch_bounds__(kThreads) sum_slots_kernel(const unsigned char *base, size_t stride, int nslots,
                                                               int64_t n, void *out)
{
    using T = __nv_bfloat16;
    __shared__ const unsigned char *s_in[AGMM_MAX_RANKS];
    for (int p = threadIdx.x; p < nslots; p += kThreads)
        s_in[p] = base + (size_t)p * stride;
    __syncthreads();
    const int64_t nvec = (n + lanes<T>::kVec - 1) / lanes<T>::kVec;
    for (int64_t v = (int64_t)blockIdx.x * kThreads + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * kThreads) {
        const int elems = vec_elems<T>(v, n);
        store_vec<T>(out, v, reduce_vec<T>(s_in, nslots, v, elems), elems, true);
    }
}

} /* namespace */

extern "C" cudaError_t agmm_all_reduce_one_shot_launch(const agmm_all_reduce_args *args, agmm_dtype dtype,
                                                       cudaStream_t stream)
{
    if (dtype == AGMM_DTYPE_F32)
        all_reduce_one_shot_kernel<float><<<args->grid, kThreads, 0, stream>>>(*args);
    else
        all_reduce_one_shot_kernel<__nv_bfloat16><<<args->grid, kThreads, 0, stream>>>(*args);
    return cudaGetLastError();
}

extern "C" cudaError_t agmm_all_reduce_two_shot_launch(const agmm_all_reduce_args *args, agmm_dtype dtype,
                                                       cudaStream_t stream)
{
    if (dtype == AGMM_DTYPE_F32)
        all_reduce_two_shot_kernel<float><<<args->grid, kThreads, 0, stream>>>(*args);
    else
        all_reduce_two_shot_kernel<__nv_bfloat16><<<args->grid, kThreads, 0, stream>>>(*args);
    return cudaGetLastError();
}

extern "C" cudaError_t agmm_sum_slots_launch(const void *base, size_t stride_bytes, int nslots, int64_t n, void *out,
                                             int grid, cudaStream_t stream)
{
    sum_slots_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const unsigned char *>(base), stride_bytes, nslots, n,
                                                    out);
    return cudaGetLastError();
}
