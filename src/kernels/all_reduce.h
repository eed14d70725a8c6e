/* Symmetric-memory all-reduce kernels (all_reduce.cu): one_shot and two_shot, bf16 and fp32, any
 * n, in place or out of place. Every rank gets bitwise the same sum: each element is summed in
 * fp32 in the fixed order rank 0, 1, ..., W-1 (acc = x_0; acc += x_1; ...) and rounded once
 * (bf16: round to nearest even).
 *
 * Vectors. The vector is cut into 16-byte vectors (8 bf16 or 4 fp32); vector v holds elements
 * [v*VEC, v*VEC + VEC), the last one possibly partial. Symmetric buffers are 16-byte aligned;
 * io->out need only be element-aligned (a misaligned out is written element by element).
 *
 * Partition (identical on every rank: same n, W and grid): thread t of block b visits vector
 * offsets off = (k*grid + b)*AGMM_AR_THREADS + t, k = 0, 1, ... one_shot applies it to the whole
 * vector; two_shot to each rank's slice [lo(q), lo(q+1)), lo(q) = q*nvec/W. Block b of one rank
 * therefore touches exactly the elements block b of every other rank touches, which is why the
 * barriers below can be per block.
 *
 * Signal pad (symmetric, grid * W uint32 per rank, zeroed at allocation, never reset): slot
 * [b*W + p] of rank r's pad is written by block b of rank p (st.release.sys) and waited on by
 * block b of rank r (ld.acquire.sys). Values are barrier counts: run e of the plan (counted from 1,
 * equal on all ranks) raises them to 2e-1 at its first barrier and 2e at its second; a wait is
 * satisfied when value - want >= 0 as int32 (monotonic, wrap-safe, so a peer that is already one
 * barrier ahead also satisfies it). A wait longer than timeout_ns records AGMM_WAIT_ALL_REDUCE in
 * err (rank, peer, epoch = the run, seen = the raw flag value) and the block returns; a wait that
 * finds err already set (an earlier wait of this rank expired, so the ranks are out of step)
 * returns at once, so runs queued behind a failed one end quickly.
 *
 * The run's epoch comes from the device, not from the launch, so a run captured in a CUDA graph
 * is a new run at every replay: block b reads its own arrival slot [b*W + r] of its own pad, which
 * nobody else writes and which the previous run left at 2(e-1) (or 2(e-1)-1 if its first barrier
 * expired), and takes e = (slot + 1) / 2 + 1 (wrapping consistently on every rank). That needs
 * the runs of a plan to follow each other on the device (the API orders a rank's runs) and a grid
 * that never changes (a plan's).
 *
 * Grid: `grid` blocks of AGMM_AR_THREADS threads, equal on every rank and never more than the
 * SMs this rank may hold while it spins (num_sms / ranks_on_device in an emulated world), so all
 * ranks' blocks are resident together. Plain C11 (host C includes it). */
#ifndef AGMM_KERNELS_ALL_REDUCE_H
#define AGMM_KERNELS_ALL_REDUCE_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "agmm.h"
#include "dev_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block. */
#define AGMM_AR_THREADS 512
/* Bytes per vector: one 16-byte load or store. */
#define AGMM_AR_VEC_BYTES 16
/* one_shot in place: vectors a thread may hold in registers across the closing barrier. A
 * message of more than grid * AGMM_AR_THREADS * AGMM_AR_REG_VECS vectors stages through
 * `scratch` instead. */
#define AGMM_AR_REG_VECS 8

/* Where one_shot puts sums until its closing barrier says no peer still reads this rank's input. */
typedef enum {
    AGMM_AR_STAGE_NONE = 0,   /* out of place: store straight to out */
    AGMM_AR_STAGE_REGS,       /* in place, small: hold in registers, store after the barrier */
    AGMM_AR_STAGE_SCRATCH     /* in place, large: store to scratch, copy to out after the barrier */
} agmm_ar_stage;

typedef struct {
    void *const *in;      /* device table: every rank's symmetric input buffer */
    size_t in_offset;     /* where the input starts in each of them (the same on every rank) */
    void *const *res;     /* two_shot: device table of every rank's symmetric result buffer
                             (ceil(n/VEC) vectors); NULL for one_shot */
    void *const *pad;     /* device table: every rank's signal pad */
    void *out;            /* this rank's n-element output, element-aligned; may be in[rank] */
    void *scratch;        /* one_shot AGMM_AR_STAGE_SCRATCH: ceil(n/VEC) vectors of local memory */
    int64_t n;            /* elements per rank, >= 0 */
    int rank, nranks;
    int grid;             /* blocks, >= 1; equal on every rank; pad holds grid * nranks slots */
    int stage;            /* agmm_ar_stage (one_shot only) */
    agmm_dev_error *err;  /* where an expired wait is recorded (host-mapped) */
    uint64_t timeout_ns;  /* bound of every wait */
} agmm_all_reduce_args;

/* Elements per 16-byte vector of dtype. */
static inline int agmm_ar_vec_elems(agmm_dtype dtype) { return dtype == AGMM_DTYPE_F32 ? 4 : 8; }

/* Enqueues one run on `stream`. Returns cudaGetLastError() after the launch. n may be 0 on some
 * ranks (a reduce-scatter block of no rows: the rank only meets its peers). Every rank must
 * launch the same kernel with the same n and grid, as many times, and in an emulated world on
 * streams that may run concurrently (never the legacy default stream). */
cudaError_t agmm_all_reduce_one_shot_launch(const agmm_all_reduce_args *args, agmm_dtype dtype,
                                            cudaStream_t stream);
cudaError_t agmm_all_reduce_two_shot_launch(const agmm_all_reduce_args *args, agmm_dtype dtype,
                                            cudaStream_t stream);

/* The local sum of a reduce-scatter's slots (matmul_reduce_scatter `ce`): out[i] = the sum over
 * p = 0..nslots-1 of element i of slot p, bf16 slots at base + p * stride_bytes (local memory,
 * 16-byte aligned), i < n (n >= 0), in fp32 in slot order and rounded once: the sum of
 * all_reduce's kernels, without their barriers (the caller has ordered every slot's writes before
 * this launch). out is 16-byte aligned. grid blocks of AGMM_AR_THREADS, any grid >= 1. */
cudaError_t agmm_sum_slots_launch(const void *base, size_t stride_bytes, int nslots, int64_t n, void *out, int grid,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* AGMM_KERNELS_ALL_REDUCE_H */
