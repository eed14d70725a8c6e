/* The launcher's view of a process (internal to src/world): rank, world size, the rank's place on
 * its host and the job's identity, read from the environment (launch.c). */
#ifndef AGMM_WORLD_LAUNCH_H
#define AGMM_WORLD_LAUNCH_H

#include "agmm.h"
#include "../core/error.h"

typedef struct {
    const char *launcher;      /* "torchrun", "Open MPI", "MPICH" or "Slurm" */
    int rank, nranks;
    int local_rank;            /* the rank's index on its host; -1 unknown */
    int local_nranks;          /* ranks on its host; -1 unknown */
    int multi_host;            /* 1 if the launcher says the ranks run on several hosts */
    char job[256];             /* the job's identity; "" when the launcher states none */
    char source[160];          /* "torchrun (RANK=1, WORLD_SIZE=4)", for messages */
    char nccl_comm_id[96];     /* host:port for NCCL's bootstrap across hosts; "" if none known */
} agmm_launch_env;

/* Reads the first launcher whose variables are set; AGMM_ERR_INVALID_ARG naming a variable that
 * is missing or malformed, or saying that no launcher's variables are there. */
agmm_status agmm_launch_env_read(agmm_launch_env *env, agmm_error *err);
/* The rank the first launcher whose variables are set gives, 0 if it cannot be read; -1 when no
 * launcher's rank or world-size variable is set. */
int agmm_launch_env_rank(void);

/* AGMM_JOB_ID as a job's identity ("AGMM_JOB_ID/<text>") in job (len bytes), "" where it is unset;
 * AGMM_ERR_INVALID_ARG where it would not fit (cut, two jobs could share it). */
agmm_status agmm_launch_job_id(char *job, size_t len, agmm_error *err);

#endif
