/* The CPU world's copy engine: one helper thread per plan that runs queued copies in order and
 * raises an epoch flag after each, as cudaMemcpyAsync followed by cuStreamWriteValue32 does on
 * the GPU's copy stream.
 *
 * Synchronisation. The queue is guarded by a mutex, so a copy happens after its submit, and
 * everything the submitting thread saw (peers' arrivals at the barrier, hence their shards)
 * is visible to the copy. After the copy the thread raises the job's flag with release order:
 * a GEMM that acquires the flag sees the copied rows. `completed` (under the mutex) tells drain
 * when the whole queue has landed, which also makes every copied byte visible to the drainer.
 */
#include "cpu.h"
#include "../core/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


struct agmm_cpu_copy_engine {
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;   /* signalled on submit and on stop */
    pthread_cond_t done_cv;   /* signalled when a job completes */
    agmm_cpu_copy_job *ring;
    int capacity;
    uint64_t submitted, completed; /* jobs ever queued / finished; ring slot = count % capacity */
    int stop;
    int rank;                 /* for error messages */
    agmm_error *err;          /* the owning rank's record (only the rank thread writes it) */
};

static void sleep_us(int64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void *copy_main(void *arg)
{
    agmm_cpu_copy_engine *ce = arg;
    pthread_mutex_lock(&ce->mu);
    for (;;) {
        /* Idle until there is work or we are told to stop: this wait is not on a peer, so it
         * needs no bound (destroy always signals). */
        while (ce->submitted == ce->completed && !ce->stop)
            pthread_cond_wait(&ce->work_cv, &ce->mu);
        if (ce->submitted == ce->completed)
            break; /* stop, and nothing left */
        agmm_cpu_copy_job job = ce->ring[ce->completed % (uint64_t)ce->capacity];
        pthread_mutex_unlock(&ce->mu);

        if (job.delay_us > 0)
            sleep_us(job.delay_us);
        if (job.bytes)
            memcpy(job.dst, job.src, job.bytes);
        if (job.done_ns)
            *job.done_ns = agmm_mono_ns();
        if (job.flag)
            agmm_cpu_flag_raise(job.flag, job.epoch); /* release: the rows above are visible */

        pthread_mutex_lock(&ce->mu);
        ce->completed++;
        pthread_cond_broadcast(&ce->done_cv);
    }
    pthread_mutex_unlock(&ce->mu);
    return NULL;
}

agmm_status agmm_cpu_ce_create(int rank, agmm_error *err, int max_jobs, agmm_cpu_copy_engine **out)
{
    *out = NULL;
    agmm_cpu_copy_engine *ce = calloc(1, sizeof *ce);
    if (ce == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: copy engine allocation failed", rank);
    ce->capacity = max_jobs > 0 ? max_jobs : 1;
    ce->rank = rank;
    ce->err = err;
    ce->ring = calloc((size_t)ce->capacity, sizeof *ce->ring);
    if (ce->ring == NULL) {
        free(ce);
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: copy engine queue allocation failed", rank);
    }
    pthread_mutex_init(&ce->mu, NULL);
    pthread_cond_init(&ce->work_cv, NULL);
    /* drain's bounded wait measures on the monotonic clock: a wall-clock jump cannot stretch it. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&ce->done_cv, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&ce->thread, NULL, copy_main, ce) != 0) {
        agmm_cpu_ce_destroy(ce);
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank %d: cannot start the copy thread", rank);
    }
    ce->started = 1;
    *out = ce;
    return AGMM_SUCCESS;
}

void agmm_cpu_ce_destroy(agmm_cpu_copy_engine *ce)
{
    if (ce == NULL)
        return;
    if (ce->started) {
        pthread_mutex_lock(&ce->mu);
        ce->stop = 1;
        pthread_cond_broadcast(&ce->work_cv);
        pthread_mutex_unlock(&ce->mu);
        pthread_join(ce->thread, NULL);
    }
    pthread_cond_destroy(&ce->done_cv);
    pthread_cond_destroy(&ce->work_cv);
    pthread_mutex_destroy(&ce->mu);
    free(ce->ring);
    free(ce);
}

agmm_status agmm_cpu_ce_submit(agmm_cpu_copy_engine *ce, const agmm_cpu_copy_job *job)
{
    pthread_mutex_lock(&ce->mu);
    if (ce->submitted - ce->completed >= (uint64_t)ce->capacity) {
        pthread_mutex_unlock(&ce->mu);
        return AGMM_FAIL(ce->err, AGMM_ERR_INTERNAL, "rank %d: copy engine queue full (%d jobs)", ce->rank,
                         ce->capacity);
    }
    ce->ring[ce->submitted % (uint64_t)ce->capacity] = *job;
    ce->submitted++;
    pthread_cond_signal(&ce->work_cv);
    pthread_mutex_unlock(&ce->mu);
    return AGMM_SUCCESS;
}

agmm_status agmm_cpu_ce_drain(agmm_cpu_copy_engine *ce, double timeout_s)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    int64_t ns = deadline.tv_nsec + (int64_t)(timeout_s * 1e9);
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);

    agmm_status st = AGMM_SUCCESS;
    pthread_mutex_lock(&ce->mu);
    while (ce->completed != ce->submitted) {
        if (pthread_cond_timedwait(&ce->done_cv, &ce->mu, &deadline) != 0 && ce->completed != ce->submitted) {
            st = AGMM_FAIL(ce->err, AGMM_ERR_TIMEOUT,
                           "rank %d: the copy engine did not finish %llu queued copies within %.2f s", ce->rank,
                           (unsigned long long)(ce->submitted - ce->completed), timeout_s);
            break;
        }
    }
    pthread_mutex_unlock(&ce->mu);
    return st;
}
