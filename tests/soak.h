/* agmm-soak (tests/soak.c): thousands of steps of random operations, backends and shapes on one
 * world, every step checked. This header is what the driver and the operations' cases share:
 * the device shim (soak_dev.c: CUDA memory and a stream on GPUs, host memory on the CPU) and one
 * case per operation of the library (soak_ops.c). */
#ifndef AGMM_TESTS_SOAK_H
#define AGMM_TESTS_SOAK_H

#include <stddef.h>
#include <stdint.h>

#include "agmm.h"

/* ---- the rank's device (soak_dev.c) ---- */

typedef struct {
    int gpu;                   /* 1: CUDA memory and a stream of the rank's device */
    void *stream;              /* cudaStream_t (non-blocking), NULL on the CPU */
    char err[160];             /* the last failure */
} soak_dev;

/* 0, or -1 with d->err. */
int soak_dev_init(soak_dev *d, agmm_ctx *ctx);
void soak_dev_fini(soak_dev *d);
/* Device memory (host memory on the CPU), 256-byte aligned; NULL with d->err. */
void *soak_dev_alloc(soak_dev *d, size_t bytes);
void soak_dev_free(soak_dev *d, void *p);
/* Host memory the device copies from and to without synchronising the device (pinned on GPUs). */
void *soak_host_alloc(soak_dev *d, size_t bytes);
void soak_host_free(soak_dev *d, void *p);
/* Enqueued on the rank's stream (at once on the CPU); 0 or -1 with d->err. */
int soak_dev_upload(soak_dev *d, void *dst, const void *src, size_t bytes);
int soak_dev_download(soak_dev *d, void *dst, const void *src, size_t bytes);
int soak_dev_copy(soak_dev *d, void *dst, const void *src, size_t bytes);
int soak_dev_poison(soak_dev *d, void *dst, size_t bytes);  /* 0xff bytes: NaN in bf16 and fp32 */
int soak_dev_sync(soak_dev *d);
/* Bytes of the device in use (total - free), 0 on the CPU. */
uint64_t soak_dev_used(soak_dev *d);

/* ---- one operation's case (soak_ops.c) ---- */

#define SOAK_BUFS 6            /* the most buffers a run takes besides its input */

/* A random shape of an operation: its dimensions and variant bits, as the operation reads them. */
typedef struct {
    int64_t dim[4];
    unsigned variant;
} soak_shape;

/* What the driver knows of one run's buffers besides the input. */
typedef enum { SOAK_OPERAND = 0, SOAK_OUTPUT = 1 } soak_role;

typedef struct {
    const char *op_name;       /* agmm_op_name of the operation it covers */
    /* A random shape (the same draws on every rank), small enough for thousands of steps. */
    void (*draw)(uint64_t *rng, int nranks, soak_shape *s);
    /* The shape whose buffers are the largest draw can need (the driver allocates those once: a
     * device allocation between steps could wait for a peer's kernel that waits for this rank). */
    void (*largest)(soak_shape *s);
    /* "M=7 N=24 K=40 b_layout=row splits=2". */
    void (*describe)(const soak_shape *s, char *buf, size_t len);
    /* The bytes of the rank's input; the bytes and role of each other buffer (count returned). */
    size_t (*sizes)(const soak_shape *s, int nranks, size_t bytes[SOAK_BUFS], soak_role role[SOAK_BUFS], int *nbufs);
    agmm_status (*plan)(agmm_plan **plan, agmm_ctx *ctx, const soak_shape *s, const char *backend);
    /* Step `seed`'s input of `rank` into `input`, and its operands into host[i] (SOAK_OPERAND ones). */
    void (*fill)(const soak_shape *s, int nranks, int rank, uint64_t seed, void *input, void *const host[]);
    /* One run: `in` is the run's input on the device (the plan's or a symmetric slot, `sym` = 1 for
     * io.input), buf[i] the device buffers. After it, every output is in its buffer (an in-place
     * result is copied out on the stream). */
    agmm_status (*run)(agmm_plan *plan, const soak_shape *s, void *in, int sym, void *const buf[], soak_dev *d);
    /* The downloaded outputs (host[i] of SOAK_OUTPUT) against the exact result of the plan's
     * backend (`backend`: auto resolved; `gpu`: the world runs on GPUs, where nccl is NCCL); 1, or
     * 0 with the first difference in why. */
    int (*check)(const soak_shape *s, int nranks, int rank, uint64_t seed, const char *backend, int gpu,
                 void *const host[], char *why, size_t len);
} soak_op;

/* The case of the operation called `name`, or NULL: an operation without a case fails the soak. */
const soak_op *soak_op_find(const char *name);

#endif
