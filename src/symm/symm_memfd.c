/* Symmetric host memory of the CPU world's processes. Every rank makes its buffer as a memfd (an
 * anonymous file: it has no name in /dev/shm or anywhere else, so a process killed at any moment
 * leaves nothing behind, and the 64 MB /dev/shm of a container does not limit it), reserves its
 * pages with fallocate (a shortage of memory is an error here rather than a SIGBUS at the first
 * touch), maps it, and passes its descriptor to every peer (agmm_host_exchange_fds), which maps
 * it too. The kernel frees the memory when the last mapping goes: a rank's free unmaps only its
 * own views, so a peer still reading keeps them alive. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "symm_impl.h"

static size_t mapped_bytes(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

/* This rank's buffer as a descriptor, sized and reserved; -1 with the reason recorded. */
static int make_buffer(agmm_ctx *ctx, size_t mapped)
{
    const int rank = agmm_ctx_info(ctx)->rank;
    int fd = memfd_create("agmm-heap", MFD_CLOEXEC);
    if (fd < 0) {
        AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: memfd_create for %zu bytes of symmetric memory: %s",
                  rank, mapped, strerror(errno));
        return -1;
    }
    int e = ftruncate(fd, (off_t)mapped) != 0 ? errno : posix_fallocate(fd, 0, (off_t)mapped);
    if (e != 0 && e != EOPNOTSUPP) {
        AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY,
                  "rank %d: %zu bytes of shared memory for the symmetric heap are not available (%s)", rank, mapped,
                  strerror(e));
        close(fd);
        return -1;
    }
    return fd;
}

static void unmap_all(agmm_symm_buf *buf, size_t mapped)
{
    for (int r = 0; r < AGMM_MAX_RANKS; r++)
        if (buf->peer[r] != NULL) {
            munmap(buf->peer[r], mapped);
            buf->peer[r] = NULL;
        }
    buf->local = NULL;
}

static agmm_status memfd_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const size_t mapped = mapped_bytes(buf->bytes);
    int fd = make_buffer(ctx, mapped);
    agmm_status mine = fd >= 0 ? AGMM_SUCCESS : agmm_ctx_err(ctx)->status;
    int fds[AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange_fds(ctx, fd, fds);
    if (st != AGMM_SUCCESS) {
        if (fd >= 0)
            close(fd);
        return st;
    }
    fds[ri->rank] = fd;
    for (int r = 0; r < ri->nranks; r++) {
        if (fds[r] < 0)
            continue; /* that rank failed: the agreement below says so */
        void *m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fds[r], 0);
        close(fds[r]);
        if (m == MAP_FAILED && mine == AGMM_SUCCESS)
            mine = AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: mapping rank %d's %zu-byte buffer: %s",
                             ri->rank, r, mapped, strerror(errno));
        else if (m != MAP_FAILED)
            buf->peer[r] = m;
    }
    st = agmm_host_agree(ctx, mine);
    if (st != AGMM_SUCCESS) {
        unmap_all(buf, mapped);
        return st;
    }
    buf->local = buf->peer[ri->rank];
    return AGMM_SUCCESS;
}

static void memfd_free(agmm_ctx *ctx, agmm_symm_buf *buf) { unmap_all(buf, mapped_bytes(buf->bytes)); }

const agmm_symm_impl agmm_symm_memfd = {"host memory shared between processes (memfd)", memfd_alloc, memfd_free};
