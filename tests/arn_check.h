/* all_reduce_rmsnorm test data and checks, shared by the CPU tests (test_ar_norm.c: threads), the
 * process tests (test_process.c) and the GPU tests (gpu/test_ar_norm.c).
 *
 * Every rank regenerates every rank's inputs from one seed (x_r per rank; gamma, bias and residual
 * the same on every rank, as in tensor parallelism), so each checks its own outputs alone:
 *   - against the fp64 reference (cpu/reference.h): r' bit for bit and y within one bf16
 *     rounding of it (|y - y_ref| <= 2^-8 |y_ref|) where the inputs are small integers (every sum
 *     exact); else both within a relative Frobenius error of 1e-2;
 *   - against the kernels' own fp32 order (core/rmsnorm.h), bit for bit: ARN_EXPECT_FUSED (the sum
 *     in fp32, ranks in order: one_shot, two_shot) or ARN_EXPECT_ROUNDED_SUM (the sum rounded to
 *     bf16 first: nccl's CPU stand-in, and NCCL itself where W <= 2); ARN_EXPECT_REFERENCE checks
 *     the reference alone (NCCL's order at W > 2);
 *   - no NaN: outputs are poisoned before every run. */
#ifndef AGMM_TESTS_ARN_CHECK_H
#define AGMM_TESTS_ARN_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"

typedef struct {
    int64_t tokens, hidden;
    double eps;
    int bias, residual;       /* 1: the run gets one */
    int in_place;             /* residual_out == residual (needs residual) */
    int symmetric_input;      /* x from agmm_symmetric_alloc memory through io.input */
    int exact;                /* small-integer inputs: every sum exact */
} arn_case;

typedef enum { ARN_EXPECT_FUSED = 0, ARN_EXPECT_ROUNDED_SUM, ARN_EXPECT_REFERENCE } arn_expect;

/* What backend `name` must match bit for bit in a world of nranks ranks (gpu: on GPUs, where
 * `nccl` is NCCL itself). */
arn_expect arn_expect_for(const char *backend, int gpu, int nranks);

/* "T=7 H=264 bias residual in place" */
const char *arn_case_name(const arn_case *c, char *buf, size_t len);

/* One rank's host data for a case. */
typedef struct {
    arn_case c;
    int nranks, rank;
    arn_expect expect;
    uint16_t *x;              /* nranks x T x H: every rank's input */
    uint16_t *gamma, *bias, *residual;  /* H, H (NULL without), T x H (NULL without) */
    uint16_t *r_ref16;        /* the reference's r', rounded once */
    double *r_ref, *y_ref;
    uint16_t *r_emul, *y_emul; /* the kernels' order (`expect`); unused for ARN_EXPECT_REFERENCE */
    uint16_t *r_got, *y_got;  /* what the caller downloaded */
    float *acc;               /* one row of scratch */
} arn_data;

/* 0, or -1 when host memory runs out (then fini is still safe). */
int arn_data_init(arn_data *d, const arn_case *c, int nranks, int rank, arn_expect expect);
void arn_data_fini(arn_data *d);
/* Fresh inputs from `seed` (the same on every rank) and what they must give. */
void arn_data_fill(arn_data *d, uint64_t seed);
/* This rank's x (T x H). */
const uint16_t *arn_data_mine(const arn_data *d);
/* Checks r_got and y_got; NULL if right, else what is wrong (in why). r_err and y_err: their
 * relative Frobenius errors against the reference (NaN stays NaN). */
const char *arn_data_check(const arn_data *d, double *r_err, double *y_err, char *why, size_t len);
/* A hash of y_got and r_got, for comparing ranks and backends. */
uint64_t arn_data_hash(const arn_data *d);

/* Device memory of a rank as the check runs it: host memory in the CPU world, CUDA memory on
 * GPUs (the stream orders the copies with the runs). Copies complete before they return. */
typedef struct {
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    int (*copy)(void *dst, const void *src, size_t bytes, void *stream); /* 0 on success */
    void *stream;
} arn_dev;

/* The host shim: malloc, free, memcpy. */
extern const arn_dev arn_dev_host;

#define ARN_MAX_RUNS 4

typedef struct {
    agmm_status status;       /* of the plan or the first failed call */
    char msg[400];            /* the first failure */
    int runs;                 /* runs completed and checked right */
    double r_err, y_err;      /* worst over the runs */
    uint64_t hash[ARN_MAX_RUNS];
} arn_result;

/* On one rank: plans `backend` for the case (collective), then `runs` runs with fresh inputs
 * (seed + run), outputs poisoned before each, every result checked (arn_data_check). The ranks
 * meet (agmm_ext_barrier) after their uploads and after their checks, so no rank's copies ever
 * wait behind a peer's spinning run. Collective. */
void arn_check_run(agmm_ctx *ctx, const char *backend, const arn_case *c, const arn_dev *dev, int runs,
                   uint64_t seed, arn_result *res);

#endif
