/* The plain GEMMs of the backends that do not run the GEMM engine (internal), with cuBLASLt:
 *   C (rows x n, row-major bf16) = A (rows x k, row-major bf16) * B (k x n in b_layout),
 * fp32 accumulation, alpha 1, beta 0. Everything cuBLASLt needs is made at plan time
 * (descriptors, layouts, the algorithm: below); agmm_gemm_lt_run only enqueues the product.
 *
 * In cuBLAS (column-major) terms C^T = B^T A^T: m = n, n = rows, k = k; the first operand is
 * the B buffer (COL_MAJOR: B^T is N x K contiguous = K x N column-major with ld = K, op T;
 * ROW_MAJOR: a K x N row-major B is B^T column-major with ld = N, op N), the second the A
 * buffer (K x rows column-major, ld = K, op N), and C is n x rows column-major with ld = n. */
#ifndef AGMM_OPS_GEMM_LT_H
#define AGMM_OPS_GEMM_LT_H

#include <stdint.h>

#include "agmm.h"
#include "../core/error.h"
#include "../world/gpu_headers.h"

/* What a plan gives cuBLASLt for scratch: the size cuBLAS recommends on Hopper. */
#define AGMM_GEMM_LT_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct agmm_gemm_lt agmm_gemm_lt;

/* What a plan allows its GEMM: flags of agmm_gemm_lt_create. */
enum {
    /* Ranks share this GPU (an emulated world), so the GEMM may be launched while peers' kernels
     * spin on SMs waiting for this rank: then an algorithm whose CTAs come in clusters of more than
     * 2 is avoided where cuBLASLt offers another. Such a cluster needs that many free SMs in one
     * GPC, which peers' spinning blocks, spread over every GPC, can deny for good (seen on the
     * H200: cuBLAS's 8-CTA clusters at 512^3 never started under 3 peers' all-reduce blocks, a
     * timeout). Nothing is timed there. */
    AGMM_GEMM_LT_SHARED_DEVICE = 1u << 0,
};

/* Plans one GEMM shape. align_bytes (a power of two, 2..16) is the alignment every A and C
 * pointer given to run will have; B pointers must be 16-byte aligned. workspace_bytes is the
 * size of the workspace run will get. flags: the enum above. Statuses: AGMM_ERR_CUBLAS (incl. no
 * algorithm found). On a GPU of its own the algorithm is timed: cuBLASLt's heuristic offers up to
 * 8, and its first was up to 9% slower than the fastest of them on the H200's seed and model
 * shapes (18% at 256^3), so each is run on random scratch operands of the plan's shape with the
 * L2 flushed before each run (as agmm-bench times; on warm operands the pick lost up to 14% to
 * torch.matmul's kernel in agmm-bench, docs/results 2026-12-05), once untimed and then in three
 * rounds of one run each, taking turns (the GPU's clock moves under load), and the fastest
 * median kept (where it gains 1% or more; once per shape in a process; AGMM_LT_TUNE=0 turns it
 * off). That costs the plan a few milliseconds and, for the largest shapes, ~0.2 s, and scratch
 * memory of the operands' size and twice the L2 (skipped where over a quarter of the free memory). Products of one shape
 * may then differ in their last bits between processes; not within one. */
agmm_status agmm_gemm_lt_create(agmm_gemm_lt **out, cublasLtHandle_t lt, int64_t rows, int64_t n, int64_t k,
                                agmm_layout b_layout, unsigned align_bytes, size_t workspace_bytes, unsigned flags,
                                agmm_error *err);
/* Enqueues the product on stream. workspace: device memory of the planned size, used by one
 * stream at a time. */
agmm_status agmm_gemm_lt_run(const agmm_gemm_lt *g, const void *a, const void *b, void *c, void *workspace,
                             cudaStream_t stream, agmm_error *err);
/* NULL-safe. */
void agmm_gemm_lt_destroy(agmm_gemm_lt *g);

/* Runs g once on scratch data (a: rows x k, b: k x n, c: rows x n device buffers) and waits, so
 * that CUDA's lazy loading brings its kernel in now. Where ranks share a GPU, loading a kernel
 * during a run may wait for the whole context, including a peer's barrier that waits for this
 * rank: plans that can meet that call this at plan time. */
agmm_status agmm_gemm_lt_warm(const agmm_gemm_lt *g, const void *a, const void *b, void *c, void *workspace,
                              cudaStream_t stream, agmm_error *err);

/* The largest power of two <= 16 that divides `bytes` (the alignment of base + bytes when base
 * is 16-byte aligned). */
unsigned agmm_gemm_lt_align(uint64_t bytes);

#endif
