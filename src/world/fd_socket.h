/* File descriptors between the processes of one host (host_procs.c), over abstract Unix sockets:
 * every rank listens on "@agmm-<16 hex digits of the job's hash>-<rank>", a name that lives in
 * the kernel only and goes with its socket. A message is sent on a fresh connection and carries
 * the job, the sender and a tag, with one descriptor (SCM_RIGHTS) or none. The kernel holds it
 * until the receiver accepts, so nobody waits for a receiver; it is not acknowledged (host_procs.c
 * sends again where it must know it arrived). */
#ifndef AGMM_WORLD_FD_SOCKET_H
#define AGMM_WORLD_FD_SOCKET_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

typedef struct {
    uint64_t job;       /* the job's hash: a stray connection is refused */
    uint32_t tag;       /* the exchange (0: the control segment at join) */
    int32_t from;
    int32_t nranks;
    int32_t has_fd;     /* 0: the sender's own part failed, no descriptor */
} agmm_fd_msg;

/* Fills *a with rank's socket name in `job`; returns its length for bind and connect. */
socklen_t agmm_fd_socket_name(struct sockaddr_un *a, uint64_t job, int rank);

/* Sends one message from rank `from` of a world of nranks to rank `to` (with `fd` unless it is
 * < 0). 1 sent, 0 not yet (nobody listens there, or the socket closed as it was sent), -1 error
 * (errno set). */
int agmm_fd_send(uint64_t job, int from, int nranks, int to, uint32_t tag, int fd);

/* Accepts one message on listen_fd, or returns 0 if none came before the wait slice (up to 10 ms,
 * and not past deadline_ns on the monotonic clock) ended. Connections of another user or job, or
 * silent for 2 s, are dropped. 1 with *m and *fd (-1 if none came) filled. */
int agmm_fd_accept(int listen_fd, uint64_t job, int nranks, int64_t deadline_ns, agmm_fd_msg *m, int *fd);

#endif
