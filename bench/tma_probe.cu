/* tma_probe.cu — does the tensor copy engine lay a Q tile out in shared memory exactly as
 * the split kernel's cp.async refill does? Lever (16c) of docs/performance.md (the Q/dO
 * refill through TMA) rests on it: SmemTile stores a 64-column panel row-major with the
 * 16-byte chunk index XORed with (row % 8), which should be CU_TENSOR_MAP_SWIZZLE_128B of
 * a box 64 columns wide, if the panel sits 1024-byte aligned.
 *
 *   build/bench/tma_probe          prints one line per case and PASS or FAIL (exit 1, as for
 *                                  a failing CUDA call)
 *
 * Each case copies one 64-row tile of a (batch, seq, head, dim) bf16 tensor twice into
 * poisoned shared memory: by cp_async_tile (kernels/tile_io.cuh, the kernels' refill) and
 * by one tensor copy per panel (kernels/ptx/tma.cuh), and compares every byte. Cases: a
 * whole 128-column tile, the last partial tile of a sequence (rows past the tensor come back
 * as zeros from both), head_dim 96 in a 128-column tile (columns 96-127 zero): SWIZZLE_128B
 * boxes of 64 columns, as the split kernel's TMA refill uses; and a 96-column tile, whose
 * SmemTile panels are 32 columns wide with chunk c of row r at c ^ ((r / 2) % 4), which
 * should be SWIZZLE_64B of 32-column boxes in 512-byte aligned panels (hd96's row, not yet
 * refilled through TMA: docs/performance.md, lever (17b)).
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h" /* after cuda_runtime.h: CUDA_CHECK */
#include "ptx/cp_async.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "tile_io.cuh"

namespace {

constexpr int BM = 64, NT = 128;
constexpr int SMEM = 2 * fb::SmemTile<BM, 128>::BYTES + 1024 + 16; /* two tiles, slack, mbarrier */

template <int HD>
__global__ void __launch_bounds__(NT) probe(const __grid_constant__ CUtensorMap tmap,
                                            const __nv_bfloat16 *gmem, int64_t row_stride,
                                            int valid_rows, int head_dim, int m0, int h, int b,
                                            int *mismatches, int *first)
{
    using Tile = fb::SmemTile<BM, HD>;
    constexpr int PANEL = Tile::PANEL;
    extern __shared__ unsigned char raw[];
    unsigned char *smem = raw + ((1024 - (fb::smem_u32(raw) & 1023)) & 1023);
    uint16_t *tma = reinterpret_cast<uint16_t *>(smem);
    uint16_t *cpa = reinterpret_cast<uint16_t *>(smem + Tile::BYTES);
    const uint32_t bar = fb::smem_u32(smem + 2 * Tile::BYTES);
    const int tid = threadIdx.x;
    for (int i = tid; i < Tile::ELEMS; i += NT) tma[i] = cpa[i] = 0xdead;
    if (tid == 0) fb::ptx::mbarrier_init(bar, 1);
    /* the poison (generic proxy) before the tensor copy's writes (async proxy) */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (tid == 0) {
        fb::ptx::mbarrier_arrive_expect_tx(bar, Tile::BYTES);
        for (int panel = 0; panel < HD / PANEL; ++panel)
            fb::ptx::tma_load_4d(fb::smem_u32(tma) + panel * BM * PANEL * 2, &tmap,
                                 panel * PANEL, h, m0, b, bar);
    }
    fb::cp_async_tile<Tile, HD, NT>(fb::smem_u32(cpa), gmem, row_stride, valid_rows, head_dim,
                                    tid);
    fb::ptx::cp_async_commit();
    fb::ptx::cp_async_wait<0>();
    fb::ptx::mbarrier_wait(bar, 0);
    __syncthreads();
    for (int i = tid; i < Tile::ELEMS; i += NT)
        if (tma[i] != cpa[i] && atomicAdd(mismatches, 1) < 4) {
            first[0] = i, first[1] = tma[i], first[2] = cpa[i];
        }
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn()
{
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                           cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !fn) {
        fprintf(stderr, "cuTensorMapEncodeTiled not found (query result %d)\n", (int)q);
        exit(1);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

/* One case: a (B, S, H, D) tensor of random bf16, the tile of rows [m0, m0 + 64) of head h,
 * batch b, in an HD-column SmemTile. Returns the number of mismatching elements. */
template <int HD> int run_case(const char *name, int B, int S, int H, int D, int m0, int h, int b)
{
    constexpr int PANEL = fb::SmemTile<BM, HD>::PANEL;
    const size_t n = (size_t)B * S * H * D;
    __nv_bfloat16 *host = (__nv_bfloat16 *)malloc(n * sizeof *host);
    for (size_t i = 0; i < n; ++i) host[i] = __float2bfloat16((float)rand() / RAND_MAX - 0.5f);
    __nv_bfloat16 *dev;
    int *counts;
    CUDA_CHECK(cudaMalloc(&dev, n * sizeof *dev));
    CUDA_CHECK(cudaMemcpy(dev, host, n * sizeof *dev, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&counts, 4 * sizeof(int)));
    CUDA_CHECK(cudaMemset(counts, 0, 4 * sizeof(int)));

    CUtensorMap tmap;
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
    const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)H * D * 2,
                                   (cuuint64_t)S * H * D * 2}; /* bytes, dims 1..3 */
    const cuuint32_t box[4] = {PANEL, 1, BM, 1}, unit[4] = {1, 1, 1, 1};
    const CUresult r = encode_fn()(&tmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, dev, dims,
                                   strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   PANEL == 64 ? CU_TENSOR_MAP_SWIZZLE_128B
                                               : CU_TENSOR_MAP_SWIZZLE_64B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "%s: cuTensorMapEncodeTiled failed (%d)\n", name, (int)r);
        exit(1);
    }
    CUDA_CHECK(
        cudaFuncSetAttribute(probe<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    const int64_t row_stride = (int64_t)H * D;
    const __nv_bfloat16 *tile = dev + ((size_t)b * S + m0) * H * D + (size_t)h * D;
    probe<HD><<<1, NT, SMEM>>>(tmap, tile, row_stride, S - m0 < BM ? S - m0 : BM, D, m0, h, b,
                           counts, counts + 1);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    int c[4];
    CUDA_CHECK(cudaMemcpy(c, counts, sizeof c, cudaMemcpyDeviceToHost));
    printf("%-32s %s", name, c[0] ? "MISMATCH" : "same bytes");
    if (c[0])
        printf(" (%d elements; e.g. element %d: tensor copy %04x, cp.async %04x)", c[0], c[1],
               c[2], c[3]);
    printf("\n");
    CUDA_CHECK(cudaFree(dev));
    CUDA_CHECK(cudaFree(counts));
    free(host);
    return c[0];
}

} // namespace

int main()
{
    int bad = 0;
    bad += run_case<128>("whole tile (b 1, h 2, rows 64+)", 2, 200, 3, 128, 64, 2, 1);
    bad += run_case<128>("last tile, 8 rows (rows 192+)", 2, 200, 3, 128, 192, 1, 0);
    bad += run_case<128>("head_dim 96", 2, 200, 3, 96, 128, 0, 1);
    bad += run_case<96>("96-column tile, SWIZZLE_64B", 2, 200, 3, 96, 64, 2, 1);
    bad += run_case<96>("96-column tile, last 8 rows", 2, 200, 3, 96, 192, 1, 0);
    printf("%s\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}
