/* Timing statistics over a sample of per-call times. */
#ifndef AGMM_CORE_STATS_H
#define AGMM_CORE_STATS_H

typedef struct {
    int count;
    double mean, median, min, max;
} agmm_stats;

/* Sorts `samples` in place and fills *out; count 0 gives all zeros. */
void agmm_stats_compute(double *samples, int count, agmm_stats *out);

#endif
