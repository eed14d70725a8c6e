/* Host-side meeting points of the benchmark's rank threads (one process). */
#ifndef AGMM_TOOLS_BENCH_SYNC_H
#define AGMM_TOOLS_BENCH_SYNC_H

#include "bench.h"

/* Sets up for `nlocal` rank threads; 0 on success. */
int bench_sync_init(bench_results *r, int nlocal);
void bench_sync_fini(bench_results *r);
void bench_sync_barrier(bench_results *r);
void bench_sync_lock(bench_results *r);
void bench_sync_unlock(bench_results *r);
/* Rank 0 prints one progress line to stderr after each row. */
void bench_progress(const bench_results *r, int row);

#endif
