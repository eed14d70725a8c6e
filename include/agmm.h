/* agmm: fused communication + compute kernels for tensor-parallel models on NVLink GPUs.
 *
 * Operations across the W ranks of a world (agmm_op):
 *   ag_matmul   every rank holds A_r (M x K, row-major) and B (K x N); every rank gets the
 *               gathered A = [A_0; ...; A_{W-1}] ((W*M) x K) and C = A * B ((W*M) x N).
 *               bf16 in and out, fp32 accumulation.
 *   all_reduce  every rank holds n elements; every rank gets their element-wise sum.
 *   matmul_reduce_scatter   every rank holds A_r (M x K) and B_r (K x N), K being its slice of
 *               the reduced dimension; rank r gets its block of rows of S = sum_r A_r * B_r
 *               (the row-parallel GEMM of a tensor-parallel layer, training and prefill).
 *   matmul_all_reduce       the same, every rank getting the whole S (M x N; decode, small M).
 *               Both: bf16 in and out; "the row-parallel matmuls" below says how S is summed.
 *   all_reduce_rmsnorm      every rank holds x_r (T x H), and bias (H) and residual (T x H) if
 *               any; every rank gets r' = sum_r x_r + bias + residual (the new residual) and
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
 *   - Each function's comment says, in this order: what it does; whether it is collective or
 *     local; who owns what it takes and gives; the statuses it returns besides AGMM_SUCCESS.
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
 *     that enqueue work are blocking instead. "Streams and CUDA graphs" below has the rules.
 *   - Limits that hold for every backend of an operation are the operation's (K a multiple of 8
 *     for ag_matmul); a backend's own are stated as that backend's (pull's captured inputs).
 *     agmm_backend_limit gives either as a number.
 *   - The library never writes to stdout and never exits the process (unless AGMM_FAULT, the
 *     fault injection of tests, asks a process-world rank to: README); diagnostics go to stderr,
 *     prefixed with the rank, at the level AGMM_LOG sets (error|warn|info|debug; default warn).
 *
 * Environment the library changes, each only where the variable is not already set:
 *   NCCL_NVLS_ENABLE=0          before NCCL starts, unless agmm_world_config.allow_nvls = 1 (NVLink
 *                               multicast can take a shared host down). If it is set to anything
 *                               but 0 while allow_nvls = 0, world creation fails instead.
 *   CUDA_DEVICE_MAX_CONNECTIONS=32   before CUDA starts: ranks sharing a GPU need their streams on
 *                               separate hardware queues (and, in an emulated world, streams made
 *                               once and kept while the ranks run: docs/architecture.md).
 *   CUDA_MODULE_LOADING=EAGER   emulated worlds only, before CUDA starts: a kernel loaded lazily
 *                               waits for the whole context, where a peer may be spinning.
 * A program that starts CUDA before creating a world must set the last two itself.
 * Environment the library reads: AGMM_LOG (above), AGMM_TIMEOUT_S (the timeout where a config
 * leaves it 0), AGMM_TUNE, AGMM_TUNE_CACHE, AGMM_TUNE_RUNS and AGMM_TUNE_BUDGET_MS (how `auto`
 * measures and where it caches its choices: docs/auto.md; rank 0's count), and what the README's
 * "Environment" lists (`agmm-bench --list-knobs` prints it). A value a variable does not allow
 * fails world creation with AGMM_ERR_INVALID_ARG naming it.
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

/* The status in words ("invalid argument"; "unknown status" for another value). Local. Never
 * NULL; a static string. */
const char *agmm_status_str(agmm_status status);
/* The version this library was built as (AGMM_VERSION of its header). Local. */
int agmm_version(void);

/* ---- operations ------------------------------------------------------------------------- */

/* AGMM_OP_NONE is no operation: what agmm_plan_op says of NULL. */
typedef enum {
    AGMM_OP_NONE = -1,
    AGMM_OP_AG_MATMUL = 0,
    AGMM_OP_ALL_REDUCE = 1,
    AGMM_OP_MATMUL_REDUCE_SCATTER = 2,
    AGMM_OP_MATMUL_ALL_REDUCE = 3,
    AGMM_OP_ALL_REDUCE_RMSNORM = 4
} agmm_op;

/* The operation's name: "ag_matmul", "all_reduce", "matmul_reduce_scatter", "matmul_all_reduce",
 * "all_reduce_rmsnorm"; "?" for any other value. Local. Never NULL; a static string. */
const char *agmm_op_name(agmm_op op);

typedef enum { AGMM_DTYPE_BF16 = 0, AGMM_DTYPE_F32 } agmm_dtype;

typedef enum {
    AGMM_LAYOUT_COL_MAJOR = 0, /* B^T is a contiguous N x K matrix (a torch.nn.Linear weight, out x in) */
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
    double timeout_s;         /* bound on every wait for a peer: 0.001..86400; 0: AGMM_TIMEOUT_S, unset 5 s */
    int allow_nvls;           /* 0 (default): NCCL_NVLS_ENABLE=0. 1 leaves NCCL's choice alone.
                                 Never set on shared hosts: NVLink multicast can take them down. */
    int32_t reserved[11];     /* must be zero */
} agmm_world_config;

typedef struct agmm_world agmm_world;
typedef struct agmm_ctx agmm_ctx;
typedef struct agmm_plan agmm_plan;

/* Creates a world of config's kind and size (NULL: AUTO, every field 0) whose ranks this process
 * drives. Local: one call per process. The caller owns *world until agmm_world_destroy; on failure
 * *world is NULL and errbuf (errbuf_len bytes, the caller's; may be NULL) holds the detail.
 * Statuses: AGMM_ERR_INVALID_ARG (a bad config, or an AGMM_* variable with a value it does not
 * allow), AGMM_ERR_UNSUPPORTED (a kind this build or machine lacks), AGMM_ERR_VERSION (NCCL
 * headers and library differ), AGMM_ERR_NO_MEMORY, CUDA/NCCL errors. */
agmm_status agmm_world_create(agmm_world **world, const agmm_world_config *config, char *errbuf,
                              size_t errbuf_len);
/* Destroys a world. Local (in a world of processes, peers still waiting for this rank then fail at
 * once). Every context of the world must be destroyed first, and every plan before its context: a
 * plan or context used after its world (or a plan after its context) is destroyed is undefined
 * behaviour, not an error (telling a freed handle from a live one would cost a lookup per call).
 * NULL-safe; cannot fail. */
void agmm_world_destroy(agmm_world *world);
/* The world's kind (never AUTO), its ranks W, the ranks this process drives, and the global rank
 * of its local rank 0. Local; world not NULL. */
agmm_world_kind agmm_world_kind_of(const agmm_world *world);
int agmm_world_nranks(const agmm_world *world);       /* W */
int agmm_world_local_ranks(const agmm_world *world);  /* ranks driven by this process */
int agmm_world_first_rank(const agmm_world *world);   /* global rank of local rank 0 */
/* Text for a banner: device names, NCCL version, emulation. Local. Never NULL ("(no world)" for
 * NULL); owned by the world. */
const char *agmm_world_describe(const agmm_world *world);
/* The bound on every wait for a peer that a world gets where its config leaves timeout_s 0, in
 * seconds: AGMM_TIMEOUT_S, else 5 (a value AGMM_TIMEOUT_S does not allow reads as 5 here; world
 * creation refuses it). Local; no world needed. */
double agmm_world_default_timeout_s(void);

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
 * one process (rank 0) only. *id is the caller's, filled. Statuses: AGMM_ERR_INVALID_ARG (id NULL,
 * kind out of range), AGMM_ERR_UNSUPPORTED (a GPU kind in a build without CUDA), AGMM_ERR_NCCL. */
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
    double timeout_s;         /* bound on every wait for a peer: 0.001..86400; 0: AGMM_TIMEOUT_S, unset 5 s */
    int allow_nvls;           /* as in agmm_world_config */
    int multi_host;           /* explicit rank/nranks only: 1 if the ranks run on several hosts (a
                                 GPU world, whose ranks then meet through NCCL alone); 0: one host.
                                 With -1 ranks the launcher's variables say (LOCAL_WORLD_SIZE...) */
    int32_t reserved[9];      /* must be zero */
} agmm_join_config;

/* Joins a world whose ranks are processes, as one rank (agmm_world_local_ranks == 1); then
 * agmm_ctx_create(&ctx, world, agmm_world_first_rank(world)) on the calling thread, and
 * agmm_world_run works too (one thread). Before building the world every rank probes what it
 * needs and says what is missing (peer access between the GPUs, NCCL_P2P_DISABLE, the CUDA VMM
 * handle type of emulated worlds, ranks on several hosts): the symmetric-memory backends then
 * report "skipped: ..." (agmm_backend_available) and `auto` takes `nccl`. Collective over the
 * processes, within the timeout: on one host they meet through abstract Unix sockets named after
 * the job ("@agmm-<hash>-<rank>"); across hosts through NCCL. The caller owns *world until
 * agmm_world_destroy (then local); on failure *world is NULL and errbuf (the caller's) holds the
 * detail (which variable is missing, which rank never came), the same on every rank that got as
 * far as meeting its peers. Statuses as agmm_world_create, plus AGMM_ERR_TIMEOUT, and
 * AGMM_ERR_INVALID_ARG for a malformed AGMM_FAULT (README; its `join` point is here). */
agmm_status agmm_world_join(agmm_world **world, const agmm_join_config *config, char *errbuf, size_t errbuf_len);

/* Creates the context of global rank `rank` (one of this process's local ranks): its device,
 * streams, communicator and symmetric heap. The calling thread is the one that enqueues the
 * rank's work from then on (its CUDA device is made current). Collective over the world: every
 * rank calls it, each on its own thread (agmm_world_run does this). The caller owns *ctx until
 * agmm_ctx_destroy; the world must outlive it. Statuses: AGMM_ERR_INVALID_ARG (rank out of range,
 * a malformed AGMM_FAULT), AGMM_ERR_TIMEOUT (a peer never came), AGMM_ERR_NO_MEMORY, CUDA/NCCL
 * errors; the detail of a failure goes to stderr. */
agmm_status agmm_ctx_create(agmm_ctx **ctx, agmm_world *world, int rank);
/* Destroys a context and the symmetric memory it still holds. Collective: every rank destroys its
 * context, after its plans. NULL-safe; cannot fail. */
void agmm_ctx_destroy(agmm_ctx *ctx);
/* The context's global rank, and its CUDA device ordinal (-1 in the CPU world). Local; -1 for
 * NULL. */
int agmm_ctx_rank(const agmm_ctx *ctx);
int agmm_ctx_device(const agmm_ctx *ctx);
/* The detail of this rank's last failure, "" if none. Local. Never NULL; owned by ctx, valid until
 * the rank's next call. */
const char *agmm_last_error(const agmm_ctx *ctx);
/* Blocks until the work this rank enqueued has finished, and reports an asynchronous failure.
 * Local. Bounded: where the rank has an NCCL communicator, work still unfinished after the
 * world's timeout (an NCCL operation waiting for a peer that died or stalled) gives
 * AGMM_ERR_TIMEOUT, the communicator is aborted (unless borrowed) and the world is unusable; so
 * time a long queue of runs against it. Statuses: AGMM_ERR_INVALID_ARG (ctx NULL),
 * AGMM_ERR_TIMEOUT (naming the peer, operation and chunk), CUDA/NCCL errors. */
agmm_status agmm_ctx_sync(agmm_ctx *ctx);

/* Marks this rank busy with work of its own between collective calls (loading weights, writing a
 * checkpoint, checking a result, timing something alone), until agmm_ctx_busy_end: peers waiting
 * for this rank in the host-side steps of collective calls (context, plan and symmetric-memory
 * creation, and their agreements) see it alive and busy and wait for it without the world's
 * timeout; a whole timeout starts when the spell ends. A busy process that dies is still reported
 * within the timeout (a world of processes on one host watches its peers' processes). Not
 * covered: the waits inside a run (its barriers and flags keep their bound, so finish solo work
 * before the peers start a run with this rank), and worlds spanning hosts (peers there cannot see
 * it). Spells nest; only the outermost shows. Local. `what` (a short text saying what) is the
 * caller's, copied. Statuses: AGMM_ERR_INVALID_ARG (ctx NULL; an end without a begin). */
agmm_status agmm_ctx_busy_begin(agmm_ctx *ctx, const char *what);
agmm_status agmm_ctx_busy_end(agmm_ctx *ctx);

/* Creates each local rank's context on a thread of its own, runs fn(ctx, arg) there once every
 * rank has its context, then destroys the contexts: a convenience for one-process worlds. Local
 * (it makes the collective calls of every local rank). fn and arg are the caller's; each ctx
 * lives for fn's call only. Statuses: the first failure of a context's creation or of fn;
 * AGMM_ERR_INVALID_ARG (world or fn NULL), AGMM_ERR_INTERNAL (a thread could not start, or a
 * peer has no context). */
typedef agmm_status (*agmm_rank_fn)(agmm_ctx *ctx, void *arg);
agmm_status agmm_world_run(agmm_world *world, agmm_rank_fn fn, void *arg);

/* ---- backends ---------------------------------------------------------------------------- */

/* The name of backend `index` of `op`, in the library's order: index 0, 1, ... until NULL. The
 * names are what descriptors take in `backend`; "auto" is never listed. Local. A static string;
 * NULL past the last. */
const char *agmm_backend_name(agmm_op op, int index);
/* One line on what backend `name` of `op` does. Local. A static string; NULL if op has no such
 * backend. */
const char *agmm_backend_summary(agmm_op op, const char *name);
/* Whether plans of `op` with backend `name` can run in `world`: 1, or 0 with the reason in why:
 * "unknown backend", or why the world cannot run it ("needs NCCL, but ranks share a GPU"). "auto"
 * and NULL give 1; with world NULL, 1 for any backend `op` has (the name alone is checked); an `op`
 * that is no operation gives 0 whatever the name. Local.
 * why (why_len bytes) is the caller's and may be NULL. */
int agmm_backend_available(const agmm_world *world, agmm_op op, const char *name, char *why, size_t why_len);

/* What a plan may ask for. An operation's limits hold for every one of its backends (so that
 * `auto` may take any); a backend's own limits are that backend's alone. */
typedef enum {
    AGMM_LIMIT_MAX_RANKS = 0,     /* the most ranks of a world: AGMM_MAX_RANKS, every operation */
    AGMM_LIMIT_MAX_ELEMS,         /* the most elements of any operand: 2^40, every operation */
    AGMM_LIMIT_K_MULTIPLE,        /* ag_matmul and the row-parallel matmuls: K is a multiple of
                                     this (8: 16-byte rows of A) */
    AGMM_LIMIT_N_MULTIPLE_ROW_B,  /* the same with a row-major B: N is a multiple of this (8) */
    AGMM_LIMIT_MAX_SPLITS,        /* ag_matmul: the most chunks per rank (1024; at most M too) */
    AGMM_LIMIT_CAPTURED_INPUTS    /* a backend's own: the most distinct inputs (the plan's own and
                                     io.input values) a plan's CUDA-graph captures may use; pull:
                                     16 (one tensor map per rank each) */
} agmm_limit;

/* Limit `what` of plans of `op` run by backend `name`, in *value; 0 where they have no such limit
 * (K_MULTIPLE of all_reduce, CAPTURED_INPUTS of ce). NULL or "auto": the strictest over op's
 * backends, which holds whichever one auto takes. Local. *value is the caller's. Statuses:
 * AGMM_ERR_INVALID_ARG (value NULL, an unknown operation, backend or limit). */
agmm_status agmm_backend_limit(agmm_op op, const char *name, agmm_limit what, int64_t *value);

/* ---- plans ------------------------------------------------------------------------------- */

typedef struct {
    int64_t m;             /* rows of A per rank (each rank's shard), >= 1 */
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

/* Plans an operation on one rank: checks the descriptor, chooses the backend, allocates the
 * plan's symmetric input and sets up everything its runs need. With backend NULL or "auto" the
 * library chooses, every rank alike, and on GPUs it measures by default: this call then plans
 * and runs every backend that can run here, a few times each, on its own stream and buffers
 * (tens of milliseconds to a few hundred for a new shape; nothing for a shape whose choice is
 * cached); agmm_plan_backend says what it chose (docs/auto.md). Before anything is allocated the
 * ranks compare their descriptors (with the backend each resolved) and memory verdicts: ranks
 * that disagree, or one short of memory, fail the same way on every rank. Collective: every rank
 * passes the same descriptor. The descriptor is copied (the backend string need not outlive the
 * call); the caller owns *plan until agmm_plan_destroy, and the plan owns its symmetric input
 * (agmm_plan_input). Statuses: AGMM_ERR_INVALID_ARG (a shape or backend, named in
 * agmm_last_error; or ranks that disagree, naming them), AGMM_ERR_UNSUPPORTED (a backend this
 * world cannot run: "skipped: ..."), AGMM_ERR_NO_MEMORY (the memory needed and available, named),
 * CUDA/NCCL/cuBLAS errors, AGMM_ERR_TIMEOUT. */
agmm_status agmm_plan_ag_matmul(agmm_plan **plan, agmm_ctx *ctx, const agmm_ag_matmul_desc *desc);
agmm_status agmm_plan_all_reduce(agmm_plan **plan, agmm_ctx *ctx, const agmm_all_reduce_desc *desc);
/* Destroys a plan and its symmetric input. Collective: a rank destroys its plans in the same
 * order as its peers. NULL-safe; cannot fail. */
void agmm_plan_destroy(agmm_plan *plan);
/* The plan's operation. Local. AGMM_OP_NONE for NULL. */
agmm_op agmm_plan_op(const agmm_plan *plan);
/* The backend that runs ("auto" resolved). Local. A static string; "" for NULL. */
const char *agmm_plan_backend(const agmm_plan *plan);

/* The rank's symmetric input buffer, 16-byte aligned: A_r (m x k bf16, row-major) for ag_matmul,
 * the n-element vector for all_reduce, x_r (T x H bf16, row-major) for all_reduce_rmsnorm; device
 * memory on GPUs, host memory in the CPU world. The caller writes it (ordered before the run on
 * the same stream) and must not write it again until that run has completed on its stream. Local.
 * Owned by the plan; NULL for NULL, and for the row-parallel matmuls, which take A_r in their io. */
void *agmm_plan_input(agmm_plan *plan);

/* Allocates symmetric memory for the caller: `bytes` on every rank, zeroed, 256-byte aligned,
 * that runs read in place (io.input), so a producer can write its shard or vector there and no
 * copy is made. Device memory on GPUs, host memory in the CPU world. Collective: every rank asks
 * for the same size, in the same order (sizes that differ fail every rank, naming them). The caller owns *ptr until agmm_symmetric_free
 * (collective, in the same order on every rank; NULL-safe, cannot fail) or the context's
 * destruction. Statuses: AGMM_ERR_INVALID_ARG, AGMM_ERR_NO_MEMORY, CUDA/NCCL errors,
 * AGMM_ERR_TIMEOUT. */
agmm_status agmm_symmetric_alloc(agmm_ctx *ctx, size_t bytes, void **ptr);
void agmm_symmetric_free(agmm_ctx *ctx, void *ptr);

/* Enqueues one run of an ag_matmul / all_reduce plan on `stream` (a cudaStream_t; the NULL stream
 * is refused where ranks share a GPU): work on `stream` after this call sees all outputs. B and the
 * outputs must be 16-byte aligned on GPUs, element-aligned in the CPU world (all_reduce: element-
 * aligned everywhere); ag_matmul's outputs must not overlap each other, B or the input, and
 * all_reduce's output not the input except io.out == input. Steps back to back: once the run has completed on `stream`, this rank
 * may overwrite its input, B and the outputs (no peer reads them any more); nothing else need be
 * waited for. Collective: every rank runs its plans in the same order (streams and graphs: the
 * next section), io.input in the same buffer at the same offset; ranks that do not are not
 * detected by default (a timeout, or wrong data where two plans' runs pair up), but with
 * AGMM_CHECK_RUNS=1 when the world is made every run first compares them across ranks (one host exchange)
 * and fails every rank with AGMM_ERR_INVALID_ARG naming the rank that differs. io and its buffers are the caller's; nothing is kept after the call but what a
 * graph capture records. A missing peer surfaces as AGMM_ERR_TIMEOUT from agmm_ctx_sync or from a
 * later run; after any failed run the rank is out of step with its peers and every later run
 * fails: destroy the plans and the context. Statuses: AGMM_ERR_INVALID_ARG (io, a plan of another
 * operation), AGMM_ERR_TIMEOUT, AGMM_ERR_UNSUPPORTED (a capture past the backend's
 * AGMM_LIMIT_CAPTURED_INPUTS, next section), CUDA/NCCL/cuBLAS errors. */
agmm_status agmm_ag_matmul(agmm_plan *plan, const agmm_ag_matmul_io *io, void *stream);
agmm_status agmm_all_reduce(agmm_plan *plan, const agmm_all_reduce_io *io, void *stream);

/* ---- streams and CUDA graphs ------------------------------------------------------------
 *
 * Streams: a rank's runs execute on the device one after another, in the order they were called,
 * whatever streams they are enqueued on (each run waits for the rank's previous one), so running a
 * plan on two streams is safe; its runs are serialised, never overlapped. In the CPU world streams
 * are ignored and runs are blocking.
 *
 * CUDA graphs: a run of any GPU backend may be captured (cudaStreamBeginCapture on `stream`; where
 * ranks are threads of one process, with cudaStreamCaptureModeThreadLocal or Relaxed, since the
 * ranks' threads keep calling CUDA). Epochs and flags live in device memory and advance on the
 * device, so every replay is a new step. Capturing is collective like running: every rank captures
 * the same runs in the same order and replays its graph where it would have run them. The io
 * pointers are fixed in the graph: refill those buffers between replays. A replay is ordered only
 * by the stream it is launched on (a graph cannot wait for work outside it): launch it on a stream
 * ordered after the rank's earlier runs. A run enqueued after a replay was launched (in host order)
 * waits for that replay, whatever the streams, and agmm_ctx_sync waits for replays launched so far.
 * The CPU world has no graphs.
 *
 * A backend's own limit: a backend with AGMM_LIMIT_CAPTURED_INPUTS > 0 (pull: 16) keeps what it
 * derives from the input pointers for that many distinct inputs (the plan's own, io.input
 * values), and an input used in a capture keeps its entry for the plan's life: a run of a new
 * input when captures hold them all fails with AGMM_ERR_UNSUPPORTED (make another plan); runs
 * outside captures reuse the entries no capture holds. */

/* ---- the row-parallel matmuls: matmul_reduce_scatter, matmul_all_reduce ---------------------
 *
 * Every rank r holds A_r (M x K, row-major bf16) and B_r (K x N bf16 in b_layout), K being its
 * slice of the reduced dimension; S = sum over r of A_r * B_r is M x N. How S is summed, on every
 * backend: each rank's partial P_r = A_r * B_r is accumulated in fp32 and rounded once to bf16;
 * the partials are added in fp32 in the fixed order r = 0, 1, ..., W-1 and the sum rounded once
 * to bf16. No atomics: every run and every rank gives the same bits, and backends give the same
 * bits wherever their GEMMs round the partials alike (always on inputs whose products are exact;
 * in the CPU world always, since its backends share one GEMM; on GPUs a backend whose GEMMs are
 * per block of rows may see cuBLASLt pick another algorithm than a whole-matrix GEMM). The `nccl`
 * backends are the exception: NCCL adds in its own order.
 *
 * Row split of matmul_reduce_scatter, the same for every backend and world: with R = ceil(M/W),
 * rank q gets rows [min(q*R, M), min((q+1)*R, M)) of S. When W divides M every rank gets M/W rows;
 * otherwise the last ranks get fewer, and some none when M <= (W-1)*R (M = 5, W = 4: 2, 2, 1, 0
 * rows). The ranks' blocks are S's rows in rank order, so concatenating them gives S (what
 * torch.chunk does, and what a reduce-scatter padded to R rows per rank gives). */

/* The rows of S that rank `rank` of a world of `nranks` gets from matmul_reduce_scatter: returns
 * how many (0 .. R) and, if first_row is not NULL, the first one. -1 if an argument is out of range
 * (m not in 1..2^40, the most rows a descriptor allows; nranks not in 1..AGMM_MAX_RANKS; rank not in
 * 0..nranks-1). Local. */
int64_t agmm_matmul_reduce_scatter_rows(int64_t m, int nranks, int rank, int64_t *first_row);

typedef struct {
    int64_t m;             /* rows of A_r and of S (before the scatter), >= 1 */
    int64_t n;             /* columns of B_r and S, >= 1; a multiple of 8 with a row-major B */
    int64_t k;             /* this rank's slice of the reduced dimension: a multiple of 8 */
    agmm_layout b_layout;
    const char *backend;   /* NULL or "auto": the library chooses; else
                              agmm_backend_name(MATMUL_REDUCE_SCATTER, i) */
    int64_t reserved[8];   /* must be zero */
} agmm_matmul_reduce_scatter_desc;

typedef struct {
    const void *a;         /* A_r: M x K bf16, row-major; caller-owned, this rank's memory (no need
                              for symmetric memory: only this rank reads it) */
    const void *b;         /* B_r: K x N bf16 in the plan's b_layout; caller-owned */
    void *out;             /* this rank's rows of S (agmm_matmul_reduce_scatter_rows) x N bf16,
                              row-major; caller-owned; may be NULL when the rank gets no rows */
    void *reserved[5];     /* must be NULL */
} agmm_matmul_reduce_scatter_io;

typedef struct {
    int64_t m;             /* rows of A_r and S, >= 1 (decode: 1 .. 256) */
    int64_t n;             /* >= 1; a multiple of 8 with a row-major B */
    int64_t k;             /* this rank's slice of the reduced dimension: a multiple of 8 */
    agmm_layout b_layout;
    const char *backend;   /* NULL or "auto"; else agmm_backend_name(MATMUL_ALL_REDUCE, i) */
    int64_t reserved[8];   /* must be zero */
} agmm_matmul_all_reduce_desc;

typedef struct {
    const void *a;         /* A_r: M x K bf16, row-major; caller-owned, this rank's memory */
    const void *b;         /* B_r: K x N bf16 in the plan's b_layout; caller-owned */
    void *c;               /* S: M x N bf16, row-major, out; caller-owned */
    void *reserved[5];     /* must be NULL */
} agmm_matmul_all_reduce_io;

/* Plans a row-parallel matmul on one rank: what agmm_plan_ag_matmul does for ag_matmul (see it for
 * auto's measuring and the agreement of the ranks before anything is allocated); the plan
 * allocates the symmetric buffers its backend sums through. Collective: every rank passes the same
 * descriptor. The descriptor is copied; the caller owns *plan until agmm_plan_destroy. These plans
 * have no symmetric input: A_r comes in the io, and agmm_plan_input returns NULL. Statuses: as
 * agmm_plan_ag_matmul. */
agmm_status agmm_plan_matmul_reduce_scatter(agmm_plan **plan, agmm_ctx *ctx,
                                            const agmm_matmul_reduce_scatter_desc *desc);
agmm_status agmm_plan_matmul_all_reduce(agmm_plan **plan, agmm_ctx *ctx, const agmm_matmul_all_reduce_desc *desc);

/* Enqueues one run on `stream`: this rank's rows of S into io->out, or all of S into io->c.
 * io->a, io->b and the output must be 16-byte aligned on GPUs (2-byte in the CPU world); the output
 * must not overlap A or B.
 * Collective: every rank runs its plans in the same order (streams and graphs: "streams and CUDA
 * graphs" above). io and its buffers are the caller's: once the run has completed on `stream`,
 * this rank may overwrite A_r, B_r and the output (no peer reads them: only the plan's own
 * symmetric buffers cross ranks, and no peer touches this rank's any more). A missing peer and a
 * failed run as for agmm_ag_matmul. Statuses: AGMM_ERR_INVALID_ARG (io, a plan of another
 * operation), AGMM_ERR_TIMEOUT, CUDA/NCCL/cuBLAS errors. */
agmm_status agmm_matmul_reduce_scatter(agmm_plan *plan, const agmm_matmul_reduce_scatter_io *io, void *stream);
agmm_status agmm_matmul_all_reduce(agmm_plan *plan, const agmm_matmul_all_reduce_io *io, void *stream);

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
    const char *backend;   /* NULL or "auto": the library chooses; else
                              agmm_backend_name(ALL_REDUCE_RMSNORM, i) */
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

/* Plans an all_reduce_rmsnorm on one rank: what agmm_plan_ag_matmul does for ag_matmul (see it for
 * auto's measuring and the agreement of the ranks before anything is allocated); the plan
 * allocates its symmetric input (x_r: agmm_plan_input) and the buffers its backend meets through.
 * Collective: every rank passes the same descriptor. The descriptor is copied; the caller owns
 * *plan until agmm_plan_destroy. Statuses: as agmm_plan_ag_matmul (AGMM_ERR_INVALID_ARG names the
 * field: "hidden=100 is not a multiple of 8: ..."). */
agmm_status agmm_plan_all_reduce_rmsnorm(agmm_plan **plan, agmm_ctx *ctx, const agmm_all_reduce_rmsnorm_desc *desc);
/* Enqueues one run on `stream`: r' into io->residual_out and y into io->y, from x_r (the plan's
 * input or io->input), gamma, bias and residual; the input is left unchanged. Collective: every
 * rank runs its plans in the same order (streams and graphs: "streams and CUDA graphs" above). io
 * and its buffers are the caller's: once the run has completed on `stream`, this rank may
 * overwrite its input, gamma, bias and residual and read the outputs (no peer touches them any
 * more). A missing peer and a failed run as for agmm_ag_matmul. Statuses: AGMM_ERR_INVALID_ARG
 * (io: a missing y, residual_out or gamma, misalignment, overlap; a plan of another operation),
 * AGMM_ERR_TIMEOUT, CUDA/NCCL errors. */
agmm_status agmm_all_reduce_rmsnorm(agmm_plan *plan, const agmm_all_reduce_rmsnorm_io *io, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* AGMM_H */
