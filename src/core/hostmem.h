/* How much host memory this process can still take: what plan creation and agmm-bench check a
 * need against before allocating, so that "too big" is an error with numbers, not an OOM kill
 * (on a machine that overcommits, malloc of 2 TB succeeds and touching it kills the process). */
#ifndef AGMM_CORE_HOSTMEM_H
#define AGMM_CORE_HOSTMEM_H

#include <stdint.h>

typedef struct {
    uint64_t bytes;      /* UINT64_MAX when nothing could be read */
    char source[72];     /* what bounds it: "MemAvailable", "cgroup v2 memory.max of /a/b", ... */
} agmm_host_memory;

/* /proc/meminfo's MemAvailable, lowered to what the process's memory cgroup has left (v1 or v2,
 * its own level and every level above: limit - usage + inactive file pages, which the kernel
 * reclaims first). Local. */
void agmm_host_memory_available(agmm_host_memory *m);
/* The same, reading `proc_root`/meminfo, `proc_root`/self/cgroup and the cgroup tree under
 * `cgroup_root` (tests give a tree of their own). */
void agmm_host_memory_available_at(const char *proc_root, const char *cgroup_root, agmm_host_memory *m);

#endif
