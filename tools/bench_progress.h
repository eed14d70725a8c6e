/* What agmm-bench tells on stderr while it runs (rank 0 only): one line when a row is done, and on
 * a row that takes more than a few seconds, one line per phase saying what it is doing
 * (allocating, filling, running, checking, timing), so that a long row is told from a hang. Short
 * rows print nothing but their "done" line. */
#ifndef AGMM_TOOLS_BENCH_PROGRESS_H
#define AGMM_TOOLS_BENCH_PROGRESS_H

#include "bench.h"

/* A row's phases are told once it has run this long. */
#define BENCH_PROGRESS_AFTER_S 3.0

/* Starts telling (a thread that tells a phase still going when the row passes the threshold).
 * Only the process that holds rank 0 calls it; without it the calls below print nothing but the
 * "done" lines. 0 on success. */
int bench_progress_start(bench_results *r);
void bench_progress_stop(bench_results *r);
/* Rank 0: row `row` starts; its clock starts now. */
void bench_progress_row(bench_results *r, int row);
/* Rank 0: what the row is doing now (copied), for `backend` (NULL: the row's own work, the plain
 * GEMM). Told at once if the row has passed the threshold, else when it does. */
void bench_progress_phase(bench_results *r, const char *backend, const char *what);
/* Rank 0: row `row` is done ("agmm-bench: row 2/13 (80, 80, 80) done"). */
void bench_progress_done(bench_results *r, int row);

#endif
