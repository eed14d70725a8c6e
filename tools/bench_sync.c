/* Meeting points of the benchmark's rank threads (bench_sync.h). */
#include "bench_sync.h"

int bench_sync_init(bench_results *r, int nlocal)
{
    if (pthread_mutex_init(&r->mu, NULL) != 0)
        return -1;
    return pthread_barrier_init(&r->barrier, NULL, (unsigned)nlocal) != 0 ? -1 : 0;
}

void bench_sync_fini(bench_results *r)
{
    pthread_barrier_destroy(&r->barrier);
    pthread_mutex_destroy(&r->mu);
}

void bench_sync_barrier(bench_results *r) { pthread_barrier_wait(&r->barrier); }
void bench_sync_lock(bench_results *r) { pthread_mutex_lock(&r->mu); }
void bench_sync_unlock(bench_results *r) { pthread_mutex_unlock(&r->mu); }

void bench_progress(const bench_results *r, int row)
{
    const bench_row *w = &r->rows[row];
    if (r->opt.op == AGMM_OP_AG_MATMUL)
        fprintf(stderr, "agmm-bench: row %d/%d (%lld, %lld, %lld) done\n", row + 1, r->nrows, (long long)w->m,
                (long long)w->n, (long long)w->k);
    else
        fprintf(stderr, "agmm-bench: row %d/%d n=%lld done\n", row + 1, r->nrows, (long long)w->n);
}
