/* Host memory left to the process (hostmem.h): /proc/meminfo and the memory cgroup. */
#include "hostmem.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_BYTES 4096
/* cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712). */
#define NO_LIMIT ((uint64_t)1 << 62)

/* The first number of file `path` ("max" reads as no limit); 0 on success. */
static int read_number(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char word[32] = "";
    int ok = fscanf(f, "%31s", word) == 1;
    fclose(f);
    if (!ok)
        return -1;
    if (strcmp(word, "max") == 0) {
        *out = UINT64_MAX;
        return 0;
    }
    char *end;
    unsigned long long v = strtoull(word, &end, 10);
    if (end == word || *end)
        return -1;
    *out = v;
    return 0;
}

/* The number after `key` on its line of `path` ("MemAvailable:  123 kB", "inactive_file 123");
 * 0 on success. */
static int read_keyed(const char *path, const char *key, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[256];
    size_t klen = strlen(key);
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && (line[klen] == ' ' || line[klen] == '\t')) {
            unsigned long long v;
            if (sscanf(line + klen, "%llu", &v) == 1) {
                *out = v;
                found = 0;
            }
        }
    fclose(f);
    return found;
}

/* Lowers m to what one cgroup directory has left, if it has a limit. */
static void cgroup_level(agmm_host_memory *m, const char *dir, const char *path, int v2)
{
    char file[PATH_BYTES];
    uint64_t limit, usage, inactive = 0;
    agmm_format(file, sizeof file, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (read_number(file, &limit) != 0 || limit >= NO_LIMIT)
        return;
    agmm_format(file, sizeof file, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    if (read_number(file, &usage) != 0)
        return;
    agmm_format(file, sizeof file, "%s/memory.stat", dir);
    read_keyed(file, v2 ? "inactive_file" : "total_inactive_file", &inactive);
    uint64_t used = usage > inactive ? usage - inactive : 0;
    uint64_t left = limit > used ? limit - used : 0;
    if (left < m->bytes) {
        m->bytes = left;
        agmm_format(m->source, sizeof m->source, "cgroup %s of %s", v2 ? "memory.max" : "memory.limit_in_bytes",
                    path[0] ? path : "/");
    }
}

/* Every level of the cgroup at `path` (as /proc/self/cgroup gives it) under `mount`, up to the
 * mount's root. Where the path is not there (a cgroup namespace shows the process its own cgroup
 * as the root), the mount's root is the process's cgroup. */
static void cgroup_walk(agmm_host_memory *m, const char *mount, const char *path, int v2)
{
    char rel[PATH_BYTES], dir[PATH_BYTES];
    agmm_format(rel, sizeof rel, "%s", path);
    size_t len = strlen(rel);
    while (len > 0 && rel[len - 1] == '\n')
        rel[--len] = '\0';
    for (;;) {
        agmm_format(dir, sizeof dir, "%s%s", mount, rel);
        cgroup_level(m, dir, rel, v2);
        char *slash = strrchr(rel, '/');
        if (slash == NULL || rel[0] == '\0')
            break;
        *slash = '\0';
    }
}

void agmm_host_memory_available_at(const char *proc_root, const char *cgroup_root, agmm_host_memory *m)
{
    char file[PATH_BYTES];
    m->bytes = UINT64_MAX;
    snprintf(m->source, sizeof m->source, "unknown (no /proc/meminfo)");
    uint64_t kb;
    agmm_format(file, sizeof file, "%s/meminfo", proc_root);
    if (read_keyed(file, "MemAvailable:", &kb) == 0 || read_keyed(file, "MemFree:", &kb) == 0) {
        m->bytes = kb * 1024;
        snprintf(m->source, sizeof m->source, "MemAvailable");
    }
    agmm_format(file, sizeof file, "%s/self/cgroup", proc_root);
    FILE *f = fopen(file, "r");
    if (f == NULL)
        return;
    char line[PATH_BYTES], mount[PATH_BYTES];
    while (fgets(line, sizeof line, f)) {
        /* "ID:CONTROLLERS:PATH": v2 is "0::PATH", v1's memory controller "N:memory:PATH". */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        const char *controllers = c1 + 1, *path = c2 + 1;
        if (controllers[0] == '\0') {
            cgroup_walk(m, cgroup_root, path, 1);
            agmm_format(mount, sizeof mount, "%s/unified", cgroup_root);
            cgroup_walk(m, mount, path, 1);
        } else {
            char *save = NULL;
            for (char *tok = strtok_r(c1 + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                if (strcmp(tok, "memory") == 0) {
                    agmm_format(mount, sizeof mount, "%s/memory", cgroup_root);
                    cgroup_walk(m, mount, path, 0);
                }
        }
    }
    fclose(f);
}

void agmm_host_memory_available(agmm_host_memory *m)
{
    agmm_host_memory_available_at("/proc", "/sys/fs/cgroup", m);
}
