/* The record a kernel leaves when a bounded wait expires, in host-mapped memory of the rank's
 * context so the host can read it without a sync. The first failure wins (atomicCAS on code);
 * the host turns it into AGMM_ERR_TIMEOUT with a message naming rank, op and chunk.
 * Plain C layout: included by C host code and by kernels. */
#ifndef AGMM_KERNELS_DEV_ERROR_H
#define AGMM_KERNELS_DEV_ERROR_H

#include <stdint.h>

enum { AGMM_DEV_OK = 0, AGMM_DEV_TIMEOUT = 1 };
enum {
    AGMM_WAIT_BARRIER = 0,     /* a cross-rank barrier: `peer` never arrived */
    AGMM_WAIT_CHUNK = 1,       /* a GEMM tile waited for chunk `chunk` (copied from `peer`) */
    AGMM_WAIT_ALL_REDUCE = 2,  /* an all-reduce kernel's barrier: `peer` never arrived */
    AGMM_WAIT_READY = 3,       /* a pull GEMM waited for `peer`'s ready flag (its shard written) */
    AGMM_WAIT_TILE = 4,        /* a reduce-scatter owner waited for `peer`'s partial of tile `chunk` */
    AGMM_WAIT_SLOT = 5         /* a reduce-scatter GEMM waited for owner `peer` to free its slot */
};

typedef struct {
    uint32_t code;     /* AGMM_DEV_OK until a wait expires */
    int32_t rank;      /* the rank that waited */
    int32_t peer;      /* the rank it waited for */
    int32_t wait;      /* AGMM_WAIT_* */
    int32_t chunk;     /* chunk id for AGMM_WAIT_CHUNK, else -1 */
    uint32_t epoch;    /* the epoch it waited for */
    uint32_t seen;     /* the value it last saw */
} agmm_dev_error;

#ifdef __CUDACC__
/* Records a timeout once (first writer wins) and makes it visible to the host. */
__device__ __forceinline__ void agmm_dev_error_record(agmm_dev_error *e, int rank, int peer, int wait,
                                                      int chunk, uint32_t epoch, uint32_t seen)
{
    if (atomicCAS(&e->code, AGMM_DEV_OK, 0xffffffffu) == AGMM_DEV_OK) {
        e->rank = rank;
        e->peer = peer;
        e->wait = wait;
        e->chunk = chunk;
        e->epoch = epoch;
        e->seen = seen;
        __threadfence_system();
        atomicExch(&e->code, AGMM_DEV_TIMEOUT);
    }
}

/* Nanoseconds from the global timer, for deadlines of bounded spins. */
__device__ __forceinline__ uint64_t agmm_globaltimer_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Acquire load at system scope: what the writer stored before its release is visible after. */
__device__ __forceinline__ uint32_t agmm_ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void agmm_st_release_sys(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
#endif

#endif
