/* The fused row-parallel matmuls (internal; matmul_reduce_fused.c): the protocol that
 * matmul_reduce_scatter's and matmul_all_reduce's `fused` backends share, as implementations their
 * table entries point to, and its test hook. */
#ifndef AGMM_BACKENDS_MATMUL_REDUCE_FUSED_H
#define AGMM_BACKENDS_MATMUL_REDUCE_FUSED_H

#include <stdint.h>

#include "agmm.h"
#include "matmul_reduce.h"

/* The CPU world's and the GPUs' implementation; each serves either operation (plan->op). */
extern const agmm_backend_impl agmm_mr_fused_cpu;
#ifdef AGMM_HAVE_CUDA
extern const agmm_backend_impl agmm_mr_fused_gpu;
#endif

/* Test hook. From the next run on, this rank's GEMM starts `gemm_delay_ns` late (its partials land
 * late at their owners: they must wait for its flags), and, in the CPU world, the last sum of each
 * of its runs starts `reduce_delay_ns` late (it reads its slots late, after every peer has stored
 * its last tile of the run: their next runs must not overwrite them before). 0: no delay. On GPUs the GEMM delay is the engine's (its producers start late; a
 * kernel parameter, so a CUDA graph captured now keeps it) and reduce_delay_ns must be 0. Local;
 * call it between runs. AGMM_ERR_INVALID_ARG for a plan that is not a fused matmul_reduce_scatter
 * or matmul_all_reduce, or a negative delay; AGMM_ERR_UNSUPPORTED for a reduce delay on GPUs. */
agmm_status agmm_mr_fused_set_delay(agmm_plan *plan, int64_t gemm_delay_ns, int64_t reduce_delay_ns);

/* Test hook: re-plans the GEMM engine of a GPU fused plan with tile config `config` (an index of
 * agmm_gemm_config_name; -1: the policy's), with fresh signals for its tile grid and a fresh epoch,
 * so that a test can run the scatter epilogue under every config. Collective (every rank, the same
 * config), between runs, after every rank's last run has completed. The engine's statuses
 * (AGMM_ERR_INVALID_ARG naming config= for a config out of range or with a split tail); after a
 * failure the plan only refuses to run (destroy it). AGMM_ERR_UNSUPPORTED in the CPU world. */
agmm_status agmm_mr_fused_set_gemm_config(agmm_plan *plan, int config);

#endif
