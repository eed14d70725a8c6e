/* The fp64 references and error measures (reference.h). */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/numeric.h"

static double elem(const void *x, agmm_dtype dtype, int64_t i)
{
    if (dtype == AGMM_DTYPE_F32)
        return ((const float *)x)[i];
    return agmm_bf16_to_f32(((const uint16_t *)x)[i]);
}

float agmm_ref_f64_to_f32(double x) { return (float)x; }

uint16_t agmm_ref_f64_to_bf16(double x)
{
    /* Rounding double -> float -> bf16 could round twice. Instead make the float round toward
     * zero and set its last bit when anything was dropped ("round to odd"): a float then carries
     * 16 more bits than bf16 plus a sticky bit, and float -> bf16 to nearest even is exact
     * rounding of x. */
    float f = (float)x;
    if (isnan(x))
        return agmm_f32_to_bf16(f);
    if (fabs((double)f) > fabs(x))
        f = nextafterf(f, 0.0f);
    if ((double)f != x) {
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        u |= 1u;
        memcpy(&f, &u, sizeof f);
    }
    return agmm_f32_to_bf16(f);
}

agmm_status agmm_ref_gemm_bf16(const uint16_t *a, const uint16_t *b, agmm_layout b_layout, int64_t rows, int64_t n,
                               int64_t k, double *c, uint16_t *c_bf16)
{
    double *row = malloc((size_t)(n > 0 ? n : 1) * sizeof *row);
    if (row == NULL)
        return AGMM_ERR_NO_MEMORY;
    for (int64_t i = 0; i < rows; i++) {
        const uint16_t *ai = a + i * k;
        if (b_layout == AGMM_LAYOUT_COL_MAJOR) {
            /* B^T row j is column j of B: a dot product of two contiguous rows. */
            for (int64_t j = 0; j < n; j++) {
                const uint16_t *bj = b + j * k;
                double s = 0.0;
                for (int64_t kk = 0; kk < k; kk++)
                    s += (double)agmm_bf16_to_f32(ai[kk]) * (double)agmm_bf16_to_f32(bj[kk]);
                row[j] = s;
            }
        } else {
            /* Row-major B: add a(i, kk) times row kk of B into the row, contiguous in j. */
            for (int64_t j = 0; j < n; j++)
                row[j] = 0.0;
            for (int64_t kk = 0; kk < k; kk++) {
                double av = agmm_bf16_to_f32(ai[kk]);
                const uint16_t *bk = b + kk * n;
                for (int64_t j = 0; j < n; j++)
                    row[j] += av * (double)agmm_bf16_to_f32(bk[j]);
            }
        }
        if (c)
            memcpy(c + i * n, row, (size_t)n * sizeof *row);
        if (c_bf16)
            for (int64_t j = 0; j < n; j++)
                c_bf16[i * n + j] = agmm_ref_f64_to_bf16(row[j]);
    }
    free(row);
    return AGMM_SUCCESS;
}

void agmm_ref_all_reduce(const void *const *inputs, int nranks, int64_t n, agmm_dtype dtype, double *out)
{
    for (int64_t i = 0; i < n; i++) {
        double s = 0.0;
        for (int r = 0; r < nranks; r++)
            s += elem(inputs[r], dtype, i);
        out[i] = s;
    }
}

double agmm_ref_rel_frobenius(const void *got, agmm_dtype dtype, const double *want, int64_t count)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < count; i++) {
        double g = elem(got, dtype, i), d = g - want[i];
        if (isnan(g))
            return NAN;
        num += d * d;
        den += want[i] * want[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

double agmm_ref_max_abs_error(const void *got, agmm_dtype dtype, const double *want, int64_t count)
{
    double worst = 0.0;
    for (int64_t i = 0; i < count; i++) {
        double g = elem(got, dtype, i);
        if (isnan(g))
            return NAN;
        double d = fabs(g - want[i]);
        if (d > worst)
            worst = d;
    }
    return worst;
}

int64_t agmm_ref_first_mismatch(const void *x, const void *y, int64_t count, size_t elem_bytes)
{
    const unsigned char *p = x, *q = y;
    if (memcmp(p, q, (size_t)count * elem_bytes) == 0)
        return -1;
    for (int64_t i = 0; i < count; i++)
        if (memcmp(p + (size_t)i * elem_bytes, q + (size_t)i * elem_bytes, elem_bytes) != 0)
            return i;
    return -1;
}
