/* A stream delay for tests: one thread sleeps on the device for a given time, holding back
 * whatever is enqueued after it on that stream (used to make one chunk's copy land late). */
#include <stdint.h>

#include "delay.h"
#include "dev_error.h"

__global__ void delay_kernel(uint64_t ns)
{
    uint64_t end = agmm_globaltimer_ns() + ns;
    while (agmm_globaltimer_ns() < end)
        __nanosleep(1000);
}

extern "C" cudaError_t agmm_launch_delay(uint64_t ns, cudaStream_t stream)
{
    delay_kernel<<<1, 1, 0, stream>>>(ns);
    return cudaGetLastError();
}
