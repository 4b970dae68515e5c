/* barrier_probe.cu — the split kernel's barrier protocol without its arithmetic, to run
 * under compute-sanitizer's racecheck (bench/run_gpu.sh does not; run it by hand):
 *
 *   compute-sanitizer --tool racecheck build/bench/barrier_probe VARIANT
 *
 * Two groups of four warps hand a tile back and forth through shared memory as
 * kernels/bwd_split.cuh does: the P warps store "P", arrive at barrier 1 and read their
 * group's P after barrier 3; the dS warps sync at 1, read P, store "dS", arrive at 2 and
 * read their group's dS after barrier 4; the P warps sync at 2 and read dS. The prologue is
 * the variant:
 *   0  one CTA-wide barrier.sync (id 5) from both roles (main's split kernel)
 *   1  the P warps bar.arrive at id 6, the dS warps bar.sync at id 6 (wip/init-pair)
 *   2  no prologue barrier
 *   3  the dS warps alone bar.sync at their group barrier (id 4), the P warps at none (the
 *      thirteenth session's try: the dS warps set up the ring's mbarriers; on the H200
 *      every value reads right and racecheck reports 4 hazards, as for variant 1)
 * then one CTA-wide barrier.sync (id 5), the loop, and a CTA-wide barrier.sync (id 5)
 * before the result is written. Every access is ordered by a barrier in all three, so a
 * hazard that racecheck reports for one variant and not another is about its model of
 * the prologue. The program checks the values it read and prints PASS or FAIL.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "ptx/barrier.cuh"

namespace {

constexpr int NT = 256, GT = 128, N = 1024, STEPS = 4;

template <bool P_WARPS>
__device__ __forceinline__ void role(int variant, int *sP, int *sdS, int *bad)
{
    const int tid = threadIdx.x, g = tid % GT;
    if (variant == 0) fb::ptx::barrier_sync_unaligned(5, NT);
    else if (variant == 1) {
        if (P_WARPS) fb::ptx::bar_arrive(6, NT);
        else fb::ptx::bar_sync(6, NT);
    } else if (variant == 3 && !P_WARPS) {
        fb::ptx::bar_sync(4, GT);
    }
    fb::ptx::barrier_sync_unaligned(5, NT);
    int errors = 0;
    for (int it = 0; it < STEPS; ++it) {
        if (P_WARPS) {
            for (int i = g; i < N; i += GT) sP[i] = it * N + i;
            fb::ptx::bar_arrive(1, NT);
            fb::ptx::bar_sync(3, GT);
            for (int i = (g + 37) % GT; i < N; i += GT) errors += sP[i] != it * N + i;
            fb::ptx::bar_sync(2, NT);
            for (int i = (g + 53) % GT; i < N; i += GT) errors += sdS[i] != -(it * N + i);
        } else {
            fb::ptx::bar_sync(1, NT);
            for (int i = (g + 11) % GT; i < N; i += GT) errors += sP[i] != it * N + i;
            for (int i = g; i < N; i += GT) sdS[i] = -(it * N + i);
            fb::ptx::bar_arrive(2, NT);
            fb::ptx::bar_sync(4, GT);
            for (int i = (g + 71) % GT; i < N; i += GT) errors += sdS[i] != -(it * N + i);
        }
    }
    fb::ptx::barrier_sync_unaligned(5, NT);
    if (errors) atomicAdd(bad, errors);
}

__global__ void __launch_bounds__(NT, 1) probe(int variant, int *bad)
{
    __shared__ int sP[N], sdS[N]; /* both roles' (declared in a role, each would have its own) */
    if (threadIdx.x < GT) role<true>(variant, sP, sdS, bad);
    else role<false>(variant, sP, sdS, bad);
}

int check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "barrier_probe: %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    const int variant = argc > 1 ? atoi(argv[1]) : 1;
    if (variant < 0 || variant > 3) {
        fprintf(stderr, "barrier_probe: variant %d: expected 0, 1, 2 or 3\n", variant);
        return 2;
    }
    int *bad = nullptr, host = -1;
    check(cudaMalloc(&bad, sizeof(int)), "cudaMalloc");
    check(cudaMemset(bad, 0, sizeof(int)), "cudaMemset");
    probe<<<4, NT>>>(variant, bad);
    check(cudaGetLastError(), "launch");
    check(cudaMemcpy(&host, bad, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy");
    check(cudaFree(bad), "cudaFree");
    printf("barrier_probe variant %d: %s (%d wrong reads)\n", variant, host ? "FAIL" : "PASS", host);
    return host != 0;
}
