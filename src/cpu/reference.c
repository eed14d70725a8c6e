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

agmm_status agmm_ref_all_reduce_rmsnorm(const uint16_t *const *x, int nranks, const uint16_t *bias,
                                        const uint16_t *residual, const uint16_t *gamma, int64_t t, int64_t h,
                                        double eps, double *r, uint16_t *r_bf16, double *y)
{
    double *row = malloc((size_t)h * sizeof *row);
    uint16_t *row16 = malloc((size_t)h * sizeof *row16);
    if (row == NULL || row16 == NULL) {
        free(row);
        free(row16);
        return AGMM_ERR_NO_MEMORY;
    }
    const double eps32 = (float)eps;
    for (int64_t i = 0; i < t; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < h; j++) {
            double s = 0.0;
            for (int p = 0; p < nranks; p++)
                s += agmm_bf16_to_f32(x[p][i * h + j]);
            if (bias)
                s += agmm_bf16_to_f32(bias[j]);
            if (residual)
                s += agmm_bf16_to_f32(residual[i * h + j]);
            row[j] = s;
            row16[j] = agmm_ref_f64_to_bf16(s);
            const double q = agmm_bf16_to_f32(row16[j]);
            ss += q * q;
        }
        const double rstd = 1.0 / sqrt(ss / (double)h + eps32);
        for (int64_t j = 0; j < h; j++) {
            if (r)
                r[i * h + j] = row[j];
            if (r_bf16)
                r_bf16[i * h + j] = row16[j];
            if (y)
                y[i * h + j] = (double)agmm_bf16_to_f32(row16[j]) * rstd * (double)agmm_bf16_to_f32(gamma[j]);
        }
    }
    free(row);
    free(row16);
    return AGMM_SUCCESS;
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
