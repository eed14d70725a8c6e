/* Cross-rank signalling on streams: the pad barrier, chunk flags, and a peek at peers' words
 * (extern "C" launchers of src/kernels/signal.cu; plain C header).
 *
 * Flags carry epochs (docs/design.md, "Protocols"): a waiter is satisfied by any value >= the epoch it waits
 * for (compared as a wrapping 32-bit difference), so nothing is ever reset between calls. */
#ifndef AGMM_KERNELS_SIGNAL_H
#define AGMM_KERNELS_SIGNAL_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "dev_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The pad barrier: one block. pads[p] is rank p's signal pad as this rank addresses it (slot q
 * of rank p's pad is written only by rank q). Rank `rank` writes `epoch` into slot `rank` of every
 * peer's pad (system-scope release, after a system fence), then waits until every slot q != rank
 * of its own pad holds >= epoch (system-scope acquire). A peer that is not there within
 * timeout_ns is recorded in *err (AGMM_WAIT_BARRIER) and the kernel exits. nranks <= 64. */
cudaError_t agmm_launch_barrier(uint32_t *const *pads, int rank, int nranks, uint32_t epoch,
                                uint64_t timeout_ns, agmm_dev_error *err, cudaStream_t stream);

/* Raises a flag: *flag = value with a system-scope release, after every earlier operation on the
 * stream (a copy, say) has completed; the fence before the store makes the copied bytes visible
 * to any reader that acquires the flag. An SM-side alternative to cuStreamWriteValue32. */
cudaError_t agmm_launch_flag_raise(uint32_t *flag, uint32_t value, cudaStream_t stream);

/* Waits on the stream until *flag >= value (acquire, system scope), bounded by timeout_ns; on
 * expiry records (rank, peer, wait, chunk) in *err and lets the stream go on. */
cudaError_t agmm_launch_flag_wait(const uint32_t *flag, uint32_t value, uint64_t timeout_ns, agmm_dev_error *err,
                                  int rank, int peer, int wait, int chunk, cudaStream_t stream);

/* out[p] = word `word` of bufs[p] (acquire loads) for p < nranks: reads every peer's buffer
 * through the device pointer table. Used by tests and for diagnostics. */
cudaError_t agmm_launch_peek_peers(uint32_t *const *bufs, size_t word, int nranks, uint32_t *out,
                                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
