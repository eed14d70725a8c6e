/* A GPU rank's resources, as the layers above see them (internal; world_gpu.c fills them). Host
 * C code may include this: only the CUDA runtime, cuBLASLt and NCCL C headers are needed
 * (gpu_headers.h). The struct is read-only outside src/world. */
#ifndef AGMM_WORLD_RANK_GPU_H
#define AGMM_WORLD_RANK_GPU_H

#include <stdint.h>

#include <cuda.h> /* the driver API's types: its calls go through agmm_vmm_api */

#include "gpu_headers.h"
#include "../kernels/dev_error.h"
#include "world.h"

/* Driver entry points, fetched once through cudaGetDriverEntryPoint so that the binary does not
 * link libcuda (it must start on machines with no driver, where it runs the CPU world). */
typedef int (*agmm_cu_stream_write_value32_fn)(cudaStream_t stream, uintptr_t addr, uint32_t value, unsigned flags);
typedef int (*agmm_cu_stream_wait_value32_fn)(cudaStream_t stream, uintptr_t addr, uint32_t value, unsigned flags);

/* The driver's virtual-memory calls (cuMem*), fetched like the memory operations above: CUDA VMM
 * memory whose handles pass between processes as POSIX file descriptors (emulated process worlds;
 * symm_vmm.c). */
typedef struct {
    __typeof__(&cuDeviceGet) device_get;
    __typeof__(&cuMemGetAllocationGranularity) granularity;
    __typeof__(&cuMemCreate) create;
    __typeof__(&cuMemExportToShareableHandle) export_handle;
    __typeof__(&cuMemImportFromShareableHandle) import_handle;
    __typeof__(&cuMemAddressReserve) reserve;
    __typeof__(&cuMemAddressFree) address_free;
    __typeof__(&cuMemMap) map;
    __typeof__(&cuMemSetAccess) set_access;
    __typeof__(&cuMemUnmap) unmap;
    __typeof__(&cuMemRelease) release;
    __typeof__(&cuGetErrorName) error_name;
} agmm_vmm_api;

/* Fetches every call of `api`; 0, or -1 naming the one the driver lacks in `why`. */
int agmm_gpu_vmm_load(agmm_vmm_api *api, char *why, size_t why_len);
/* The allocation properties agmm uses: device memory of `device`, POSIX fd handles. */
CUmemAllocationProp agmm_gpu_vmm_prop(CUdevice device);

typedef struct agmm_gpu_rank {
    cudaStream_t copy_stream;          /* high priority, non-blocking: the copy-engine role */
    cudaStream_t measure_stream;       /* auto's timed runs: made at the first, kept (agmm_gpu_measure_stream) */
    cublasLtHandle_t lt;
    ncclComm_t nccl_comm;              /* NULL where the world has no AGMM_CAP_NCCL */
    agmm_dev_error *err_host;          /* mapped pinned memory written by kernels on timeout */
    agmm_dev_error *err_dev;           /* its device alias, passed to kernels */
    uint64_t timeout_ns;               /* bound of every device-side wait */
    int num_sms;                       /* SMs of the device */
    agmm_cu_stream_write_value32_fn write_value32;  /* NULL where the driver lacks them */
    agmm_cu_stream_wait_value32_fn wait_value32;
    cudaEvent_t last_run;              /* recorded by agmm_gpu_note_run after each eager run */
    int last_run_recorded;
    cudaStream_t last_run_stream;      /* the stream of that record */
    cudaEvent_t last_replay;           /* recorded by each replay of a graph that captured a run */
    int captured;                      /* a run of this rank was ever captured into a graph */
    unsigned long long mark_capture;   /* the capture that holds mark_node (ids are never 0) */
    cudaGraphNode_t mark_node;         /* that capture's last record of last_replay (world_gpu.c) */
    agmm_vmm_api vmm;                  /* loaded where ranks are processes sharing a GPU */
    CUdevice cu_device;
} agmm_gpu_rank;

/* The rank's GPU resources; NULL in the CPU world. */
const agmm_gpu_rank *agmm_ctx_gpu(const agmm_ctx *ctx);

/* Threading: a context's CUDA work is enqueued by the thread that created it (agmm_rank_create
 * made the rank's device current on that thread). Another thread must cudaSetDevice first.
 *
 * Ranks sharing a device (emulated worlds): a device-synchronising call (cudaMalloc, cudaFree,
 * cudaHostAlloc, cudaDeviceSynchronize, anything on the legacy stream) waits for every rank's
 * work, and a copy from or to pageable host memory can hold up other threads' CUDA calls, so
 * neither may be made while a peer's run may be waiting in a barrier for this rank: it would
 * stall both until the barrier's timeout (seen on the H200). The library makes such calls only
 * where the ranks have just met (plan create/destroy, symmetric alloc/free); callers allocate
 * before planning, copy through pinned host memory, and use one non-blocking stream per rank. */

/* Turns a recorded device timeout into AGMM_ERR_TIMEOUT in the rank's error record; AGMM_SUCCESS
 * if none. The record is sticky: ranks are out of step after a missed wait, so every later run
 * fails too. */
agmm_status agmm_gpu_check_dev_error(agmm_ctx *ctx);

/* Every backend's GPU run ends with this: records the point agmm_ctx_sync waits for where ranks
 * share a device (a device-wide sync there would also wait for peers' barriers that wait for us),
 * and which the rank's next run is ordered after (agmm_gpu_order_run): last_run after an eager
 * run; while `stream` is being captured into a CUDA graph, last_replay, as a node of the graph
 * that every replay records (a leaf: the graph's later work does not wait for it). */
agmm_status agmm_gpu_note_run(agmm_ctx *ctx, cudaStream_t stream);

/* Orders a run about to be enqueued on `stream` after the rank's previous run, whatever stream
 * that one was on: a rank's runs never overlap on the device (a plan's device state, its epochs
 * and flags, assumes it). Nothing while `stream` is being captured: a graph cannot wait for work
 * outside it, so a replay is ordered by the stream it is launched on (agmm.h). An eager run waits
 * for the last eager run only when that was on another stream (stream order suffices on the same
 * one), and for the last replay only while that is still pending: each wait costs about 1.2 us
 * of device time per run on an H200, and before replays had an event of their own every eager run
 * after a capture paid it. */
agmm_status agmm_gpu_order_run(agmm_ctx *ctx, cudaStream_t stream);

/* The events that mark the rank's last runs, eager and replayed, for the waits that must cover
 * all of its work (agmm_ctx_sync, the host exchange over NCCL); returns how many (0..2). */
int agmm_gpu_run_events(const agmm_gpu_rank *g, cudaEvent_t ev[2]);

/* The stream auto times its candidates on: non-blocking, of default priority, made on the first
 * call and kept until the rank is destroyed. Kept rather than made per measurement: streams made
 * and destroyed per case stalled emulated worlds and, made and destroyed during plan creation,
 * slowed later runs by 1.5-2 us on the H200 (docs/architecture.md, emulated worlds; gemm_lt.c);
 * made lazily, so that a world that never measures makes none. Local. */
agmm_status agmm_gpu_measure_stream(agmm_ctx *ctx, cudaStream_t *out);

/* Rejects the legacy default stream where ranks share a device: it serialises their streams, so
 * a barrier would wait for a peer queued behind it. Use one non-blocking stream per rank there. */
agmm_status agmm_gpu_check_stream(agmm_ctx *ctx, cudaStream_t stream);

/* Waits for every piece of work this rank has enqueued (its runs end with note_run), ignoring
 * errors: what a rank does before it unmaps or frees memory that its own kernels and copies may
 * still touch. All its waits are bounded, so this returns. Local. */
void agmm_gpu_quiesce(agmm_ctx *ctx);

/* Every NCCL call on a rank's communicator goes through this. The world's communicators are
 * nonblocking: a call may answer ncclInProgress, and then the communicator's state is polled
 * (ncclCommGetAsyncError) until it settles, within the world's timeout. On timeout the
 * communicator is aborted (unless it is borrowed: then left to its owner) and the world marked
 * unusable; the error names `what` ("ncclAllGather"). Returns the call's outcome as a status. */
agmm_status agmm_gpu_nccl_settle(agmm_ctx *ctx, ncclResult_t result, const char *what);

/* The most blocks a kernel whose block b meets block b of every peer may launch on every rank: this
 * rank's share of its device's SMs (SMs / ranks on the device), agreed as the minimum over the
 * world. Collective (a host exchange). */
agmm_status agmm_gpu_agreed_sm_share(agmm_ctx *ctx, int *out);

#endif
