/* registry.cuh — one compiled variant of the backward: a config-table row and a dtype,
 * with its launcher. kernels/inst/ builds the entries; launch.cu looks them up.
 */
#pragma once
#include <cuda_runtime_api.h>

#include "bwd_main.cuh"
#include "bwd_prepost.cuh"
#include "bwd_split.cuh"
#include "flashbwd.h"
#include "launch.h"

namespace fb {

struct KernelEntry {
    fb_kernel_key key;
    const void *main_fn[5]; /* the main kernel without, with the dQ conversion; the split
                               kernel's plain, head-group and full-tile instances, each NULL
                               where the row has none (attributes; graphs) */
    cudaError_t (*launch)(const fb_bwd_params &, const fb_launch_table &, cudaStream_t);
    /* The kernel of each launch-table slot (the main slot's with FOLD off), for graphs. */
    const void *slot_fn[FLASHBWD_LAUNCH_CONVERT_DKV + 1];
};

/* Enqueue the launches of the plan's table, in order, checking each. */
template <class C>
cudaError_t launch_backward(const fb_bwd_params &p, const fb_launch_table &t, cudaStream_t s)
{
    auto dims = [&](int i, dim3 &g, dim3 &b) {
        g = dim3(t.launch[i].grid[0], t.launch[i].grid[1], t.launch[i].grid[2]);
        b = dim3(t.launch[i].block[0], t.launch[i].block[1], t.launch[i].block[2]);
    };
    dim3 g, b;
    cudaError_t err;
    dims(FLASHBWD_LAUNCH_PREPROCESS, g, b);
    bwd_preprocess_kernel<C><<<g, b, 0, s>>>(p);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    dims(FLASHBWD_LAUNCH_MAIN, g, b);
    const int smem = t.launch[FLASHBWD_LAUNCH_MAIN].smem_bytes;
    if (t.split) { /* the plan sets split (split_grouped) only where the row has it */
        constexpr int HD = C::HEAD_DIM, SST = C::SPLIT_STAGES;
        if (t.split_grouped) {
            if constexpr (SST > 0 && FB_SPLIT_GROUPED(HD))
                bwd_split_kernel<C, true><<<g, b, smem, s>>>(p);
            else return cudaErrorInvalidValue;
        } else if (t.split_full && !p.alibi_slopes) {
            if constexpr (SST > 0 && FB_SPLIT_PLAIN(HD) && FB_SPLIT_FULL(HD))
                bwd_split_kernel<C, false, true><<<g, b, smem, s>>>(p);
            else return cudaErrorInvalidValue;
        } else {
            if constexpr (SST > 0 && FB_SPLIT_PLAIN(HD))
                bwd_split_kernel<C, false><<<g, b, smem, s>>>(p);
            else return cudaErrorInvalidValue;
        }
    } else if (t.dq_in_main) { /* then FLASHBWD_LAUNCH_CONVERT_DQ has grid 0 */
        bwd_main_kernel<C, true><<<g, b, smem, s>>>(p);
    } else {
        bwd_main_kernel<C, false><<<g, b, smem, s>>>(p);
    }
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    if (!t.dq_in_main) {
        dims(FLASHBWD_LAUNCH_CONVERT_DQ, g, b);
        bwd_convert_dq_kernel<C><<<g, b, 0, s>>>(p);
        if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
    if (t.num_launches > FLASHBWD_LAUNCH_CONVERT_DKV) {
        dims(FLASHBWD_LAUNCH_CONVERT_DKV, g, b);
        bwd_convert_dkv_kernel<C><<<g, b, 0, s>>>(p);
        if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
    return cudaSuccess;
}

/* The entry of row (ARCH, HD, ...) if HD is the head dim this file instantiates, else an
 * empty entry; `if constexpr` keeps the other head dims from being compiled here. */
template <int WANT_HD, typename T, int ARCH, int HD, int BM, int BN, int ST, int WS, int WK,
          int WQ, int LAG, int SST>
KernelEntry entry_if(int32_t dtype)
{
    if constexpr (HD == WANT_HD) {
        using C = BwdConfig<T, ARCH, HD, BM, BN, ST, WS, WK, WQ, LAG, SST>;
        const void *split = nullptr, *split_grouped = nullptr, *split_full = nullptr;
        if constexpr (SST > 0 && FB_SPLIT_PLAIN(HD))
            split = (const void *)bwd_split_kernel<C, false>;
        if constexpr (SST > 0 && FB_SPLIT_PLAIN(HD) && FB_SPLIT_FULL(HD))
            split_full = (const void *)bwd_split_kernel<C, false, true>;
        if constexpr (SST > 0 && FB_SPLIT_GROUPED(HD))
            split_grouped = (const void *)bwd_split_kernel<C, true>;
        return KernelEntry{{dtype, ARCH, HD},
                           {(const void *)bwd_main_kernel<C, false>,
                            (const void *)bwd_main_kernel<C, true>, split, split_grouped,
                            split_full},
                           launch_backward<C>,
                           {(const void *)bwd_preprocess_kernel<C>,
                            (const void *)bwd_main_kernel<C, false>,
                            (const void *)bwd_convert_dq_kernel<C>,
                            (const void *)bwd_convert_dkv_kernel<C>}};
    } else {
        return KernelEntry{{0, 0, 0}, {nullptr, nullptr, nullptr, nullptr, nullptr}, nullptr, {}};
    }
}

} // namespace fb

/* Each kernels/inst/hdNN.cu defines one of these: its entries, and how many. */
#define FB_DECLARE_ENTRIES(hd) int fb_entries_hd##hd(const fb::KernelEntry **out);
