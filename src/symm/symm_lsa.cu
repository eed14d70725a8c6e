/* The NCCL 2.28 device API, used once per window: create the device communicator and resolve
 * peers' addresses with ncclGetLsaPointer into a pointer table (2.28 has no host call for this).
 * Everything else sees only the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>
#include <nccl_device.h>

#include "symm_lsa.h"

extern "C" ncclResult_t agmm_lsa_devcomm_create(ncclComm_t comm, void **out, char *why, size_t why_len)
{
    *out = NULL;
    ncclDevComm *dc = (ncclDevComm *)calloc(1, sizeof *dc);
    if (dc == NULL) {
        snprintf(why, why_len, "device communicator allocation failed");
        return ncclSystemError;
    }
    /* 2.28 has no size/magic header in the requirements: zeroing is the initialiser (2.29
     * changes this; this is the one place to update). No multimem, no GIN, no LSA barriers:
     * agmm's barriers live in its own signal pads. */
    ncclDevCommRequirements reqs;
    memset(&reqs, 0, sizeof reqs);
    ncclResult_t r = ncclDevCommCreate(comm, &reqs, dc);
    if (r != ncclSuccess && r != ncclInProgress) {
        const char *w = ncclGetLastError(comm);
        snprintf(why, why_len, "ncclDevCommCreate -> %s%s%s", ncclGetErrorString(r), w && *w ? ": " : "",
                 w ? w : "");
        free(dc);
        return r;
    }
    *out = dc;
    return r;
}

extern "C" int agmm_lsa_devcomm_check(const void *devcomm, char *why, size_t why_len)
{
    const ncclDevComm *dc = (const ncclDevComm *)devcomm;
    const char *bad = NULL;
    if (dc->lsaMultimem.mcBasePtr != NULL)
        bad = "the device communicator holds a multicast handle (NVLink multicast must stay off)";
    else if (dc->lsaSize != dc->nRanks || dc->lsaRank != dc->rank)
        bad = "the LSA team is not the whole world (ranks without load/store access to each other: several "
              "nodes, or peer access off)";
    if (bad == NULL)
        return 0;
    snprintf(why, why_len, "ncclDevCommCreate: %s (rank %d of %d, lsaRank %d of %d)", bad, dc->rank, dc->nRanks,
             dc->lsaRank, dc->lsaSize);
    return -1;
}

extern "C" ncclResult_t agmm_lsa_devcomm_destroy(ncclComm_t comm, void *devcomm)
{
    return devcomm == NULL ? ncclSuccess : ncclDevCommDestroy(comm, (ncclDevComm *)devcomm);
}

extern "C" void agmm_lsa_devcomm_free(void *devcomm) { free(devcomm); }

/* Grid 1 x 64: thread p resolves rank p (LSA rank == world rank on one node, checked above). */
__global__ void lsa_resolve_kernel(ncclWindow_t win, void **table, int nranks)
{
    int p = threadIdx.x;
    if (p < nranks)
        table[p] = ncclGetLsaPointer(win, 0, p);
}

extern "C" cudaError_t agmm_lsa_resolve_peers(ncclWindow_t win, void **d_table, int nranks, cudaStream_t stream)
{
    if (nranks < 1 || nranks > 64)
        return cudaErrorInvalidValue;
    lsa_resolve_kernel<<<1, 64, 0, stream>>>(win, d_table, nranks);
    return cudaGetLastError();
}
