/* One cell of agmm-bench's sweep (a row and a backend) and what every operation's rows share:
 * seeded inputs, the cell's verdict merged across ranks, busy spells and phases, what a checked
 * cell holds for its row's timed turns and its graph's check (bench_cell.c); the turns themselves
 * are bench_turns.c's. Each operation's rows are a row kind in a file of their own
 * (bench_row_*.c), listed in bench_run.c's table. */
#ifndef AGMM_TOOLS_BENCH_CELL_H
#define AGMM_TOOLS_BENCH_CELL_H

#include "bench.h"
#include "bench_mem.h"

/* Tolerances: bf16 outputs carry ~2^-9 relative rounding; fp32 sums only reordering. */
#define CELL_TOL_BF16 1e-2
#define CELL_TOL_F32 1e-5

typedef struct bench_row_kind bench_row_kind;

/* An output a graph replay must reproduce: its device buffer, and the eager run's result on the
 * host (already checked against the reference). */
typedef struct {
    void *dev;
    const void *host;
    size_t count;      /* elements */
    agmm_dtype dtype;
    int exact;         /* 1: bit for bit (the gathered A); 0: within the cell's tolerance (a sum may
                          be added in another order by NCCL inside a graph) */
} cell_output;

/* What a checked cell keeps until its row's timed turns are over (cell_keep, cell_release): its
 * plan, its io, the device buffers it allocated (cell_alloc) and, with --graph, its checked
 * outputs until its graph is captured (cell_graph) and the graph. */
#define CELL_MAX_BUFS 8
#define CELL_MAX_OUTS 2
typedef struct {
    agmm_plan *plan;
    _Alignas(16) unsigned char io[128];  /* the operation's agmm_<op>_io, copied */
    void *bufs[CELL_MAX_BUFS];   /* device buffers, freed by cell_release */
    int nbufs;
    cell_output outs[CELL_MAX_OUTS]; /* --graph: their host copies are the cell's until cell_graph */
    int nouts;
    void *exec;                  /* --graph: the graph of one run, its replay checked; or NULL */
    int ok;                      /* checked correct on every rank: the same on every rank */
    int replays;                 /* ok, not --check, and its graph reproduced the run on every rank */
} cell_held;

typedef struct {
    agmm_ctx *ctx;
    bench_results *res;
    bench_dev *dev;
    const bench_row_kind *kind;  /* the rows' operation */
    int rank, nranks, row, bi;
    cell_held *held;             /* where cell row, bi keeps what it holds */
    int short_of_memory;         /* a plan or device buffer of this rank's in this row found no memory */
} cell_job;

/* An operation's rows. A new operation's rows are a file defining one of these and a line in
 * bench_run.c's table. */
struct bench_row_kind {
    agmm_op op;
    /* One cell, row j->row with backend j->bi: plan, allocate its device buffers (cell_alloc),
     * fill fresh inputs, poison the outputs, run once, check against the reference, and keep the
     * plan and its io for the row's timed turns (cell_keep). Collective: a rank whose plan or
     * buffers failed still walks the whole cell, so every rank meets the same barriers in the
     * same order. */
    void (*run)(cell_job *j);
    /* One enqueue of the plan on `stream` with its io (the operation's agmm_<op>_io). */
    agmm_status (*launch)(agmm_plan *plan, const void *io, void *stream);
    /* What one rank's cell of row `row` allocates at most, in bytes: host buffers (inputs,
     * downloads, the reference's scratch; freed when the cell is checked) and device buffers
     * (outputs, and the plan's symmetric input, which the library checks on its own too; held
     * until the row is timed). */
    void (*need)(const bench_results *r, int row, uint64_t *host, uint64_t *device);
    /* The rows of the plain GEMM each rank's work holds (its N and K are the row's), timed beside
     * the backends for the overlap columns; NULL for an operation without a GEMM. */
    int64_t (*gemm_rows)(const bench_results *r, const bench_row *row);
};

/* The row kinds (bench_row_*.c). */
extern const bench_row_kind bench_row_ag_matmul, bench_row_all_reduce, bench_row_matmul_reduce_scatter,
    bench_row_matmul_all_reduce, bench_row_all_reduce_rmsnorm;

/* The seed of input `what` of rank `rank` in row `row`, backend `backend`: fresh per cell. */
uint64_t cell_seed(int row, int backend, int rank, int what);
/* count values uniform in [-1, 1) of the stream `seed`, as bf16 or fp32. */
void cell_fill_bf16(uint16_t *x, size_t count, uint64_t seed);
void cell_fill_f32(float *x, size_t count, uint64_t seed);

/* Marks the cell failed (the first failure's note is kept); returns 0 for `ok = cell_fail(...)`. */
int cell_fail(cell_job *j, cell_state state, const char *what);
/* A failed plan creation: skipped where the backend cannot do it, else an error (noting a shortage
 * of memory in j->short_of_memory). */
void cell_fail_plan(cell_job *j, agmm_status st);
/* No rank has failed this cell so far. Read after a barrier, every rank sees the same answer. */
int cell_ok(cell_job *j);
/* Every rank's verdict on the cell, the same on every rank (bench_sync_cell). Collective: deciding
 * collective work on a plain cell_ok() could differ between ranks and leave one at a barrier. */
int cell_agreed_ok(cell_job *j);
/* Merges one rank's check into the cell: the worst error, exactness on every rank. */
void cell_record_check(cell_job *j, double err, int exact);
/* The library's last error, else the device shim's, else `fallback`. */
const char *cell_why(cell_job *j, const char *fallback);

/* Rank 0: what the cell does now, for the progress lines. */
void cell_phase(cell_job *j, const char *what);
/* Work this rank does alone, up to cell_solo_end: no meeting may start inside it. */
void cell_solo_begin(cell_job *j, const char *what);
void cell_solo_end(cell_job *j);
/* The auto column's plan: what it chose (rank 0's record; every rank chose alike). */
void cell_note_auto(cell_job *j, const agmm_plan *plan);

/* One run of the cell's plan (the kind's launch on the rank's stream). */
agmm_status cell_run_once(cell_job *j, agmm_plan *plan, const void *io);
/* A device buffer of the cell, freed by cell_release; NULL with j->dev->err set (and
 * j->short_of_memory) on failure. */
void *cell_alloc(cell_job *j, size_t bytes);
/* The end of a row kind's run: keeps the plan (NULL if planning failed) and a copy of its io
 * (io_bytes <= sizeof held->io) for the row's turns and, with --graph on GPUs, a copy of the
 * checked `outs` (nouts <= CELL_MAX_OUTS; the caller's host buffers may be freed once it returns)
 * for cell_graph. Collective: marks the cell ok where every rank checked it correct. */
void cell_keep(cell_job *j, agmm_plan *plan, const void *io, size_t io_bytes, const cell_output *outs, int nouts);
/* --graph, once the cell's eager runs are timed: captures one run into a CUDA graph on every rank
 * and checks that a replay reproduces the kept outputs; marks the cell's replays to be timed where
 * it does. Collective. (Eager runs of a plan after its own graph's replays once timed out in an
 * emulated world, docs/results thirty-third session: a plan's eager runs all come first.) */
void cell_graph(cell_job *j);
/* Frees what cell j->bi of the row holds: its graph, its device buffers, its plan. Every rank
 * releases a row's cells in the same order. */
void cell_release(cell_job *j);

#endif
