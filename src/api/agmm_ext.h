/* agmm's extras for its own benchmark (agmm-bench, tools/): the one internal header the tools
 * include beside agmm.h. Not installed; no stability promise. It gives them
 *   - the plain GEMM on a rank's device (the yardstick of the overlap column): the world's
 *     reference library (cuBLASLt on GPUs, the CPU world's GEMM) or agmm's GEMM engine;
 *   - descriptor checks without a world (so bad command lines fail before any device starts);
 *   - the host collectives its ranks merge their results with, when they are processes;
 *   - memory checks before allocating, and the fault spec's check (AGMM_FAULT, --fault);
 *   - core's helpers the benchmark shares with the library: bf16 conversion and the RNG
 *     (core/numeric.h), medians (core/stats.h), dtype sizes (core/validate.h), message text
 *     (core/text.h), and the knob table (core/knobs.h), which --help and --list-knobs print. */
#ifndef AGMM_API_AGMM_EXT_H
#define AGMM_API_AGMM_EXT_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"
#include "../core/knobs.h"
#include "../core/numeric.h"
#include "../core/stats.h"
#include "../core/text.h"
#include "../core/validate.h"

typedef struct agmm_ext_gemm agmm_ext_gemm;

typedef enum {
    AGMM_EXT_GEMM_LIBRARY = 0, /* cuBLASLt (gemm_lt.h: timed on a GPU of its own) on GPUs; the CPU GEMM */
    AGMM_EXT_GEMM_ENGINE       /* agmm's GEMM engine (GPUs only) */
} agmm_ext_gemm_kind;

/* A plain C = A * B (rows x k times k x n in `layout`, bf16) on ctx's device, on operands that
 * stay valid and unchanged in place until destroy (device memory on GPUs, host memory in the CPU
 * world; 16-byte aligned). Local. AGMM_ERR_UNSUPPORTED for the engine in the CPU world; the
 * detail goes to why (why_len bytes). */
agmm_status agmm_ext_gemm_create(agmm_ext_gemm **g, agmm_ctx *ctx, agmm_ext_gemm_kind kind, int64_t rows, int64_t n,
                                 int64_t k, agmm_layout layout, const void *a, const void *b, void *c, char *why,
                                 size_t why_len);
/* Enqueues one product on `stream` (blocking in the CPU world). */
agmm_status agmm_ext_gemm_run(agmm_ext_gemm *g, void *stream);
/* NULL-safe. */
void agmm_ext_gemm_destroy(agmm_ext_gemm *g);

/* The library's operations are the agmm_op values 0 .. agmm_ext_op_count() - 1, each with its type
 * (src/api): what the benchmark, the soak and the GPU step tests loop over, so that an operation
 * added later is in them without a line there. Local. */
int agmm_ext_op_count(void);

/* How the last plan this rank made with backend NULL or "auto" got its backend: *how is
 * "measured", "cached" (rank 0's memory or the cache file) or "static" (NULL before any such
 * plan), *tune_ms the milliseconds its creation spent measuring (0 unless measured). Local. */
void agmm_ext_auto_choice(const agmm_ctx *ctx, const char **how, double *tune_ms);

/* The library's descriptor checks, for a world of `nranks` ranks, without a world: the backend
 * name is checked against the table too. AGMM_ERR_INVALID_ARG with the reason (no file:line) in
 * why. */
agmm_status agmm_ext_check_ag_matmul(const agmm_ag_matmul_desc *desc, int nranks, char *why, size_t why_len);
agmm_status agmm_ext_check_all_reduce(const agmm_all_reduce_desc *desc, char *why, size_t why_len);
/* The shape check of the row-parallel matmuls (op: AGMM_OP_MATMUL_REDUCE_SCATTER or
 * AGMM_OP_MATMUL_ALL_REDUCE), without a backend. */
agmm_status agmm_ext_check_matmul_reduce(agmm_op op, int64_t m, int64_t n, int64_t k, agmm_layout b_layout, char *why,
                                         size_t why_len);
agmm_status agmm_ext_check_all_reduce_rmsnorm(const agmm_all_reduce_rmsnorm_desc *desc, char *why, size_t why_len);

/* Process worlds (agmm_world_join): agmm-bench's ranks are then separate processes, so they
 * meet and merge their results through the library's host collectives, bounded by the world's
 * timeout (a rank that died fails them at once, naming it). In a one-process world the same
 * calls meet the world's rank threads. `bytes` <= 1024. Collective. */
agmm_status agmm_ext_barrier(agmm_ctx *ctx);
agmm_status agmm_ext_exchange(agmm_ctx *ctx, const void *mine, size_t bytes, void *all);
/* The rank a launcher gave this process (torchrun, mpirun, srun, or their variables set by hand),
 * so that agmm_world_join can form a world of processes from them; -1 without a launcher's
 * variables; 0 if they cannot be read (agmm_world_join then says why). */
int agmm_ext_launch_rank(void);

/* Whether this rank can allocate host_bytes of host memory and device_bytes on its device (host
 * memory in the CPU world), every rank sharing a pool asking the same (the host's: every rank on
 * this host, threads or processes; a GPU's: the ranks on it): AGMM_ERR_NO_MEMORY
 * with "needs X of host memory (...), but Y is available (MemAvailable)" in why. Local. */
agmm_status agmm_ext_check_memory(agmm_ctx *ctx, uint64_t host_bytes, uint64_t device_bytes, char *why,
                                  size_t why_len);

/* A fault spec (the grammar of AGMM_FAULT, README): AGMM_ERR_INVALID_ARG with what is wrong and the
 * grammar in why. */
agmm_status agmm_ext_check_fault(const char *spec, char *why, size_t why_len);

#endif
