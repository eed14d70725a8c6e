/* agmm: fused communication + compute kernels for tensor-parallel models on NVLink GPUs.
 *
 * Operations across the W ranks of a world (agmm_op):
 *   ag_matmul   every rank holds A_r (M x K, row-major) and B (K x N); every rank gets the
 *               gathered A = [A_0; ...; A_{W-1}] ((W*M) x K) and C = A * B ((W*M) x N).
 *               bf16 in and out, fp32 accumulation.
 *   all_reduce  every rank holds n elements; every rank gets their element-wise sum.
 *   all_reduce_rmsnorm   every rank holds x_r (T x H), and bias (H) and residual (T x H) if any;
 *               every rank gets r' = sum_r x_r + bias + residual (the new residual) and
 *               y = RMSNorm(r') * gamma: the all-reduce that ends a tensor-parallel layer, with the
 *               add and the norm after it. bf16 in and out, fp32 sums and norm.
 * Each operation has several backends (algorithms), named by strings: agmm_backend_name lists
 * them, and "auto" (or NULL) lets the library choose.
 *
 * Objects, in the order a caller makes them:
 *   agmm_world  the ranks this process drives: one thread per GPU, emulated ranks sharing a GPU,
 *               or threads on the CPU (agmm_world_create); or this process's one rank of a world
 *               of processes started by torchrun, mpirun or srun (agmm_world_join).
 *   agmm_ctx    one rank of a world: its device, streams, communicator, symmetric heap.
 *   agmm_plan   one operation, shape and backend on one rank: buffers, descriptors and tuning
 *               are set up once here, so each run only enqueues work.
 *
 * Conventions.
 *   - Every call returns an agmm_status (or a value that cannot fail); agmm_last_error(ctx) holds
 *     the detail of the last failure on that rank, naming the argument and what is allowed.
 *   - "Collective" means every rank of the world makes the call, in the same order, each from the
 *     thread that owns its context. "Local" means only the calling rank takes part. A collective
 *     set-up call (contexts, plans, symmetric memory) that fails on one rank fails on every rank,
 *     with that rank's reason ("rank 2 failed: ..."), rather than leaving the others waiting.
 *   - Every wait for a peer is bounded by the world's timeout. A failed meeting (a peer that never
 *     came, died, or stalled) leaves the world unusable: later collective calls fail at once with
 *     the first reason; destroy plans, contexts and the world.
 *   - Destroy functions accept NULL and cannot fail.
 *   - Public structs end in a reserved tail that must be zero (initialise them with `= {...}` or
 *     memset): later versions give those bytes meaning without changing the struct's size, and a
 *     non-zero tail is refused with AGMM_ERR_INVALID_ARG (e.g. a program built against a newer
 *     header).
 *   - Streams are `void *` holding a cudaStream_t. In the CPU world they are ignored and calls
 *     that enqueue work are blocking instead.
 *   - The library never writes to stdout and never exits the process (unless AGMM_FAULT, the
 *     fault injection of tests, asks a process-world rank to: README); diagnostics go to stderr,
 *     prefixed with the rank, at the level AGMM_LOG sets (error|warn|info|debug; default warn).
 *
 * Environment the library changes, each only where the variable is not already set:
 *   NCCL_NVLS_ENABLE=0          before NCCL starts, unless agmm_world_config.allow_nvls = 1 (NVLink
 *                               multicast can take a shared host down). If it is set to anything
 *                               but 0 while allow_nvls = 0, world creation fails instead.
 *   CUDA_DEVICE_MAX_CONNECTIONS=32   before CUDA starts: ranks sharing a GPU need their streams on
 *                               separate hardware queues.
 *   CUDA_MODULE_LOADING=EAGER   emulated worlds only, before CUDA starts: a kernel loaded lazily
 *                               waits for the whole context, where a peer may be spinning.
 * A program that starts CUDA before creating a world must set the last two itself.
 * Environment the library reads: AGMM_LOG (above); AGMM_TUNE and AGMM_TUNE_CACHE (how `auto`
 * chooses a backend and where it caches the choice: docs/auto.md); on rank 0 only.
 * Plain C11; usable from C++. */
#ifndef AGMM_H
#define AGMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AGMM_VERSION_MAJOR 0
#define AGMM_VERSION_MINOR 2
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

/* Never NULL; a static string. Local. */
const char *agmm_status_str(agmm_status status);
/* The version this library was built as (AGMM_VERSION of its header). Local. */
int agmm_version(void);

/* ---- operations ------------------------------------------------------------------------- */

typedef enum {
    AGMM_OP_AG_MATMUL = 0,
    AGMM_OP_ALL_REDUCE = 1,
    AGMM_OP_ALL_REDUCE_RMSNORM = 2
} agmm_op;

/* "ag_matmul", "all_reduce", "all_reduce_rmsnorm"; "?" for an unknown value. Never NULL. Local. */
const char *agmm_op_name(agmm_op op);

typedef enum { AGMM_DTYPE_BF16 = 0, AGMM_DTYPE_F32 } agmm_dtype;

typedef enum {
    AGMM_LAYOUT_COL_MAJOR = 0, /* B^T is a contiguous N x K matrix (the seed's layout) */
    AGMM_LAYOUT_ROW_MAJOR      /* B is a contiguous K x N matrix */
} agmm_layout;

/* ---- worlds and ranks ------------------------------------------------------------------- */

typedef enum {
    AGMM_WORLD_AUTO = 0,  /* GPUs if a GPU is visible, else the CPU world. A visible GPU that
                             cannot be used (a driver or NCCL problem) is an error, not the CPU. */
    AGMM_WORLD_CPU,       /* ranks are threads, memory is host memory; no GPU needed */
    AGMM_WORLD_GPU,       /* one thread per GPU, NCCL communicators, NCCL windows */
    AGMM_WORLD_EMULATED   /* more ranks than GPUs: ranks share devices round-robin; no NCCL */
} agmm_world_kind;

typedef struct {
    agmm_world_kind kind;
    int nranks;               /* 0: one per visible GPU (GPU), 4 (CPU); emulated: required */
    double timeout_s;         /* bound on every wait for a peer; 0 means 5 s */
    int allow_nvls;           /* 0 (default): NCCL_NVLS_ENABLE=0. 1 leaves NCCL's choice alone.
                                 Never set on shared hosts: NVLink multicast can take them down. */
    int32_t reserved[11];     /* must be zero */
} agmm_world_config;

typedef struct agmm_world agmm_world;
typedef struct agmm_ctx agmm_ctx;
typedef struct agmm_plan agmm_plan;

/* Creates a world. Local (one call per process). Returns AGMM_ERR_INVALID_ARG for a bad config,
 * AGMM_ERR_UNSUPPORTED for a kind this build or machine lacks, AGMM_ERR_VERSION when NCCL headers
 * and library differ. On failure *world is NULL and, if errbuf is not NULL, errbuf (errbuf_len
 * bytes) holds the detail. */
agmm_status agmm_world_create(agmm_world **world, const agmm_world_config *config, char *errbuf,
                              size_t errbuf_len);
/* Local. Every context of the world must be destroyed first, and every plan before its context:
 * a plan or context used after its world (or a plan after its context) is destroyed is undefined
 * behaviour, not an error (telling a freed handle from a live one would cost a lookup per call).
 * (In a world of processes, peers still waiting for this rank then fail at once.) */
void agmm_world_destroy(agmm_world *world);
agmm_world_kind agmm_world_kind_of(const agmm_world *world);
int agmm_world_nranks(const agmm_world *world);       /* W */
int agmm_world_local_ranks(const agmm_world *world);  /* ranks driven by this process */
int agmm_world_first_rank(const agmm_world *world);   /* global rank of local rank 0 */
/* Text for a banner: device names, NCCL version, emulation. Never NULL; owned by the world. */
const char *agmm_world_describe(const agmm_world *world);

/* ---- process worlds: one rank per process (torchrun, mpirun, srun, or the caller's own) ---- */

/* 256, not NCCL's 128: a GPU world's id carries NCCL's unique id and agmm's own header. */
#define AGMM_UNIQUE_ID_BYTES 256
/* What the processes of one world share to find each other: opaque bytes, made by one process
 * with agmm_unique_id_create and sent to the others over the caller's own channel (MPI_Bcast, a
 * torch.distributed broadcast). An id serves one world: make a fresh one for the next. */
typedef struct {
    unsigned char bytes[AGMM_UNIQUE_ID_BYTES];
} agmm_unique_id;

/* Makes a fresh id for a world of `kind` (AUTO is resolved here: GPU if a GPU is visible, else
 * CPU; a GPU world's id carries NCCL's unique id, which honours NCCL_COMM_ID). Local: call it on
 * one process (rank 0) only. Statuses: AGMM_ERR_INVALID_ARG (id NULL, kind out of range),
 * AGMM_ERR_UNSUPPORTED (a GPU kind in a build without CUDA), AGMM_ERR_NCCL. */
agmm_status agmm_unique_id_create(agmm_world_kind kind, agmm_unique_id *id);

typedef struct {
    agmm_world_kind kind;     /* AUTO: the id's kind; without an id, GPUs if a GPU is visible,
                                 else the CPU. Every rank must end up with the same kind. */
    int rank, nranks;         /* -1 both: from the launcher's environment (torchrun's RANK and
                                 WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_*, MPICH's PMI_*, Slurm's
                                 SLURM_PROCID/SLURM_NTASKS; docs/processes.md) */
    int device;               /* CUDA device of this rank; -1: the launcher's local rank (GPU
                                 worlds; without one, rank modulo the visible GPUs), 0 (emulated
                                 worlds, where every process shares one GPU) */
    const agmm_unique_id *id; /* from agmm_unique_id_create on rank 0; NULL: bootstrap from the
                                 environment (docs/processes.md) */
    void *nccl_comm;          /* GPU worlds: an ncclComm_t of these ranks to borrow (not destroyed,
                                 finalised or aborted by agmm); NULL: agmm makes its own */
    double timeout_s;         /* bound on every wait for a peer; 0 means 5 s */
    int allow_nvls;           /* as in agmm_world_config */
    int multi_host;           /* explicit rank/nranks only: 1 if the ranks run on several hosts (a
                                 GPU world, whose ranks then meet through NCCL alone); 0: one host.
                                 With -1 ranks the launcher's variables say (LOCAL_WORLD_SIZE...) */
    int32_t reserved[9];      /* must be zero */
} agmm_join_config;

/* Joins a world whose ranks are processes, as one rank (agmm_world_local_ranks == 1); then
 * agmm_ctx_create(&ctx, world, agmm_world_first_rank(world)) on the calling thread, and
 * agmm_world_run works too (one thread). Collective over the processes, within the timeout: on
 * one host they meet through abstract Unix sockets named after the job ("@agmm-<hash>-<rank>");
 * across hosts through NCCL. Before building the world every rank probes what it needs and says
 * what is missing (peer access between the GPUs, NCCL_P2P_DISABLE, the CUDA VMM handle type of
 * emulated worlds, ranks on several hosts): the symmetric-memory backends then report
 * "skipped: ..." (agmm_backend_available) and `auto` takes `nccl`. On failure *world is NULL and
 * errbuf holds the detail (which variable is missing, which rank never came); every rank that
 * got as far as meeting its peers fails with the same reason. Statuses as agmm_world_create,
 * plus AGMM_ERR_TIMEOUT, and AGMM_ERR_INVALID_ARG for a malformed AGMM_FAULT (README; its `join`
 * point is here). agmm_world_destroy is then local. */
agmm_status agmm_world_join(agmm_world **world, const agmm_join_config *config, char *errbuf, size_t errbuf_len);

/* Creates the context of global rank `rank` (one of this process's local ranks). Collective over
 * the world: every rank calls it, each on its own thread (agmm_world_run does this). The
 * calling thread is the one that enqueues the rank's work from then on (its CUDA device is made
 * current). Statuses: AGMM_ERR_INVALID_ARG (rank out of range, a malformed AGMM_FAULT),
 * AGMM_ERR_TIMEOUT (a peer never came), CUDA/NCCL errors; the detail of a failure goes to stderr. */
agmm_status agmm_ctx_create(agmm_ctx **ctx, agmm_world *world, int rank);
/* Collective: every rank destroys its context, after its plans. */
void agmm_ctx_destroy(agmm_ctx *ctx);
int agmm_ctx_rank(const agmm_ctx *ctx);
int agmm_ctx_device(const agmm_ctx *ctx);   /* CUDA device ordinal; -1 in the CPU world */
/* The detail of this rank's last failure, "" if none. Never NULL. Owned by ctx. */
const char *agmm_last_error(const agmm_ctx *ctx);
/* Blocks until the work this rank enqueued has finished; reports an asynchronous failure
 * (AGMM_ERR_TIMEOUT naming the peer, op and chunk, or a CUDA error). Local. Bounded: where the rank
 * has an NCCL communicator, work still unfinished after the world's timeout (an NCCL operation
 * waiting for a peer that died or stalled) gives AGMM_ERR_TIMEOUT, the communicator is aborted
 * (unless borrowed) and the world is unusable; so time a long queue of runs against it. */
agmm_status agmm_ctx_sync(agmm_ctx *ctx);

/* Runs fn(ctx_of_rank, arg) on one thread per local rank, after creating each rank's context,
 * and returns the first non-success status; fn runs only once every rank has its context.
 * A convenience for one-process worlds. */
typedef agmm_status (*agmm_rank_fn)(agmm_ctx *ctx, void *arg);
agmm_status agmm_world_run(agmm_world *world, agmm_rank_fn fn, void *arg);

/* ---- backends ---------------------------------------------------------------------------- */

/* The backends of `op`, in the library's order: index 0, 1, ... until NULL. The names are what
 * descriptors take in `backend`. Never lists "auto". Local. */
const char *agmm_backend_name(agmm_op op, int index);
/* One line on what backend `name` of `op` does; NULL if op has no such backend. Local. */
const char *agmm_backend_summary(agmm_op op, const char *name);
/* 1 if plans of `op` with backend `name` can run in this world; else 0, with the reason in why
 * (why_len bytes, if why is not NULL): "unknown backend", or why the world cannot run it
 * ("needs NCCL, but ranks share a GPU"). "auto" and NULL give 1; with world NULL, 1 for any
 * backend `op` has (the name alone is checked). Local. */
int agmm_backend_available(const agmm_world *world, agmm_op op, const char *name, char *why, size_t why_len);

/* ---- plans ------------------------------------------------------------------------------- */

typedef struct {
    int64_t m;             /* rows of A per rank (the seed's M), >= 1 */
    int64_t n;             /* >= 1; a multiple of 8 with a row-major B (16-byte rows) */
    int64_t k;             /* a multiple of 8 (16-byte rows of A for TMA) */
    agmm_layout b_layout;
    int splits;            /* chunks per rank for the chunked backends: 0 (means 1) .. min(m, 1024) */
    const char *backend;   /* NULL or "auto": the library chooses; else agmm_backend_name(AG_MATMUL, i) */
    int64_t reserved[8];   /* must be zero */
} agmm_ag_matmul_desc;

typedef struct {
    const void *b;         /* K x N bf16 in the plan's b_layout; caller-owned */
    void *a_gathered;      /* (W*m) x k bf16 out; caller-owned */
    void *c;               /* (W*m) x n bf16 out; caller-owned */
    const void *input;     /* NULL: A_r is in agmm_plan_input(plan). Else A_r is here: inside memory
                              from agmm_symmetric_alloc, 16-byte aligned, at the same offset in that
                              allocation on every rank; nothing is copied */
    void *reserved[4];     /* must be NULL */
} agmm_ag_matmul_io;

typedef struct {
    int64_t n;             /* elements per rank, >= 1 */
    agmm_dtype dtype;
    const char *backend;   /* NULL or "auto": the library chooses; else agmm_backend_name(ALL_REDUCE, i) */
    int64_t reserved[8];   /* must be zero */
} agmm_all_reduce_desc;

typedef struct {
    void *out;             /* n elements out; may equal the input (in place); caller-owned */
    const void *input;     /* NULL: the vector is in agmm_plan_input(plan). Else it is here, as for
                              agmm_ag_matmul_io.input */
    void *reserved[6];     /* must be NULL */
} agmm_all_reduce_io;

/* Plans an operation on one rank. Collective (it allocates symmetric memory; every rank passes
 * the same descriptor). The descriptor is copied; the backend string need not outlive the call.
 * The plan owns its symmetric input buffer (agmm_plan_input). With backend NULL or "auto" the
 * library chooses, every rank alike, and on GPUs it measures by default: this call then plans
 * and runs every backend that can run here, a few times each, on its own stream and buffers
 * (tens of milliseconds to a few hundred for a new shape; nothing for a shape whose choice is
 * cached); agmm_plan_backend says what it chose (docs/auto.md). Before anything is allocated the
 * ranks compare their descriptors (with the backend each resolved) and memory verdicts: ranks
 * that disagree, or one short of memory, fail the same way on every rank. Statuses:
 * AGMM_ERR_INVALID_ARG (a shape or backend, named in agmm_last_error; or ranks that disagree,
 * naming them), AGMM_ERR_UNSUPPORTED (a backend this world cannot run: "skipped: ..."),
 * AGMM_ERR_NO_MEMORY (the memory needed and available, named), CUDA/NCCL/cuBLAS errors,
 * AGMM_ERR_TIMEOUT. */
agmm_status agmm_plan_ag_matmul(agmm_plan **plan, agmm_ctx *ctx, const agmm_ag_matmul_desc *desc);
agmm_status agmm_plan_all_reduce(agmm_plan **plan, agmm_ctx *ctx, const agmm_all_reduce_desc *desc);
/* Collective: a rank destroys its plans in the same order as its peers. */
void agmm_plan_destroy(agmm_plan *plan);
agmm_op agmm_plan_op(const agmm_plan *plan);
/* The backend that runs ("auto" resolved); "" for NULL. Owned by the library. */
const char *agmm_plan_backend(const agmm_plan *plan);

/* The rank's symmetric input buffer, owned by the plan, 16-byte aligned: A_r (m x k bf16,
 * row-major) for ag_matmul, the n-element vector for all_reduce, x_r (T x H bf16, row-major) for
 * all_reduce_rmsnorm. Device memory on GPUs, host memory in the CPU world. The caller writes it
 * (ordered before the run on the same stream) and must not write it again until that run has
 * completed on its stream. NULL for NULL. */
void *agmm_plan_input(agmm_plan *plan);

/* Symmetric memory for the caller: `bytes` on every rank, zeroed, 256-byte aligned, that runs
 * read in place (io.input), so a producer can write its shard or vector there and no copy is
 * made. Device memory on GPUs, host memory in the CPU world. Collective (every rank asks for the
 * same size, in the same order). Freed by agmm_symmetric_free (collective, NULL-safe; in the same
 * order on every rank) or with the context. Statuses: AGMM_ERR_INVALID_ARG, AGMM_ERR_NO_MEMORY,
 * CUDA/NCCL errors, AGMM_ERR_TIMEOUT. */
agmm_status agmm_symmetric_alloc(agmm_ctx *ctx, size_t bytes, void **ptr);
void agmm_symmetric_free(agmm_ctx *ctx, void *ptr);

/* Enqueues one run of an ag_matmul / all_reduce plan on `stream` (a cudaStream_t; the NULL stream
 * is refused where ranks share a GPU). Collective: every rank runs its plans in the same order.
 * Work on `stream` after this call sees all outputs. Outputs must be 16-byte aligned on GPUs
 * (all_reduce: element-aligned), and must not overlap the input except io.out == input. A missing
 * peer surfaces as AGMM_ERR_TIMEOUT from agmm_ctx_sync or from a later run; after any failed run
 * the rank is out of step with its peers and every later run fails: destroy the plans and the
 * context. Statuses: AGMM_ERR_INVALID_ARG (io, a plan of another operation), AGMM_ERR_TIMEOUT,
 * AGMM_ERR_UNSUPPORTED (a `pull` capture past its inputs, below), CUDA/NCCL/cuBLAS errors.
 *
 * Steps back to back: once the run has completed on `stream` (work enqueued after it on `stream`
 * runs after it), this rank may overwrite its input, B and the outputs: no peer reads them any
 * more. Nothing else need be waited for.
 *
 * Streams: a rank's runs execute on the device one after another, in the order they were called,
 * whatever streams they are enqueued on (each run waits for the rank's previous one), so running a
 * plan on two streams is safe; its runs are serialised, never overlapped.
 *
 * CUDA graphs: a run of any GPU backend may be captured (cudaStreamBeginCapture on `stream`; where
 * ranks are threads of one process, with cudaStreamCaptureModeThreadLocal or Relaxed, since the
 * ranks' threads keep calling CUDA). Epochs and flags live in device memory and advance on the
 * device, so every replay is a new step. Capturing is collective like running: every rank captures
 * the same runs in the same order and replays its graph where it would have run them. The io
 * pointers are fixed in the graph: refill those buffers between replays. A `pull` plan keeps what
 * it derives from the input pointers (a tensor map per rank) for 16 distinct inputs at most (the
 * plan's own, io.input values), and an input used in a capture keeps its entry for the plan's
 * life: a capture of a new input when captures hold all 16 fails with AGMM_ERR_UNSUPPORTED (make
 * another plan). A replay is ordered only by the stream it is launched on (a graph cannot wait for
 * work outside it): launch it on a stream ordered after the rank's earlier runs, and enqueue no
 * run of the rank on another stream while it may still be executing. agmm_ctx_sync also waits for
 * replays launched so far. The CPU world has no graphs. */
agmm_status agmm_ag_matmul(agmm_plan *plan, const agmm_ag_matmul_io *io, void *stream);
agmm_status agmm_all_reduce(agmm_plan *plan, const agmm_all_reduce_io *io, void *stream);

/* ---- all_reduce_rmsnorm: the all-reduce that ends a layer, with bias, residual and RMSNorm ---- */

/* What it computes, row by row (t < T) and column by column (h < H), on every rank:
 *   r'[t][h] = bf16( x_0[t][h] + x_1[t][h] + ... + x_{W-1}[t][h] + bias[h] + residual[t][h] )
 *   y[t][h]  = bf16( r'[t][h] * rstd[t] * gamma[h] ),  rstd[t] = 1 / sqrt(mean_h(r'[t][h]^2) + eps)
 * in fp32, summed in that order (ranks 0..W-1, then bias, then residual) and rounded once to r';
 * the norm is taken of the rounded r' (the residual the next layer reads: what serving engines
 * do). docs/all_reduce_rmsnorm.md gives the order of every fp32 operation: the backends one_shot
 * and two_shot, in every world, give bit for bit the same r' and y on every rank; `nccl` rounds the
 * sum to bf16 first (ncclAllReduce's output) and sums in NCCL's order.
 * bias, residual and gamma are replicated in tensor parallelism and must hold the same values on
 * every rank: a backend may use another rank's copy for some rows (two_shot normalises each row on
 * the rank that owns it). */
typedef struct {
    int64_t tokens;        /* T: rows of x, >= 1 */
    int64_t hidden;        /* H: columns, a multiple of 8 (16-byte rows), >= 8 */
    double eps;            /* > 0 and finite, used as fp32 (it must not round to 0 or inf there) */
    const char *backend;   /* NULL or "auto": the library chooses; else agmm_backend_name(ALL_REDUCE_RMSNORM, i) */
    int64_t reserved[8];   /* must be zero */
} agmm_all_reduce_rmsnorm_desc;

/* One run's buffers: T x H and H bf16 arrays, row-major, caller-owned, 16-byte aligned on GPUs
 * (device memory there, host memory in the CPU world). The outputs must not overlap the input or
 * each other, nor gamma, bias or residual, except residual_out == residual (the residual updated
 * in place). */
typedef struct {
    void *y;               /* T x H out: RMSNorm(r') * gamma */
    void *residual_out;    /* T x H out: r', the new residual; may equal residual */
    const void *gamma;     /* H: the norm's weight; required */
    const void *bias;      /* H, or NULL: no bias */
    const void *residual;  /* T x H, or NULL: no residual */
    const void *input;     /* NULL: x_r is in agmm_plan_input(plan) (T x H). Else it is here, as for
                              agmm_all_reduce_io.input */
    void *reserved[4];     /* must be NULL */
} agmm_all_reduce_rmsnorm_io;

/* Plans an all_reduce_rmsnorm on one rank: as agmm_plan_all_reduce (collective, the descriptor
 * copied, the plan owning its symmetric input of T x H bf16, `auto` choosing alike on every
 * rank). Statuses as agmm_plan_ag_matmul: AGMM_ERR_INVALID_ARG names the field ("hidden=100 is not
 * a multiple of 8: ..."). */
agmm_status agmm_plan_all_reduce_rmsnorm(agmm_plan **plan, agmm_ctx *ctx, const agmm_all_reduce_rmsnorm_desc *desc);
/* Enqueues one run on `stream`, as agmm_all_reduce: collective, the same stream, graph and
 * back-to-back rules (once the run has completed on `stream`, this rank may overwrite its input,
 * gamma, bias and residual, and read y and residual_out). The input is left unchanged. Statuses:
 * AGMM_ERR_INVALID_ARG (io: a missing y, residual_out or gamma, misalignment, overlap; a plan of
 * another operation), AGMM_ERR_TIMEOUT, CUDA/NCCL errors. */
agmm_status agmm_all_reduce_rmsnorm(agmm_plan *plan, const agmm_all_reduce_rmsnorm_io *io, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* AGMM_H */
