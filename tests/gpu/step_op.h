/* One operation in the step harness (steps.c): how its steps plan, make one slot's inputs, run
 * through the public API and check one slot's output. steps.c owns the buffers, the slots, the
 * uploads, the poison and the downloads, and calls these through its table `step_ops`; a new
 * operation is a file of its own (step_<op>.c) and a line there. */
#ifndef AGMM_TESTS_GPU_STEP_OP_H
#define AGMM_TESTS_GPU_STEP_OP_H

#include "gpu_tests.h"

#define STEP_ALIGN 256

struct step_op {
    agmm_op op;
    /* 1: the plan has an input buffer (agmm_plan_input) that a staged step first copies its
     * input into; 0: the input comes in the io (the row-parallel matmuls' A_r). */
    int plan_input;
    void (*name)(const step_case *sc, char *buf, size_t len);
    /* Plans (collective) into sr->plan and sets sr's in_bytes, b_bytes, ag_bytes and out_bytes;
     * *ref_bytes: what sr->ref must hold for fill and check. 0 after recording a failure. */
    int (*plan)(step_rank *sr, size_t *ref_bytes);
    /* Slot `slot`'s host inputs from sr->seed: `in` (in_bytes) and `b` (b_bytes). */
    void (*fill)(step_rank *sr, int slot, char *in, char *b);
    /* Enqueues one run of slot `slot`: `in` its device input (`io_input` when it is symmetric,
     * else NULL), `b` its device B slot, `out` its device output. */
    agmm_status (*run)(step_rank *sr, int slot, char *in, const void *io_input, const char *b, char *out,
                       cudaStream_t s);
    /* Slot `slot`'s downloaded output `out` (and sr->h_ag's slot) exact; else 0 after recording the
     * first difference, prefixed by `what`. */
    int (*check)(step_rank *sr, int slot, const char *out, const char *what);
};
typedef struct step_op step_op;

extern const step_op step_ag_matmul, step_matmul_reduce_scatter, step_matmul_all_reduce, step_all_reduce,
    step_all_reduce_rmsnorm;

static inline size_t step_round_up(size_t x) { return (x + STEP_ALIGN - 1) / STEP_ALIGN * STEP_ALIGN; }

/* A plan hook's end: 1 for AGMM_SUCCESS, else 0 after recording "plan: <status>: <last error>". */
int step_planned(step_rank *sr, agmm_status st);
/* The state of input `what` ('A' shard, 'B', 'V' all-reduce vector, 'N' all_reduce_rmsnorm) of
 * rank `rank` in slot `slot`. */
uint64_t step_input_state(uint64_t seed, int slot, int rank, int what);
/* count small integers in [-span, span] from `state`. */
void step_gen_small(int8_t *x, size_t count, uint64_t state, int span);
/* Small integers as bf16 or fp32. */
void step_to_dtype(const int8_t *x, size_t count, agmm_dtype dt, void *out);
/* The matmuls' fill: this rank's A (m x k) and B (k x n, column-major) in {-1, 0, 1}, bf16. */
void step_fill_ab(step_rank *sr, int slot, char *in, char *b);

#endif
