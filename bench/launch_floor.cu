/* launch_floor.cu — the floor under execute's host cost: what enqueueing N empty kernels
 * costs when each takes a parameter block the size of fb_bwd_params (kernels/launch.h),
 * as flashbwd's launches do. flashbwd_bench --host-costs prints it beside execute's cost,
 * so the gap (validation, parameter filling, error checks) and the floor (launch count x
 * per-launch cost) can be read apart; and, to weigh the ways down, the same launches with
 * an 8-byte parameter and as one captured CUDA graph.
 */
#include <stdio.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "launch.h"

namespace {

struct ParamBlock {
    unsigned char bytes[sizeof(fb_bwd_params)];
};

__global__ void empty_kernel(const ParamBlock) {}
__global__ void empty_kernel_small(const float *) {} /* 8 bytes of parameters */

double now_s()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

} // namespace

/* Microseconds per call of `launches` empty launches on `stream`, averaged over `calls`
 * calls after a warm-up; < 0 when a CUDA call failed (the error is printed). small != 0:
 * launches with an 8-byte parameter instead, to see what the parameter size costs. */
extern "C" double fb_bench_launch_floor_us(int launches, int calls, void *stream, int small)
{
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    ParamBlock blob = {};
    auto enqueue = [&]() -> bool {
        for (int i = 0; i < launches; ++i) {
            if (small) empty_kernel_small<<<1, 32, 0, s>>>(nullptr);
            else empty_kernel<<<1, 32, 0, s>>>(blob);
            const cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) {
                fprintf(stderr, "launch floor: %s\n", cudaGetErrorString(e));
                return false;
            }
        }
        return true;
    };
    for (int i = 0; i < 100; ++i)
        if (!enqueue()) return -1.0;
    cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return fprintf(stderr, "launch floor: %s\n", cudaGetErrorString(e)), -1.0;
    const double t0 = now_s();
    for (int i = 0; i < calls; ++i)
        if (!enqueue()) return -1.0;
    const double us = (now_s() - t0) / calls * 1e6;
    e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return fprintf(stderr, "launch floor: %s\n", cudaGetErrorString(e)), -1.0;
    return us;
}

/* Microseconds per cudaGraphLaunch of one graph that holds `launches` such empty launches,
 * captured from `stream`: what execute would cost if the plan replayed a cached graph. */
extern "C" double fb_bench_graph_floor_us(int launches, int calls, void *stream)
{
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    ParamBlock blob = {};
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    double us = -1.0;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) goto fail;
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 32, 0, s>>>(blob);
    {
        const cudaError_t launch = cudaGetLastError();
        e = cudaStreamEndCapture(s, &graph); /* always: a failed capture must still end */
        if (launch != cudaSuccess) e = launch;
    }
    if (e != cudaSuccess) goto fail;
    if ((e = cudaGraphInstantiate(&exec, graph, 0)) != cudaSuccess) goto fail;
    for (int i = 0; i < 100; ++i)
        if ((e = cudaGraphLaunch(exec, s)) != cudaSuccess) goto fail;
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess) goto fail;
    {
        const double t0 = now_s();
        for (int i = 0; i < calls; ++i)
            if ((e = cudaGraphLaunch(exec, s)) != cudaSuccess) goto fail;
        us = (now_s() - t0) / calls * 1e6;
    }
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess) goto fail;
    if ((e = cudaGraphExecDestroy(exec)) != cudaSuccess) { exec = nullptr; goto fail; }
    exec = nullptr;
    if ((e = cudaGraphDestroy(graph)) != cudaSuccess) { graph = nullptr; goto fail; }
    return us;
fail:
    fprintf(stderr, "graph floor: %s\n", cudaGetErrorString(e));
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return -1.0;
}
