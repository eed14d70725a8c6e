/* The fault scenario, written for any world a rank's context can be created in: the ranks of one
 * process as threads (test_fault.c's driver, in agmm-test) or one process per rank
 * (fault_process.c's driver, in agmm-proctest: each process joins the world, runs
 * fault_scenario_rank and writes its outcome; a last invocation reads every rank's outcome, with
 * each process's exit status, and calls fault_scenario_check). tests/fault_process_test.sh
 * launches the processes.
 *
 * One case: AGMM_FAULT holds `rank=F,at=POINT,action=ACTION[,ms=N]`; every rank creates its
 * context, plans one operation on exact small-integer inputs, runs it once and checks the result,
 * timing the call at the fault's point (a process world's join too: the driver times it). What
 * must hold:
 *   delay  every rank succeeds and every result is exact: a delay shorter than the timeout
 *          changes nothing (processes exit 0)
 *   hang   the faulted rank's call fails (after being held 3 x the timeout) without arriving;
 *   exit   every other rank's call returns AGMM_ERR_TIMEOUT naming rank F ("rank F never
 *          arrived") within the timeout + 1 s, and not before the timeout unless F's process is
 *          gone; in a process world `exit` ends the faulted process with status 3, and every
 *          other process (and the hung one) exits 1 */
#ifndef AGMM_TESTS_FAULT_SCENARIO_H
#define AGMM_TESTS_FAULT_SCENARIO_H

#include <stdio.h>

#include "agmm.h"
#include "core/error.h"

typedef struct {
    const char *point;       /* "join" (process worlds), "create", "plan" or "run" */
    const char *action;      /* "delay", "hang" or "exit" */
    int faulted;             /* rank F */
    int delay_ms;            /* delay's length (shorter than the timeout) */
    int all_reduce;          /* 0: ag_matmul, 1: all_reduce */
    const char *backend;
    int nranks;
    double timeout_s;        /* the world's */
    int processes;           /* 1: one process per rank (exit_status of each outcome is checked) */
} fault_case;

typedef struct {
    int ran;                 /* the rank's scenario returned */
    agmm_status status;      /* of the call at the fault's point (or of the first call that failed) */
    const char *failed_at;   /* "join", "create", "plan", "run", or NULL when every call succeeded */
    double elapsed_s;        /* of that call */
    double point_s;          /* of the call at the fault's point, whatever its outcome */
    char msg[AGMM_ERROR_LEN]; /* agmm_last_error after it ("" for create: its detail goes to stderr) */
    int exact;               /* every call succeeded and the gathered A and C (or the sum) are exact */
    int exit_status;         /* process worlds: the rank's process's exit status; -1 in threads */
} fault_outcome;

/* AGMM_FAULT's value for the case. */
void fault_case_spec(const fault_case *c, char *buf, size_t len);
/* One rank's part of the case, in `world` (AGMM_FAULT set before the rank starts). After its calls,
 * before destroying anything, the rank calls meet(meet_arg): the driver's meeting point of every
 * rank (threads: a barrier; processes: none, see fault_process.c), so that no rank makes its next
 * collective call (a destroy) while a peer is still inside the faulted one. */
void fault_scenario_rank(agmm_world *world, int rank, const fault_case *c, void (*meet)(void *), void *meet_arg,
                         fault_outcome *out);
/* Prints the case's checks (PASS/FAIL lines) from every rank's outcome. `messages`: 0 where the
 * create point's messages could not be read (they go to stderr). */
void fault_scenario_check(const fault_case *c, const fault_outcome *outs, int messages);
/* A failed context creation has no context to hold its detail: the library logs it to stderr
 * ("[agmm rank R] context creation failed: ..."), and that is where the drivers read it: from
 * `captured` (rewound first), into outs[r].msg where that is still empty. */
void fault_read_create_messages(FILE *captured, fault_outcome *outs, int nranks);

/* agmm-proctest's fault modes (fault_process.c): `agmm-proctest --fault-case ...`. */
int fault_process_main(int argc, char **argv);

#endif
