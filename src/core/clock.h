/* The monotonic clock in nanoseconds, what every bounded wait measures its deadline on. */
#ifndef AGMM_CORE_CLOCK_H
#define AGMM_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t agmm_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
