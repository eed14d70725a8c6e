/* What a launcher tells a process about its world (launch.h): torchrun, Open MPI's mpirun, MPICH's
 * mpiexec (Hydra) and Slurm's srun each put the rank, the world size and the rank's place on its
 * host into the environment, so that agmm can be launched by any of them without linking MPI.
 * docs/processes.md lists the variables read here. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch.h"
#include "../core/knobs.h"

/* The variable as a whole decimal integer in [lo, hi]: 1; unset: 0; anything else: -1. */
static int env_int(const char *name, long lo, long hi, int *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || errno != 0 || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 1;
}

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

typedef struct {
    const char *launcher;
    const char *rank, *size, *local_rank, *local_size;
} launcher_vars;

/* In the order they are looked for: a launcher started by another (torchrun under srun) sets its
 * own variables in the processes it starts, so the innermost comes first. */
static const launcher_vars launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};

/* The job's identity as the launcher states it: equal in every process of one job and different
 * between jobs running at the same time on a host. "" when the launcher gives none. Returns the
 * length it needed (>= len: cut, and two jobs could then share it). */
static int job_identity(const launcher_vars *l, char *job, size_t len)
{
    job[0] = '\0';
    int n = 0;
    if (strcmp(l->launcher, "torchrun") == 0) {
        /* The rendezvous address is unique among live jobs on a host (torchrun's store listens
         * there); the run id and restart count tell restarts apart. */
        if (getenv("MASTER_PORT") || getenv("TORCHELASTIC_RUN_ID"))
            n = snprintf(job, len, "torchrun/%s:%s/%s/%s", env_or("MASTER_ADDR", ""), env_or("MASTER_PORT", ""),
                     env_or("TORCHELASTIC_RUN_ID", ""), env_or("TORCHELASTIC_RESTART_COUNT", ""));
    } else if (strcmp(l->launcher, "Open MPI") == 0) {
        const char *ns = env_or("PMIX_NAMESPACE", env_or("OMPI_MCA_ess_base_jobid", getenv("OMPI_MCA_orte_ess_jobid")));
        if (ns)
            n = snprintf(job, len, "ompi/%s", ns);
    } else if (strcmp(l->launcher, "MPICH") == 0) {
        /* Hydra names no job; its proxy is the parent of every rank it starts on a host. */
        const char *ns = env_or("PMIX_NAMESPACE", getenv("PMI_KVSNAME"));
        if (ns)
            n = snprintf(job, len, "mpich/%s", ns);
        else
            n = snprintf(job, len, "mpich/parent-%ld", (long)getppid());
    } else if (getenv("SLURM_JOB_ID")) {
        n = snprintf(job, len, "slurm/%s.%s", getenv("SLURM_JOB_ID"), env_or("SLURM_STEP_ID", env_or("SLURM_STEPID", "")));
    }
    return n;
}

/* knobs.h's AGMM_JOB_ID entry states this bound in words. */
_Static_assert(sizeof((agmm_launch_env *)0)->job - sizeof "AGMM_JOB_ID/" == 243,
               "AGMM_JOB_ID's bound in knobs.h says 243 bytes");

agmm_status agmm_launch_job_id(char *job, size_t len, agmm_error *err)
{
    agmm_knob_value v;
    agmm_knob_read(AGMM_KNOB_JOB_ID, &v, err); /* text: any value is allowed */
    job[0] = '\0';
    if (v.text && *v.text && (size_t)snprintf(job, len, "AGMM_JOB_ID/%s", v.text) >= len)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "AGMM_JOB_ID is %zu characters: at most %zu (a longer one would be cut, and two jobs "
                         "could then meet as one)",
                         strlen(v.text), len - 1 - strlen("AGMM_JOB_ID/"));
    return AGMM_SUCCESS;
}

agmm_status agmm_launch_env_read(agmm_launch_env *e, agmm_error *err)
{
    memset(e, 0, sizeof *e);
    e->local_rank = e->local_nranks = -1;
    const launcher_vars *l = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof *launchers && l == NULL; i++)
        if (getenv(launchers[i].rank) || getenv(launchers[i].size))
            l = &launchers[i];
    if (l == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "rank=-1: no launcher's variables in the environment (torchrun's RANK and WORLD_SIZE, Open "
                         "MPI's OMPI_COMM_WORLD_RANK/_SIZE, MPICH's PMI_RANK/PMI_SIZE, Slurm's SLURM_PROCID/"
                         "SLURM_NTASKS): start the processes with a launcher or pass rank and nranks");
    e->launcher = l->launcher;
    int got = env_int(l->size, 1, AGMM_MAX_RANKS, &e->nranks);
    if (got <= 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s=%s (set by %s?): must be a world size in 1..%d", l->size,
                         env_or(l->size, "(unset)"), l->launcher, AGMM_MAX_RANKS);
    got = env_int(l->rank, 0, e->nranks - 1, &e->rank);
    if (got <= 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s=%s (set by %s?): must be a rank in 0..%d (%s=%d)", l->rank,
                         env_or(l->rank, "(unset)"), l->launcher, e->nranks - 1, l->size, e->nranks);
    if (env_int(l->local_rank, 0, e->nranks - 1, &e->local_rank) < 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s=%s: must be a local rank in 0..%d", l->local_rank,
                         getenv(l->local_rank), e->nranks - 1);
    if (l->local_size && env_int(l->local_size, 1, e->nranks, &e->local_nranks) < 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s=%s: must be a count in 1..%d", l->local_size,
                         getenv(l->local_size), e->nranks);
    int nodes = 0;
    if (strcmp(l->launcher, "Slurm") == 0 &&
        (env_int("SLURM_STEP_NUM_NODES", 1, INT_MAX, &nodes) == 1 || env_int("SLURM_NNODES", 1, INT_MAX, &nodes) == 1))
        e->local_nranks = nodes == 1 ? e->nranks : 0;
    e->multi_host = e->local_nranks >= 0 && e->local_nranks < e->nranks;

    agmm_status st = agmm_launch_job_id(e->job, sizeof e->job, err);
    if (st != AGMM_SUCCESS)
        return st;
    if (e->job[0] == '\0' && (size_t)job_identity(l, e->job, sizeof e->job) >= sizeof e->job)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "%s's job identity (\"%.40s...\") is longer than %zu characters: set a shorter AGMM_JOB_ID "
                         "in every process",
                         l->launcher, e->job, sizeof e->job - 1);
    snprintf(e->source, sizeof e->source, "%s (%s=%d, %s=%d)", l->launcher, l->rank, e->rank, l->size, e->nranks);

    /* Where NCCL may start its bootstrap when ranks span hosts and no id is passed: the
     * user's NCCL_COMM_ID, else next to torchrun's store (MASTER_PORT itself is the store's). */
    int port = 0;
    if (getenv("NCCL_COMM_ID"))
        snprintf(e->nccl_comm_id, sizeof e->nccl_comm_id, "%s", getenv("NCCL_COMM_ID"));
    else if (getenv("MASTER_ADDR") && env_int("MASTER_PORT", 1, 65534, &port) == 1)
        snprintf(e->nccl_comm_id, sizeof e->nccl_comm_id, "%s:%d", getenv("MASTER_ADDR"), port + 1);
    return AGMM_SUCCESS;
}

int agmm_launch_env_rank(void)
{
    for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++)
        if (getenv(launchers[i].rank) || getenv(launchers[i].size)) {
            int rank = 0;
            return env_int(launchers[i].rank, 0, AGMM_MAX_RANKS - 1, &rank) == 1 ? rank : 0;
        }
    return -1;
}
