/* Cross-rank signalling on streams: the pad barrier, chunk flags, and a peek at peers' words
 * (extern "C" launchers of src/kernels/signal.cu; plain C header).
 *
 * Waits compare as a wrapping 32-bit difference: a waiter is satisfied by any value >= the one it
 * waits for (docs/design.md, "Protocols"). The pad barrier's epochs live in device memory and
 * advance on the device, so a barrier captured in a CUDA graph is a new barrier at every replay. */
#ifndef AGMM_KERNELS_SIGNAL_H
#define AGMM_KERNELS_SIGNAL_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "dev_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The pad barrier: one block. pads[p] is rank p's signal pad as this rank addresses it (slot q
 * of rank p's pad is written only by rank q). Slot `rank` of this rank's own pad counts the
 * barriers it has entered: the kernel adds one to it (its epoch e, the same on every rank because
 * barriers are collective), writes e into slot `rank` of every peer's pad (system-scope release,
 * after a system fence), then waits until every slot q != rank of its own pad holds >= e
 * (system-scope acquire). A peer that is not there within timeout_ns is recorded in *err
 * (AGMM_WAIT_BARRIER, with e) and the kernel exits. nranks <= 64. */
cudaError_t agmm_launch_barrier(uint32_t *const *pads, int rank, int nranks, uint64_t timeout_ns,
                                agmm_dev_error *err, cudaStream_t stream);

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
