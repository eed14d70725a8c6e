/* A device-side delay on a stream (delay.cu), for tests of waits. Plain C header. */
#ifndef AGMM_KERNELS_DELAY_H
#define AGMM_KERNELS_DELAY_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* Enqueues one single-thread kernel that spins (with nanosleep) for `ns` nanoseconds. */
cudaError_t agmm_launch_delay(uint64_t ns, cudaStream_t stream);
#ifdef __cplusplus
}
#endif
#endif
