/* agmm: fused communication + compute kernels for tensor-parallel models on NVLink GPUs.
 *
 * Two operations across the W ranks of a world:
 *   ag_matmul   every rank holds A_r (M x K, row-major) and B (K x N); every rank gets the
 *               gathered A = [A_0; ...; A_{W-1}] ((W*M) x K) and C = A * B ((W*M) x N).
 *               bf16 in and out, fp32 accumulation.
 *   all_reduce  every rank holds n elements; every rank gets their element-wise sum.
 *
 * Objects, in the order a caller makes them:
 *   agmm_world  the ranks this process drives: one thread per GPU, emulated ranks sharing
 *               GPUs, one rank per MPI process, or threads on the CPU.
 *   agmm_ctx    one rank of a world: its device, streams, communicator, symmetric heap.
 *   agmm_plan   one operation, shape and backend on one rank: buffers, descriptors and
 *               tuning are set up once here, so agmm_plan_run only enqueues work.
 *
 * Conventions. Every call returns an agmm_status; agmm_last_error(ctx) holds the detail of the
 * last failure on that rank. "Collective" means every rank of the world makes the call, in the
 * same order, each from the thread that owns its context. Destroy functions accept NULL and
 * cannot fail. Plain C11; usable from C++.
 */
#ifndef AGMM_H
#define AGMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AGMM_VERSION_MAJOR 0
#define AGMM_VERSION_MINOR 1
#define AGMM_VERSION_PATCH 0
#define AGMM_VERSION (AGMM_VERSION_MAJOR * 10000 + AGMM_VERSION_MINOR * 100 + AGMM_VERSION_PATCH)

/* The largest world agmm supports (ranks of one NVLink domain). */
#define AGMM_MAX_RANKS 64

typedef enum {
    AGMM_SUCCESS = 0,
    AGMM_ERR_INVALID_ARG,   /* an argument is out of range; agmm_last_error names it */
    AGMM_ERR_UNSUPPORTED,   /* valid, but this backend or world cannot do it */
    AGMM_ERR_NO_MEMORY,
    AGMM_ERR_CUDA,          /* CUDA runtime or driver call failed */
    AGMM_ERR_NCCL,
    AGMM_ERR_CUBLAS,
    AGMM_ERR_TIMEOUT,       /* a bounded wait expired: a peer never arrived */
    AGMM_ERR_VERSION,       /* NCCL headers and library differ */
    AGMM_ERR_INTERNAL
} agmm_status;

/* Never NULL; a static string. */
const char *agmm_status_str(agmm_status status);
/* The version this library was built as (AGMM_VERSION of its header). */
int agmm_version(void);

typedef enum {
    AGMM_WORLD_AUTO = 0,  /* GPU threads if a GPU is visible, else the CPU world */
    AGMM_WORLD_CPU,       /* ranks are threads, memory is host memory; no GPU needed */
    AGMM_WORLD_GPU,       /* one thread per GPU, NCCL communicators, NCCL windows */
    AGMM_WORLD_EMULATED,  /* more ranks than GPUs: ranks share devices round-robin; no NCCL */
    AGMM_WORLD_MPI        /* one rank per MPI process (needs a build with MPI) */
} agmm_world_kind;

typedef struct {
    agmm_world_kind kind;
    int nranks;               /* 0: one per visible GPU (GPU), 4 (CPU); ignored under MPI */
    double timeout_s;         /* bound on every wait for a peer; 0 means 5 s */
    int allow_nvls;           /* 0 (default): NCCL_NVLS_ENABLE=0 is forced. 1 lets NCCL decide.
                                 Never set on shared hosts: NVLink multicast can take them down. */
} agmm_world_config;

typedef struct agmm_world agmm_world;
typedef struct agmm_ctx agmm_ctx;
typedef struct agmm_plan agmm_plan;

/* Creates a world. Not collective: one call per process (under MPI, one per process too).
 * Returns AGMM_ERR_INVALID_ARG for a bad config, AGMM_ERR_UNSUPPORTED for a kind this build or
 * machine lacks, AGMM_ERR_VERSION when NCCL headers and library differ. On failure *world is
 * NULL and, if errbuf is not NULL, errbuf (errbuf_len bytes) holds the detail. */
agmm_status agmm_world_create(agmm_world **world, const agmm_world_config *config,
                              char *errbuf, size_t errbuf_len);
void agmm_world_destroy(agmm_world *world);
agmm_world_kind agmm_world_kind_of(const agmm_world *world);
int agmm_world_nranks(const agmm_world *world);       /* W */
int agmm_world_local_ranks(const agmm_world *world);  /* ranks driven by this process */
int agmm_world_first_rank(const agmm_world *world);   /* global rank of local rank 0 */
/* Text for a banner: device names, NCCL version, emulation. Never NULL. */
const char *agmm_world_describe(const agmm_world *world);

/* Creates the context of global rank `rank` (one of this process's local ranks). Collective over
 * the world: every local rank calls it, each on its own thread (agmm_world_run helps). */
agmm_status agmm_ctx_create(agmm_ctx **ctx, agmm_world *world, int rank);
void agmm_ctx_destroy(agmm_ctx *ctx);
int agmm_ctx_rank(const agmm_ctx *ctx);
int agmm_ctx_device(const agmm_ctx *ctx);   /* CUDA device ordinal; -1 in the CPU world */
/* The detail of this rank's last failure, "" if none. Never NULL. Owned by ctx. */
const char *agmm_last_error(const agmm_ctx *ctx);
/* Blocks until the work this rank enqueued has finished; reports an asynchronous failure
 * (AGMM_ERR_TIMEOUT naming the peer, op and chunk, or a CUDA error). Not collective. */
agmm_status agmm_ctx_sync(agmm_ctx *ctx);

/* Runs fn(ctx_of_rank, arg) on one thread per local rank, after creating each rank's context,
 * and returns the first non-success status. A convenience for one-process worlds. */
typedef agmm_status (*agmm_rank_fn)(agmm_ctx *ctx, void *arg);
agmm_status agmm_world_run(agmm_world *world, agmm_rank_fn fn, void *arg);

typedef enum { AGMM_DTYPE_BF16 = 0, AGMM_DTYPE_F32 } agmm_dtype;

typedef enum {
    AGMM_BACKEND_AUTO = 0,
    AGMM_BACKEND_NCCL,      /* ag_matmul: ncclAllGather + one cuBLASLt GEMM; all_reduce: ncclAllReduce */
    AGMM_BACKEND_CE,        /* ag_matmul: copy-engine copies, one GEMM per chunk */
    AGMM_BACKEND_FUSED,     /* ag_matmul: copy engine + one persistent GEMM waiting per tile */
    AGMM_BACKEND_ONE_SHOT,  /* all_reduce: every rank reads all peers */
    AGMM_BACKEND_TWO_SHOT,  /* all_reduce: reduce-scatter by loads, all-gather by stores */
    AGMM_BACKEND_NCCL_PLAIN,/* all_reduce: ncclAllReduce on a plain (unregistered) buffer */
    AGMM_BACKEND_COUNT
} agmm_backend;

/* "nccl", "ce", ... ; "?" for an unknown value. Never NULL. */
const char *agmm_backend_name(agmm_backend backend);
/* Parses a name; returns AGMM_ERR_INVALID_ARG for an unknown one. */
agmm_status agmm_backend_parse(const char *name, agmm_backend *backend);
/* 1 if this build can run `backend` for ag_matmul (all_reduce = 0) or all_reduce (1) in this
 * world, else 0. AUTO is always available. A backend needing NCCL in a world whose ranks share
 * a GPU counts as available: its plans report "skipped: ranks share a GPU". */
int agmm_backend_available(const agmm_world *world, agmm_backend backend, int all_reduce);

typedef enum {
    AGMM_LAYOUT_COL_MAJOR = 0, /* B^T is a contiguous N x K matrix (the seed's layout) */
    AGMM_LAYOUT_ROW_MAJOR      /* B is a contiguous K x N matrix */
} agmm_layout;

typedef struct {
    int64_t m;             /* rows of A per rank (the seed's M), >= 1 */
    int64_t n;             /* >= 1; a multiple of 8 with a row-major B (16-byte rows) */
    int64_t k;             /* a multiple of 8 (16-byte rows of A for TMA) */
    agmm_layout b_layout;
    agmm_backend backend;
    int splits;            /* chunks per rank for ce/fused: 0 (means 1) .. min(m, 1024) */
} agmm_ag_matmul_desc;

typedef struct {
    int64_t n;             /* elements per rank, >= 1 */
    agmm_dtype dtype;
    agmm_backend backend;
} agmm_all_reduce_desc;

/* Plans an operation on one rank. Collective (it allocates symmetric memory). The plan owns
 * its symmetric input buffer: see agmm_plan_input. Statuses: AGMM_ERR_INVALID_ARG (shape or
 * backend, named in agmm_last_error), AGMM_ERR_UNSUPPORTED (e.g. an NCCL backend while ranks
 * share a GPU), AGMM_ERR_NO_MEMORY, CUDA/NCCL/cuBLAS errors. */
agmm_status agmm_plan_ag_matmul(agmm_plan **plan, agmm_ctx *ctx, const agmm_ag_matmul_desc *desc);
agmm_status agmm_plan_all_reduce(agmm_plan **plan, agmm_ctx *ctx, const agmm_all_reduce_desc *desc);
/* Collective: a rank destroys its plans in the same order as its peers. */
void agmm_plan_destroy(agmm_plan *plan);
agmm_backend agmm_plan_backend(const agmm_plan *plan);  /* AUTO resolved to what runs; AUTO for NULL */

/* The rank's symmetric input buffer, owned by the plan: A_r (m x k bf16, row-major) for
 * ag_matmul, the n-element vector for all_reduce. Device memory on GPUs, host memory in the CPU
 * world. The caller writes it (ordered before agmm_plan_run on the same stream) and must not
 * write it again until the run that reads it has completed. */
void *agmm_plan_input(agmm_plan *plan);

typedef struct {
    const void *b;         /* ag_matmul: K x N bf16 in the plan's b_layout; caller-owned */
    void *a_gathered;      /* ag_matmul: (W*m) x k bf16 out; caller-owned */
    void *c;               /* ag_matmul: (W*m) x n bf16 out; caller-owned */
    void *out;             /* all_reduce: n elements out; may equal agmm_plan_input (in place) */
} agmm_io;

/* Enqueues one run on `stream` (a cudaStream_t; ignored, and the call is blocking, in the CPU
 * world). Collective: every rank runs its plans in the same order. Work on `stream` after this
 * call sees all outputs. A missing peer surfaces as AGMM_ERR_TIMEOUT from agmm_ctx_sync or from
 * this call. */
agmm_status agmm_plan_run(agmm_plan *plan, const agmm_io *io, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* AGMM_H */
