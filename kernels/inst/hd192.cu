/* hd192.cu — every config-table row with kernel head dim 192, in bf16 and fp16. One file per
 * head dim so the build compiles them in parallel and CMake can leave any out. */
#include "../registry.cuh"

#define FB_ROW(arch, hd, bm, bn, st, ws, wk, wq, lag, fold, foldm, fmin, split, sst)            \
    fb::entry_if<192, __nv_bfloat16, arch, hd, bm, bn, st, ws, wk, wq, lag, sst>(               \
        FLASHBWD_DTYPE_BF16),                                                                   \
    fb::entry_if<192, __half, arch, hd, bm, bn, st, ws, wk, wq, lag, sst>(FLASHBWD_DTYPE_FP16),

int fb_entries_hd192(const fb::KernelEntry **out)
{
    static const fb::KernelEntry entries[] = {FB_CONFIG_TABLE(FB_ROW)};
    *out = entries;
    return (int)(sizeof entries / sizeof entries[0]);
}
