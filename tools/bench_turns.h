/* The timed part of agmm-bench's rows: everything a row holds takes turns, so that every figure
 * meets the same clocks (a long product's clock moves by up to a third under the power cap:
 * docs/design.md, "Benchmark method"). */
#ifndef AGMM_TOOLS_BENCH_TURNS_H
#define AGMM_TOOLS_BENCH_TURNS_H

#include "bench_cell.h"

/* Times what row j->row holds: the eager runs of the cells held[b0 .. b0 + nb) that are to be
 * timed and, where `gemm` is given (on every rank alike; only rank 0's holds GEMMs), the plain
 * GEMMs; or, with `replays`, the replays of those cells' graphs (cell_graph). Every figure is warmed
 * up (--warmup calls), then they take turns in --turns rounds: in each, every figure in turn, the
 * first rotating, gets its share of the --iters calls, each after an L2 flush and between CUDA
 * events (wall clocks on the CPU). A figure's mean, median, min and max are over the calls of all
 * its rounds; rank 0 records them. A cell whose call fails on any rank stops being timed and keeps
 * its error. Collective. Returns the rounds, or 0 where nothing was timed. */
int bench_turns(cell_job *j, cell_held *held, int b0, int nb, const bench_gemm *gemm, int replays);

#endif
