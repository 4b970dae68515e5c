/* zero_probe.cu — what zeroing dQ's fp32 sums costs, by each way of writing the zeros.
 *
 * At hd128 causal 512 (16k tokens, 16 heads) the preprocess reads O and dO (134 MB) and
 * stores 134 MB of zeros over the sums; it takes ~23 us more than hd64's, which reads the
 * same bytes and stores none (docs/performance.md, forty-ninth session). This probe times,
 * on the library's compressible workspace (flashbwd_workspace_alloc) and on cudaMalloc
 * memory, with CUDA events (median of 21 runs):
 *   memset        cudaMemsetAsync over the region
 *   store         a kernel of 16-byte zero stores over it
 *   read          a kernel reading 134 MB of other memory (the preprocess's loads)
 *   read+store    one kernel doing both, as the preprocess does
 *   read|memset   the read kernel and the memset on two streams at once
 * If memset is much cheaper than store on compressible memory, a memset node in the plan's
 * graph could take the zeroing off the preprocess. It is not: on an H100 (fiftieth session)
 * memset 38.4 us, store 39.1, and the zeros add to the reads in both joint forms, so the
 * zeroing lever is closed (docs/performance.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>

#include "check.h"
#include "flashbwd.h"

namespace {

constexpr size_t ZERO_BYTES = 134217728; /* 16k tokens x 16 heads x 128 x 4 B */

__global__ void zero_store(float4 *p, size_t n4)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_float4(0, 0, 0, 0);
}

/* Reads n4 16-byte chunks and writes one float per thread, so the loads are not dead. */
__global__ void read_sum(const uint4 *src, size_t n4, float *sink)
{
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = src[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    sink[blockIdx.x * blockDim.x + threadIdx.x] = (float)acc;
}

/* read_sum and zero_store in one loop over the same n4 chunks, as the preprocess does. */
__global__ void read_and_store(const uint4 *src, float4 *z, size_t n4, float *sink)
{
    unsigned acc = 0;
    const size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = t; i < n4; i += step) {
        const uint4 v = src[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
        z[i] = make_float4(0, 0, 0, 0);
    }
    sink[t] = (float)acc;
}

template <class F> float median_us(cudaStream_t s, F &&enqueue)
{
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < 24; ++i) {
        CUDA_CHECK(cudaEventRecord(a, s));
        enqueue();
        CUDA_CHECK(cudaEventRecord(b, s));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3) t.push_back(ms * 1000.0f);
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

} // namespace

int main()
{
    /* A plan whose workspace holds the sums of hd128 causal 512 at 16k tokens. */
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CUDA;
    p.dtype = FLASHBWD_DTYPE_BF16;
    p.batch = 32, p.heads_q = 16, p.seqlen_q = p.seqlen_k = 512, p.head_dim = 128;
    p.causal = 1;
    flashbwd_plan *plan = NULL;
    CHECK(flashbwd_plan_create(&p, &plan));
    void *ws = NULL;
    size_t ws_bytes = 0;
    int32_t compressed = 0;
    CHECK(flashbwd_workspace_alloc(plan, &ws, &ws_bytes, &compressed));
    if (ws_bytes < ZERO_BYTES) {
        fprintf(stderr, "workspace %zu B, less than %zu\n", ws_bytes, ZERO_BYTES);
        return 1;
    }
    void *plain = NULL, *src = NULL;
    float *sink = NULL;
    const int blocks = 132 * 8, threads = 256;
    CUDA_CHECK(cudaMalloc(&plain, ZERO_BYTES));
    CUDA_CHECK(cudaMalloc(&src, ZERO_BYTES));
    CUDA_CHECK(cudaMalloc(&sink, sizeof(float) * blocks * threads));
    CUDA_CHECK(cudaMemset(src, 0x5a, ZERO_BYTES)); /* incompressible enough: not zeros */
    cudaStream_t s, s2;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    const size_t n4 = ZERO_BYTES / 16;

    printf("zero_probe: %zu MB of zeros; workspace %s\n", ZERO_BYTES >> 20,
           compressed ? "compressible" : "NOT compressible (cudaMalloc)");
    const float read = median_us(s, [&] {
        read_sum<<<blocks, threads, 0, s>>>(static_cast<const uint4 *>(src), n4, sink);
        CUDA_CHECK(cudaGetLastError());
    });
    printf("  read (134 MB, other memory)       %8.1f us\n", read);
    for (int mem = 0; mem < 2; ++mem) {
        void *z = mem == 0 ? ws : plain;
        const char *name = mem == 0 ? "workspace" : "cudaMalloc";
        const float memset_us = median_us(s, [&] { CUDA_CHECK(cudaMemsetAsync(z, 0, ZERO_BYTES, s)); });
        const float store = median_us(s, [&] {
            zero_store<<<blocks, threads, 0, s>>>(static_cast<float4 *>(z), n4);
            CUDA_CHECK(cudaGetLastError());
        });
        const float both = median_us(s, [&] {
            read_and_store<<<blocks, threads, 0, s>>>(static_cast<const uint4 *>(src),
                                                      static_cast<float4 *>(z), n4, sink);
            CUDA_CHECK(cudaGetLastError());
        });
        const float side = median_us(s, [&] {
            CUDA_CHECK(cudaEventRecord(fork, s));
            CUDA_CHECK(cudaStreamWaitEvent(s2, fork, 0));
            CUDA_CHECK(cudaMemsetAsync(z, 0, ZERO_BYTES, s2));
            read_sum<<<blocks, threads, 0, s>>>(static_cast<const uint4 *>(src), n4, sink);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaEventRecord(join, s2));
            CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
        });
        printf("  %-10s memset %8.1f us   store %8.1f us   read+store %8.1f us   read|memset %8.1f us\n",
               name, memset_us, store, both, side);
    }
    /* The zeros are really there: the last memset left them; read a few back. */
    float back[4] = {1, 1, 1, 1};
    CUDA_CHECK(cudaMemcpy(back, static_cast<char *>(ws) + ZERO_BYTES / 2, sizeof back,
                          cudaMemcpyDeviceToHost));
    printf("  workspace mid-region after the last memset: %g %g %g %g\n", back[0], back[1],
           back[2], back[3]);
    CUDA_CHECK(cudaFree(plain));
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(sink));
    CHECK(flashbwd_workspace_free(ws));
    flashbwd_plan_destroy(plan);
    return 0;
}
