/* Process worlds: a world whose ranks are processes, one rank each (agmm_world_join), and the id
 * their processes share (agmm_unique_id_create). The same agmm_world as a one-process world, with
 * nlocal = 1 and the host collectives of host_procs.c (one host) or host_nccl.c (several hosts).
 *
 * Joining, in order; every step that can fail on one rank is agreed before anyone goes on, so a
 * failure anywhere is the same failure everywhere (agmm_host_agree):
 *   1. who this process is: rank, world size and the job, from the config or the launcher
 *      (launch.c), and which kind of world; then AGMM_FAULT's join point (core/fault.h);
 *   2. the peers: meet them (host_procs.c), or across hosts form the NCCL communicator first and
 *      meet over it (host_nccl.c);
 *   3. the device, locally: CUDA device, its PCI bus id, and for emulated worlds whether CUDA VMM
 *      memory with POSIX file-descriptor handles can be made;
 *   4. one exchange of what each rank is (kind, host, pid, device; rank 0 adds NCCL's unique id
 *      where it hands it out), from which every rank derives the same capabilities;
 *   5. GPU worlds on one host: the NCCL communicator (nonblocking, bounded).
 * docs/processes.md tells users the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "world_impl.h"
#include "../core/fault.h"
#include "../core/knobs.h"
#include "../core/text.h"
#include "../core/validate.h"

#define ID_MAGIC "agmm-id"
#define NCCL_ID_BYTES 128
#define JOIN_GPU_MIN_S 60.0

typedef struct {
    char magic[8];
    uint32_t version;
    int32_t kind;                        /* resolved: CPU, GPU or EMULATED */
    unsigned char key[16];               /* random: names the job's sockets */
    unsigned char nccl[NCCL_ID_BYTES];   /* GPU worlds: ncclUniqueId */
} id_layout;

_Static_assert(sizeof(id_layout) <= AGMM_UNIQUE_ID_BYTES, "agmm_unique_id holds the id's layout");

/* What each rank tells the others when it joins. */
typedef struct {
    int32_t kind;
    int32_t pid;
    char host[128];
    agmm_gpu_join_info gpu;
    int32_t has_nccl_id;
    unsigned char nccl_id[NCCL_ID_BYTES];
} join_info;

_Static_assert(sizeof(join_info) <= AGMM_HOST_SLOT_BYTES, "a host exchange slot holds join_info");

static const char *kind_name(agmm_world_kind k)
{
    switch (k) {
    case AGMM_WORLD_AUTO: return "auto";
    case AGMM_WORLD_CPU: return "CPU";
    case AGMM_WORLD_GPU: return "GPU";
    case AGMM_WORLD_EMULATED: return "emulated";
    }
    return "?";
}

static void random_bytes(unsigned char *out, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(out + got, len - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    /* Without getrandom (an old kernel): the time and pid still tell two jobs apart. */
    for (size_t i = got; i < len; i++)
        out[i] = (unsigned char)(((uint64_t)time(NULL) >> (8 * (i % 8))) ^ (unsigned)getpid() ^ i);
}

static agmm_world_kind resolve_auto(agmm_world_kind kind)
{
    if (kind != AGMM_WORLD_AUTO)
        return kind;
    return agmm_world_gpu_count() > 0 ? AGMM_WORLD_GPU : AGMM_WORLD_CPU;
}

agmm_status agmm_unique_id_create(agmm_world_kind kind, agmm_unique_id *id)
{
    if (id == NULL || kind < AGMM_WORLD_AUTO || kind > AGMM_WORLD_EMULATED)
        return AGMM_ERR_INVALID_ARG;
    memset(id, 0, sizeof *id);
    id_layout l = {.magic = ID_MAGIC, .version = 1, .kind = resolve_auto(kind)};
    random_bytes(l.key, sizeof l.key);
    if (l.kind == AGMM_WORLD_GPU) {
        agmm_error err = {0};
        agmm_status st = agmm_world_gpu_nccl_id(l.nccl, sizeof l.nccl, &err);
        if (st != AGMM_SUCCESS)
            return st;
    }
    memcpy(id->bytes, &l, sizeof l);
    return AGMM_SUCCESS;
}

/* ---- step 1: who this process is ---- */

typedef struct {
    agmm_proc_identity who;
    agmm_world_kind kind;
    int device;
    int multi_host;
    int local_rank;               /* from the launcher, -1 unknown */
    char nccl_comm_id[96];        /* from the launcher, for NCCL across hosts */
    const id_layout *id;          /* NULL without one */
} join_plan;

static agmm_status check_config(const agmm_join_config *c, agmm_error *err)
{
    if (c->kind < AGMM_WORLD_AUTO || c->kind > AGMM_WORLD_EMULATED)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "kind=%d: must be AGMM_WORLD_AUTO, _CPU, _GPU or _EMULATED",
                         (int)c->kind);
    int from_env = c->rank == -1 && c->nranks == -1;
    if (!from_env && (c->nranks < 1 || c->nranks > AGMM_MAX_RANKS))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "nranks=%d: must be 1..%d, or -1 with rank=-1 to read both from the launcher", c->nranks,
                         AGMM_MAX_RANKS);
    if (!from_env && (c->rank < 0 || c->rank >= c->nranks))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "rank=%d: must be 0..%d (nranks=%d), or -1 with nranks=-1",
                         c->rank, c->nranks - 1, c->nranks);
    if (c->device < -1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "device=%d: must be a CUDA device ordinal or -1", c->device);
    const agmm_status timeout_ok = agmm_world_check_timeout(c->timeout_s, err);
    if (timeout_ok != AGMM_SUCCESS)
        return timeout_ok;
    if (c->multi_host != 0 && c->multi_host != 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "multi_host=%d: must be 0 or 1", c->multi_host);
    if (c->id != NULL) {
        const id_layout *l = (const id_layout *)c->id->bytes;
        if (memcmp(l->magic, ID_MAGIC, sizeof l->magic) != 0 || l->version != 1)
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "id: not an id from agmm_unique_id_create (or from another version of agmm)");
        if (c->kind != AGMM_WORLD_AUTO && (int32_t)c->kind != l->kind)
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "kind=%s, but the id was made for a %s world",
                             kind_name(c->kind), kind_name((agmm_world_kind)l->kind));
    }
    if (c->nccl_comm != NULL && c->kind != AGMM_WORLD_GPU && c->kind != AGMM_WORLD_AUTO)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "nccl_comm given for a %s world: only GPU worlds use NCCL",
                         kind_name(c->kind));
    return agmm_check_reserved(c->reserved, sizeof c->reserved, "join config", err);
}

static agmm_status plan_join(const agmm_join_config *c, join_plan *p, agmm_error *err)
{
    memset(p, 0, sizeof *p);
    p->local_rank = -1;
    p->id = c->id ? (const id_layout *)c->id->bytes : NULL;
    p->kind = p->id ? (agmm_world_kind)p->id->kind : resolve_auto(c->kind);
    if (c->nccl_comm != NULL && p->kind != AGMM_WORLD_GPU)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "nccl_comm given, but the world is a %s world",
                         kind_name(p->kind));
    agmm_proc_identity *who = &p->who;
    if (c->rank == -1 && c->nranks == -1) {
        agmm_launch_env env;
        agmm_status st = agmm_launch_env_read(&env, err);
        if (st != AGMM_SUCCESS)
            return st;
        who->rank = env.rank;
        who->nranks = env.nranks;
        p->multi_host = env.multi_host;
        p->local_rank = env.local_rank;
        snprintf(who->job, sizeof who->job, "%s", env.job);
        snprintf(who->source, sizeof who->source, "%s", env.source);
        snprintf(p->nccl_comm_id, sizeof p->nccl_comm_id, "%s", env.nccl_comm_id);
    } else {
        who->rank = c->rank;
        who->nranks = c->nranks;
        p->multi_host = c->multi_host;
        const agmm_status job_ok = agmm_launch_job_id(who->job, sizeof who->job, err);
        if (job_ok != AGMM_SUCCESS)
            return job_ok;
        snprintf(who->source, sizeof who->source, "rank=%d, nranks=%d", c->rank, c->nranks);
        if (getenv("NCCL_COMM_ID"))
            snprintf(p->nccl_comm_id, sizeof p->nccl_comm_id, "%s", getenv("NCCL_COMM_ID"));
    }
    if (p->id != NULL) {
        /* The id names the job: its random key, whatever the launcher says. */
        size_t n = (size_t)snprintf(who->job, sizeof who->job, "id/");
        for (size_t i = 0; i < sizeof p->id->key; i++)
            n += (size_t)snprintf(who->job + n, sizeof who->job - n, "%02x", p->id->key[i]);
    }
    if (p->multi_host && p->kind != AGMM_WORLD_GPU)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "a %s process world needs every rank on one host (its ranks share this host's memory), but "
                         "%s",
                         kind_name(p->kind), c->rank == -1 ? "the launcher says they run on several" : "multi_host=1");
    if (!p->multi_host && who->job[0] == '\0')
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "%s: nothing names this job, so its processes cannot find each other: pass an "
                         "agmm_unique_id, run under torchrun (MASTER_ADDR/MASTER_PORT), mpirun or srun, or set "
                         "AGMM_JOB_ID to the same value in every process",
                         who->source);
    p->device = -1;
    if (p->kind == AGMM_WORLD_EMULATED)
        p->device = c->device >= 0 ? c->device : 0;
    else if (p->kind == AGMM_WORLD_GPU) {
        int ndev = agmm_world_gpu_count();
        p->device = c->device >= 0                  ? c->device
                    : p->local_rank >= 0            ? p->local_rank
                    : ndev > 0                      ? who->rank % ndev
                                                    : 0;
    }
    return AGMM_SUCCESS;
}

/* ---- steps 3 and 4: what each rank is, and what the world can do ---- */

static void host_name(char *out, size_t len)
{
    agmm_error ignored; /* text: any value is allowed */
    agmm_knob_value o;
    agmm_knob_read(AGMM_KNOB_HOSTNAME, &o, &ignored);
    if (o.text && *o.text)
        snprintf(out, len, "%s", o.text);
    else if (gethostname(out, len) != 0)
        snprintf(out, len, "?");
    out[len - 1] = '\0';
}

/* Capabilities every rank derives alike from everyone's join_info. */
static agmm_status derive_caps(agmm_world *w, agmm_ctx *boot, const join_info *all)
{
    const join_info *me = &all[w->first_rank];
    for (int r = 0; r < w->nranks; r++)
        if (all[r].kind != all[0].kind)
            return AGMM_FAIL(&boot->err, AGMM_ERR_INVALID_ARG,
                             "rank %d joined a %s world but rank 0 a %s world: every rank must ask for the same kind",
                             r, kind_name((agmm_world_kind)all[r].kind), kind_name((agmm_world_kind)all[0].kind));
    int span = -1;
    for (int r = 0; r < w->nranks && span < 0; r++)
        if (strcmp(all[r].host, all[0].host) != 0)
            span = r;
    w->caps = w->kind == AGMM_WORLD_CPU ? AGMM_CAP_PEER_MEMORY : AGMM_CAP_GPU | AGMM_CAP_PEER_MEMORY;
    if (w->kind == AGMM_WORLD_GPU)
        w->caps |= AGMM_CAP_NCCL;
    if (w->kind == AGMM_WORLD_CPU)
        snprintf(w->lacks_nccl, sizeof w->lacks_nccl, "the CPU world has no NCCL");
    if (w->kind == AGMM_WORLD_EMULATED)
        snprintf(w->lacks_nccl, sizeof w->lacks_nccl,
                 "ranks share a GPU (an emulated world), and NCCL needs one GPU per rank");
    /* Processes of one job on one host share its memory: memory checks count them together. */
    w->ranks_on_host = 0;
    for (int r = 0; r < w->nranks; r++)
        w->ranks_on_host += strcmp(all[r].host, me->host) == 0;
    w->ranks_on_device = 0;
    for (int r = 0; r < w->nranks; r++) {
        int same = strcmp(all[r].host, me->host) == 0 && w->kind != AGMM_WORLD_CPU &&
                   strcmp(all[r].gpu.bus_id, me->gpu.bus_id) == 0;
        w->ranks_on_device += same || r == w->first_rank;
        if (same && r != w->first_rank && w->kind == AGMM_WORLD_GPU)
            return AGMM_FAIL(&boot->err, AGMM_ERR_INVALID_ARG,
                             "ranks %d and %d both run on GPU %s of %s: a GPU world needs one GPU per rank (NCCL "
                             "refuses two ranks on one GPU; an emulated world shares one)",
                             r < w->first_rank ? r : w->first_rank, r < w->first_rank ? w->first_rank : r,
                             me->gpu.bus_id, me->host);
    }
    const char *p2p = getenv("NCCL_P2P_DISABLE");
    char why[sizeof w->lacks_peer] = "";
    if (span >= 0)
        agmm_format(why, sizeof why, "ranks span nodes (rank 0 runs on %s, rank %d on %s)", all[0].host, span,
                    all[span].host);
    else if (w->kind == AGMM_WORLD_GPU && w->nranks > 1 && p2p && *p2p && strcmp(p2p, "0") != 0)
        agmm_format(why, sizeof why, "NCCL_P2P_DISABLE=%s: peer access between the ranks' GPUs is turned off", p2p);
    for (int r = 0; r < w->nranks && !why[0] && w->kind == AGMM_WORLD_EMULATED; r++)
        if (!all[r].gpu.vmm_fd_ok)
            agmm_format(why, sizeof why, "rank %d cannot share GPU memory between processes: %s", r,
                        all[r].gpu.vmm_why);
    if (why[0]) {
        w->caps &= ~(unsigned)AGMM_CAP_PEER_MEMORY;
        snprintf(w->lacks_peer, sizeof w->lacks_peer, "%s", why);
    }
    return AGMM_SUCCESS;
}

/* GPU worlds on one host: whether every rank's GPU reaches every other's (each rank probes its
 * own; the first reason any rank found counts for all). */
static agmm_status agree_peer_access(agmm_world *w, agmm_ctx *boot, const join_info *all)
{
    if (w->kind != AGMM_WORLD_GPU || !(w->caps & AGMM_CAP_PEER_MEMORY) || w->nranks == 1)
        return AGMM_SUCCESS;
    agmm_gpu_join_info infos[AGMM_MAX_RANKS];
    for (int r = 0; r < w->nranks; r++)
        infos[r] = all[r].gpu;
    char mine[160] = "", whys[AGMM_MAX_RANKS][160];
    agmm_world_gpu_peer_probe(w, infos, mine, sizeof mine);
    agmm_status st = agmm_host_exchange(boot, mine, sizeof mine, whys);
    for (int r = 0; r < w->nranks && st == AGMM_SUCCESS; r++)
        if (whys[r][0]) {
            w->caps &= ~(unsigned)AGMM_CAP_PEER_MEMORY;
            snprintf(w->lacks_peer, sizeof w->lacks_peer, "%s", whys[r]);
            break;
        }
    return st;
}

static void describe(agmm_world *w, const join_plan *p, const char *device_text)
{
    char extra[sizeof w->lacks_peer + 64] = "";
    if (!(w->caps & AGMM_CAP_PEER_MEMORY))
        snprintf(extra, sizeof extra, "; no peer memory: %s", w->lacks_peer);
    if (w->kind == AGMM_WORLD_CPU)
        agmm_format(w->describe, sizeof w->describe,
                    "device: CPU (a process world); rank %d of %d processes, %s; host memory shared between the "
                    "processes as symmetric memory%s",
                    w->first_rank, w->nranks, p->who.source, extra);
    else
        agmm_format(w->describe, sizeof w->describe, "%s; rank %d of %d processes, %s%s%s", device_text,
                    w->first_rank, w->nranks, p->who.source,
                    w->kind == AGMM_WORLD_EMULATED ? "; emulated: the processes share the GPU, no NCCL" : "", extra);
}

/* ---- the whole join ---- */

/* AGMM_FAULT's join point: this process is known (rank, world size, timeout) and has met nobody
 * yet. A malformed spec fails the join here, before any peer waits for this process. */
static agmm_status join_fault(const agmm_world *w, const join_plan *p, agmm_error *err)
{
    agmm_fault f;
    agmm_status st = agmm_fault_from_env(p->who.nranks, &f, err);
    agmm_fault_site site = {.rank = p->who.rank, .nranks = p->who.nranks, .timeout_s = w->timeout_s,
                            .process_world = 1};
    return st == AGMM_SUCCESS ? agmm_fault_point(&f, AGMM_FAULT_AT_JOIN, &site, err) : st;
}

static agmm_status join(agmm_world *w, const agmm_join_config *c, const join_plan *p, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    join_info mine = {.kind = (int32_t)p->kind, .pid = (int32_t)getpid()};
    host_name(mine.host, sizeof mine.host);
    char device_text[256] = "";
    int gpu = p->kind != AGMM_WORLD_CPU;

    if (p->multi_host) {
        /* Across hosts the ranks meet through NCCL alone: its communicator comes first. */
        unsigned char nccl_id[NCCL_ID_BYTES] = {0};
        if (p->id == NULL && c->nccl_comm == NULL) {
            if (p->nccl_comm_id[0] == '\0')
                return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                                 "%s: the ranks run on several hosts, and without an id they meet through NCCL's "
                                 "bootstrap, which needs an address: set NCCL_COMM_ID=host:port (or MASTER_ADDR and "
                                 "MASTER_PORT: agmm then uses MASTER_PORT+1)",
                                 p->who.source);
            /* NCCL reads it in ncclGetUniqueId; a value the user set is left alone. */
            setenv("NCCL_COMM_ID", p->nccl_comm_id, 0);
            AGMM_TRY(st, agmm_world_gpu_nccl_id(nccl_id, sizeof nccl_id, err));
        }
        AGMM_TRY(st, agmm_world_gpu_join_device(w, p->device, &mine.gpu, device_text, sizeof device_text, err));
        AGMM_TRY(st, agmm_world_gpu_join_nccl(w, p->id ? p->id->nccl : nccl_id, c->nccl_comm, c->allow_nvls,
                                              device_text, sizeof device_text, err));
        AGMM_TRY(st, agmm_host_nccl_init(w, err));
    } else {
        AGMM_TRY(st, agmm_host_procs_init(w, &p->who, err));
    }

    /* From here on every failure is agreed: the peers are reachable. Every rank has arrived, so
     * what is left to wait for is peers starting CUDA and NCCL (seconds where several processes
     * load every kernel into one GPU): bounded as NCCL's own set-up is, by at least 60 s. A peer
     * that dies meanwhile is still seen at once. */
    const double timeout_s = w->timeout_s;
    if (gpu && w->timeout_s < JOIN_GPU_MIN_S)
        w->timeout_s = JOIN_GPU_MIN_S;
    agmm_ctx boot = {.world = w};
    boot.info = (agmm_rank_info){.kind = w->kind, .rank = w->first_rank, .nranks = w->nranks, .device = -1,
                                 .timeout_s = w->timeout_s, .log_level = w->log_level, .processes = 1};
    agmm_status local = AGMM_SUCCESS;
    if (gpu && !p->multi_host)
        local = agmm_world_gpu_join_device(w, p->device, &mine.gpu, device_text, sizeof device_text, &boot.err);
    if (local == AGMM_SUCCESS && p->kind == AGMM_WORLD_GPU && !p->multi_host && w->first_rank == 0 &&
        p->id == NULL && c->nccl_comm == NULL) {
        /* Rank 0 hands NCCL's unique id to the others over this host's meeting point. */
        local = agmm_world_gpu_nccl_id(mine.nccl_id, sizeof mine.nccl_id, &boot.err);
        mine.has_nccl_id = local == AGMM_SUCCESS;
    }
    st = agmm_host_agree(&boot, local);
    join_info *all = NULL;
    if (st == AGMM_SUCCESS) {
        all = calloc(AGMM_MAX_RANKS, sizeof *all);
        st = all ? agmm_host_exchange(&boot, &mine, sizeof mine, all)
                 : AGMM_FAIL(&boot.err, AGMM_ERR_NO_MEMORY, "join table allocation failed");
    }
    if (st == AGMM_SUCCESS)
        st = derive_caps(w, &boot, all);
    if (st == AGMM_SUCCESS)
        st = agree_peer_access(w, &boot, all);
    if (st == AGMM_SUCCESS && p->kind == AGMM_WORLD_GPU && !p->multi_host) {
        const void *nccl_id = p->id ? (const void *)p->id->nccl : all[0].has_nccl_id ? all[0].nccl_id : NULL;
        local = agmm_world_gpu_join_nccl(w, nccl_id, c->nccl_comm, c->allow_nvls, device_text, sizeof device_text,
                                         &boot.err);
        st = agmm_host_agree(&boot, local);
    }
    free(all);
    w->timeout_s = timeout_s;
    if (st != AGMM_SUCCESS) {
        *err = boot.err;
        return st;
    }
    describe(w, p, device_text);
fail:
    return st;
}

agmm_status agmm_world_join(agmm_world **out, const agmm_join_config *config, char *errbuf, size_t errbuf_len)
{
    agmm_error err = {0};
    agmm_status st = AGMM_SUCCESS;
    agmm_join_config c = {.kind = AGMM_WORLD_AUTO, .rank = -1, .nranks = -1, .device = -1};
    if (config)
        c = *config;
    join_plan p;
    agmm_world *w = NULL;
    if (out == NULL)
        st = AGMM_FAIL(&err, AGMM_ERR_INVALID_ARG, "world is NULL");
    else
        *out = NULL;
    if (st == AGMM_SUCCESS)
        st = check_config(&c, &err);
    if (st == AGMM_SUCCESS)
        st = plan_join(&c, &p, &err);
    if (st == AGMM_SUCCESS)
        st = agmm_world_alloc(c.timeout_s, &w, &err);
    if (st == AGMM_SUCCESS) {
        w->kind = p.kind;
        w->processes = 1;
        w->nranks = p.who.nranks;
        w->nlocal = 1;
        w->first_rank = p.who.rank;
        w->device_of[0] = p.device;
        w->ranks_on_device = 1;
        w->ranks_on_host = 1;
        st = join_fault(w, &p, &err);
    }
    if (st == AGMM_SUCCESS)
        st = join(w, &c, &p, &err);
    if (st != AGMM_SUCCESS) {
        if (errbuf && errbuf_len)
            agmm_format(errbuf, errbuf_len, "%s", err.msg);
        agmm_world_destroy(w);
        return st;
    }
    *out = w;
    return AGMM_SUCCESS;
}

int agmm_world_launch_rank(void) { return agmm_launch_env_rank(); }
