/* The NCCL device-API pieces the window implementation needs (symm_lsa.cu), behind a C API:
 * nccl_device.h is C++ only, so C code holds the device communicator as an opaque pointer. */
#ifndef AGMM_SYMM_LSA_H
#define AGMM_SYMM_LSA_H

#include <cuda_runtime_api.h>
#include "../world/gpu_headers.h"
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts creating the device communicator of `comm` (collective over comm): ncclSuccess, or
 * ncclInProgress on a nonblocking communicator (the caller settles it), with *devcomm set; any
 * other result with `why` (why_len bytes) saying what failed and nothing left allocated. */
ncclResult_t agmm_lsa_devcomm_create(ncclComm_t comm, void **devcomm, char *why, size_t why_len);
/* Once created: checks what agmm relies on (no multicast handle, one LSA team spanning the world
 * with lsaRank == rank). 0, or -1 with why. */
int agmm_lsa_devcomm_check(const void *devcomm, char *why, size_t why_len);
/* Starts destroying the device communicator (ncclSuccess, or ncclInProgress on a nonblocking
 * communicator: the caller settles it, then calls agmm_lsa_devcomm_free). NULL-safe. */
ncclResult_t agmm_lsa_devcomm_destroy(ncclComm_t comm, void *devcomm);
/* Frees what agmm_lsa_devcomm_create allocated, once NCCL is done with it. NULL-safe. */
void agmm_lsa_devcomm_free(void *devcomm);

/* Enqueues a one-block kernel writing ncclGetLsaPointer(win, 0, p) into d_table[p], p < nranks
 * (<= 64): every rank's buffer of this window in NCCL's flat address space. */
cudaError_t agmm_lsa_resolve_peers(ncclWindow_t win, void **d_table, int nranks, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
