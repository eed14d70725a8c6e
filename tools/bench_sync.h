/* Meeting points of the benchmark's ranks, and how their verdicts on a cell become one. In a
 * one-process world the ranks are threads sharing bench_results (a pthread barrier, a mutex); in
 * a process world each process holds its own copy, and the cells are merged through the
 * library's host collectives (agmm_ext.h), bounded by the world's timeout. */
#ifndef AGMM_TOOLS_BENCH_SYNC_H
#define AGMM_TOOLS_BENCH_SYNC_H

#include "bench.h"

/* Sets up for `nlocal` rank threads; 0 on success. */
int bench_sync_init(bench_results *r, int nlocal);
void bench_sync_fini(bench_results *r);
/* A process world: the rank's context, before the sweep starts (r->proc_ctx). */
void bench_sync_attach(bench_results *r, agmm_ctx *ctx);
void bench_sync_barrier(bench_results *r);
void bench_sync_lock(bench_results *r);
void bench_sync_unlock(bench_results *r);
/* Every rank's verdict on cell (row, b) so far, the same on every rank (failures recorded before
 * the call are all in, none after it counts): 1 if no rank failed the cell. In a process world
 * the cell is merged (first failure by rank order, worst error, exactness on every rank) into
 * every process's copy. Collective. */
int bench_sync_cell(bench_results *r, int row, int b);
/* A process world, before the sweep: 0 where every rank was given rank 0's arguments (argc, argv
 * as main got them; the --csv and --json paths aside, which only rank 0 writes), else -1 on every
 * rank, each having printed the first difference: a rank given other options would make the sweep
 * fall out of step ("exchange #N") instead. Collective. */
int bench_sync_args(bench_results *r, int argc, char **argv);
/* 1 if `ok` on every rank, the same answer on every rank. Collective. */
int bench_sync_and(bench_results *r, int ok);

#endif
