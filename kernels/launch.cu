/* launch.cu — the only extern "C" surface of the kernels: find a compiled variant, prepare
 * it on a device, and enqueue a backward pass, directly or as one CUDA graph the plan keeps.
 * Every entry returns a cudaError_t value and lets no C++ exception escape.
 */
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>

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
        for (const void *fn : e.main_fn) /* the plan picks one at execute; raise all */
            if (fn && (err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
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

/* ------------------------------------------------------------------------------------------
 * The launches as one CUDA graph. A chain of kernel nodes in table order; the parameter
 * block is set on every node whenever it changes (new tensors or workspace), so a caller
 * who keeps the same bindings pays one cudaGraphLaunch per execute.
 * ---------------------------------------------------------------------------------------- */

struct fb_launch_graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaGraphNode_t nodes[FLASHBWD_LAUNCH_CONVERT_DKV + 1] = {};
    cudaKernelNodeParams node_params[FLASHBWD_LAUNCH_CONVERT_DKV + 1] = {};
    int node_count = 0;
    /* A split_full plan's main node runs the full-tile instance, or the plain one while
     * ALiBi slopes are bound (fb_graph_launch sets the function with the parameters). */
    int main_node = -1;
    const void *main_full = nullptr, *main_plain = nullptr;
    bool params_set = false;  /* params below are what the nodes hold */
    fb_bwd_params params = {};
    int device = -1;
    fb_launch_graph *next_released = nullptr;
};

namespace {

std::mutex released_lock;
fb_launch_graph *released = nullptr; /* queued by fb_graph_release, any device */

void destroy_graph(fb_launch_graph *g)
{
    /* Destruction errors have no caller to go to; the handles are gone either way. An
     * executable graph still in flight is freed when it completes (cuGraphExecDestroy). */
    if (g->exec) (void)cudaGraphExecDestroy(g->exec);
    if (g->graph) (void)cudaGraphDestroy(g->graph);
    delete g;
}

} // namespace

extern "C" void fb_graph_reap(int device)
{
    fb_launch_graph *mine = nullptr;
    try {
        std::lock_guard<std::mutex> hold(released_lock);
        fb_launch_graph **link = &released;
        while (*link) {
            fb_launch_graph *g = *link;
            if (g->device == device) {
                *link = g->next_released;
                g->next_released = mine;
                mine = g;
            } else {
                link = &g->next_released;
            }
        }
    } catch (...) {
        return; /* the lock failed: try again at the next creation */
    }
    while (mine) {
        fb_launch_graph *next = mine->next_released;
        destroy_graph(mine);
        mine = next;
    }
}

extern "C" int fb_graph_create(const fb_launch_table *table, int device, fb_launch_graph **out,
                               const char **failed_call)
{
    *out = nullptr;
    *failed_call = "";
    try {
        fb_graph_reap(device);
        const Registry &r = registry();
        if (table->kernel_index < 0 || table->kernel_index >= r.count) {
            *failed_call = "finding the plan's kernels";
            return (int)cudaErrorInvalidValue;
        }
        const fb::KernelEntry &e = *r.entries[table->kernel_index];
        auto *g = new fb_launch_graph;
        g->device = device;
        cudaError_t err = cudaGraphCreate(&g->graph, 0);
        if (err != cudaSuccess) {
            *failed_call = "cudaGraphCreate";
            g->graph = nullptr;
            destroy_graph(g);
            return (int)err;
        }
        /* Until the first launch sets them, the nodes hold a zero parameter block. */
        void *args[] = {&g->params};
        int main_index = -1;
        for (int slot = 0; slot < table->num_launches; ++slot) {
            const fb_launch_dims &l = table->launch[slot];
            if (l.grid[0] == 0) continue; /* convert dQ when folded */
            cudaKernelNodeParams &k = g->node_params[g->node_count];
            k.func = const_cast<void *>(slot == FLASHBWD_LAUNCH_MAIN
                                            ? e.main_fn[table->split ? 2 + table->split_grouped
                                                           : table->dq_in_main]
                                            : e.slot_fn[slot]);
            if (slot == FLASHBWD_LAUNCH_MAIN && table->split_full) {
                if (!e.main_fn[4]) {
                    *failed_call = "finding the plan's kernels";
                    destroy_graph(g);
                    return (int)cudaErrorInvalidValue;
                }
                g->main_node = g->node_count;
                g->main_plain = k.func;
                g->main_full = e.main_fn[4];
                k.func = const_cast<void *>(g->main_full); /* no slopes until a launch binds them */
            }
            k.gridDim = dim3(l.grid[0], l.grid[1], l.grid[2]);
            k.blockDim = dim3(l.block[0], l.block[1], l.block[2]);
            k.sharedMemBytes = (unsigned)l.smem_bytes;
            k.kernelParams = args;
            k.extra = nullptr;
            /* A chain, but for the overlapped convert pass (table->dq_overlap): its edge from
             * the main node is programmatic (it may start once every main CTA has run
             * launch_dependents), and the node after it also waits for the main node. */
            const bool overlap = table->dq_overlap && main_index >= 0;
            cudaGraphNode_t deps[2];
            size_t n_deps = 0;
            if (g->node_count && !(overlap && slot == FLASHBWD_LAUNCH_CONVERT_DQ))
                deps[n_deps++] = g->nodes[g->node_count - 1];
            if (overlap && slot == FLASHBWD_LAUNCH_CONVERT_DKV) deps[n_deps++] = g->nodes[main_index];
            cudaGraphNode_t &node = g->nodes[g->node_count];
            err = cudaGraphAddKernelNode(&node, g->graph, deps, n_deps, &k);
            if (err != cudaSuccess) {
                *failed_call = "cudaGraphAddKernelNode";
                destroy_graph(g);
                return (int)err;
            }
            if (overlap && slot == FLASHBWD_LAUNCH_CONVERT_DQ) {
                cudaGraphEdgeData edge = {};
                edge.from_port = cudaGraphKernelNodePortProgrammatic;
                edge.type = cudaGraphDependencyTypeProgrammatic;
                err = cudaGraphAddDependencies(g->graph, &g->nodes[main_index], &node, &edge, 1);
                if (err != cudaSuccess) {
                    *failed_call = "cudaGraphAddDependencies (programmatic)";
                    destroy_graph(g);
                    return (int)err;
                }
            }
            if (slot == FLASHBWD_LAUNCH_MAIN) main_index = g->node_count;
            ++g->node_count;
        }
        err = cudaGraphInstantiate(&g->exec, g->graph, 0);
        if (err != cudaSuccess) {
            *failed_call = "cudaGraphInstantiate";
            g->exec = nullptr;
            destroy_graph(g);
            return (int)err;
        }
        *out = g;
        return (int)cudaSuccess;
    } catch (...) {
        *failed_call = "allocating the graph record (out of host memory)";
        return (int)cudaErrorMemoryAllocation;
    }
}

extern "C" int fb_graph_launch(fb_launch_graph *g, const fb_bwd_params *params, void *stream,
                               const char **failed_call)
{
    *failed_call = "";
    if (!g->params_set || memcmp(&g->params, params, sizeof *params) != 0) {
        g->params_set = false; /* until every node holds the new block */
        fb_bwd_params copy = *params;
        void *args[] = {&copy};
        if (g->main_full)
            g->node_params[g->main_node].func =
                const_cast<void *>(params->alibi_slopes ? g->main_plain : g->main_full);
        for (int i = 0; i < g->node_count; ++i) {
            g->node_params[i].kernelParams = args;
            const cudaError_t err =
                cudaGraphExecKernelNodeSetParams(g->exec, g->nodes[i], &g->node_params[i]);
            g->node_params[i].kernelParams = nullptr;
            if (err != cudaSuccess) {
                *failed_call = "cudaGraphExecKernelNodeSetParams";
                return (int)err;
            }
        }
        memcpy(&g->params, params, sizeof *params); /* padding too: memcmp reads it */
        g->params_set = true;
    }
    const cudaError_t err = cudaGraphLaunch(g->exec, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) *failed_call = "cudaGraphLaunch";
    return (int)err;
}

extern "C" void fb_graph_release(fb_launch_graph *g)
{
    if (!g) return;
    try {
        std::lock_guard<std::mutex> hold(released_lock);
        g->next_released = released;
        released = g;
    } catch (...) {
        /* the lock failed: leave the graph to the process's end rather than touch CUDA */
    }
}
