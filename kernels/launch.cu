/* launch.cu — the only extern "C" surface of the kernels: find a compiled variant, prepare
 * it on a device, and enqueue a backward pass. Every entry returns a cudaError_t value and
 * lets no C++ exception escape.
 */
#include <cuda_runtime_api.h>

#include "launch.h"
#include "registry.cuh"

#ifdef FB_HAVE_HD64
FB_DECLARE_ENTRIES(64)
#endif
#ifdef FB_HAVE_HD96
FB_DECLARE_ENTRIES(96)
#endif
#ifdef FB_HAVE_HD128
FB_DECLARE_ENTRIES(128)
#endif
#ifdef FB_HAVE_HD192
FB_DECLARE_ENTRIES(192)
#endif
#ifdef FB_HAVE_HD256
FB_DECLARE_ENTRIES(256)
#endif

namespace {

/* All compiled variants, flattened once (the first call; static init is thread-safe). */
struct Registry {
    const fb::KernelEntry *entries[64];
    int count = 0;

    Registry()
    {
        auto add = [&](int (*list)(const fb::KernelEntry **)) {
            const fb::KernelEntry *e;
            const int n = list(&e);
            for (int i = 0; i < n && count < 64; ++i)
                if (e[i].launch) entries[count++] = &e[i];
        };
#ifdef FB_HAVE_HD64
        add(fb_entries_hd64);
#endif
#ifdef FB_HAVE_HD96
        add(fb_entries_hd96);
#endif
#ifdef FB_HAVE_HD128
        add(fb_entries_hd128);
#endif
#ifdef FB_HAVE_HD192
        add(fb_entries_hd192);
#endif
#ifdef FB_HAVE_HD256
        add(fb_entries_hd256);
#endif
        (void)add;
    }
};

const Registry &registry()
{
    static const Registry r;
    return r;
}

} // namespace

extern "C" int fb_kernel_find(const fb_kernel_key *key)
{
    try {
        const Registry &r = registry();
        for (int i = 0; i < r.count; ++i) {
            const fb_kernel_key &k = r.entries[i]->key;
            if (k.dtype == key->dtype && k.arch == key->arch && k.head_dim == key->head_dim)
                return i;
        }
        return -1;
    } catch (...) {
        return -1;
    }
}

extern "C" int fb_kernel_prepare(int kernel_index, int smem_bytes)
{
    try {
        const Registry &r = registry();
        if (kernel_index < 0 || kernel_index >= r.count) return (int)cudaErrorInvalidValue;
        const fb::KernelEntry &e = *r.entries[kernel_index];
        /* The variant must have real code for this device: an sm_90 row is an empty stub in
         * code built for older GPUs (bwd_config.cuh, arch_compiled). */
        cudaFuncAttributes attr;
        cudaError_t err = cudaFuncGetAttributes(&attr, e.main_fn[0]);
        if (err != cudaSuccess) return (int)err;
        const int needed = e.key.arch == 90 ? 90 : 80;
        if (attr.ptxVersion < needed) return (int)cudaErrorNoKernelImageForDevice;
        for (const void *fn : e.main_fn) /* the plan picks one at execute; raise both */
            if ((err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            smem_bytes)) != cudaSuccess)
                return (int)err;
        return (int)cudaSuccess;
    } catch (...) {
        return (int)cudaErrorUnknown;
    }
}

extern "C" int fb_launch_backward(const fb_bwd_params *params, const fb_launch_table *table,
                                  void *stream)
{
    try {
        const Registry &r = registry();
        if (table->kernel_index < 0 || table->kernel_index >= r.count)
            return (int)cudaErrorInvalidValue;
        return (int)r.entries[table->kernel_index]->launch(*params, *table,
                                                           static_cast<cudaStream_t>(stream));
    } catch (...) {
        return (int)cudaErrorUnknown;
    }
}
