/* Symmetric memory of emulated ranks that are processes sharing a GPU (agmm_world_join with an
 * emulated world): NCCL refuses two ranks on one GPU, so no windows. Each rank makes its buffer
 * with CUDA's virtual memory API, with a POSIX file-descriptor handle (cuMemCreate), exports the
 * handle, zeroes and maps the buffer; the descriptors pass to every peer over Unix sockets
 * (agmm_host_exchange_fds, SCM_RIGHTS: no ptrace rights needed, unlike pidfd_getfd), and each peer
 * imports, reserves an address, maps and enables access. Every process holds its own handles and
 * mappings, so the driver keeps each buffer until the last process lets go: a rank's free
 * unmaps and releases only its own views. */
#ifdef AGMM_HAVE_CUDA
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symm_impl.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    size_t size;                                   /* mapped bytes, a multiple of the granularity */
    CUmemGenericAllocationHandle handle[AGMM_MAX_RANKS];  /* own (made) and peers' (imported) */
    int mapped[AGMM_MAX_RANKS];
} vmm_buf;

static agmm_status cu_fail(agmm_ctx *ctx, const char *what, int peer, CUresult r)
{
    const char *name = "?";
    agmm_ctx_gpu(ctx)->vmm.error_name(r, &name);
    return AGMM_FAIL(agmm_ctx_err(ctx), r == CUDA_ERROR_OUT_OF_MEMORY ? AGMM_ERR_NO_MEMORY : AGMM_ERR_CUDA,
                     "rank %d: %s (rank %d's buffer) -> %s", agmm_ctx_info(ctx)->rank, what, peer, name);
}

/* Maps rank r's handle at a new address with read/write access for this rank's device. */
static agmm_status map_one(agmm_ctx *ctx, vmm_buf *vb, agmm_symm_buf *buf, int r)
{
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    const agmm_vmm_api *v = &g->vmm;
    CUdeviceptr va = 0;
    CUresult e = v->reserve(&va, vb->size, 0, 0, 0);
    if (e != CUDA_SUCCESS)
        return cu_fail(ctx, "cuMemAddressReserve", r, e);
    e = v->map(va, vb->size, 0, vb->handle[r], 0);
    if (e != CUDA_SUCCESS) {
        v->address_free(va, vb->size);
        return cu_fail(ctx, "cuMemMap", r, e);
    }
    vb->mapped[r] = 1;
    buf->peer[r] = (void *)(uintptr_t)va;
    CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = g->cu_device},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    e = v->set_access(va, vb->size, &a, 1);
    return e == CUDA_SUCCESS ? AGMM_SUCCESS : cu_fail(ctx, "cuMemSetAccess", r, e);
}

/* This rank's buffer: made, exported as *fd, mapped and zeroed. */
static agmm_status make_own(agmm_ctx *ctx, vmm_buf *vb, agmm_symm_buf *buf, int *fd)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    const agmm_vmm_api *v = &g->vmm;
    const int rank = agmm_ctx_info(ctx)->rank;
    CUmemAllocationProp prop = agmm_gpu_vmm_prop(g->cu_device);
    size_t gran = 0;
    CUresult e = v->granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (e != CUDA_SUCCESS)
        return cu_fail(ctx, "cuMemGetAllocationGranularity", rank, e);
    vb->size = (buf->bytes + gran - 1) / gran * gran;
    if ((e = v->create(&vb->handle[rank], vb->size, &prop, 0)) != CUDA_SUCCESS)
        return cu_fail(ctx, "cuMemCreate", rank, e);
    if ((e = v->export_handle(fd, vb->handle[rank], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) != CUDA_SUCCESS)
        return cu_fail(ctx, "cuMemExportToShareableHandle", rank, e);
    AGMM_TRY(st, map_one(ctx, vb, buf, rank));
    /* Zeroed and finished before the descriptor leaves, so no peer sees it otherwise. */
    AGMM_CUDA_TRY(st, agmm_ctx_err(ctx), cudaMemsetAsync(buf->peer[rank], 0, vb->size, g->copy_stream));
    AGMM_CUDA_TRY(st, agmm_ctx_err(ctx), cudaStreamSynchronize(g->copy_stream));
fail:
    return st;
}

static void unmap_all(agmm_ctx *ctx, agmm_symm_buf *buf, vmm_buf *vb)
{
    const agmm_vmm_api *v = &agmm_ctx_gpu(ctx)->vmm;
    for (int r = 0; r < AGMM_MAX_RANKS; r++) {
        if (vb->mapped[r]) {
            v->unmap((CUdeviceptr)(uintptr_t)buf->peer[r], vb->size);
            v->address_free((CUdeviceptr)(uintptr_t)buf->peer[r], vb->size);
        }
        if (vb->handle[r])
            v->release(vb->handle[r]);
        buf->peer[r] = NULL;
    }
    cudaFree(buf->d_peer);
    buf->d_peer = NULL;
    buf->local = NULL;
    cudaGetLastError();
    free(vb);
}

static agmm_status vmm_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    vmm_buf *vb = calloc(1, sizeof *vb);
    int fd = -1, fds[AGMM_MAX_RANKS];
    agmm_status mine = vb ? make_own(ctx, vb, buf, &fd)
                          : AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: VMM record", ri->rank);
    agmm_status st = agmm_host_exchange_fds(ctx, mine == AGMM_SUCCESS ? fd : -1, fds);
    if (fd >= 0)
        close(fd);
    if (st != AGMM_SUCCESS) {
        if (vb)
            unmap_all(ctx, buf, vb);
        return st;
    }
    for (int r = 0; r < ri->nranks; r++) {
        if (r == ri->rank || fds[r] < 0)
            continue; /* a rank whose part failed sends nothing: the agreement below says so */
        if (mine == AGMM_SUCCESS) {
            CUresult e = g->vmm.import_handle(&vb->handle[r], (void *)(uintptr_t)fds[r],
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            mine = e == CUDA_SUCCESS ? map_one(ctx, vb, buf, r) : cu_fail(ctx, "cuMemImportFromShareableHandle", r, e);
        }
        close(fds[r]);
    }
    const size_t table = (size_t)ri->nranks * sizeof *buf->d_peer;
    if (mine == AGMM_SUCCESS && cudaMalloc((void **)&buf->d_peer, table) == cudaSuccess &&
        cudaMemcpyAsync(buf->d_peer, buf->peer, table, cudaMemcpyHostToDevice, g->copy_stream) == cudaSuccess &&
        cudaStreamSynchronize(g->copy_stream) == cudaSuccess)
        buf->local = buf->peer[ri->rank];
    else if (mine == AGMM_SUCCESS)
        mine = AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_CUDA, "rank %d: the device table of a VMM buffer: %s", ri->rank,
                         cudaGetErrorString(cudaGetLastError()));
    st = agmm_host_agree(ctx, mine);
    if (st != AGMM_SUCCESS) {
        if (vb)
            unmap_all(ctx, buf, vb);
        return st;
    }
    buf->impl = vb;
    return AGMM_SUCCESS;
}

static void vmm_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    /* Only this rank's own work may still use its views; peers' views are theirs. */
    agmm_gpu_quiesce(ctx);
    unmap_all(ctx, buf, buf->impl);
    buf->impl = NULL;
}

const agmm_symm_impl agmm_symm_vmm = {"GPU memory shared between processes (CUDA VMM, fd handles)", vmm_alloc,
                                      vmm_free};
#endif /* AGMM_HAVE_CUDA */
