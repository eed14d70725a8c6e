/* Timing statistics (stats.h). */
#include "stats.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void agmm_stats_compute(double *samples, int count, agmm_stats *out)
{
    out->count = count;
    out->mean = out->median = out->min = out->max = 0.0;
    if (count <= 0)
        return;
    qsort(samples, (size_t)count, sizeof *samples, cmp_double);
    double sum = 0.0;
    for (int i = 0; i < count; i++)
        sum += samples[i];
    out->mean = sum / count;
    out->median = count % 2 ? samples[count / 2] : 0.5 * (samples[count / 2 - 1] + samples[count / 2]);
    out->min = samples[0];
    out->max = samples[count - 1];
}
