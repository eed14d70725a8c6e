/* Fault injection: a rank made slow, stuck or gone at a chosen point, so that tests (and users,
 * through AGMM_FAULT or agmm-bench --fault) can see what its peers do then.
 *
 * A spec is `rank=R,at=POINT,action=ACTION[,ms=N]` (AGMM_FAULT_GRAMMAR):
 *   R       the rank it strikes, or `any`: at each occurrence of the point one rank, drawn at
 *           random from the occurrence's number, so every rank draws the same one
 *   POINT   join    a process world's join, before the process meets its peers (agmm_world_join;
 *                   worlds of threads have no join)
 *           create  context creation, before the rank meets any peer (agmm_ctx_create)
 *           plan    plan creation, before its first collective step (agmm_plan_*)
 *           run     a run, before it enqueues anything (agmm_ag_matmul, agmm_all_reduce)
 *   ACTION  delay   sleep ms, then carry on
 *           hang    never arrive: held ms (default: 3 x the world's timeout, long after every
 *                   peer gave up), then the call fails without arriving
 *           exit    never arrive: in a process world the process exits with status 3; where the
 *                   rank is a thread of a bigger world the call fails at once
 * A failed call is AGMM_ERR_INTERNAL, its message saying a fault was injected; after a run fails
 * this way the rank is out of step, like any failed run.
 *
 * The points are calls to agmm_fault_point with the rank's facts; a new point is a value of
 * agmm_fault_at, its name in fault.c, and one call. Nothing here keeps state:
 * the spec is parsed where it is used (contexts and plans keep their copy). */
#ifndef AGMM_CORE_FAULT_H
#define AGMM_CORE_FAULT_H

#include <stdint.h>

#include "error.h"

#define AGMM_FAULT_GRAMMAR                                                                                        \
    "rank=R,at=POINT,action=ACTION[,ms=N] with R a rank or any, POINT join, create, plan or run, ACTION delay "  \
    "(ms required), hang (ms: how long it is held, default 3 x the timeout) or exit"

typedef enum { AGMM_FAULT_AT_CREATE = 0, AGMM_FAULT_AT_PLAN, AGMM_FAULT_AT_RUN, AGMM_FAULT_AT_JOIN } agmm_fault_at;

typedef enum { AGMM_FAULT_NONE = 0, AGMM_FAULT_DELAY, AGMM_FAULT_HANG, AGMM_FAULT_EXIT } agmm_fault_action;

#define AGMM_FAULT_ANY_RANK (-1)

typedef struct {
    agmm_fault_action action;  /* AGMM_FAULT_NONE: no fault */
    agmm_fault_at at;
    int rank;                  /* >= 0, or AGMM_FAULT_ANY_RANK */
    int64_t ms;                /* delay: its length; hang: how long held (-1: the default) */
} agmm_fault;

/* Parses a spec (NULL or "": no fault). AGMM_ERR_INVALID_ARG naming the part that is wrong and
 * giving the grammar; *f is then no fault. */
agmm_status agmm_fault_parse(const char *spec, agmm_fault *f, agmm_error *err);
/* The spec in AGMM_FAULT, as agmm_fault_parse; a rank >= nranks is refused too. */
agmm_status agmm_fault_from_env(int nranks, agmm_fault *f, agmm_error *err);

/* Where a fault point is reached: the rank and what its world is. */
typedef struct {
    int rank, nranks;
    double timeout_s;          /* the world's bound on waits for a peer */
    int process_world;         /* 1: the rank is a process of its own (exit ends the process) */
    uint64_t occurrence;       /* the point's count on this rank, the same on every rank (a run's
                                  epoch); rank=any draws from it */
} agmm_fault_site;

/* The hook. AGMM_SUCCESS where f does not strike here or after a delay; for hang and exit the
 * AGMM_ERR_INTERNAL recorded in err (the caller returns it without arriving), or no return at all
 * (exit in a process world). */
agmm_status agmm_fault_point(const agmm_fault *f, agmm_fault_at at, const agmm_fault_site *site, agmm_error *err);

#endif
