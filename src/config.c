/* config.c — choose the main kernel's tile configuration for an architecture and head dim.
 *
 * The rows live in config_table.h, shared with the CUDA instantiations, so a row the host
 * picks is always a kernel that exists (or the build left it out, which plan creation
 * reports as not supported).
 */
#include <stdlib.h>
#include <string.h>

#include "config_table.h"
#include "internal.h"

static const fb_config rows[] = {
#define FB_CONFIG_ROW(arch, hd, bm, bn, st, ws, wk, wq, lag, fold, foldm, fmin, split, sst) \
    {arch, hd, bm, bn, st, ws, wk, wq, lag, fold, foldm, fmin, split, sst,                 \
     FB_SMEM_MAIN_BYTES(bm, bn, hd, st, lag), sst ? FB_SMEM_SPLIT_BYTES(bm, bn, hd, sst) : 0},
    FB_CONFIG_TABLE(FB_CONFIG_ROW)
#undef FB_CONFIG_ROW
};

int fb_config_count(void) { return (int)(sizeof rows / sizeof rows[0]); }

const fb_config *fb_config_row(int i)
{
    return i >= 0 && i < fb_config_count() ? &rows[i] : NULL;
}

int32_t fb_arch_class(int32_t arch)
{
    if (arch == 80) return 80;
    if (arch >= 81 && arch <= 89) return 86; /* sm_86, sm_87, sm_89: the 99 KB parts */
    if (arch >= 90) return 90;               /* sm_90; newer parts run the sm_90 code */
    return 0;
}

int32_t fb_arch_smem_limit(int32_t arch)
{
    switch (arch) {
    case 80: return FB_SMEM_LIMIT_SM80;
    case 86: case 87: case 89: return FB_SMEM_LIMIT_SM86;
    case 90: return FB_SMEM_LIMIT_SM90;
    default: return 0;
    }
}

int32_t fb_kernel_head_dim(int32_t head_dim)
{
    static const int32_t sizes[] = {64, 96, 128, 192, 256};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        if (head_dim <= sizes[i]) return sizes[i];
    return 0;
}

int32_t fb_config_select(flashbwd_plan *plan, int32_t arch, int32_t head_dim,
                         int32_t smem_limit, fb_config *out)
{
    const int32_t hd = fb_kernel_head_dim(head_dim);
    FB_FAIL_IF(plan, hd == 0, FLASHBWD_ERR_NOT_SUPPORTED,
               "head_dim = %d: the CUDA kernels support head_dim <= 256", head_dim);
    const int32_t cls = fb_arch_class(arch);
    FB_FAIL_IF(plan, cls == 0, FLASHBWD_ERR_NOT_SUPPORTED,
               "device architecture sm_%d is older than sm_80, the oldest flashbwd supports",
               arch);
    /* Prefer the architecture's own row; a part with less shared memory than its class
     * documents (or a newer one) falls back to the rows of the smaller classes. */
    static const int32_t order[] = {90, 80, 86};
    int first = cls == 90 ? 0 : cls == 80 ? 1 : 2;
    /* FLASHBWD_FORCE_CONFIG_CLASS=80|86 (testing): start at that older class's rows, so an
     * H200 runs the sm_86 kernels, which are compiled for every GPU. A class newer than
     * the device's changes nothing; any other value is an error. */
    const char *force = getenv("FLASHBWD_FORCE_CONFIG_CLASS");
    if (force && *force) {
        const int f = !strcmp(force, "90") ? 0 : !strcmp(force, "80") ? 1
                    : !strcmp(force, "86") ? 2 : -1;
        FB_FAIL_IF(plan, f < 0, FLASHBWD_ERR_INVALID_VALUE,
                   "environment FLASHBWD_FORCE_CONFIG_CLASS = \"%.16s\": expected 80, 86 or 90",
                   force);
        if (f > first) first = f;
    }
    for (int o = first; o < 3; ++o)
        for (int i = 0; i < fb_config_count(); ++i)
            if (rows[i].arch_class == order[o] && rows[i].kernel_head_dim == hd &&
                rows[i].smem_bytes <= smem_limit) {
                *out = rows[i];
                return FLASHBWD_OK;
            }
    return fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED,
                   "no kernel configuration for head_dim %d fits %d bytes of shared memory "
                   "per block (sm_%d)", head_dim, smem_limit, arch);
}
