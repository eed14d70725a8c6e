/* Host collectives of a world whose ranks are processes on one host (agmm_world_join): how the
 * processes find each other, the shared control segment their collectives run on, how they pass
 * file descriptors, and how they notice a peer that died. docs/processes.md says the same for
 * users.
 *
 * Meeting. Every process listens on an abstract Unix socket named after the job and its rank,
 * "@agmm-<16 hex digits of the job's hash>-<rank>". An abstract name lives in the kernel only and
 * goes with the socket, so a process killed at any moment leaves no name behind (nothing in
 * /dev/shm or the file system). Rank 0 makes the control segment (a memfd: it never has a name
 * either) and sends its descriptor to each peer's socket as soon as that peer listens; every
 * process maps it and claims its slot.
 *
 * Collectives. Slot r is written by rank r only. Host collective number s writes buffer s % 2 of
 * the slot and then publishes seq = s (release); a rank reads a peer's buffer once that peer's
 * seq has reached s (acquire). Two buffers suffice: a rank writes collective s + 2 only after
 * every peer published s + 1, that is after every peer finished reading s.
 *
 * Liveness. Each process holds a lock on byte `rank` of the control segment through its own open
 * file description (F_OFD_SETLK). The kernel drops it when the process ends, however it ends
 * (kill -9 included) and before it is reaped, so a waiter that finds a joined peer's byte unlocked
 * knows the peer is gone and fails at once, naming it, instead of at the timeout. A rank that
 * leaves normally marks its slot first, so its peers can tell "left" from "died".
 *
 * Busy. A rank doing work of its own (agmm_ctx_busy_begin) raises `busy` in its slot, with what
 * it does. A peer waiting for it then pushes its deadline on at every look, so the wait has no
 * bound while the rank is busy and a whole timeout once it ends. The liveness locks are still
 * watched, the busy rank's and every other's: a process that dies meanwhile is reported at once,
 * not at the end of the spell.
 *
 * Giving up. A rank whose collective failed writes why into the segment's header; every peer
 * then fails its next (or current) wait at once with that reason: the world is unusable.
 *
 * Passing descriptors (the sockets: fd_socket.h). For each exchange every rank connects to each
 * peer's socket and sends its descriptor (SCM_RIGHTS) with the exchange's tag, then accepts one
 * message from each peer. The kernel holds a sent message until it is accepted, so nobody waits
 * for a receiver. A peer one exchange ahead may already have sent the next one's: it is kept until
 * then. Connections from another user are refused (SO_PEERCRED).
 *
 * fork(). A child forked without exec (a data loader's workers) would inherit the segment's open
 * file description (through its descriptor and its mapping), and with it the liveness lock, and
 * the listening socket: a rank that died would look alive to its peers until the timeout, and its
 * name would outlive the job. The child unmaps and closes them at once (pthread_atfork); it is no
 * rank of the world and must not use it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fd_socket.h"
#include "world_impl.h"
#include "../core/clock.h"
#include "../core/text.h"

#define CONTROL_MAGIC 0x316c74636d6d6761ull /* "agmmctl1" */
#define SLOT_JOINED 1u
#define SLOT_LEFT 2u

typedef struct {
    uint32_t tag;
    uint32_t bytes;
    unsigned char data[AGMM_HOST_SLOT_BYTES];
} ctl_buf;

typedef struct {
    _Atomic uint32_t state;    /* 0, SLOT_JOINED once its lock is held, SLOT_LEFT after destroy */
    _Atomic uint32_t seq;      /* the last host collective this rank published */
    int32_t pid;
    _Atomic uint32_t busy;     /* 1 while the rank is busy with work of its own */
    char busy_what[64];        /* what it does then, written before busy is raised */
    ctl_buf buf[2];
} __attribute__((aligned(64))) ctl_slot;

typedef struct {
    uint64_t magic;
    uint32_t nranks;
    _Atomic uint32_t abandoning;   /* claimed by the first rank that gives up */
    _Atomic uint32_t abandoned;    /* rank + 1 of that rank once `why` is written */
    char why[AGMM_ERROR_LEN];
    ctl_slot slot[AGMM_MAX_RANKS];
} ctl_segment;

typedef struct procs_state {
    ctl_segment *ctl;
    int ctl_fd;                /* this process's own open of the segment: it holds the lock */
    int liveness;              /* 1 if locks tell who is alive */
    int listen_fd;
    int rank, nranks;
    uint64_t job;
    uint32_t seq;              /* host collectives entered */
    struct {
        uint32_t tag;
        int fd;
        int present;
    } early[AGMM_MAX_RANKS];   /* a peer's descriptor sent for a later exchange */
    int seg_fd;                /* rank 0: the control segment, until every peer has its slot (resend_control) */
    int64_t sent_at[AGMM_MAX_RANKS]; /* rank 0: when each peer was last sent it */
    struct procs_state *next_live; /* the process's live worlds (forked, below) */
} procs_state;

/* ---- fork(): the child lets go of every world's descriptors (the header says why) ---- */

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static procs_state *live_states;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) { pthread_mutex_lock(&live_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&live_mu); }

/* In the child, the one thread left; live_mu is held since fork_prepare. */
static void fork_child(void)
{
    for (procs_state *ps = live_states; ps; ps = ps->next_live) {
        /* The mapping holds the segment's open file description too, and with it the lock. */
        if (ps->ctl != NULL)
            munmap(ps->ctl, sizeof *ps->ctl);
        ps->ctl = NULL;
        if (ps->ctl_fd >= 0)
            close(ps->ctl_fd);
        if (ps->listen_fd >= 0)
            close(ps->listen_fd);
        if (ps->seg_fd >= 0)
            close(ps->seg_fd);
        for (int p = 0; p < AGMM_MAX_RANKS; p++)
            if (ps->early[p].present)
                close(ps->early[p].fd);
        ps->ctl_fd = ps->listen_fd = ps->seg_fd = -1;
        memset(ps->early, 0, sizeof ps->early);
    }
    pthread_mutex_unlock(&live_mu);
}

static void atfork_register(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

static void live_add(procs_state *ps)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&live_mu);
    ps->next_live = live_states;
    live_states = ps;
    pthread_mutex_unlock(&live_mu);
}

static void live_remove(procs_state *ps)
{
    pthread_mutex_lock(&live_mu);
    procs_state **at = &live_states;
    while (*at && *at != ps)
        at = &(*at)->next_live;
    if (*at)
        *at = ps->next_live;
    pthread_mutex_unlock(&live_mu);
}

static void nap(int64_t ns)
{
    struct timespec t = {0, (long)ns};
    nanosleep(&t, NULL);
}

static uint64_t job_hash(const char *s)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- liveness ---- */

static int lock_byte(int fd, int rank, int cmd, struct flock *out)
{
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = rank, .l_len = 1};
    int r = fcntl(fd, cmd, &l);
    if (out)
        *out = l;
    return r;
}

typedef enum { PEER_ABSENT, PEER_ALIVE, PEER_LEFT, PEER_DEAD } peer_state;

static peer_state peer_of(const procs_state *ps, int p)
{
    uint32_t st = atomic_load_explicit(&ps->ctl->slot[p].state, memory_order_acquire);
    if (st == 0)
        return PEER_ABSENT;
    if (st == SLOT_LEFT)
        return PEER_LEFT;
    if (!ps->liveness)
        return PEER_ALIVE;
    struct flock l;
    if (lock_byte(ps->ctl_fd, p, F_OFD_GETLK, &l) != 0 || l.l_type != F_UNLCK)
        return PEER_ALIVE;
    /* Unlocked: the process is gone, unless it left between the two loads. */
    st = atomic_load_explicit(&ps->ctl->slot[p].state, memory_order_acquire);
    return st == SLOT_LEFT ? PEER_LEFT : PEER_DEAD;
}

/* "rank 2 never arrived (pid 1234 has exited ...)": the words every world's timeouts use
 * (host_threads.c, the barriers), with what this world knows besides. */
static const char *peer_text(const procs_state *ps, int p, char *buf, size_t len)
{
    const int pid = ps->ctl->slot[p].pid;
    switch (peer_of(ps, p)) {
    case PEER_ABSENT: agmm_format(buf, len, "rank %d never arrived (it has not joined)", p); break;
    case PEER_ALIVE:
        agmm_format(buf, len, "rank %d never arrived (pid %d is alive but has not reached this step)", p, pid);
        break;
    case PEER_LEFT:
        agmm_format(buf, len, "rank %d never arrived (pid %d left the world without this step)", p, pid);
        break;
    case PEER_DEAD:
        agmm_format(buf, len, "rank %d never arrived (pid %d has exited without leaving the world: killed or crashed)",
                    p, pid);
        break;
    }
    return buf;
}

/* The reason a peer gave up, or NULL. */
static const char *abandoned(const procs_state *ps, int *who)
{
    uint32_t a = atomic_load_explicit(&ps->ctl->abandoned, memory_order_acquire);
    if (a == 0)
        return NULL;
    *who = (int)a - 1;
    return ps->ctl->why;
}

/* 1 with the reason in `why` if waiting any longer for peer p is pointless, 0 while it may still
 * come. The most telling reason first: p died; someone gave up on the world (with that rank's
 * reason, which names a missing rank where that is why); p left. */
static int hopeless(const procs_state *ps, int p, char *why, size_t len)
{
    peer_state s = peer_of(ps, p);
    int who = -1;
    const char *gave_up = abandoned(ps, &who);
    if (s == PEER_DEAD || (s == PEER_LEFT && (gave_up == NULL || who == ps->rank)))
        peer_text(ps, p, why, len);
    else if (gave_up != NULL && who != ps->rank)
        agmm_format(why, len, "rank %d gave up on the world: %s", who, gave_up);
    else
        return 0;
    return 1;
}

/* While peer p is busy with work of its own, a wait for it keeps a whole timeout ahead: the
 * deadline moves to now + timeout at every look. Returns whether p is busy. */
static int hold_for_busy(const procs_state *ps, int p, int64_t t, double timeout_s, int64_t *deadline_ns)
{
    const int64_t held = t + (int64_t)(timeout_s * 1e9);
    const int busy = atomic_load_explicit(&ps->ctl->slot[p].busy, memory_order_acquire) != 0;
    if (busy && held > *deadline_ns)
        *deadline_ns = held;
    return busy;
}

/* A peer other than p whose process died, or -1. Looked at while a wait has no bound (p busy): a
 * death elsewhere, even of a rank that already arrived, dooms the world, and must not wait for
 * the end of p's spell to be seen. */
static int dead_elsewhere(const procs_state *ps, int p)
{
    for (int q = 0; q < ps->nranks; q++)
        if (q != p && q != ps->rank && peer_of(ps, q) == PEER_DEAD)
            return q;
    return -1;
}

/* How long rank 0 waits for a peer to claim its slot before it sends the control segment again. */
#define RESEND_NS 200000000LL

/* Rank 0, while it waits for peers: the control segment again to each peer that has not claimed
 * its slot RESEND_NS after the last send. A send can land on a socket that closes unread (a
 * process of the same identity leaving its world as this one meets, the name then bound anew by
 * its successor), and that peer would wait for the segment until its deadline. The peers ignore
 * the copies that come after the first (procs_exchange_fds). Once every peer has its slot, the
 * descriptor is closed. */
static void resend_control(procs_state *ps)
{
    if (ps->seg_fd < 0)
        return;
    int waiting = 0;
    for (int p = 1; p < ps->nranks; p++) {
        if (atomic_load_explicit(&ps->ctl->slot[p].state, memory_order_acquire) != 0)
            continue;
        waiting = 1;
        if (agmm_mono_ns() - ps->sent_at[p] >= RESEND_NS && agmm_fd_send(ps->job, ps->rank, ps->nranks, p, 0, ps->seg_fd) == 1)
            ps->sent_at[p] = agmm_mono_ns();
    }
    if (!waiting) {
        close(ps->seg_fd);
        ps->seg_fd = -1;
    }
}

/* Waits until `ready(ps, p, arg)` holds for peer p, up to *deadline_ns (moved on while p is busy:
 * the caller's later waits keep the moved deadline). Spins briefly, then naps; looks at the abandon
 * flag and p's liveness every few milliseconds so that a dead peer or one that gave up is reported
 * at once, busy or not. Returns AGMM_SUCCESS, or records why not. */
static agmm_status wait_for(agmm_ctx *ctx, procs_state *ps, int p, int (*ready)(const procs_state *, int, uint32_t),
                            uint32_t arg, int64_t *deadline_ns, const char *what)
{
    int64_t start = agmm_mono_ns(), next_look = start;
    for (int spins = 0;; spins++) {
        if (ready(ps, p, arg))
            return AGMM_SUCCESS;
        int64_t t = agmm_mono_ns();
        if (t >= next_look || t >= *deadline_ns) {
            resend_control(ps);
            char why[AGMM_ERROR_LEN];
            /* A peer that published and then left or died still counts as arrived. */
            if (hopeless(ps, p, why, sizeof why) && !ready(ps, p, arg))
                return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT, "rank %d: %s: %s", ps->rank, what, why);
            int q = hold_for_busy(ps, p, t, ctx->world->timeout_s, deadline_ns) ? dead_elsewhere(ps, p) : -1;
            if (q >= 0)
                return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                                 "rank %d: %s: rank %d (pid %d) has exited without leaving the world: killed or "
                                 "crashed (seen while rank %d was busy: %s)",
                                 ps->rank, what, q, ps->ctl->slot[q].pid, p, ps->ctl->slot[p].busy_what);
            if (t >= *deadline_ns)
                return AGMM_ERR_TIMEOUT; /* the caller names every rank still missing */
            next_look = t + 2000000;
        }
        if (spins < 64)
            continue;
        if (t - start < 200000)
            sched_yield();
        else
            nap(50000);
    }
}

static int published(const procs_state *ps, int p, uint32_t s)
{
    return (int32_t)(atomic_load_explicit(&ps->ctl->slot[p].seq, memory_order_acquire) - s) >= 0;
}

/* The timeout of host collective s, naming every rank missing, each in the words every world
 * uses: "rank 1 never arrived (pid 12 is alive ...); rank 2 never arrived (it has not joined)". */
static agmm_status missing_ranks(agmm_ctx *ctx, procs_state *ps, uint32_t s, const char *what)
{
    char list[AGMM_MAX_RANKS * 112] = "";
    size_t used = 0;
    for (int p = 0; p < ps->nranks; p++)
        if (!published(ps, p, s)) {
            char text[160];
            used += agmm_format(list + used, sizeof list - used, "%s%s", used ? "; " : "",
                                peer_text(ps, p, text, sizeof text));
        }
    return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT, "rank %d: %s timed out after %.2f s: %s", ps->rank, what,
                     ctx->world->timeout_s, list);
}

static int64_t deadline_of(const agmm_world *w) { return agmm_mono_ns() + (int64_t)(w->timeout_s * 1e9); }

/* ---- collectives on the control segment ---- */

static agmm_status procs_exchange(agmm_ctx *ctx, uint32_t tag, const void *mine, size_t bytes, void *all)
{
    agmm_world *w = ctx->world;
    procs_state *ps = w->host_state;
    uint32_t s = ++ps->seq;
    char what[64];
    snprintf(what, sizeof what, "host %s #%u", tag & 1 ? "exchange" : "barrier", tag >> 1);
    ctl_slot *me = &ps->ctl->slot[ps->rank];
    ctl_buf *b = &me->buf[s & 1];
    b->tag = tag;
    b->bytes = (uint32_t)bytes;
    if (bytes)
        memcpy(b->data, mine, bytes);
    atomic_store_explicit(&me->seq, s, memory_order_release);

    int64_t deadline = deadline_of(w);
    for (int p = 0; p < ps->nranks; p++) {
        agmm_status st = wait_for(ctx, ps, p, published, s, &deadline, what);
        if (st != AGMM_SUCCESS)
            return ctx->err.status != AGMM_SUCCESS ? st : missing_ranks(ctx, ps, s, what);
    }
    for (int p = 0; p < ps->nranks; p++) {
        const ctl_buf *pb = &ps->ctl->slot[p].buf[s & 1];
        if (pb->tag != tag || pb->bytes != bytes)
            return AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL,
                             "rank %d: %s met rank %d in its host %s #%u (%u bytes, not %zu): the ranks are out of "
                             "step (one skipped or repeated a collective call, or they disagree on a size)",
                             ps->rank, what, p, pb->tag & 1 ? "exchange" : "barrier", pb->tag >> 1, pb->bytes, bytes);
        if (bytes)
            memcpy((unsigned char *)all + (size_t)p * bytes, pb->data, bytes);
    }
    return AGMM_SUCCESS;
}

static agmm_status procs_barrier(agmm_ctx *ctx, uint32_t tag) { return procs_exchange(ctx, tag, NULL, 0, NULL); }

static void procs_abandon(agmm_world *w, const agmm_error *why)
{
    procs_state *ps = w->host_state;
    if (ps == NULL || ps->ctl == NULL || atomic_exchange(&ps->ctl->abandoning, 1u) != 0)
        return;
    snprintf(ps->ctl->why, sizeof ps->ctl->why, "%s", agmm_error_detail(why->msg));
    atomic_store_explicit(&ps->ctl->abandoned, (uint32_t)ps->rank + 1, memory_order_release);
}

static void procs_busy(agmm_ctx *ctx, int busy, const char *what)
{
    procs_state *ps = ctx->world->host_state;
    ctl_slot *me = &ps->ctl->slot[ps->rank];
    if (busy)
        snprintf(me->busy_what, sizeof me->busy_what, "%s", what);
    atomic_store_explicit(&me->busy, (uint32_t)busy, memory_order_release);
}

/* Only a death is told: a peer that left did so after failing itself, and says why on its own. */
static int procs_peer_gone(const agmm_world *w, int p, char *why, size_t len)
{
    const procs_state *ps = w->host_state;
    if (ps == NULL || ps->ctl == NULL || p < 0 || p >= ps->nranks || p == ps->rank || peer_of(ps, p) != PEER_DEAD)
        return 0;
    agmm_format(why, len, "rank %d (pid %d) has exited without leaving the world: killed or crashed", p,
                ps->ctl->slot[p].pid);
    return 1;
}

/* ---- descriptors over sockets (fd_socket.h) ---- */

static agmm_status procs_exchange_fds(agmm_ctx *ctx, uint32_t tag, int mine, int *all)
{
    agmm_world *w = ctx->world;
    procs_state *ps = w->host_state;
    int64_t deadline = deadline_of(w);
    int to_send[AGMM_MAX_RANKS], nsend = 0, have[AGMM_MAX_RANKS] = {0}, nhave = 1;
    char what[64];
    snprintf(what, sizeof what, "descriptor exchange #%u", tag >> 1);
    for (int r = 0; r < ps->nranks; r++) {
        all[r] = -1;
        if (r != ps->rank)
            to_send[nsend++] = r;
    }
    have[ps->rank] = 1;
    agmm_status st = AGMM_SUCCESS;
    /* Send to every peer first (the kernel keeps each message until the peer accepts it), then
     * collect; a peer whose socket is not there yet is retried while collecting. */
    while ((nsend > 0 || nhave < ps->nranks) && st == AGMM_SUCCESS) {
        for (int i = 0; i < nsend;) {
            int r = agmm_fd_send(ps->job, ps->rank, ps->nranks, to_send[i], tag, mine);
            if (r < 0) {
                st = AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL, "rank %d: %s: sending to rank %d: %s", ps->rank, what,
                               to_send[i], strerror(errno));
                break;
            }
            if (r == 1)
                to_send[i] = to_send[--nsend];
            else
                i++;
        }
        for (int p = 0; p < ps->nranks && st == AGMM_SUCCESS; p++)
            if (!have[p] && ps->early[p].present && ps->early[p].tag == tag) {
                all[p] = ps->early[p].fd;
                ps->early[p].present = 0;
                have[p] = 1, nhave++;
            }
        agmm_fd_msg m;
        int fd = -1;
        while (st == AGMM_SUCCESS && nhave < ps->nranks && agmm_fd_accept(ps->listen_fd, ps->job, ps->nranks, deadline, &m, &fd)) {
            if (m.tag == 0 && m.from == 0) {
                if (fd >= 0) /* a copy of the control segment sent again at join (hand_out_control) */
                    close(fd);
            } else if (m.tag == tag && !have[m.from]) {
                all[m.from] = fd;
                have[m.from] = 1, nhave++;
            } else if ((int32_t)(m.tag - tag) > 0 && !ps->early[m.from].present) {
                ps->early[m.from].tag = m.tag;
                ps->early[m.from].fd = fd;
                ps->early[m.from].present = 1;
            } else {
                if (fd >= 0)
                    close(fd);
                st = AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL,
                               "rank %d: %s got rank %d's descriptor of exchange #%u: the ranks are out of step",
                               ps->rank, what, m.from, m.tag >> 1);
            }
            fd = -1;
        }
        if (st != AGMM_SUCCESS || (nsend == 0 && nhave == ps->nranks))
            break;
        resend_control(ps);
        /* Nobody still awaited may be gone, and the wait is bounded while they are not busy. */
        for (int p = 0; p < ps->nranks && st == AGMM_SUCCESS; p++) {
            int waiting = !have[p];
            for (int i = 0; i < nsend; i++)
                waiting |= to_send[i] == p;
            if (!waiting)
                continue;
            char why[AGMM_ERROR_LEN];
            const int q = hold_for_busy(ps, p, agmm_mono_ns(), w->timeout_s, &deadline) ? dead_elsewhere(ps, p) : -1;
            if (q >= 0)
                st = AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                               "rank %d: %s failed: rank %d (pid %d) has exited without leaving the world: killed or "
                               "crashed (seen while rank %d was busy: %s)",
                               ps->rank, what, q, ps->ctl->slot[q].pid, p, ps->ctl->slot[p].busy_what);
            else if (hopeless(ps, p, why, sizeof why))
                st = AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT, "rank %d: %s failed: %s", ps->rank, what, why);
            else if (agmm_mono_ns() >= deadline)
                st = AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT, "rank %d: %s timed out after %.2f s: %s", ps->rank, what,
                               w->timeout_s, peer_text(ps, p, why, sizeof why));
        }
    }
    if (st != AGMM_SUCCESS)
        for (int p = 0; p < ps->nranks; p++)
            if (all[p] >= 0) {
                close(all[p]);
                all[p] = -1;
            }
    return st;
}

/* ---- meeting and leaving ---- */

static void procs_fini(agmm_world *w)
{
    procs_state *ps = w->host_state;
    if (ps == NULL)
        return;
    live_remove(ps);
    if (ps->ctl != NULL) {
        ctl_slot *me = &ps->ctl->slot[ps->rank];
        if (atomic_load_explicit(&me->state, memory_order_relaxed) == SLOT_JOINED)
            atomic_store_explicit(&me->state, SLOT_LEFT, memory_order_release);
        munmap(ps->ctl, sizeof *ps->ctl);
    }
    if (ps->ctl_fd >= 0)
        close(ps->ctl_fd); /* drops the liveness lock */
    if (ps->listen_fd >= 0)
        close(ps->listen_fd); /* the abstract name goes with it */
    if (ps->seg_fd >= 0)
        close(ps->seg_fd);
    for (int p = 0; p < AGMM_MAX_RANKS; p++)
        if (ps->early[p].present)
            close(ps->early[p].fd);
    free(ps);
    w->host_state = NULL;
}

static const agmm_host_ops procs_ops = {procs_exchange, procs_barrier,   procs_exchange_fds, procs_abandon,
                                        procs_busy,     procs_peer_gone, procs_fini};

/* "<the job's identity> (<where it came from>)": what a process was told, so that processes that
 * never meet (given different identities: another MASTER_PORT, another AGMM_JOB_ID) can be told
 * apart by their messages. */
static const char *job_text(const agmm_proc_identity *id, char *buf, size_t len)
{
    agmm_format(buf, len, "\"%s\" (%s)", id->job, id->source);
    return buf;
}

/* Maps the control segment through a new open of `seg` (its own open file description, which
 * holds this process's liveness lock), claims slot `rank`; `seg` is closed. Rank 0 first sizes
 * and stamps it. */
static agmm_status attach_control(procs_state *ps, int seg, agmm_error *err)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", seg);
    ps->ctl_fd = open(path, O_RDWR | O_CLOEXEC);
    ps->liveness = ps->ctl_fd >= 0;
    if (ps->ctl_fd < 0)
        ps->ctl_fd = seg; /* no /proc: the shared description works, only liveness is lost */
    else
        close(seg);
    if (ps->rank == 0 && ftruncate(ps->ctl_fd, (off_t)sizeof(ctl_segment)) != 0)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank 0: sizing the control segment (%zu bytes): %s",
                         sizeof(ctl_segment), strerror(errno));
    void *m = mmap(NULL, sizeof(ctl_segment), PROT_READ | PROT_WRITE, MAP_SHARED, ps->ctl_fd, 0);
    if (m == MAP_FAILED)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: mapping the control segment: %s", ps->rank,
                         strerror(errno));
    ps->ctl = m;
    if (ps->rank == 0) {
        ps->ctl->nranks = (uint32_t)ps->nranks;
        ps->ctl->magic = CONTROL_MAGIC; /* ordered before the peers see it by the socket send */
    }
    if (ps->ctl->magic != CONTROL_MAGIC)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank %d: rank 0 sent something that is not a control segment",
                         ps->rank);
    if (ps->ctl->nranks != (uint32_t)ps->nranks)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "rank %d: this process says the world has %d ranks, rank 0 says %u: every rank must be "
                         "given the same world size",
                         ps->rank, ps->nranks, ps->ctl->nranks);
    if (ps->liveness && lock_byte(ps->ctl_fd, ps->rank, F_OFD_SETLK, NULL) != 0) {
        if (errno == EAGAIN || errno == EACCES)
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "rank %d: another process of this job holds rank %d",
                             ps->rank, ps->rank);
        ps->liveness = 0;
    }
    ctl_slot *me = &ps->ctl->slot[ps->rank];
    me->pid = (int32_t)getpid();
    atomic_store_explicit(&me->state, SLOT_JOINED, memory_order_release);
    return AGMM_SUCCESS;
}

/* Rank 0: the control segment's descriptor to every peer, each as soon as its socket is there.
 * The descriptor stays open in ps->seg_fd until every peer has claimed its slot (resend_control). */
static agmm_status hand_out_control(procs_state *ps, int seg, int64_t deadline, double timeout_s, const char *job,
                                    agmm_error *err)
{
    int pending[AGMM_MAX_RANKS], npending = 0;
    for (int p = 1; p < ps->nranks; p++)
        pending[npending++] = p;
    while (npending > 0) {
        for (int i = 0; i < npending;) {
            int r = agmm_fd_send(ps->job, ps->rank, ps->nranks, pending[i], 0, seg);
            if (r < 0)
                return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank 0: sending the control segment to rank %d: %s",
                                 pending[i], strerror(errno));
            if (r == 1) {
                ps->sent_at[pending[i]] = agmm_mono_ns();
                pending[i] = pending[--npending];
            } else {
                i++;
            }
        }
        if (npending == 0)
            break;
        if (agmm_mono_ns() >= deadline) {
            uint64_t missing = 0;
            char who[200];
            for (int i = 0; i < npending; i++)
                missing |= (uint64_t)1 << pending[i];
            agmm_format_ranks(who, sizeof who, missing);
            return AGMM_FAIL(err, AGMM_ERR_TIMEOUT,
                             "rank 0: joining the world timed out after %.2f s: %s never arrived (nobody listens on "
                             "@agmm-%016llx-<rank>; job %s: every process of a job must be given this identity)",
                             timeout_s, who, (unsigned long long)ps->job, job);
        }
        nap(1000000);
    }
    ps->seg_fd = seg;
    return AGMM_SUCCESS;
}

agmm_status agmm_host_procs_init(agmm_world *w, const agmm_proc_identity *id, agmm_error *err)
{
    procs_state *ps = calloc(1, sizeof *ps);
    if (ps == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "world rendezvous allocation failed");
    ps->ctl_fd = ps->listen_fd = ps->seg_fd = -1;
    live_add(ps);
    ps->rank = id->rank;
    ps->nranks = id->nranks;
    ps->job = job_hash(id->job);
    w->host = &procs_ops;
    w->host_state = ps;
    const int64_t deadline = deadline_of(w);
    char job[440];

    ps->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (ps->listen_fd < 0)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank %d: socket(AF_UNIX): %s", ps->rank, strerror(errno));
    struct sockaddr_un a;
    socklen_t len = agmm_fd_socket_name(&a, ps->job, ps->rank);
    if (bind(ps->listen_fd, (struct sockaddr *)&a, len) != 0) {
        if (errno == EADDRINUSE)
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "rank %d of job %s is taken: another process listens on @%s (two processes given the "
                             "same rank, or two jobs with the same identity on this host)",
                             ps->rank, job_text(id, job, sizeof job), a.sun_path + 1);
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank %d: bind(@%s): %s", ps->rank, a.sun_path + 1, strerror(errno));
    }
    if (listen(ps->listen_fd, 2 * AGMM_MAX_RANKS) != 0)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank %d: listen(@%s): %s", ps->rank, a.sun_path + 1,
                         strerror(errno));

    agmm_status st = AGMM_SUCCESS;
    if (ps->rank == 0) {
        int seg = memfd_create("agmm-control", MFD_CLOEXEC);
        if (seg < 0)
            return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank 0: memfd_create (the control segment): %s",
                             strerror(errno));
        int keep = dup(seg);
        if (keep < 0)
            close(seg);
        st = keep < 0 ? AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank 0: dup: %s", strerror(errno))
                      : attach_control(ps, seg, err);
        if (st == AGMM_SUCCESS)
            st = hand_out_control(ps, keep, deadline, w->timeout_s, job_text(id, job, sizeof job), err);
        if (keep >= 0 && ps->seg_fd != keep)
            close(keep);
        if (st != AGMM_SUCCESS && ps->ctl != NULL)
            procs_abandon(w, err);
        return st;
    }
    agmm_fd_msg m;
    int seg = -1;
    while (seg < 0) {
        if (agmm_fd_accept(ps->listen_fd, ps->job, ps->nranks, deadline, &m, &seg) && (m.tag != 0 || m.from != 0 || seg < 0)) {
            if (seg >= 0)
                close(seg);
            return AGMM_FAIL(err, AGMM_ERR_INTERNAL,
                             "rank %d: while joining, got a message of exchange #%u from rank %d instead of rank 0's "
                             "control segment",
                             ps->rank, m.tag >> 1, m.from);
        }
        if (seg < 0 && agmm_mono_ns() >= deadline)
            return AGMM_FAIL(err, AGMM_ERR_TIMEOUT,
                             "rank %d: joining the world timed out after %.2f s: rank 0 never arrived (no control "
                             "segment came from it; it listens on @agmm-%016llx-0; job %s: every process of a job "
                             "must be given this identity)",
                             ps->rank, w->timeout_s, (unsigned long long)ps->job, job_text(id, job, sizeof job));
    }
    /* A rank that cannot take part says so in the segment, so that its peers fail at once. */
    st = attach_control(ps, seg, err);
    if (st != AGMM_SUCCESS && ps->ctl != NULL)
        procs_abandon(w, err);
    return st;
}
