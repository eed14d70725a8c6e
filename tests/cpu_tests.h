/* The CPU test cases, one group per file; tests/test_main.c lists them. */
#ifndef AGMM_TESTS_CPU_TESTS_H
#define AGMM_TESTS_CPU_TESTS_H

#include <stdint.h>

#include "agmm.h"

/* test_schedule.c: the tile schedule of core/schedule.h. */
void test_schedule_edges(void);
void test_schedule_random(void);
void test_schedule_fastdiv(void);
void test_schedule_dividers(void);
void test_schedule_pull_stores(void);
void test_schedule_reduce_scatter(void);

/* test_gemm_policy.c: the GEMM engine's config policy (plain C, no GPU). */
void test_gemm_policy_table(void);
void test_gemm_policy_measured(void);
void test_gemm_policy_model(void);
void test_gemm_policy_split_tail(void);
void test_gemm_policy_stream_k(void);

/* test_validate.c: argument checks and their messages. */
void test_validate_ag_matmul(void);
void test_validate_all_reduce(void);
void test_validate_plan_api(void);
void test_validate_mm_io(void);
void test_validate_host_other_call(void);
void test_validate_run_io(void);
void test_validate_run_misuse(void);
void test_validate_host_collective_order(void);

/* test_backends.c: the backend table and the public backend queries. */
void test_backend_table(void);
void test_backend_queries(void);
void test_backend_limits(void);

/* test_cpu_backends.c: every CPU backend against the fp64 reference. */
void test_cpu_reference(void);
void test_cpu_ag_matmul_exact(void);
void test_cpu_ag_matmul_random(void);
void test_cpu_all_reduce(void);
void test_cpu_auto_backend(void);

/* test_matmul_reduce.c: matmul_reduce_scatter and matmul_all_reduce, every CPU backend. */
void test_matmul_reduce_exact(void);
void test_matmul_reduce_random(void);
void test_matmul_reduce_auto(void);
void test_matmul_reduce_rows(void);
void test_matmul_reduce_bad_args(void);
/* proc_matmul_reduce.c (agmm-proctest): one backend of a row-parallel matmul on odd shapes, in a
 * world of processes; PASS/FAIL lines per shape. stream: the rank's cudaStream_t on GPUs. */
void proc_matmul_reduce(agmm_ctx *ctx, int nranks, int gpu, void *stream, agmm_op op, const char *backend);
/* test_ar_norm.c: all_reduce_rmsnorm's CPU backends, checks and bounded waits. */
void test_arn_numerics(void);
void test_arn_cpu_backends(void);
void test_arn_validate(void);
void test_arn_timeout(void);
void test_arn_auto(void);
void test_arn_faults(void);

/* test_cpu_protocols.c: per-chunk waits of the fused GEMM, timeouts. */
void test_cpu_fused_waits(void);
void test_cpu_timeout_missing_rank(void);
void test_cpu_timeout_chunk(void);

/* test_symmetric.c: caller-owned symmetric memory as a run's input. */
void test_symmetric_input(void);
void test_symmetric_sizes(void);

/* test_ownership.c: memory outlives its owner for a late peer; agreed failures, unusable worlds. */
void test_ownership_late_rank(void);
void test_ownership_agreement(void);
/* test_fault.c: fault injection (AGMM_FAULT). */
void test_fault_spec(void);
void test_fault_any_rank(void);
void test_fault_matrix(void);

/* test_busy.c: busy spells (agmm_ctx_busy_begin) in a world of threads. */
void test_busy_threads(void);
void test_busy_misuse(void);
void test_busy_left_open(void);

/* test_steps.c: steps back to back, a rank slowed at random, inputs overwritten at once. */
void test_steps_back_to_back(void);

/* test_leaks.c: create/run/destroy cycles of plans and worlds leave the process flat. */
void test_leaks_plan_cycles(void);
void test_leaks_world_cycles(void);

/* test_messages.c: no message cut silently; rank lists and byte counts. */
void test_messages_truncation(void);
void test_messages_log_whole(void);
void test_messages_words(void);

/* test_plan_checks.c: memory and agreement, settled before a plan allocates. */
void test_plan_host_memory(void);
void test_plan_memory_check(void);
void test_plan_agreement(void);

/* test_run_check.c: AGMM_CHECK_RUNS=1, ranks that run different plans or inputs. */
void test_run_check(void);

/* 1 in a build under AddressSanitizer or ThreadSanitizer (whose reports go to stderr, and whose
 * allocators keep freed memory for a while). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif
/* test_pull.c: the pull backend's ready waits, closing barrier and timeouts. */
void test_pull_late_ready(void);
void test_pull_slow_reader(void);
void test_pull_timeouts(void);
/* test_mr_fused.c: the fused row-parallel matmuls' tile waits, slot-free waits and timeouts. */
void test_mr_fused_late_writer(void);
void test_mr_fused_slow_owner(void);
void test_mr_fused_timeouts(void);

/* test_tune.c: auto's cache file, measuring, agreement across ranks, the static rule, what it
 * reads from the operations' types. */
void test_tune_cache_file(void);
void test_tune_measured(void);
void test_tune_agreement(void);
void test_tune_groups(void);
void test_tune_off(void);
void test_tune_op_types(void);

/* test_knobs.c: the knob table, its values, and what reaches the worlds. */
void test_knobs_table(void);
void test_knobs_values(void);
void test_knobs_worlds(void);

/* Helpers of the CPU tests (test_cpu_backends.c). */
/* A CPU world of nranks ranks (timeout_s 0: the default), or NULL after a FAIL line. */
agmm_world *test_cpu_world(int nranks, double timeout_s);
/* A seed for the data of (base, rank, run, what), the same on every rank that asks. */
uint64_t test_seed_of(uint64_t base, int rank, int run, int what);
/* bf16 data: small integers in -exact_range..exact_range, or uniform in [-1, 1) if 0. */
void test_fill_bf16(uint16_t *x, int64_t count, uint64_t seed, int exact_range);
/* Writes AGMM_POISON_BF16 over count elements. */
void test_poison_bf16(uint16_t *x, int64_t count);

#endif
