/* The per-block barrier on a symmetric signal pad, shared by the symmetric-memory all-reduce
 * kernels (all_reduce.cu, all_reduce_rmsnorm.cu); all_reduce.h has the protocol. Device code only.
 *
 * Signal pad (symmetric, grid * W uint32 per rank, zeroed at allocation, never reset): slot
 * [b*W + p] of rank r's pad is written by block b of rank p (st.release.sys) and waited on by
 * block b of rank r (ld.acquire.sys). Run e of a plan raises the slots to 2e-1 at its first
 * barrier and 2e at its second; a wait is satisfied when value - want >= 0 as int32. The epoch is
 * read from the device (agmm_pad_run_epoch), so a captured run is a new run at every replay. */
#ifndef AGMM_KERNELS_PAD_BARRIER_CUH
#define AGMM_KERNELS_PAD_BARRIER_CUH

#include <stdint.h>

#include "bounded_wait.cuh"
#include "dev_error.h"

/* Where a block's barriers meet: the plan's pads, this rank, and the bound of every wait. */
struct agmm_pad_sync {
    void *const *pad;      /* device table: every rank's signal pad */
    int rank, nranks;
    agmm_dev_error *err;   /* where an expired wait is recorded (host-mapped) */
    uint64_t timeout_ns;
};

/* This run's epoch for this block: from the block's own arrival slot, where the previous run left
 * 2(e-1), or 2(e-1)-1 if its first barrier expired. Read before the first barrier, which
 * overwrites the slot; the previous run's kernel has completed (stream order), so its stores are
 * visible. */
__device__ __forceinline__ uint32_t agmm_pad_run_epoch(const agmm_pad_sync &s)
{
    const uint32_t *own = static_cast<const uint32_t *>(s.pad[s.rank]) + (size_t)blockIdx.x * s.nranks + s.rank;
    return (agmm_ld_relaxed_sys(own) + 1u) / 2u + 1u;
}

/* Barrier of block b with block b of every rank, at count `value` (2e-1 or 2e of run `epoch`).
 * Needs blockDim.x >= nranks. Returns false, the same in every thread of the block, when a peer
 * did not arrive within timeout_ns (recorded in err as AGMM_WAIT_ALL_REDUCE).
 *
 * Ordering. The __syncthreads() first orders every access this block made before (loads of
 * peers' inputs, stores of results or outputs) before thread p's st.release.sys to rank p's pad:
 * the release is cumulative, so rank p, once it acquires the flag, sees this block's stores and
 * knows its loads are done. Thread p of this block acquires rank p's flag (relaxed polls, then
 * one ld.acquire.sys: bounded_wait.cuh), and the closing __syncthreads_or extends that to every
 * thread of the block: what rank p's block did before its release is visible to all of them
 * afterwards. A wait of this rank that already expired (this run or an earlier one still queued
 * behind it) makes it give up at once: the ranks are out of step and the host reports that
 * record. */
__device__ __forceinline__ bool agmm_pad_barrier(const agmm_pad_sync &s, uint32_t epoch, uint32_t value)
{
    __syncthreads();
    int late = 0;
    const int p = threadIdx.x;
    if (p < s.nranks) {
        const size_t slot = (size_t)blockIdx.x * (size_t)s.nranks;
        agmm_st_release_sys(static_cast<uint32_t *>(s.pad[p]) + slot + s.rank, value);
        const uint32_t *mine = static_cast<const uint32_t *>(s.pad[s.rank]) + slot + p;
        uint32_t seen;
        const int r = agmm_spin_until<0, 64, 1>(mine, value, s.timeout_ns, s.err, &seen);
        if (r == AGMM_SPIN_EXPIRED)
            agmm_dev_error_record(s.err, s.rank, p, AGMM_WAIT_ALL_REDUCE, -1, epoch, seen);
        late = r != AGMM_SPIN_MET;
    }
    return __syncthreads_or(late) == 0;
}

#endif
