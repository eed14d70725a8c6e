/* File descriptors between the processes of one host: fd_socket.h. */
#include "fd_socket.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/clock.h"

socklen_t agmm_fd_socket_name(struct sockaddr_un *a, uint64_t job, int rank)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* sun_path[0] = '\0': the abstract namespace. */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "agmm-%016llx-%d", (unsigned long long)job, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int agmm_fd_send(uint64_t job, int from, int nranks, int to, uint32_t tag, int fd)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -1;
    struct sockaddr_un a;
    socklen_t len = agmm_fd_socket_name(&a, job, to);
    if (connect(s, (struct sockaddr *)&a, len) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return e == ECONNREFUSED || e == ENOENT || e == EAGAIN ? 0 : -1;
    }
    agmm_fd_msg m = {.job = job, .tag = tag, .from = from, .nranks = nranks, .has_fd = fd >= 0};
    struct iovec iov = {&m, sizeof m};
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = u.space;
        mh.msg_controllen = sizeof u.space;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    /* A fresh connection's buffer takes a small message at once. A socket closed between the
     * connect and the send (its process leaving) is like one not there yet. */
    ssize_t n = sendmsg(s, &mh, MSG_NOSIGNAL);
    int e = errno;
    close(s);
    errno = e;
    return n == (ssize_t)sizeof m ? 1 : n < 0 && (e == EPIPE || e == ECONNRESET) ? 0 : -1;
}

/* Receives one message from an accepted connection (nonblocking, up to the deadline). */
static int recv_msg(int c, int64_t deadline, agmm_fd_msg *m, int *fd)
{
    *fd = -1;
    struct pollfd pf = {c, POLLIN, 0};
    int64_t left_ms = (deadline - agmm_mono_ns()) / 1000000;
    if (poll(&pf, 1, left_ms > 0 ? (int)left_ms : 0) != 1)
        return -1;
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } u;
    struct iovec iov = {m, sizeof *m};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.space, .msg_controllen = sizeof u.space};
    ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h != NULL; h = CMSG_NXTHDR(&mh, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(h), sizeof *fd);
    if (n != (ssize_t)sizeof *m || (m->has_fd && *fd < 0)) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return -1;
    }
    return 0;
}

/* How long an accepted connection may take to deliver its message. Senders write it right after
 * connecting (agmm_fd_send), so only a stranger's idle connection (anything can connect to an
 * abstract socket) runs into this: it is dropped instead of stalling the meeting until the deadline
 * and then blaming whichever rank was awaited. */
#define ACCEPT_MSG_NS 2000000000LL

int agmm_fd_accept(int listen_fd, uint64_t job, int nranks, int64_t deadline, agmm_fd_msg *m, int *fd)
{
    *fd = -1;
    struct pollfd pf = {listen_fd, POLLIN, 0};
    int64_t left_ms = (deadline - agmm_mono_ns()) / 1000000;
    if (poll(&pf, 1, left_ms > 10 ? 10 : left_ms > 0 ? (int)left_ms : 0) != 1)
        return 0;
    int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0)
        return 0;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    const int64_t until = agmm_mono_ns() + ACCEPT_MSG_NS < deadline ? agmm_mono_ns() + ACCEPT_MSG_NS : deadline;
    int ok = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && cred.uid == getuid() &&
             recv_msg(c, until, m, fd) == 0 && m->job == job && m->from >= 0 && m->from < nranks;
    close(c);
    if (!ok && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return ok;
}
