/* gemm_probe.cu — how fast the split kernel's GEMMs can run at all: the hd128 step's five
 * warp GEMMs, with the kernel's own tiles, layouts and warp_gemm (kernels/warp_gemm.cuh),
 * operands in swizzled shared memory, one 8-warp CTA per SM as the kernel runs, and nothing
 * else (no exponentials, no barriers, no refill, no dQ reductions), except in the step
 * cases that add the step's L2 traffic or its barriers (step+red, step+l2, step+sync,
 * step+tma, step+cl, step+mc, step+gsync, step+half, step+roles).
 *
 *   build/bench/gemm_probe [ITERS [CASE,CASE...]]
 *
 * Issue 6 asks 400 TFLOP/s at hd128 (62% of the register-operand mma.sync ceiling that
 * ../shared/tools/mma_peak.cu measures with 32 warps per SM). The kernel's warps read their
 * operands from shared memory with ldmatrix (S/dP blocks 32 x 64, dV/dK 64 x 64, dQ 32 x 32:
 * 192, 128 and 256 bytes per m16n8k16) and only two warps share a scheduler, so its GEMMs
 * have a lower ceiling than that; this measures it, shape by shape and as the step's mix.
 * Cases (each prints TFLOP/s and mma per SM-clock, the latter clock-independent, since the
 * board may run below its boost clock at its power cap):
 *   regs    register operands (random data, loaded once): at 4 CTAs an SM (32 warps,
 *           mma_peak's setup: the issue's ceiling) and at 1 (8 warps, the kernel's occupancy);
 *           at 4 CTAs the per-CTA clock64 count reads ~40% below the board's reported clock
 *           (fifty-second session), so read that line's TFLOP/s, not its mma per clock
 *   S       S = Q·Kᵀ / dP = dO·Vᵀ, SplitLayoutS (32 x 64 a warp), depth 128, every warp;
 *           also with two CTAs an SM (16 warps), which the kernel's registers do not allow
 *   dV      dV = Pᵀ·dO / dK = dSᵀ·Q, SplitLayoutKV (64 x 64), depth 64, both .trans
 *   dQ      dQ = dS·K, LayoutQ (32 x 32 over 8 warps), depth 128, B .trans
 *   step    each group its role's three GEMMs back to back, as one hd128 step has them
 *           (S or dP, then dV or dK, then dQ): 320 mma a warp, 2560 a CTA
 *   ldsm    the step's ldmatrix without the mma (shared-memory read bandwidth, B/clk)
 *   step+red  the step with each warp's dQ block added into global memory as the kernel
 *           does (red.global.add.v4.f32, 32 KB a CTA a step), every CTA into the same
 *           64 x 128 block of a 256-block buffer at the same iteration, as a head's CTAs
 *           at long non-causal lengths do
 *   step+l2 step+red and the next block's Q and dO read from L2 (32 KB a CTA a step, the
 *           same block for every CTA) with plain loads into registers, each waited for in
 *           its step: the L2 round trip unhidden (the kernel's refill is asynchronous)
 *   step+sync step+red with a CTA barrier at the top of each step, as step+tma has, but
 *           no copy: what the barrier alone costs
 *   step+tma step+red and the next block's Q and dO copied from L2 into shared memory as
 *           the kernel's refill does, by the copy engine (one 32 KB bulk copy a step on an
 *           mbarrier, waited for a step later, a CTA barrier after the wait): the step's
 *           whole L2 traffic beside its GEMMs, asynchronous
 *   step+cl step+tma launched in clusters of two CTAs, with the cluster barrier in place of
 *           the CTA barrier (each CTA still copies its whole block)
 *   step+mc step+cl with each CTA of the pair copying half of the block and multicasting
 *           it into both: the pair's L2 reads halved, each CTA's shared-memory writes
 *           unchanged (the cluster lever of next-levers item (39a); sm_90a, built so
 *           where CMAKE_CUDA_ARCHITECTURES has 90)
 *   step+gsync step+red with each 4-warp group's own barrier at the top of each step
 *   step+half step+sync with group 1 running its GEMMs in another order (dV, dQ, S), so
 *           that the groups' phases differ between the barriers
 *   step+roles step+red with the split kernel's hand-offs between its groups instead of a
 *           CTA barrier (group 0 as the P warps, group 1 as the dS warps: after S/dP the
 *           one arrives and the other syncs, then each group's own barrier before dV/dK,
 *           and group 0 syncs on group 1 before dQ): what the kernel's structure leaves
 *           of the GEMMs' rate, with nothing else in the step
 *   step+sync0, step+roles0  step+sync and step+roles without the dQ reductions (dQ
 *           folded into a register as in step): whether the barriers cost by themselves or
 *           by waiting for the reductions before them
 * At the board's power cap the clock falls as energy per mma rises, so TFLOP/s, not mma
 * per clock, says what a case costs there (docs/performance.md, thirty-ninth session).
 * Inputs are random values in [-1, 1] (zeros would draw less power than real data).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bwd_config.cuh"
#include "check.h" /* after cuda_runtime.h: CUDA_CHECK */
#include "ptx/barrier.cuh"
#include "ptx/cluster.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/red.cuh"
#include "ptx/tma.cuh"
#include "warp_gemm.cuh"

namespace {

using T = __nv_bfloat16;
/* hd128's sm_90 row (src/config_table.h): BM 64, BN 128, WQ 2. */
using C = fb::BwdConfig<T, 90, 128, 64, 128, 2, 2, 4, 2, 0, 2>;
using TileQ = C::TileQ;         /* Q, dO: 64 x 128 */
using TileK = C::TileK;         /* K, V: 128 x 128 */
using TileP = C::TileP;         /* P, dS: 64 x 128 */
using LS = C::SplitLayoutS;     /* 32 x 64 a warp, 4 warps */
using LKV = C::SplitLayoutKV;   /* 64 x 64 a warp, 4 warps */
using LQ = C::LayoutQ;          /* 32 x 32 a warp, 8 warps */
constexpr int HD = 128, BM = 64, BN = 128;

/* Shared memory: two of each tile, one per group (Q | dO, K | V, P | dS), plus padding so
 * that one CTA fills an SM as the split kernel's 161 KB do. */
constexpr int OFF_Q = 0, OFF_K = 2 * TileQ::BYTES, OFF_P = OFF_K + 2 * TileK::BYTES;
constexpr int DATA_BYTES = OFF_P + 2 * TileP::BYTES;
/* step+tma: the copies' destination (a Q and a dO tile) and their mbarrier */
constexpr int QDO_BYTES = 2 * TileQ::BYTES, OFF_COPY = DATA_BYTES, OFF_BAR = OFF_COPY + QDO_BYTES;
constexpr int SMEM_BYTES = 161 * 1024;
static_assert(OFF_BAR + 8 <= SMEM_BYTES, "the tiles, the copies' tile and the mbarrier fit");

enum Case {
    REGS, S, DV, DQ, STEP, LDSM, STEP_RED, STEP_L2, STEP_SYNC, STEP_TMA, STEP_CL, STEP_MC,
    STEP_GSYNC, STEP_HALF, STEP_ROLES, STEP_SYNC0, STEP_ROLES0, NUM_CASES
};
const char *const case_name[NUM_CASES] = {"regs",     "S",         "dV",       "dQ",
                                          "step",     "ldsm",      "step+red", "step+l2",
                                          "step+sync", "step+tma", "step+cl",  "step+mc",
                                          "step+gsync", "step+half", "step+roles",
                                          "step+sync0", "step+roles0"};
/* The global buffers of the L2 cases: NB query blocks of fp32 dQ sums (BM x HD)
 * and of Q and dO (2 x BM x HD, 16-bit): 8 MB each, in L2 as a head's are. */
constexpr int NB = 256, DQ_BLOCK = BM * HD, QDO_BLOCK_U4 = 2 * BM * HD * 2 / 16;
/* m16n8k16 per warp per iteration, and ldmatrix bytes per warp per iteration */
constexpr int MMA_S = LS::MT * LS::NT * (HD / 16), MMA_DV = LKV::MT * LKV::NT * (BM / 16),
              MMA_DQ = LQ::MT * LQ::NT * (BN / 16), MMA_REGS = 8 * 8;
constexpr int LDSM_S = (LS::MT + LS::NT / 2) * 512 * (HD / 16),
              LDSM_DV = (LKV::MT + LKV::NT / 2) * 512 * (BM / 16),
              LDSM_DQ = (LQ::MT + LQ::NT / 2) * 512 * (BN / 16);

template <int MT, int NT> __device__ __forceinline__ float fold(const float (&acc)[MT][NT][4])
{
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) s += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
    return s;
}

/* The ldmatrix of one warp_gemm without its mma: what the GEMM reads, at full rate. */
template <class L, class TileA, class TileB, bool AK, bool BK, int K>
__device__ __forceinline__ uint32_t loads_only(const fb::LaneAddr<TileA, 16> &a,
                                               const fb::LaneAddr<TileB, 16> &b)
{
    uint32_t x = 0;
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t f[4];
#pragma unroll
        for (int mi = 0; mi < L::MT; ++mi) {
            if constexpr (!AK) fb::ptx::ldmatrix_x4(f, a.at(16 * mi, k0));
            else fb::ptx::ldmatrix_x4_trans(f, a.at(k0, 16 * mi));
            x ^= f[0] ^ f[3];
        }
#pragma unroll
        for (int nj = 0; nj < L::NT; nj += 2) {
            if constexpr (!BK) fb::ptx::ldmatrix_x4(f, b.at(8 * nj, k0));
            else fb::ptx::ldmatrix_x4_trans(f, b.at(k0, 8 * nj));
            x ^= f[0] ^ f[3];
        }
    }
    return x;
}

template <int CASE, int MINB>
__global__ void __launch_bounds__(256, MINB)
    probe(const T *init, float *out, long long *cycles, int iters, float *dq, const uint4 *qdo)
{
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = warp / 4, gw = warp % 4;
    if constexpr (CASE != REGS)
        for (int i = tid; i < (MINB == 1 ? DATA_BYTES : OFF_P) / 16; i += blockDim.x)
            reinterpret_cast<uint4 *>(smem)[i] = reinterpret_cast<const uint4 *>(init)[i];
    /* the cases that copy the next block's Q and dO, and those of them in clusters */
    constexpr bool CLUSTER = CASE == STEP_CL || CASE == STEP_MC;
    constexpr bool COPIES = CASE == STEP_TMA || CLUSTER;
    const uint32_t base = fb::smem_u32(smem), bar = base + OFF_BAR;
    if (COPIES && tid == 0) {
        fb::ptx::mbarrier_init(bar, 1); /* the issuing thread's arrival, then the bytes */
        fb::ptx::fence_mbarrier_init();
    }
    __syncthreads();
    if constexpr (CLUSTER) fb::ptx::cluster_sync(); /* the partner's mbarrier is ready */
    const uint32_t rank = CLUSTER ? fb::ptx::cluster_ctarank() : 0;
    const uint32_t sQ = base + OFF_Q + g * TileQ::BYTES, sK = base + OFF_K + g * TileK::BYTES,
                   sP = base + OFF_P + g * TileP::BYTES;
    /* the cases that run all three GEMMs of a step */
    constexpr bool REDS = CASE == STEP_RED || CASE == STEP_L2 || CASE == STEP_SYNC || COPIES ||
                          CASE == STEP_GSYNC || CASE == STEP_HALF || CASE == STEP_ROLES;
    constexpr bool STEPS = CASE == STEP || REDS || CASE == STEP_SYNC0 || CASE == STEP_ROLES0;
    const long long t0 = clock64();
    float sink = 0.0f;
    uint32_t xs = 0;

    if constexpr (CASE == REGS) {
        /* operands from the random input, as the other cases have them: fixed bit patterns
         * (tid * 3 and the like, before the fifty-second session) are tiny bf16 values that
         * draw far less power than data does */
        const uint32_t *in = reinterpret_cast<const uint32_t *>(init) + tid * 6; /* 6 KB */
        uint32_t a[4] = {in[0], in[1], in[2], in[3]}, b0 = in[4], b1 = in[5];
        float c[8][4] = {};
        for (int it = 0; it < iters; ++it)
#pragma unroll
            for (int r = 0; r < MMA_REGS / 8; ++r)
#pragma unroll
                for (int j = 0; j < 8; ++j) fb::ptx::mma_m16n8k16<T>(c[j], a, b0, b1);
#pragma unroll
        for (int j = 0; j < 8; ++j) sink += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    } else {
        const auto aS = fb::operand_addr<LS, TileQ, true, false>(sQ, gw, lane);
        const auto bS = fb::operand_addr<LS, TileK, false, false>(sK, gw, lane);
        const auto aKV = fb::operand_addr<LKV, TileP, true, true>(sP, gw, lane);
        const auto bKV = fb::operand_addr<LKV, TileQ, false, true>(sQ, gw, lane);
        const auto aQ = fb::operand_addr<LQ, TileP, true, false>(base + OFF_P, warp, lane);
        const auto bQ = fb::operand_addr<LQ, TileK, false, true>(base + OFF_K, warp, lane);
        float acc_kv[LKV::MT][LKV::NT][4];
        fb::zero(acc_kv);
        for (int it = 0; it < iters; ++it) {
            if constexpr (CASE == STEP_SYNC || CASE == STEP_HALF || CASE == STEP_SYNC0)
                __syncthreads();
            if constexpr (CASE == STEP_GSYNC) fb::ptx::bar_sync(1 + g, 128);
            if constexpr (COPIES) {
                /* the previous step's copy has landed, every thread (of the pair) has seen
                 * it, and the next one starts (the kernel's full[s] wait, then its refill);
                 * a partner's multicast bytes may reach this mbarrier before its own
                 * expect_tx, which the phase's pending arrival covers */
                if (it > 0) fb::ptx::mbarrier_wait(bar, (it - 1) & 1);
                if constexpr (CLUSTER) fb::ptx::cluster_sync();
                else __syncthreads();
                if (tid == 0) {
                    const uint4 *src = qdo + (size_t)((it + 1) % NB) * QDO_BLOCK_U4;
                    fb::ptx::mbarrier_arrive_expect_tx(bar, QDO_BYTES);
                    if constexpr (CASE == STEP_MC) {
                        constexpr int HALF = QDO_BYTES / 2;
                        fb::ptx::bulk_load_multicast(base + OFF_COPY + rank * HALF,
                                                     src + rank * (HALF / 16), HALF, bar, 0x3);
                    } else {
                        fb::ptx::bulk_load(base + OFF_COPY, src, QDO_BYTES, bar);
                    }
                }
            }
            auto gemm_s = [&] {
                float acc[LS::MT][LS::NT][4];
                fb::zero(acc);
                fb::warp_gemm<LS, TileQ, TileK, false, false, HD, T>(acc, aS, 0, bS, 0);
                sink += fold(acc);
            };
            auto gemm_kv = [&] {
                fb::warp_gemm<LKV, TileP, TileQ, true, true, BM, T>(acc_kv, aKV, 0, bKV, 0);
            };
            auto gemm_dq = [&] {
                float acc[LQ::MT][LQ::NT][4];
                fb::zero(acc);
                fb::warp_gemm<LQ, TileP, TileK, false, true, BN, T>(acc, aQ, 0, bQ, 0);
                if constexpr (REDS) {
                    /* each warp's 32 x 32 block as 8 coalesced 512-byte reductions */
                    float *blk = dq + (size_t)(it % NB) * DQ_BLOCK + warp * 1024 + lane * 4;
#pragma unroll
                    for (int mi = 0; mi < LQ::MT; ++mi)
#pragma unroll
                        for (int nj = 0; nj < LQ::NT; ++nj)
                            fb::ptx::red_global_add_v4_f32(blk + (mi * LQ::NT + nj) * 128,
                                                           acc[mi][nj][0], acc[mi][nj][1],
                                                           acc[mi][nj][2], acc[mi][nj][3]);
                } else {
                    sink += fold(acc);
                }
            };
            if constexpr (CASE == STEP_ROLES || CASE == STEP_ROLES0) {
                /* the split kernel's hand-offs (bwd_split.cuh): group 0 as its P warps,
                 * group 1 as its dS warps, barrier ids as there */
                gemm_s();
                if (g == 0) {
                    fb::ptx::bar_arrive(1, 256);
                    fb::ptx::bar_sync(3, 128);
                } else {
                    fb::ptx::bar_sync(1, 256);
                    fb::ptx::bar_arrive(2, 256);
                    fb::ptx::bar_sync(4, 128);
                }
                gemm_kv();
                if (g == 0) fb::ptx::bar_sync(2, 256);
                gemm_dq();
            } else if (CASE == STEP_HALF && g == 1) { /* the other order in group 1 */
                gemm_kv();
                gemm_dq();
                gemm_s();
            } else {
                if constexpr (CASE == S || STEPS) gemm_s();
                if constexpr (CASE == DV || STEPS) gemm_kv();
                if constexpr (CASE == DQ || STEPS) gemm_dq();
            }
            if constexpr (CASE == STEP_L2) {
                /* the next block's Q and dO: 8 x 16 bytes a thread, from L2 */
                const uint4 *src = qdo + (size_t)((it + 1) % NB) * QDO_BLOCK_U4 + tid;
#pragma unroll
                for (int j = 0; j < QDO_BLOCK_U4 / 256; ++j) {
                    const uint4 v = __ldcg(src + j * 256);
                    xs ^= v.x ^ v.w;
                }
            }
            if constexpr (CASE == LDSM) {
                xs ^= loads_only<LS, TileQ, TileK, false, false, HD>(aS, bS);
                xs ^= loads_only<LKV, TileP, TileQ, true, true, BM>(aKV, bKV);
                xs ^= loads_only<LQ, TileP, TileK, false, true, BN>(aQ, bQ);
            }
        }
        sink += fold(acc_kv);
        if (COPIES && iters > 0) /* no copy in flight into a CTA that has exited */
            fb::ptx::mbarrier_wait(bar, (iters - 1) & 1);
        if constexpr (CLUSTER) fb::ptx::cluster_sync();
    }
    (void)rank;
    const long long t1 = clock64();
    out[blockIdx.x * blockDim.x + tid] = sink + (float)(xs & 1);
    if (tid == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int CASE, int CTAS_PER_SM = 1>
void run(const T *init, float *out, long long *cycles, int sms, int iters, float *dq,
         const uint4 *qdo)
{
    /* Two CTAs an SM: S only (128 registers, its Q and K tiles: 96 KB a CTA), to see what
     * twice the warps would give where registers allowed them. */
    static_assert(CTAS_PER_SM == 1 || CASE == REGS || CASE == S, "registers and tiles fit");
    constexpr int MINB = CASE == S ? CTAS_PER_SM : 1;
    auto kernel = probe<CASE, MINB>;
    const int ctas_per_sm = CTAS_PER_SM;
    const int smem = CTAS_PER_SM == 1 ? SMEM_BYTES : CASE == S ? OFF_P : 0;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int grid = sms * ctas_per_sm;
    /* the cluster cases: pairs of CTAs, all resident at once (or the timing would hold a
     * second wave) */
    constexpr bool CLUSTER = CASE == STEP_CL || CASE == STEP_MC;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = smem;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = CLUSTER ? 1 : 0;
    if (CLUSTER) {
        int clusters = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
        if (grid % 2 || clusters < grid / 2) {
            printf("%-6s skipped: %d SMs hold %d pairs at once, the grid needs %d\n",
                   case_name[CASE], sms, clusters, (grid + 1) / 2);
            return;
        }
    }
    auto launch = [&](int n) {
        CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, init, out, cycles, n, dq, qdo));
    };
    launch(iters / 10); /* warm-up */
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        CUDA_CHECK(cudaEventRecord(e0));
        launch(iters);
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    long long *host = (long long *)malloc(sizeof(long long) * grid);
    if (!host) exit(1);
    CUDA_CHECK(cudaMemcpy(host, cycles, sizeof(long long) * grid, cudaMemcpyDeviceToHost));
    double cyc = 0;
    for (int i = 0; i < grid; ++i) cyc += (double)host[i];
    cyc /= grid; /* a CTA's cycles in the last run (all CTAs run at once) */
    free(host);

    const int mma_warp = CASE == REGS   ? MMA_REGS
                         : CASE == S    ? MMA_S
                         : CASE == DV   ? MMA_DV
                         : CASE == DQ   ? MMA_DQ
                         : CASE == LDSM ? 0
                                        : MMA_S + MMA_DV + MMA_DQ; /* the steps */
    const double warps = (double)grid * 8, mma = (double)mma_warp * iters * warps;
    const double flops = mma * 2.0 * 16 * 8 * 16;
    if (CASE == LDSM) {
        const double bytes = (double)(LDSM_S + LDSM_DV + LDSM_DQ) * iters * warps;
        printf("%-6s %d CTA/SM  %8.1f GB/s   %6.1f B per SM-clock   (%.0f cycles)\n",
               case_name[CASE], ctas_per_sm, bytes / best / 1e6, bytes / sms / cyc, cyc);
    } else {
        printf("%-6s %d CTA/SM  %8.1f TFLOP/s  %6.3f mma per SM-clock  (%.0f cycles, %.3f ms)\n",
               case_name[CASE], ctas_per_sm, flops / best / 1e9, mma / sms / cyc, cyc, best);
    }
}

} // namespace

int main(int argc, char **argv)
{
    const int iters = argc > 1 ? atoi(argv[1]) : 4000;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    printf("%s, %d SMs; hd128 split tiles: S %dx%d, dV %dx%d, dQ %dx%d a warp; %d iterations\n",
           prop.name, sms, LS::TM, LS::TN, LKV::TM, LKV::TN, LQ::TM, LQ::TN, iters);
    printf("ldmatrix bytes per mma: S %d, dV %d, dQ %d\n", LDSM_S / MMA_S, LDSM_DV / MMA_DV,
           LDSM_DQ / MMA_DQ);

    const size_t n = DATA_BYTES / 2;
    T *host = (T *)malloc(n * sizeof(T));
    if (!host) return 1;
    srand(12345u ^ (unsigned)iters);
    for (size_t i = 0; i < n; ++i) host[i] = __float2bfloat16(2.0f * rand() / RAND_MAX - 1.0f);
    T *init;
    float *out;
    long long *cycles;
    CUDA_CHECK(cudaMalloc(&init, n * sizeof(T)));
    CUDA_CHECK(cudaMalloc(&out, sizeof(float) * sms * 4 * 256));
    CUDA_CHECK(cudaMalloc(&cycles, sizeof(long long) * sms * 4));
    CUDA_CHECK(cudaMemcpy(init, host, n * sizeof(T), cudaMemcpyHostToDevice));
    free(host);

    float *dq;
    uint4 *qdo;
    CUDA_CHECK(cudaMalloc(&dq, sizeof(float) * NB * DQ_BLOCK));
    CUDA_CHECK(cudaMalloc(&qdo, sizeof(uint4) * NB * QDO_BLOCK_U4));
    CUDA_CHECK(cudaMemset(dq, 0, sizeof(float) * NB * DQ_BLOCK));
    CUDA_CHECK(cudaMemset(qdo, 0x3c, sizeof(uint4) * NB * QDO_BLOCK_U4));

    /* argv[2]: the cases to run, by name, comma-separated (default: all) */
    auto want = [&](int c) {
        if (argc <= 2) return true;
        char list[256];
        snprintf(list, sizeof list, ",%s,", argv[2]);
        char name[32];
        snprintf(name, sizeof name, ",%s,", case_name[c]);
        return strstr(list, name) != NULL;
    };
    if (want(REGS)) run<REGS, 4>(init, out, cycles, sms, iters * 8, dq, qdo);
    if (want(REGS)) run<REGS>(init, out, cycles, sms, iters * 8, dq, qdo);
    if (want(S)) run<S>(init, out, cycles, sms, iters, dq, qdo);
    if (want(S)) run<S, 2>(init, out, cycles, sms, iters, dq, qdo);
    if (want(DV)) run<DV>(init, out, cycles, sms, iters, dq, qdo);
    if (want(DQ)) run<DQ>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP)) run<STEP>(init, out, cycles, sms, iters, dq, qdo);
    if (want(LDSM)) run<LDSM>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_RED)) run<STEP_RED>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_L2)) run<STEP_L2>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_SYNC)) run<STEP_SYNC>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_TMA)) run<STEP_TMA>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_CL)) run<STEP_CL>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_GSYNC)) run<STEP_GSYNC>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_HALF)) run<STEP_HALF>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_ROLES)) run<STEP_ROLES>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_SYNC0)) run<STEP_SYNC0>(init, out, cycles, sms, iters, dq, qdo);
    if (want(STEP_ROLES0)) run<STEP_ROLES0>(init, out, cycles, sms, iters, dq, qdo);
#if FB_PROBE_SM90A /* multicast */
    if (want(STEP_MC)) run<STEP_MC>(init, out, cycles, sms, iters, dq, qdo);
#else
    if (want(STEP_MC)) printf("step+mc not built: multicast needs sm_90a (bench/CMakeLists.txt)\n");
#endif
    CUDA_CHECK(cudaFree(dq));
    CUDA_CHECK(cudaFree(qdo));

    CUDA_CHECK(cudaFree(init));
    CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaFree(cycles));
    return 0;
}
