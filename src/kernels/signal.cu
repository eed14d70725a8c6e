/* Cross-rank signalling kernels (signal.h): the pad barrier, flag raise/wait, peer peek.
 *
 * All of them are single-block kernels: they hold one SM while they wait, which matters where
 * emulated ranks share a GPU (W such blocks at most, one per rank) and is why every wait here is
 * bounded by %globaltimer and records its failure instead of hanging the stream. */
#include "signal.h"

#include "bounded_wait.cuh"

/* The single-block kernels' wait (bounded_wait.cuh): acquire polls, the record and the clock
 * looked at every 64. It gives up at once, recording nothing, when this rank already holds a
 * timeout (err->code set): the ranks are out of step then, and each run queued behind the failed
 * one must end quickly, not wait out its own full bound. */
__device__ __forceinline__ int wait_slot(const uint32_t *slot, uint32_t epoch, uint64_t timeout_ns,
                                         const agmm_dev_error *err, uint32_t *seen)
{
    return agmm_spin_until<0, 64, 0>(slot, epoch, timeout_ns, err, seen);
}

/* Grid 1 x 64 threads (AGMM_MAX_RANKS). Thread p talks to rank p.
 * Epoch: thread 0 counts this barrier in the rank's own slot of its own pad (no peer writes that
 * slot) with an atomic add, so the epoch comes from the device, not from the launch: a captured
 * barrier replays as the next barrier. The atomic keeps two barriers of one rank distinct even if
 * a caller misuses streams; barriers of a rank are ordered on its copy stream in normal use.
 * Ordering: everything enqueued before this kernel on the stream has completed when it starts
 * (stream order); the __threadfence_system() makes those writes, and any this thread observed,
 * visible at system scope before the release store of the arrival flag, so a peer that acquires
 * the flag may read this rank's data (its shard, say) over NVLink or with the copy engine. The
 * acquire loads in the wait give the converse: work after this kernel sees the peers' writes. */
__global__ void barrier_pad_kernel(uint32_t *const *pads, int rank, int nranks, uint64_t timeout_ns,
                                   agmm_dev_error *err)
{
    __shared__ uint32_t s_epoch;
    if (threadIdx.x == 0)
        s_epoch = atomicAdd(pads[rank] + rank, 1u) + 1u;
    __syncthreads();
    const uint32_t epoch = s_epoch;
    int p = threadIdx.x;
    bool peer = p < nranks && p != rank;
    if (peer) {
        __threadfence_system();
        agmm_st_release_sys(pads[p] + rank, epoch);
        uint32_t seen;
        if (wait_slot(pads[rank] + p, epoch, timeout_ns, err, &seen) == AGMM_SPIN_EXPIRED)
            agmm_dev_error_record(err, rank, p, AGMM_WAIT_BARRIER, -1, epoch, seen);
    }
    __syncthreads();
}

/* Grid 1 x 1. Stream order puts it after the copy that filled the chunk; the system fence orders
 * those bytes before the flag for every observer, the release store publishes the flag. */
__global__ void flag_raise_kernel(uint32_t *flag, uint32_t value)
{
    __threadfence_system();
    agmm_st_release_sys(flag, value);
}

__global__ void flag_wait_kernel(const uint32_t *flag, uint32_t value, uint64_t timeout_ns, agmm_dev_error *err,
                                 int rank, int peer, int wait, int chunk)
{
    uint32_t seen;
    if (wait_slot(flag, value, timeout_ns, err, &seen) == AGMM_SPIN_EXPIRED)
        agmm_dev_error_record(err, rank, peer, wait, chunk, value, seen);
}

__global__ void peek_peers_kernel(uint32_t *const *bufs, size_t word, int nranks, uint32_t *out)
{
    int p = threadIdx.x;
    if (p < nranks)
        out[p] = agmm_ld_acquire_sys(bufs[p] + word);
}

extern "C" cudaError_t agmm_launch_barrier(uint32_t *const *pads, int rank, int nranks, uint64_t timeout_ns,
                                           agmm_dev_error *err, cudaStream_t stream)
{
    if (nranks < 1 || nranks > 64 || rank < 0 || rank >= nranks)
        return cudaErrorInvalidValue;
    barrier_pad_kernel<<<1, 64, 0, stream>>>(pads, rank, nranks, timeout_ns, err);
    return cudaGetLastError();
}

extern "C" cudaError_t agmm_launch_flag_raise(uint32_t *flag, uint32_t value, cudaStream_t stream)
{
    flag_raise_kernel<<<1, 1, 0, stream>>>(flag, value);
    return cudaGetLastError();
}

extern "C" cudaError_t agmm_launch_flag_wait(const uint32_t *flag, uint32_t value, uint64_t timeout_ns,
                                             agmm_dev_error *err, int rank, int peer, int wait, int chunk,
                                             cudaStream_t stream)
{
    flag_wait_kernel<<<1, 1, 0, stream>>>(flag, value, timeout_ns, err, rank, peer, wait, chunk);
    return cudaGetLastError();
}

extern "C" cudaError_t agmm_launch_peek_peers(uint32_t *const *bufs, size_t word, int nranks, uint32_t *out,
                                              cudaStream_t stream)
{
    if (nranks < 1 || nranks > 64)
        return cudaErrorInvalidValue;
    peek_peers_kernel<<<1, 64, 0, stream>>>(bufs, word, nranks, out);
    return cudaGetLastError();
}
