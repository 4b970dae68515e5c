/* tma_maps.c — the tensor maps of the split kernel's TMA refill (FB_SPLIT_TMA rows).
 *
 * The kernel's dS warps refill the Q/dO ring with one thread asking the tensor copy engine
 * for boxes of Q and dO (kernels/bwd_split.cuh). The engine needs each tensor described by
 * a CUtensorMap, encoded on the host (cuTensorMapEncodeTiled) and passed in the kernel's
 * parameters. Execute calls fb_tma_bind with the parameters it filled: the maps are encoded
 * when Q or dO (pointer or strides) differ from the last call's and copied from the plan's
 * cache otherwise, so a training loop that rebinds its tensors pays two encodes a call
 * (about a microsecond each) and a fixed one none.
 *
 * A map views Q as a (head_dim, heads, seqlen_q, batch) tensor, innermost first, with
 * strides in bytes, and a box of one SmemTile panel: 64 columns x 1 head x BLOCK_M rows x
 * 1 batch entry, 128 bytes per row, which CU_TENSOR_MAP_SWIZZLE_128B lays out exactly as a
 * 64-column panel (16-byte chunk c of row r at chunk c ^ (r % 8)); at kernel head dim 96,
 * whose tiles are 32-column panels, 32 columns with CU_TENSOR_MAP_SWIZZLE_64B (chunk
 * c ^ ((r / 2) % 4)). Both checked byte for byte by bench/tma_probe. Rows past seqlen_q and
 * columns past head_dim come back as zeros, as from cp_async_tile.
 *
 * Where the maps cannot describe the problem, tma_on stays 0 and the kernel refills with
 * cp.async as before, which gives the same bytes: varlen (sequences are packed rows, with
 * no batch stride) and seqused_q (rows between seqused and seqlen_q must read as zeros, and
 * the map's bounds are seqlen_q), a base or a stride that is not a multiple of 16 bytes (the
 * engine's rule), a CUDA runtime older than 12.5 (no versioned entry point), or a failed
 * encode. FLASHBWD_SPLIT_TMA=0 turns it off at plan creation (src/launches.c).
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"

#ifdef FB_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#if defined(FB_WITH_CUDA) && CUDART_VERSION >= 12050
#include <cudaTypedefs.h>

/* cuTensorMapEncodeTiled from the driver, looked up once per process. Two threads that
 * race here store the same pointer. */
static PFN_cuTensorMapEncodeTiled_v12000 encode_fn(void)
{
    static _Atomic(PFN_cuTensorMapEncodeTiled_v12000) fn;
    PFN_cuTensorMapEncodeTiled_v12000 f = atomic_load(&fn);
    if (!f) {
        void *sym = NULL;
        enum cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &sym, 12000,
                                             cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            return NULL;
        f = (PFN_cuTensorMapEncodeTiled_v12000)sym;
        atomic_store(&fn, f);
    }
    return f;
}

/* Encode the map of one 16-bit (batch, row, head, dim) tensor; 0 when the engine cannot
 * describe it (the caller then keeps cp.async). */
static int encode(uint64_t out[16], const void *base, const int64_t stride[3],
                  const fb_bwd_params *k, int32_t dtype, const fb_config *cfg)
{
    /* SmemTile's panel (kernels/smem_tile.cuh): 64 columns where the tile width allows. */
    const int panel = cfg->kernel_head_dim % 64 == 0 ? 64 : 32;
    /* Byte strides of dims 1..3 (heads, rows, batch). A dim of extent 1 is never stepped,
     * so its stride only has to be legal: the next inner one's span stands in. */
    const int64_t elem = 2;
    const int64_t s_head = k->heads_q > 1 ? stride[2] * elem : 128;
    const int64_t s_row = k->seqlen_q > 1 ? stride[1] * elem : s_head * k->heads_q;
    const int64_t s_batch = k->batch > 1 ? stride[0] * elem : s_row * k->seqlen_q;
    const int64_t limit = (int64_t)1 << 40;
    if ((uintptr_t)base % 16 || s_head <= 0 || s_row <= 0 || s_batch <= 0 || s_head % 16 ||
        s_row % 16 || s_batch % 16 || s_head >= limit || s_row >= limit || s_batch >= limit)
        return 0;
    PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
    if (!fn) return 0;
    const cuuint64_t dims[4] = {(cuuint64_t)k->head_dim, (cuuint64_t)k->heads_q,
                                (cuuint64_t)k->seqlen_q, (cuuint64_t)k->batch};
    const cuuint64_t strides[3] = {(cuuint64_t)s_head, (cuuint64_t)s_row, (cuuint64_t)s_batch};
    const cuuint32_t box[4] = {(cuuint32_t)panel, 1, (cuuint32_t)cfg->block_m, 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    _Static_assert(sizeof(CUtensorMap) == sizeof(fb_tma_map), "fb_tma_map holds a CUtensorMap");
    CUtensorMap map;
    const CUresult r = fn(&map,
                          dtype == FLASHBWD_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                          4, (void *)base, dims, strides, box, unit,
                          CU_TENSOR_MAP_INTERLEAVE_NONE,
                          panel == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                          CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return 0;
    memcpy(out, &map, sizeof map);
    return 1;
}

void fb_tma_bind(flashbwd_plan *plan, fb_bwd_params *k)
{
    fb_tma_cache *c = &plan->tma;
    k->tma_on = 0;
    if (!plan->launches.split_tma || k->varlen || k->seqused_q) return;
    /* The bulk copies of the LSE and D rows: 16-byte aligned at every block's first row. */
    if ((uintptr_t)k->lse_log2 % 16 || (uintptr_t)k->dpsum % 16 || k->ws_rows_q % 4 ||
        plan->config.block_m % 4)
        return;
    const int same = c->valid && c->q == k->q && c->dout == k->dout &&
                     !memcmp(c->q_stride, k->q_stride, sizeof c->q_stride) &&
                     !memcmp(c->do_stride, k->do_stride, sizeof c->do_stride) &&
                     c->shape[0] == k->batch && c->shape[1] == k->heads_q &&
                     c->shape[2] == k->seqlen_q && c->shape[3] == k->head_dim;
    if (!same) {
        c->valid = 0;
        c->on = encode(c->q_map, k->q, k->q_stride, k, plan->prob.dtype, &plan->config) &&
                encode(c->do_map, k->dout, k->do_stride, k, plan->prob.dtype, &plan->config);
        c->q = k->q, c->dout = k->dout;
        memcpy(c->q_stride, k->q_stride, sizeof c->q_stride);
        memcpy(c->do_stride, k->do_stride, sizeof c->do_stride);
        c->shape[0] = k->batch, c->shape[1] = k->heads_q;
        c->shape[2] = k->seqlen_q, c->shape[3] = k->head_dim;
        c->valid = 1;
    }
    if (c->on) {
        k->tma_on = 1;
        memcpy(k->tma_q.words, c->q_map, sizeof c->q_map);
        memcpy(k->tma_do.words, c->do_map, sizeof c->do_map);
    }
}

#else /* no CUDA, or a runtime before 12.5: cp.async only */

void fb_tma_bind(flashbwd_plan *plan, fb_bwd_params *k)
{
    (void)plan;
    k->tma_on = 0;
}

#endif
