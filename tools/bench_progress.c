/* Rank 0's progress lines on stderr (bench_progress.h). The sweep sets the phase as it goes; a
 * thread wakes a few times a second and tells a phase that is still going once its row has passed
 * the threshold, so a phase that started early (filling a huge input) is told while it lasts, not
 * after. Each phase of a row is told once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_progress.h"

struct bench_progress_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* wakes the thread early to stop */
    pthread_t thread;
    int stop;
    int row;                   /* -1 before the first row */
    double row_start_s;
    char backend[32];          /* "" for the row's own work */
    char what[96];             /* the phase; "" between phases */
    int told;                  /* the phase has been told */
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void row_text(const bench_results *r, int row, char *buf, size_t len)
{
    const bench_row *w = &r->rows[row];
    if (r->opt.op == AGMM_OP_ALL_REDUCE_RMSNORM)
        snprintf(buf, len, "row %d/%d T=%lld H=%lld", row + 1, r->nrows, (long long)w->m, (long long)w->n);
    else if (r->opt.op != AGMM_OP_ALL_REDUCE)
        snprintf(buf, len, "row %d/%d (%lld, %lld, %lld)", row + 1, r->nrows, (long long)w->m, (long long)w->n,
                 (long long)w->k);
    else
        snprintf(buf, len, "row %d/%d n=%lld", row + 1, r->nrows, (long long)w->n);
}

/* Tells the phase if it is due and untold. Called with p->mu held. */
static void tell_locked(const bench_results *r, struct bench_progress_state *p)
{
    const double t = now_s() - p->row_start_s;
    if (p->told || p->row < 0 || !p->what[0] || t < BENCH_PROGRESS_AFTER_S)
        return;
    char row[96];
    row_text(r, p->row, row, sizeof row);
    fprintf(stderr, "agmm-bench: %s%s%s: %s (%.0f s into the row)\n", row, p->backend[0] ? ", " : "", p->backend,
            p->what, t);
    p->told = 1;
}

static void *teller(void *arg)
{
    bench_results *r = arg;
    struct bench_progress_state *p = r->progress;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec wake;
        clock_gettime(CLOCK_REALTIME, &wake);
        wake.tv_nsec += 250000000L;
        if (wake.tv_nsec >= 1000000000L) {
            wake.tv_sec++;
            wake.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->cv, &p->mu, &wake);
        tell_locked(r, p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int bench_progress_start(bench_results *r)
{
    struct bench_progress_state *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -1;
    p->row = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    r->progress = p;
    if (pthread_create(&p->thread, NULL, teller, r) != 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        r->progress = NULL;
        return -1;
    }
    return 0;
}

void bench_progress_stop(bench_results *r)
{
    struct bench_progress_state *p = r->progress;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    r->progress = NULL;
}

void bench_progress_row(bench_results *r, int row)
{
    struct bench_progress_state *p = r->progress;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->row = row;
    p->row_start_s = now_s();
    p->what[0] = '\0';
    pthread_mutex_unlock(&p->mu);
}

void bench_progress_phase(bench_results *r, const char *backend, const char *what)
{
    struct bench_progress_state *p = r->progress;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    /* The same phase again (a spell resumed after a meeting) is still the phase told once. */
    if (strcmp(p->backend, backend ? backend : "") != 0 || strcmp(p->what, what) != 0) {
        snprintf(p->backend, sizeof p->backend, "%s", backend ? backend : "");
        snprintf(p->what, sizeof p->what, "%s", what);
        p->told = 0;
    }
    tell_locked(r, p);
    pthread_mutex_unlock(&p->mu);
}

void bench_progress_done(bench_results *r, int row)
{
    char text[96];
    row_text(r, row, text, sizeof text);
    struct bench_progress_state *p = r->progress;
    if (p != NULL) {
        pthread_mutex_lock(&p->mu);
        p->what[0] = '\0';
        pthread_mutex_unlock(&p->mu);
    }
    fprintf(stderr, "agmm-bench: %s done\n", text);
}
