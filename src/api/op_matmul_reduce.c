/* The checks the row-parallel matmul operations share (op_matmul_reduce.h). */
#include "op_matmul_reduce.h"

#include "../core/text.h"
#include "../core/validate.h"

agmm_status agmm_op_mr_check(agmm_op op, int64_t m, int64_t n, int64_t k, agmm_layout b_layout,
                             const int64_t *reserved, size_t reserved_bytes, agmm_error *err)
{
    return agmm_check_matmul_reduce(agmm_op_name(op), m, n, k, b_layout, reserved, reserved_bytes, err);
}

int64_t agmm_op_mr_limit(agmm_limit what)
{
    switch (what) {
    case AGMM_LIMIT_K_MULTIPLE:
    case AGMM_LIMIT_N_MULTIPLE_ROW_B: return AGMM_MATMUL_REDUCE_ROW_MULTIPLE;
    default: return 0;
    }
}

int agmm_op_mr_scratch(int64_t m, int64_t n, int64_t k, int64_t out_rows, size_t bytes[])
{
    bytes[0] = (size_t)(m * k) * 2;
    bytes[1] = (size_t)(k * n) * 2;
    bytes[2] = (size_t)(out_rows * n) * 2;
    return 3;
}

const void *agmm_op_mr_input_of(const void *io) { return NULL; }

agmm_status agmm_op_mr_check_buffers(const agmm_plan *plan, int64_t m, int64_t n, int64_t k, const void *a,
                                     const void *b, void *out, const char *out_name, size_t out_bytes, agmm_error *err)
{
    const char *op = agmm_op_name(plan->op);
    const size_t a_bytes = (size_t)(m * k) * 2, b_bytes = (size_t)(k * n) * 2;
    /* The GPU GEMMs are set up for 16-byte aligned operands; the CPU world reads bf16 elements. */
    const size_t align = (agmm_ctx_info(plan->ctx)->caps & AGMM_CAP_GPU) ? 16 : 2;
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)out) % align != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s: io->a=%p, io->b=%p and io->%s=%p must be %zu-byte aligned",
                         op, a, b, out_name, out, align);
    if (out != NULL && (agmm_overlap(out, out_bytes, a, a_bytes) || agmm_overlap(out, out_bytes, b, b_bytes)))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s: io->%s=%p (%zu bytes) overlaps io->a=%p or io->b=%p", op,
                         out_name, out, out_bytes, a, b);
    return AGMM_SUCCESS;
}

size_t agmm_op_mr_describe(char *buf, size_t len, int64_t m, int64_t n, int64_t k, agmm_layout b_layout)
{
    return agmm_format(buf, len, "M=%lld N=%lld K=%lld b_layout=%s", (long long)m, (long long)n, (long long)k,
                       b_layout == AGMM_LAYOUT_ROW_MAJOR ? "row" : "col");
}
