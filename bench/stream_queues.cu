/* Does making streams change which of them share a hardware queue? A caller stream runs a 20 us
 * spin kernel while a copy stream (greatest priority, as world_gpu.c makes it) copies 32 MiB;
 * apart, they take about the larger of the two, sharing a queue about the sum. Between rounds it
 * makes N more streams: `destroy` makes and destroys each, `keep` keeps them, `use` runs a kernel
 * on each before destroying it, `prio` makes them at the greatest priority and destroys them.
 * Prints the best of 5 rounds per N (0..40), then a fresh pair and the legacy default stream as
 * the caller.
 *
 *   make stream-queues && build/stream-queues destroy|keep|use|prio
 *
 * H200, 2026-12-04 (docs/results; run as a first draft of this program): 27-33 us at every N in
 * every mode, with CUDA_DEVICE_MAX_CONNECTIONS 8 and 32, about the copy's own time: no stream made
 * or destroyed ever put the two on one queue (sharing one, the spin's 20 us would add to it). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

__global__ void spin(long long ns)
{
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

/* Best of 5: the spin on s and the copy on c, started together and joined on s (us). */
static float both(cudaStream_t s, cudaStream_t c, void *dst, const void *src, size_t bytes, cudaEvent_t ev[3])
{
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        float ms = 0;
        cudaEventRecord(ev[0], s);
        cudaStreamWaitEvent(c, ev[0], 0);
        spin<<<1, 1, 0, s>>>(20000);
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c);
        cudaEventRecord(ev[2], c);
        cudaStreamWaitEvent(s, ev[2], 0);
        cudaEventRecord(ev[1], s);
        cudaEventSynchronize(ev[1]);
        cudaEventElapsedTime(&ms, ev[0], ev[1]);
        if (ms * 1e3f < best)
            best = ms * 1e3f;
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "destroy";
    if (strcmp(mode, "destroy") && strcmp(mode, "keep") && strcmp(mode, "use") && strcmp(mode, "prio")) {
        fprintf(stderr, "stream-queues: mode must be destroy, keep, use or prio (got %s)\n", mode);
        return 2;
    }
    int least = 0, greatest = 0;
    const size_t bytes = (size_t)32 << 20;
    void *a, *b;
    cudaEvent_t ev[3];
    cudaStream_t s, c;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess || cudaMalloc(&a, bytes) != cudaSuccess ||
        cudaMalloc(&b, bytes) != cudaSuccess) {
        fprintf(stderr, "stream-queues: no GPU\n");
        return 1;
    }
    for (int i = 0; i < 3; i++)
        cudaEventCreate(&ev[i]);
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithPriority(&c, cudaStreamNonBlocking, greatest);
    printf("mode %s: N=0 %.1f us", mode, both(s, c, b, a, bytes, ev));
    for (int n = 1; n <= 40; n++) {
        cudaStream_t x;
        if (strcmp(mode, "prio") == 0)
            cudaStreamCreateWithPriority(&x, cudaStreamNonBlocking, greatest);
        else
            cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
        if (strcmp(mode, "use") == 0) {
            spin<<<1, 1, 0, x>>>(10);
            cudaStreamSynchronize(x);
        }
        if (strcmp(mode, "keep") != 0)
            cudaStreamDestroy(x);
        printf(", N=%d %.1f", n, both(s, c, b, a, bytes, ev));
    }
    cudaStream_t s2, c2;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaStreamCreateWithPriority(&c2, cudaStreamNonBlocking, greatest);
    printf("\nfresh pair %.1f us; the legacy default stream as the caller %.1f us; spin alone 20 us\n",
           both(s2, c2, b, a, bytes, ev), both(0, c2, b, a, bytes, ev));
    return 0;
}
