/* test_faults.c — every CUDA runtime call of the host code, failing in turn, and a fake
 * device behind them for the paths a GPU-less machine cannot reach.
 *
 * The suite links the library's objects with -Wl,--wrap for each call (tests/CMakeLists.txt
 * lists them: grep src/ and kernels/ for cuda* calls when adding one), so the __wrap_ functions
 * below replace the runtime inside flashbwd. They describe a machine of FAKE_DEVICES
 * devices, each an H200 unless a test says otherwise (sm_90, 132 SMs, 232448 bytes of
 * opt-in shared memory), with a per-thread current device, and fail the nth call of one kind
 * with a chosen cudaError_t. A failure must give NO_DEVICE (codes 34, 35, 100) or CUDA, a
 * message naming the call and cudaGetErrorName() of the code, *out NULL, the caller's device
 * restored, and no leak (CI runs this suite under valgrind).
 *
 * The device cache lives for the whole process, so tests use device ordinals with a known
 * history: see the ORD_* names.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cuda.h> /* the tensor-map encoder's types */
#include <cuda_runtime_api.h>

#include "config_table.h"
#include "internal.h"

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ======================================================================================
 * The fake runtime
 * ====================================================================================== */

enum call {
    C_GET_DEVICE_COUNT,
    C_DEVICE_GET_ATTRIBUTE,
    C_GET_DEVICE,
    C_SET_DEVICE,
    C_FUNC_GET_ATTRIBUTES,
    C_FUNC_SET_ATTRIBUTE,
    C_GET_LAST_ERROR,
    C_STREAM_IS_CAPTURING,
    C_GRAPH_CREATE,
    C_GRAPH_ADD_KERNEL_NODE,
    C_GRAPH_ADD_DEPENDENCIES,
    C_GRAPH_INSTANTIATE,
    C_GRAPH_SET_PARAMS,
    C_GRAPH_LAUNCH,
    C_GRAPH_EXEC_DESTROY,
    C_GRAPH_DESTROY,
    C_GET_DRIVER_ENTRY_POINT,
    C_MALLOC,
    C_FREE,
    C_DEVICE_SYNCHRONIZE,
    C_COUNT
};

#define FAKE_DEVICES 24

typedef struct fake_device {
    int major, minor, sms, smem;
    int compression; /* the driver's CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED */
} fake_device;

static const fake_device h200 = {9, 0, 132, 232448, 1};

static struct {
    int count;                      /* what cudaGetDeviceCount reports */
    fake_device dev[FAKE_DEVICES];
    int ptx_version;                /* cudaFuncAttributes.ptxVersion of every kernel */
    int fail_call, fail_nth;        /* fail the fail_nth call (1-based) of kind fail_call */
    cudaError_t fail_err;
} fake;

static atomic_int calls[C_COUNT];              /* calls per kind since fake_reset() */
static atomic_int live_graphs, live_execs;     /* fake graph objects not yet destroyed */
static enum cudaStreamCaptureStatus capture_status; /* what cudaStreamIsCapturing reports */
static fb_bwd_params last_set_params;          /* the last parameter block set on a node */
static atomic_int smem_raised_to;              /* last cudaFuncSetAttribute value */
static _Thread_local int current_device;       /* the runtime's per-thread current device */

static void fake_reset(void)
{
    fake.count = FAKE_DEVICES;
    for (int i = 0; i < FAKE_DEVICES; ++i) fake.dev[i] = h200;
    fake.ptx_version = 90;
    fake.fail_call = -1;
    fake.fail_nth = 0;
    fake.fail_err = cudaSuccess;
    for (int c = 0; c < C_COUNT; ++c) atomic_store(&calls[c], 0);
    atomic_store(&smem_raised_to, 0);
    capture_status = cudaStreamCaptureStatusNone;
    current_device = 0;
}

/* Start counting calls afresh (after a test's own setup calls). */
static void fake_zero_counts(void)
{
    for (int c = 0; c < C_COUNT; ++c) atomic_store(&calls[c], 0);
}

static void fake_fail(int call, int nth, cudaError_t err)
{
    fake.fail_call = call;
    fake.fail_nth = nth;
    fake.fail_err = err;
}

/* Count a call; the error it must return, or cudaSuccess. */
static cudaError_t fake_enter(int call)
{
    const int n = atomic_fetch_add(&calls[call], 1) + 1;
    return call == fake.fail_call && n == fake.fail_nth ? fake.fail_err : cudaSuccess;
}

static int fake_calls(int call) { return atomic_load(&calls[call]); }

static int total_calls(void)
{
    int n = 0;
    for (int c = 0; c < C_COUNT; ++c) n += fake_calls(c);
    return n;
}

cudaError_t __wrap_cudaGetDeviceCount(int *count);
cudaError_t __wrap_cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t __wrap_cudaGetDevice(int *device);
cudaError_t __wrap_cudaSetDevice(int device);
cudaError_t __wrap_cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func);
cudaError_t __wrap_cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value);
cudaError_t __wrap_cudaGetLastError(void);
cudaError_t __wrap_cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status);
cudaError_t __wrap_cudaGraphCreate(cudaGraph_t *graph, unsigned int flags);
cudaError_t __wrap_cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                          const cudaGraphNode_t *deps, size_t ndeps,
                                          const struct cudaKernelNodeParams *params);
cudaError_t __wrap_cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                            const cudaGraphNode_t *to,
                                            const cudaGraphEdgeData *edge, size_t count);
cudaError_t __wrap_cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                        unsigned long long flags);
cudaError_t __wrap_cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaKernelNodeParams *params);
cudaError_t __wrap_cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t __wrap_cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t __wrap_cudaGraphDestroy(cudaGraph_t graph);

cudaError_t __wrap_cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                                     unsigned int version,
                                                     unsigned long long flags,
                                                     enum cudaDriverEntryPointQueryResult *found);
cudaError_t __wrap_cudaMalloc(void **ptr, size_t bytes);
cudaError_t __wrap_cudaFree(void *ptr);
cudaError_t __wrap_cudaDeviceSynchronize(void);

/* The driver's cuTensorMapEncodeTiled, as the entry-point query hands it out: records its
 * arguments and writes the tensor's base address into the map's first word, so a test can
 * tell whose map a parameter block carries; fails while encode_fails is set. */
static atomic_int encodes, encode_fails;
static struct {
    void *base;
    cuuint64_t dims[4], strides[3];
    cuuint32_t box[4];
    CUtensorMapSwizzle swizzle;
    CUtensorMapDataType dtype;
} last_encode;

static CUresult fake_encode_tiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
                                  void *base, const cuuint64_t *dims, const cuuint64_t *strides,
                                  const cuuint32_t *box, const cuuint32_t *elem_strides,
                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                  CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    (void)elem_strides, (void)interleave, (void)l2, (void)oob;
    atomic_fetch_add(&encodes, 1);
    if (atomic_load(&encode_fails) || rank != 4) return CUDA_ERROR_INVALID_VALUE;
    last_encode.base = base, last_encode.swizzle = swizzle, last_encode.dtype = dtype;
    memcpy(last_encode.dims, dims, sizeof last_encode.dims);
    memcpy(last_encode.strides, strides, sizeof last_encode.strides);
    memcpy(last_encode.box, box, sizeof last_encode.box);
    memset(map, 0, sizeof *map);
    memcpy(map, &base, sizeof base);
    return CUDA_SUCCESS;
}

/* The driver's virtual-memory calls behind flashbwd_workspace_alloc: a handle is a
 * counter with bit 40 set when compression was granted; addresses are made up (nothing
 * dereferences them); every object is counted live until released. vmm_fail names one
 * call that returns CUDA_ERROR_OUT_OF_MEMORY; vmm_decline makes cuMemCreate grant no
 * compression; vmm_missing hides cuMemCreate from the entry-point query (an old driver). */
static atomic_int live_mallocs, live_handles, live_reserved, live_mapped;
static const char *vmm_fail;
static int vmm_decline, vmm_missing;
static atomic_int vmm_calls;
#define FAKE_GRANULARITY ((size_t)2 << 20)
#define FAKE_HANDLE_COMPRESSED ((CUmemGenericAllocationHandle)1 << 40)

static int vmm_enter(const char *name)
{
    atomic_fetch_add(&vmm_calls, 1);
    return vmm_fail && strcmp(vmm_fail, name) == 0;
}

static CUresult fake_device_get(CUdevice *dev, int ordinal)
{
    if (vmm_enter("cuDeviceGet")) return CUDA_ERROR_OUT_OF_MEMORY;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

static CUresult fake_device_attribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    if (vmm_enter("cuDeviceGetAttribute")) return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev < 0 || dev >= FAKE_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    if (attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) *value = 1;
    else if (attr == CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED)
        *value = fake.dev[dev].compression;
    else return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult fake_granularity(size_t *gran, const CUmemAllocationProp *prop,
                                 CUmemAllocationGranularity_flags flags)
{
    (void)prop, (void)flags;
    if (vmm_enter("cuMemGetAllocationGranularity")) return CUDA_ERROR_OUT_OF_MEMORY;
    *gran = FAKE_GRANULARITY;
    return CUDA_SUCCESS;
}

static CUresult fake_mem_create(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    static atomic_ullong next = 1;
    if (vmm_enter("cuMemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
    if (flags || size == 0 || size % FAKE_GRANULARITY ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    *handle = atomic_fetch_add(&next, 1);
    if (prop->allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC && !vmm_decline)
        *handle |= FAKE_HANDLE_COMPRESSED;
    atomic_fetch_add(&live_handles, 1);
    return CUDA_SUCCESS;
}

static CUresult fake_mem_properties(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
    if (vmm_enter("cuMemGetAllocationPropertiesFromHandle")) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->allocFlags.compressionType =
        h & FAKE_HANDLE_COMPRESSED ? CU_MEM_ALLOCATION_COMP_GENERIC : CU_MEM_ALLOCATION_COMP_NONE;
    return CUDA_SUCCESS;
}

static CUresult fake_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags)
{
    static atomic_ullong next = 1;
    (void)align, (void)addr, (void)flags;
    if (vmm_enter("cuMemAddressReserve")) return CUDA_ERROR_OUT_OF_MEMORY;
    if (size % FAKE_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    *ptr = (CUdeviceptr)0x700000000000ull + atomic_fetch_add(&next, 1) * ((CUdeviceptr)1 << 34);
    atomic_fetch_add(&live_reserved, 1);
    return CUDA_SUCCESS;
}

static CUresult fake_map(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle h, unsigned long long flags)
{
    (void)ptr, (void)size, (void)offset, (void)h, (void)flags;
    if (vmm_enter("cuMemMap")) return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&live_mapped, 1);
    return CUDA_SUCCESS;
}

static CUresult fake_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    (void)ptr, (void)size;
    if (vmm_enter("cuMemSetAccess")) return CUDA_ERROR_OUT_OF_MEMORY;
    return count == 1 && desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
               ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The three releases fail when told to but release anyway, so nothing leaks. */
static CUresult fake_unmap(CUdeviceptr ptr, size_t size)
{
    (void)ptr, (void)size;
    atomic_fetch_sub(&live_mapped, 1);
    return vmm_enter("cuMemUnmap") ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static CUresult fake_address_free(CUdeviceptr ptr, size_t size)
{
    (void)ptr, (void)size;
    atomic_fetch_sub(&live_reserved, 1);
    return vmm_enter("cuMemAddressFree") ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static CUresult fake_release(CUmemGenericAllocationHandle h)
{
    (void)h;
    atomic_fetch_sub(&live_handles, 1);
    return vmm_enter("cuMemRelease") ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static void *fake_vmm_symbol(const char *symbol)
{
    static const struct {
        const char *name;
        void *fn;
    } table[] = {
        {"cuDeviceGet", (void *)fake_device_get},
        {"cuDeviceGetAttribute", (void *)fake_device_attribute},
        {"cuMemGetAllocationGranularity", (void *)fake_granularity},
        {"cuMemCreate", (void *)fake_mem_create},
        {"cuMemGetAllocationPropertiesFromHandle", (void *)fake_mem_properties},
        {"cuMemAddressReserve", (void *)fake_reserve},
        {"cuMemMap", (void *)fake_map},
        {"cuMemSetAccess", (void *)fake_set_access},
        {"cuMemUnmap", (void *)fake_unmap},
        {"cuMemAddressFree", (void *)fake_address_free},
        {"cuMemRelease", (void *)fake_release},
    };
    if (vmm_missing && strcmp(symbol, "cuMemCreate") == 0) return NULL;
    for (size_t i = 0; i < COUNT_OF(table); ++i)
        if (strcmp(symbol, table[i].name) == 0) return table[i].fn;
    return NULL;
}

cudaError_t __wrap_cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                                     unsigned int version,
                                                     unsigned long long flags,
                                                     enum cudaDriverEntryPointQueryResult *found)
{
    (void)version, (void)flags;
    const cudaError_t err = fake_enter(C_GET_DRIVER_ENTRY_POINT);
    if (err != cudaSuccess) return err;
    void *f = strcmp(symbol, "cuTensorMapEncodeTiled") == 0 ? (void *)fake_encode_tiled
                                                              : fake_vmm_symbol(symbol);
    *fn = f;
    if (found) *found = f ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

cudaError_t __wrap_cudaMalloc(void **ptr, size_t bytes)
{
    const cudaError_t err = fake_enter(C_MALLOC);
    if (err != cudaSuccess) return err;
    (void)bytes;
    *ptr = aligned_alloc(256, 256); /* a stand-in address; nothing dereferences it */
    if (!*ptr) return cudaErrorMemoryAllocation;
    atomic_fetch_add(&live_mallocs, 1);
    return cudaSuccess;
}

/* Fails when told to, but frees anyway (as the driver would), so valgrind sees no leak. */
cudaError_t __wrap_cudaFree(void *ptr)
{
    const cudaError_t err = fake_enter(C_FREE);
    if (ptr) {
        free(ptr);
        atomic_fetch_sub(&live_mallocs, 1);
    }
    return err;
}

cudaError_t __wrap_cudaDeviceSynchronize(void) { return fake_enter(C_DEVICE_SYNCHRONIZE); }

cudaError_t __wrap_cudaGetDeviceCount(int *count)
{
    const cudaError_t err = fake_enter(C_GET_DEVICE_COUNT);
    if (err != cudaSuccess) return err; /* like the real one: *count untouched */
    *count = fake.count;
    return cudaSuccess;
}

cudaError_t __wrap_cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    const cudaError_t err = fake_enter(C_DEVICE_GET_ATTRIBUTE);
    if (err != cudaSuccess) return err;
    if (device < 0 || device >= fake.count || device >= FAKE_DEVICES) return cudaErrorInvalidDevice;
    const fake_device *d = &fake.dev[device];
    switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = d->major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = d->minor; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = d->sms; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = d->smem; return cudaSuccess;
    default: return cudaErrorInvalidValue; /* an attribute this fake does not know */
    }
}

cudaError_t __wrap_cudaGetDevice(int *device)
{
    const cudaError_t err = fake_enter(C_GET_DEVICE);
    if (err != cudaSuccess) return err;
    *device = current_device;
    return cudaSuccess;
}

cudaError_t __wrap_cudaSetDevice(int device)
{
    const cudaError_t err = fake_enter(C_SET_DEVICE);
    if (err != cudaSuccess) return err;
    if (device < 0 || device >= fake.count) return cudaErrorInvalidDevice;
    current_device = device;
    return cudaSuccess;
}

cudaError_t __wrap_cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    const cudaError_t err = fake_enter(C_FUNC_GET_ATTRIBUTES);
    if (err != cudaSuccess) return err;
    if (!func) return cudaErrorInvalidDeviceFunction;
    memset(attr, 0, sizeof *attr);
    attr->ptxVersion = attr->binaryVersion = fake.ptx_version;
    attr->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

cudaError_t __wrap_cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    const cudaError_t err = fake_enter(C_FUNC_SET_ATTRIBUTE);
    if (err != cudaSuccess) return err;
    if (!func || attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    atomic_store(&smem_raised_to, value);
    return cudaSuccess;
}

/* The kernel launchers check each launch with cudaGetLastError; this is where a launch
 * fails. (The launches themselves reach the real runtime, which has no driver here and
 * leaves no state behind that this fake reports.) */
cudaError_t __wrap_cudaGetLastError(void) { return fake_enter(C_GET_LAST_ERROR); }

/* The launch graph. Graphs and executable graphs are heap tokens, so valgrind sees any the
 * library never destroys; nodes are indices into their graph. */
typedef struct fake_graph {
    int nodes;
    int unlinked; /* a node added without dependencies after the first, until its
                     programmatic edge is added (0: none) */
} fake_graph;

cudaError_t __wrap_cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    (void)stream;
    const cudaError_t err = fake_enter(C_STREAM_IS_CAPTURING);
    if (err != cudaSuccess) return err;
    *status = capture_status;
    return cudaSuccess;
}

cudaError_t __wrap_cudaGraphCreate(cudaGraph_t *graph, unsigned int flags)
{
    (void)flags;
    const cudaError_t err = fake_enter(C_GRAPH_CREATE);
    if (err != cudaSuccess) return err;
    fake_graph *g = calloc(1, sizeof *g);
    if (!g) return cudaErrorMemoryAllocation;
    atomic_fetch_add(&live_graphs, 1);
    *graph = (cudaGraph_t)g;
    return cudaSuccess;
}

cudaError_t __wrap_cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                          const cudaGraphNode_t *deps, size_t ndeps,
                                          const struct cudaKernelNodeParams *params)
{
    const cudaError_t err = fake_enter(C_GRAPH_ADD_KERNEL_NODE);
    if (err != cudaSuccess) return err;
    fake_graph *g = (fake_graph *)graph;
    /* A chain: each node after the first depends on the one before (its first dependency),
     * and may depend on one earlier node too; or, the overlapped convert pass, on none
     * until cudaGraphAddDependencies gives it a programmatic edge. */
    if (!params || !params->func || !params->kernelParams || g->unlinked || ndeps > 2 ||
        (g->nodes == 0 && ndeps != 0))
        return cudaErrorInvalidValue;
    if (ndeps && deps[0] != (cudaGraphNode_t)(uintptr_t)g->nodes) return cudaErrorInvalidValue;
    if (ndeps == 2 && ((uintptr_t)deps[1] < 1 || (uintptr_t)deps[1] >= (uintptr_t)g->nodes))
        return cudaErrorInvalidValue;
    *node = (cudaGraphNode_t)(uintptr_t)++g->nodes;
    if (g->nodes > 1 && ndeps == 0) g->unlinked = g->nodes;
    return cudaSuccess;
}

cudaError_t __wrap_cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                            const cudaGraphNode_t *to,
                                            const cudaGraphEdgeData *edge, size_t count)
{
    const cudaError_t err = fake_enter(C_GRAPH_ADD_DEPENDENCIES);
    if (err != cudaSuccess) return err;
    fake_graph *g = (fake_graph *)graph;
    /* Only the programmatic edge into the node just added, from an earlier one. */
    if (count != 1 || !edge || !g->unlinked || (uintptr_t)to[0] != (uintptr_t)g->unlinked ||
        (uintptr_t)from[0] < 1 || (uintptr_t)from[0] >= (uintptr_t)g->unlinked ||
        edge->type != cudaGraphDependencyTypeProgrammatic ||
        edge->from_port != cudaGraphKernelNodePortProgrammatic)
        return cudaErrorInvalidValue;
    g->unlinked = 0;
    return cudaSuccess;
}

cudaError_t __wrap_cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                        unsigned long long flags)
{
    (void)flags;
    const cudaError_t err = fake_enter(C_GRAPH_INSTANTIATE);
    if (err != cudaSuccess) return err;
    if (((fake_graph *)graph)->unlinked) return cudaErrorInvalidValue; /* a node with no edge in */
    fake_graph *e = malloc(sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    e->nodes = ((fake_graph *)graph)->nodes;
    atomic_fetch_add(&live_execs, 1);
    *exec = (cudaGraphExec_t)e;
    return cudaSuccess;
}

cudaError_t __wrap_cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaKernelNodeParams *params)
{
    const cudaError_t err = fake_enter(C_GRAPH_SET_PARAMS);
    if (err != cudaSuccess) return err;
    const uintptr_t i = (uintptr_t)node;
    if (i < 1 || i > (uintptr_t)((fake_graph *)exec)->nodes || !params->kernelParams)
        return cudaErrorInvalidValue;
    memcpy(&last_set_params, params->kernelParams[0], sizeof last_set_params);
    return cudaSuccess;
}

cudaError_t __wrap_cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    (void)exec, (void)stream;
    return fake_enter(C_GRAPH_LAUNCH);
}

cudaError_t __wrap_cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    fake_enter(C_GRAPH_EXEC_DESTROY); /* never fails here: the library ignores its result */
    free(exec);
    atomic_fetch_sub(&live_execs, 1);
    return cudaSuccess;
}

cudaError_t __wrap_cudaGraphDestroy(cudaGraph_t graph)
{
    fake_enter(C_GRAPH_DESTROY);
    free(graph);
    atomic_fetch_sub(&live_graphs, 1);
    return cudaSuccess;
}

/* ======================================================================================
 * Helpers
 * ====================================================================================== */

/* Device ordinals by history (the cache is per process and per ordinal). */
enum {
    ORD_HAPPY = 0,      /* queried and prepared by the happy-path tests; the current device */
    ORD_SM86 = 1,
    ORD_SM75 = 2,
    ORD_THREADS = 3,    /* first touched by the cache test, from many threads */
    ORD_RETRY = 4,
    ORD_GRAPH = 5,      /* prepared; not current, so each create switches to it for the graph */
    ORD_PREPARE = 6,    /* query succeeds; kernel preparation never does */
    ORD_QUERY = 7,      /* never queried successfully */
    ORD_FRESH = 8,      /* 8 .. FAKE_DEVICES-1: one each, handed out by fresh_ordinal() */
};

static int fresh_ordinal(void)
{
    static int next = ORD_FRESH;
    if (next >= FAKE_DEVICES) fail_msg("out of fresh device ordinals; raise FAKE_DEVICES");
    return next++;
}

static int32_t head_dim; /* a head dim this build has a kernel for (main() picks it) */

static flashbwd_problem device_problem(int32_t device)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CUDA;
    p.device = device;
    p.head_dim = head_dim;
    /* 2000 keys: past every sm_90 row's FMIN, so a main-kernel plan folds the dQ conversion
     * in (two launches without GQA); a split-kernel plan has its convert pass (three). The
     * graph tests count launches from the plan's info. */
    p.batch = 2, p.heads_q = 4, p.heads_kv = 4, p.seqlen_q = 100, p.seqlen_k = 2000;
    return p;
}

/* The main-kernel variants plan creation raises the shared-memory limit of: the main
 * kernel without and with the dQ conversion, and the split kernel where the sm_90 row of
 * the head dim has one (config table SST). */
static int main_kernel_variants(void)
{
    fb_config c;
    assert_int_equal(fb_config_select(NULL, 90, head_dim, FB_SMEM_LIMIT_SM90, &c), FLASHBWD_OK);
    /* bwd_main with and without the dQ conversion; the split kernel's plain, head-group and
     * full-tile instances where the row has them (FB_SPLIT_PLAIN, FB_SPLIT_GROUPED,
     * FB_SPLIT_FULL) */
    const int hd = c.kernel_head_dim;
    return 2 + (c.split_stages > 0 ? FB_SPLIT_PLAIN(hd) + FB_SPLIT_GROUPED(hd) +
                                         (FB_SPLIT_PLAIN(hd) && FB_SPLIT_FULL(hd))
                                   : 0);
}

/* Launches with a grid in a plan's table (the kernel nodes of its graph). */
static int launched(const flashbwd_plan_info *info)
{
    int n = 0;
    for (int l = 0; l < info->num_launches; ++l) n += info->grid[l][0] > 0;
    return n;
}

static flashbwd_plan_info info_of(const flashbwd_plan *plan)
{
    flashbwd_plan_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
    assert_int_equal(flashbwd_plan_get_info(plan, &info), FLASHBWD_OK);
    return info;
}

static int setup(void **state)
{
    (void)state;
    fake_reset();
    return 0;
}

static void expect_contains(const char *msg, const char *want, const char *row)
{
    if (!strstr(msg, want))
        fail_msg("[%s] message \"%s\" does not contain \"%s\"", row, msg, want);
}

/* A plan on ORD_HAPPY with every tensor and the workspace bound to host memory the fake
 * launches never touch. */
typedef struct bound_plan {
    flashbwd_plan *plan;
    void *mem;
} bound_plan;

static bound_plan bound_plan_make(int32_t heads_kv)
{
    flashbwd_problem p = device_problem(ORD_HAPPY);
    p.heads_kv = heads_kv;
    bound_plan b = {NULL, NULL};
    const int32_t st = flashbwd_plan_create(&p, &b.plan);
    if (st != FLASHBWD_OK) fail_msg("create: %s", flashbwd_last_error());
    size_t ws = 0;
    assert_int_equal(flashbwd_plan_workspace_size(b.plan, &ws), FLASHBWD_OK);
    const size_t slot = (size_t)4 << 20; /* K and V of 2000 keys: 4 MB each */
    b.mem = aligned_alloc(256, slot * 11 + ws);
    assert_non_null(b.mem);
    for (int32_t id = FLASHBWD_TENSOR_Q; id <= FLASHBWD_TENSOR_DV; ++id)
        assert_int_equal(flashbwd_plan_set_tensor(b.plan, id, (char *)b.mem + slot * id, NULL, 0),
                         FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_workspace(b.plan, (char *)b.mem + slot * 10, ws),
                     FLASHBWD_OK);
    return b;
}

static void bound_plan_free(bound_plan *b)
{
    flashbwd_plan_destroy(b->plan);
    free(b->mem);
}

/* The same, launching its kernels one by one (FLASHBWD_LAUNCH_GRAPH=0 at creation). */
static bound_plan bound_plan_make_direct(int32_t heads_kv)
{
    assert_int_equal(setenv("FLASHBWD_LAUNCH_GRAPH", "0", 1), 0);
    bound_plan b = bound_plan_make(heads_kv);
    unsetenv("FLASHBWD_LAUNCH_GRAPH");
    return b;
}

/* Destroy every queued graph, then no fake graph may be left alive. */
static void reap_and_expect_no_live_graphs(const char *row)
{
    for (int d = 0; d < FAKE_DEVICES; ++d) fb_graph_reap(d);
    if (atomic_load(&live_graphs) || atomic_load(&live_execs))
        fail_msg("[%s] %d graph(s), %d executable graph(s) never destroyed", row,
                 atomic_load(&live_graphs), atomic_load(&live_execs));
}

/* ======================================================================================
 * Each call fails in turn
 * ====================================================================================== */

typedef struct site {
    const char *name;
    int call, nth;
    int32_t device;     /* ordinal planned for; -1: a fresh one */
    int at_execute;     /* the call is made by flashbwd_execute, not plan creation */
    const char *names;  /* the message must contain this */
} site;

static const site sites[] = {
    {"cudaGetDeviceCount", C_GET_DEVICE_COUNT, 1, ORD_QUERY, 0, "cudaGetDeviceCount failed"},
    {"cudaDeviceGetAttribute #1 (major)", C_DEVICE_GET_ATTRIBUTE, 1, ORD_QUERY, 0, "cudaDeviceGetAttribute failed"},
    {"cudaDeviceGetAttribute #2 (minor)", C_DEVICE_GET_ATTRIBUTE, 2, ORD_QUERY, 0, "cudaDeviceGetAttribute failed"},
    {"cudaDeviceGetAttribute #3 (SMs)", C_DEVICE_GET_ATTRIBUTE, 3, ORD_QUERY, 0, "cudaDeviceGetAttribute failed"},
    {"cudaDeviceGetAttribute #4 (opt-in smem)", C_DEVICE_GET_ATTRIBUTE, 4, ORD_QUERY, 0, "cudaDeviceGetAttribute failed"},
    {"cudaGetDevice before preparing the kernel", C_GET_DEVICE, 1, ORD_PREPARE, 0, "cudaGetDevice failed"},
    {"cudaSetDevice to the plan's device", C_SET_DEVICE, 1, ORD_PREPARE, 0, "cudaSetDevice failed"},
    {"cudaFuncGetAttributes", C_FUNC_GET_ATTRIBUTES, 1, ORD_PREPARE, 0, "cudaFuncGetAttributes"},
    {"cudaFuncSetAttribute", C_FUNC_SET_ATTRIBUTE, 1, ORD_PREPARE, 0, "cudaFuncSetAttribute"},
    {"cudaSetDevice restoring the caller's device", C_SET_DEVICE, 2, -1, 0, "restoring the caller's"},
    {"cudaGetDevice at execute", C_GET_DEVICE, 1, ORD_HAPPY, 1, "cudaGetDevice failed"},
    /* The launch graph: built at plan creation (after preparing the kernel: on a fresh
     * ORD_GRAPH, whose kernels are already prepared, the first cudaGetDevice and both
     * cudaSetDevice), replayed by execute. The plan has two or three launches (the main
     * kernel with the dQ conversion folded in, or the split kernel and the convert pass). */
    {"cudaGetDevice before building the graph", C_GET_DEVICE, 1, ORD_GRAPH, 0, "cudaGetDevice failed"},
    {"cudaSetDevice before building the graph", C_SET_DEVICE, 1, ORD_GRAPH, 0, "cudaSetDevice failed"},
    {"cudaSetDevice restoring the caller's device after the graph", C_SET_DEVICE, 2, ORD_GRAPH, 0, "restoring the caller's"},
    {"cudaGraphCreate", C_GRAPH_CREATE, 1, ORD_HAPPY, 0, "building the launch graph: cudaGraphCreate"},
    {"cudaGraphAddKernelNode #1", C_GRAPH_ADD_KERNEL_NODE, 1, ORD_HAPPY, 0, "building the launch graph: cudaGraphAddKernelNode"},
    {"cudaGraphAddKernelNode #2", C_GRAPH_ADD_KERNEL_NODE, 2, ORD_HAPPY, 0, "building the launch graph: cudaGraphAddKernelNode"},
    {"cudaGraphAddDependencies (the overlapped convert pass)", C_GRAPH_ADD_DEPENDENCIES, 1, ORD_HAPPY, 0, "building the launch graph: cudaGraphAddDependencies (programmatic)"},
    {"cudaGraphInstantiate", C_GRAPH_INSTANTIATE, 1, ORD_HAPPY, 0, "building the launch graph: cudaGraphInstantiate"},
    {"cudaStreamIsCapturing at execute", C_STREAM_IS_CAPTURING, 1, ORD_HAPPY, 1, "cudaStreamIsCapturing"},
    {"cudaGraphExecKernelNodeSetParams #2 at execute", C_GRAPH_SET_PARAMS, 2, ORD_HAPPY, 1, "cudaGraphExecKernelNodeSetParams"},
    {"cudaGraphLaunch at execute", C_GRAPH_LAUNCH, 1, ORD_HAPPY, 1, "cudaGraphLaunch"},
};

typedef struct code {
    cudaError_t err;
    int32_t expect;
} code;

static const code codes[] = {
    {cudaErrorInsufficientDriver, FLASHBWD_ERR_NO_DEVICE}, /* 35: no driver */
    {cudaErrorNoDevice, FLASHBWD_ERR_NO_DEVICE},           /* 100: driver, no GPU */
    {cudaErrorStubLibrary, FLASHBWD_ERR_NO_DEVICE},        /* 34: the stub libcuda */
    {cudaErrorInvalidValue, FLASHBWD_ERR_CUDA},
    {cudaErrorUnknown, FLASHBWD_ERR_CUDA},
};

typedef struct fault {
    const site *site;
    const code *code;
} fault;

static fault faults[COUNT_OF(sites) * COUNT_OF(codes)];

static void test_cuda_call_failure_gives_a_clean_status_and_names_the_error(void **state)
{
    const fault *f = *state;
    const site *s = f->site;
    const code *c = f->code;
    const char *row = s->name;
    int32_t st;
    const char *msg;
    bound_plan b = {NULL, NULL};
    int out_left_set = 0;
    if (s->call == C_GRAPH_ADD_DEPENDENCIES && !FB_SPLIT_DQ_OVERLAP(head_dim))
        skip(); /* a build without hd128: no plan of this head dim overlaps */
    if (s->at_execute) {
        b = bound_plan_make(4);
        fake_zero_counts();
        fake_fail(s->call, s->nth, c->err);
        st = flashbwd_execute(b.plan, NULL);
        msg = flashbwd_plan_last_error(b.plan);
        if (strcmp(msg, flashbwd_last_error()) != 0)
            fail_msg("[%s] plan message \"%s\" differs from the thread's \"%s\"", row, msg,
                     flashbwd_last_error());
    } else {
        flashbwd_problem p = device_problem(s->device >= 0 ? s->device : fresh_ordinal());
        if (s->device == ORD_GRAPH) { /* its kernels prepared, so only the graph's calls */
            flashbwd_plan *primer = NULL;
            assert_int_equal(flashbwd_plan_create(&p, &primer), FLASHBWD_OK);
            flashbwd_plan_destroy(primer);
            fake_zero_counts();
        }
        fake_fail(s->call, s->nth, c->err);
        flashbwd_plan *plan = (flashbwd_plan *)&p;
        st = flashbwd_plan_create(&p, &plan);
        out_left_set = plan != NULL;
        if (plan && st == FLASHBWD_OK) flashbwd_plan_destroy(plan);
        msg = flashbwd_last_error();
    }
    if (fake_calls(s->call) < s->nth)
        fail_msg("[%s] the call was made %d time(s), never a #%d: the site is not reached",
                 row, fake_calls(s->call), s->nth);
    if (st != c->expect)
        fail_msg("[%s] %s: status %s; expected %s (%s)", row, cudaGetErrorName(c->err),
                 flashbwd_status_name(st), flashbwd_status_name(c->expect), msg);
    if (out_left_set) fail_msg("[%s] a failed create left *out non-NULL", row);
    expect_contains(msg, s->names, row);
    expect_contains(msg, cudaGetErrorName(c->err), row);
    expect_contains(msg, flashbwd_status_name(c->expect), row);
    /* The caller's device is restored, unless restoring it is what failed. */
    if (!strstr(s->names, "restoring"))
        if (current_device != 0)
            fail_msg("[%s] the current device is %d after the call; it was 0", row,
                     current_device);
    if (b.plan) bound_plan_free(&b);
    /* A graph built before the failure is destroyed at once or queued: none is lost. */
    reap_and_expect_no_live_graphs(row);
}

/* Launches fail through cudaGetLastError after each kernel (GQA has a third launch). */
typedef struct launch_fault {
    const char *name;
    int nth;
    cudaError_t err;
    int32_t heads_kv; /* of 4 query heads */
} launch_fault;

static const launch_fault launch_faults[] = {
    {"preprocess launch", 1, cudaErrorLaunchOutOfResources, 4},
    {"main launch", 2, cudaErrorLaunchOutOfResources, 4},
    {"convert dK/dV launch", 3, cudaErrorLaunchOutOfResources, 2},
    {"preprocess launch", 1, cudaErrorInvalidConfiguration, 2},
    {"main launch", 2, cudaErrorNoKernelImageForDevice, 2},
    {"convert dK/dV launch", 3, cudaErrorInvalidConfiguration, 2},
};

static void test_launch_failure_gives_cuda_status_and_names_the_error(void **state)
{
    const launch_fault *f = *state;
    bound_plan b = bound_plan_make_direct(f->heads_kv);
    fake_zero_counts();
    fake_fail(C_GET_LAST_ERROR, f->nth, f->err);
    const int32_t st = flashbwd_execute(b.plan, NULL);
    const char *msg = flashbwd_plan_last_error(b.plan);
    if (st != FLASHBWD_ERR_CUDA)
        fail_msg("[%s] status %s; expected FLASHBWD_ERR_CUDA (%s)", f->name,
                 flashbwd_status_name(st), msg);
    expect_contains(msg, cudaGetErrorName(f->err), f->name);
    expect_contains(msg, "launching the backward kernels failed", f->name);
    /* The launcher stops at the failing launch. */
    assert_int_equal(fake_calls(C_GET_LAST_ERROR), f->nth);
    bound_plan_free(&b);
}

/* ======================================================================================
 * The fake device's happy paths, and the device cache
 * ====================================================================================== */

static void test_plan_on_a_device_takes_its_properties(void **state)
{
    (void)state;
    flashbwd_problem p = device_problem(ORD_HAPPY);
    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) fail_msg("%s", flashbwd_last_error());
    const flashbwd_plan_info info = info_of(plan);
    assert_int_equal(info.backend, FLASHBWD_BACKEND_CUDA);
    assert_int_equal(info.arch, 90);
    assert_int_equal(info.sm_count, 132);
    assert_int_equal(info.smem_per_block, 232448);
    assert_int_equal(info.kernel_head_dim, head_dim);
    assert_true(info.smem_bytes > 0 && info.smem_bytes <= 232448);
    /* The same problem planned for sm_90 from explicit properties chooses the same. */
    flashbwd_problem q = p;
    q.arch = 90;
    flashbwd_plan *planned = NULL;
    assert_int_equal(flashbwd_plan_create(&q, &planned), FLASHBWD_OK);
    const flashbwd_plan_info want = info_of(planned);
    assert_int_equal(info.block_m, want.block_m);
    assert_int_equal(info.block_n, want.block_n);
    assert_int_equal(info.smem_bytes, want.smem_bytes);
    assert_memory_equal(info.grid, want.grid, sizeof info.grid);
    assert_int_equal(info.workspace_bytes, want.workspace_bytes);
    flashbwd_plan_destroy(planned);
    flashbwd_plan_destroy(plan);
}

static void test_plan_raises_the_kernels_smem_limit_once_per_device(void **state)
{
    (void)state;
    const int ord = fresh_ordinal();
    flashbwd_problem p = device_problem(ord);
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    const flashbwd_plan_info info = info_of(plan);
    /* Every main-kernel variant raised (main_kernel_variants). */
    assert_int_equal(fake_calls(C_FUNC_SET_ATTRIBUTE), main_kernel_variants());
    /* ... to the larger need of the kernels (the plan's own is what info reports). */
    fb_config c;
    assert_int_equal(fb_config_select(NULL, 90, head_dim, FB_SMEM_LIMIT_SM90, &c), FLASHBWD_OK);
    assert_int_equal(atomic_load(&smem_raised_to),
                     c.split_smem_bytes > c.smem_bytes ? c.split_smem_bytes : c.smem_bytes);
    assert_true(info.smem_bytes == c.smem_bytes || info.smem_bytes == c.split_smem_bytes);
    /* It was raised on the plan's device, and the caller's device is back (twice: once
     * for the kernels, once for the launch graph). */
    assert_int_equal(current_device, 0);
    assert_int_equal(fake_calls(C_SET_DEVICE), 4);
    flashbwd_plan_destroy(plan);
    for (int i = 0; i < 5; ++i) {
        assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
        flashbwd_plan_destroy(plan);
    }
    assert_int_equal(fake_calls(C_FUNC_SET_ATTRIBUTE), main_kernel_variants());
    /* Only the graph, which each plan builds for itself, switched devices again. */
    assert_int_equal(fake_calls(C_SET_DEVICE), 4 + 5 * 2);
    assert_int_equal(fake_calls(C_GRAPH_INSTANTIATE), 1 + 5);
}

static void test_plan_on_an_sm86_device_takes_an_sm86_row(void **state)
{
    (void)state;
    fake.dev[ORD_SM86] = (fake_device){8, 6, 84, 101376, 0};
    flashbwd_problem p = device_problem(ORD_SM86);
    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) fail_msg("%s", flashbwd_last_error());
    const flashbwd_plan_info info = info_of(plan);
    assert_int_equal(info.arch, 86);
    assert_int_equal(info.sm_count, 84);
    assert_true(info.smem_bytes <= 101376);
    flashbwd_plan_destroy(plan);
}

/* An sm_90 part whose opt-in shared memory fits the main kernel but not the split kernel
 * (past hd64 the split kernel needs more): plans run the main kernel, and plan creation
 * raises the kernels' limit only to what the device has. */
static void test_plan_on_a_device_too_small_for_the_split_kernel_runs_the_main_kernel(void **state)
{
    (void)state;
    const int32_t dims[] = {96, 128};
    int ran = 0;
    for (size_t i = 0; i < COUNT_OF(dims); ++i) {
        const fb_kernel_key key = {FLASHBWD_DTYPE_BF16, 90, dims[i]};
        fb_config c;
        if (fb_kernel_find(&key) < 0 ||
            fb_config_select(NULL, 90, dims[i], FB_SMEM_LIMIT_SM90, &c) != FLASHBWD_OK ||
            c.split_smem_bytes <= c.smem_bytes)
            continue;
        const int ord = fresh_ordinal();
        fake.dev[ord] = (fake_device){9, 0, 132, c.smem_bytes, 1};
        flashbwd_problem p = device_problem(ord);
        p.head_dim = dims[i];
        flashbwd_plan *plan = NULL;
        if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) fail_msg("%s", flashbwd_last_error());
        const flashbwd_plan_info info = info_of(plan);
        assert_int_equal(info.smem_bytes, c.smem_bytes);
        assert_int_equal(atomic_load(&smem_raised_to), c.smem_bytes);
        flashbwd_plan_destroy(plan);
        ++ran;
    }
    if (!ran) skip(); /* this build has neither head dim */
}

static void test_plan_on_an_sm75_device_is_not_supported(void **state)
{
    (void)state;
    fake.dev[ORD_SM75] = (fake_device){7, 5, 40, 65536, 0};
    flashbwd_problem p = device_problem(ORD_SM75);
    flashbwd_plan *plan = (flashbwd_plan *)&p;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_NOT_SUPPORTED);
    assert_null(plan);
    expect_contains(flashbwd_last_error(), "sm_75 is older than sm_80", "sm_75");
}

static void test_plan_with_kernels_older_than_the_device_is_a_cuda_error(void **state)
{
    (void)state;
    fake.ptx_version = 80; /* the binary has only sm_80 code for an sm_90 row */
    flashbwd_problem p = device_problem(fresh_ordinal());
    flashbwd_plan *plan = (flashbwd_plan *)&p;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_CUDA);
    assert_null(plan);
    expect_contains(flashbwd_last_error(), "cudaErrorNoKernelImageForDevice", "old ptx");
    assert_int_equal(fake_calls(C_FUNC_SET_ATTRIBUTE), 0);
}

static void test_plan_with_zero_devices_is_no_device(void **state)
{
    (void)state;
    fake.count = 0;
    flashbwd_problem p = device_problem(ORD_QUERY);
    flashbwd_plan *plan = (flashbwd_plan *)&p;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_NO_DEVICE);
    assert_null(plan);
    expect_contains(flashbwd_last_error(), "no CUDA device is visible", "count 0");
}

static void test_plan_for_a_device_past_the_count_is_invalid(void **state)
{
    (void)state;
    fake.count = 2;
    flashbwd_problem p = device_problem(ORD_QUERY);
    flashbwd_plan *plan = (flashbwd_plan *)&p;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_INVALID_VALUE);
    assert_null(plan);
    expect_contains(flashbwd_last_error(), "problem.device = 7, but only 2 CUDA device(s)", "count 2");
}

static void test_plan_for_device_64_or_above_is_not_supported(void **state)
{
    (void)state;
    fake.count = 100;
    flashbwd_problem p = device_problem(64);
    flashbwd_plan *plan = (flashbwd_plan *)&p;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_NOT_SUPPORTED);
    assert_null(plan);
    expect_contains(flashbwd_last_error(), "problem.device = 64", "device 64");
}

static void test_plan_sm_count_override_leaves_the_cached_count_alone(void **state)
{
    (void)state;
    flashbwd_problem p = device_problem(ORD_HAPPY);
    p.sm_count = 7;
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    assert_int_equal(info_of(plan).sm_count, 7);
    flashbwd_plan_destroy(plan);
    p.sm_count = 0;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    assert_int_equal(info_of(plan).sm_count, 132);
    flashbwd_plan_destroy(plan);
}

static void test_device_query_failure_is_not_cached_and_is_retried(void **state)
{
    (void)state;
    const int64_t before = fb_device_query_count();
    flashbwd_problem p = device_problem(ORD_RETRY);
    flashbwd_plan *plan = NULL;
    fake_fail(C_DEVICE_GET_ATTRIBUTE, 3, cudaErrorUnknown);
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_CUDA);
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    assert_int_equal(info_of(plan).sm_count, 132);
    flashbwd_plan_destroy(plan);
    assert_int_equal(fb_device_query_count() - before, 2);
    assert_int_equal(fake_calls(C_DEVICE_GET_ATTRIBUTE), 3 + 4);
}

/* Many threads create plans for one device at once: the device is queried once and the
 * kernel prepared once, and every plan sees the same properties. */
enum { THREADS = 8, PLANS_PER_THREAD = 25 };

static void *create_many(void *arg)
{
    int *failures = arg;
    flashbwd_problem p = device_problem(ORD_THREADS);
    for (int i = 0; i < PLANS_PER_THREAD; ++i) {
        flashbwd_plan *plan = NULL;
        if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) {
            ++*failures;
            continue;
        }
        flashbwd_plan_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
        if (flashbwd_plan_get_info(plan, &info) != FLASHBWD_OK || info.arch != 90 ||
            info.sm_count != 132 || info.smem_per_block != 232448)
            ++*failures;
        flashbwd_plan_destroy(plan);
    }
    return NULL;
}

static void test_device_cache_queries_once_across_many_creates_and_threads(void **state)
{
    (void)state;
    const int64_t before = fb_device_query_count();
    pthread_t t[THREADS];
    int failures[THREADS] = {0};
    for (int i = 0; i < THREADS; ++i)
        assert_int_equal(pthread_create(&t[i], NULL, create_many, &failures[i]), 0);
    for (int i = 0; i < THREADS; ++i) assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < THREADS; ++i)
        if (failures[i]) fail_msg("thread %d: %d of %d creates failed", i, failures[i],
                                  PLANS_PER_THREAD);
    assert_int_equal(fb_device_query_count() - before, 1);
    assert_int_equal(fake_calls(C_GET_DEVICE_COUNT), 1);
    assert_int_equal(fake_calls(C_DEVICE_GET_ATTRIBUTE), 4);
    assert_int_equal(fake_calls(C_FUNC_SET_ATTRIBUTE), main_kernel_variants());
}

/* ======================================================================================
 * Execute and destroy
 * ====================================================================================== */

static void test_execute_without_graph_checks_every_launch_and_returns_ok(void **state)
{
    (void)state;
    const int32_t heads_kv[] = {4, 2}; /* MHA: 2 launches; GQA: 3 */
    for (size_t i = 0; i < COUNT_OF(heads_kv); ++i) {
        bound_plan b = bound_plan_make_direct(heads_kv[i]);
        const flashbwd_plan_info info = info_of(b.plan);
        fake_reset();
        const int32_t st = flashbwd_execute(b.plan, NULL);
        if (st != FLASHBWD_OK) fail_msg("execute: %s", flashbwd_plan_last_error(b.plan));
        assert_string_equal(flashbwd_plan_last_error(b.plan), "");
        const int n = launched(&info); /* table entries with a grid (folded: no convert) */
        assert_true(n >= (heads_kv[i] == 4 ? 2 : 3)); /* dQ folded in or not */
        assert_int_equal(fake_calls(C_GET_LAST_ERROR), n);
        /* Execute does no device setup: one check of the current device, nothing else. */
        assert_int_equal(fake_calls(C_GET_DEVICE), 1);
        assert_int_equal(fake_calls(C_SET_DEVICE) + fake_calls(C_FUNC_SET_ATTRIBUTE) +
                             fake_calls(C_DEVICE_GET_ATTRIBUTE),
                         0);
        bound_plan_free(&b);
    }
}

/* The split kernel's tensor maps (src/tma_maps.c): execute looks the encoder up in the
 * driver and encodes Q's and dO's maps when they are bound anew, copies them from the plan
 * otherwise, and where the lookup or an encode fails runs the cp.async refill (tma_on 0)
 * with execute still OK. Runs first: the encoder's address is kept for the process once
 * found, so only the first lookup can be made to fail. */
static void test_tma_maps_are_encoded_per_binding_and_fall_back_to_cp_async(void **state)
{
    (void)state;
    if (!FB_SPLIT_TMA(head_dim)) skip();
    bound_plan b = bound_plan_make(4);
    const size_t slot = (size_t)4 << 20;
    char *q = (char *)b.mem + slot * FLASHBWD_TENSOR_Q;
    char *dout = (char *)b.mem + slot * FLASHBWD_TENSOR_DO;
    fake_zero_counts();
    atomic_store(&encodes, 0);
    /* The lookup fails: cp.async, and no retry while the bindings stay. */
    fake_fail(C_GET_DRIVER_ENTRY_POINT, 1, cudaErrorUnknown);
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
    assert_int_equal(fake_calls(C_GET_DRIVER_ENTRY_POINT), 1);
    assert_int_equal(last_set_params.tma_on, 0);
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
    assert_int_equal(fake_calls(C_GET_DRIVER_ENTRY_POINT), 1);
    assert_int_equal(atomic_load(&encodes), 0);
    /* Q bound anew (the same memory): the lookup succeeds, both maps are encoded. */
    fake_fail(-1, 0, cudaSuccess);
    assert_int_equal(flashbwd_plan_set_tensor(b.plan, FLASHBWD_TENSOR_Q, q + 256, NULL, 0),
                     FLASHBWD_OK);
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
    assert_int_equal(atomic_load(&encodes), 2);
    assert_int_equal(last_set_params.tma_on, 1);
    void *in_map;
    memcpy(&in_map, last_set_params.tma_q.words, sizeof in_map);
    assert_ptr_equal(in_map, q + 256);
    memcpy(&in_map, last_set_params.tma_do.words, sizeof in_map);
    assert_ptr_equal(in_map, dout);
    /* dO's map: (head_dim, heads, seqlen_q, batch), byte strides, one tile panel's columns
     * (64, or 32 at kernel head dim 96) x block_m rows a box. */
    const flashbwd_plan_info info = info_of(b.plan);
    const cuuint64_t hd = (cuuint64_t)head_dim;
    assert_ptr_equal(last_encode.base, dout);
    assert_true(last_encode.dims[0] == hd && last_encode.dims[1] == 4 &&
                last_encode.dims[2] == 100 && last_encode.dims[3] == 2);
    assert_true(last_encode.strides[0] == hd * 2 && last_encode.strides[1] == 4 * hd * 2 &&
                last_encode.strides[2] == 100 * 4 * hd * 2);
    const int panel = info.kernel_head_dim % 64 == 0 ? 64 : 32; /* SmemTile's panel */
    assert_true(last_encode.box[0] == (cuuint32_t)panel && last_encode.box[1] == 1 &&
                last_encode.box[2] == (cuuint32_t)info.block_m && last_encode.box[3] == 1);
    assert_int_equal(last_encode.swizzle,
                     panel == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B);
    assert_int_equal(last_encode.dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    /* The same bindings: nothing encoded. */
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
    assert_int_equal(atomic_load(&encodes), 2);
    assert_int_equal(last_set_params.tma_on, 1);
    /* An encode fails (dO bound anew): cp.async, execute OK. */
    atomic_store(&encode_fails, 1);
    assert_int_equal(flashbwd_plan_set_tensor(b.plan, FLASHBWD_TENSOR_DO, dout + 256, NULL, 0),
                     FLASHBWD_OK);
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
    assert_int_equal(last_set_params.tma_on, 0);
    atomic_store(&encode_fails, 0);
    assert_int_equal(fake_calls(C_GET_DRIVER_ENTRY_POINT), 2); /* found once, then kept */
    bound_plan_free(&b);
    /* Kernel head dim 96 (tiles of 32-column panels): 32-column boxes, SWIZZLE_64B, once
     * its row refills through TMA (FB_SPLIT_TMA). */
    const fb_kernel_key k96 = {FLASHBWD_DTYPE_BF16, 90, 96};
    if (FB_SPLIT_TMA(96) && fb_kernel_find(&k96) >= 0) {
        const int32_t saved = head_dim;
        head_dim = 96;
        bound_plan b96 = bound_plan_make(4);
        head_dim = saved;
        atomic_store(&encodes, 0);
        assert_int_equal(flashbwd_execute(b96.plan, NULL), FLASHBWD_OK);
        assert_int_equal(atomic_load(&encodes), 2);
        assert_int_equal(last_set_params.tma_on, 1);
        assert_true(last_encode.dims[0] == 96 && last_encode.box[0] == 32 &&
                    last_encode.box[2] == (cuuint32_t)info_of(b96.plan).block_m);
        assert_int_equal(last_encode.swizzle, CU_TENSOR_MAP_SWIZZLE_64B);
        bound_plan_free(&b96);
    }
    reap_and_expect_no_live_graphs("tma maps");
}

/* The default path: plan creation builds a graph of the launches (a chain, one node per
 * launch with a grid), execute replays it, setting the parameter block on every node only
 * when it changed; a capturing stream gets direct launches instead. */
static void test_execute_replays_the_graph_and_sets_params_only_when_they_change(void **state)
{
    (void)state;
    const int32_t heads_kv[] = {4, 2}; /* MHA: 2 nodes (3 with the split kernel); GQA: +1 */
    for (size_t i = 0; i < COUNT_OF(heads_kv); ++i) {
        fake_zero_counts();
        bound_plan b = bound_plan_make(heads_kv[i]);
        const int nodes = fake_calls(C_GRAPH_ADD_KERNEL_NODE);
        const flashbwd_plan_info info = info_of(b.plan);
        assert_int_equal(nodes, launched(&info));
        assert_true(nodes >= (heads_kv[i] == 4 ? 2 : 3));
        assert_int_equal(fake_calls(C_GRAPH_INSTANTIATE), 1);
        /* Split plans of the rows that overlap the convert pass get its programmatic edge
         * (the fake checks its shape), and only they. */
        const fb_launch_table *t = &b.plan->launches;
        assert_int_equal(t->dq_overlap, t->split && FB_SPLIT_DQ_OVERLAP(head_dim));
        assert_int_equal(fake_calls(C_GRAPH_ADD_DEPENDENCIES), t->dq_overlap);
        fake_zero_counts();
        assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
        assert_int_equal(fake_calls(C_STREAM_IS_CAPTURING), 1);
        assert_int_equal(fake_calls(C_GRAPH_SET_PARAMS), nodes); /* the first call sets them */
        assert_int_equal(fake_calls(C_GRAPH_LAUNCH), 1);
        assert_int_equal(fake_calls(C_GET_LAST_ERROR), 0);
        const size_t slot = (size_t)4 << 20; /* K and V of 2000 keys: 4 MB each */
        assert_ptr_equal(last_set_params.dq, (char *)b.mem + slot * FLASHBWD_TENSOR_DQ);

        /* Same bindings: one cudaGraphLaunch, nothing set. */
        assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
        assert_int_equal(fake_calls(C_GRAPH_SET_PARAMS), nodes);
        assert_int_equal(fake_calls(C_GRAPH_LAUNCH), 2);

        /* A new dQ binding, then a new workspace: each sets every node once. */
        size_t ws = 0;
        assert_int_equal(flashbwd_plan_workspace_size(b.plan, &ws), FLASHBWD_OK);
        char *other = aligned_alloc(256, slot + ws); /* a dQ, then a workspace */
        assert_non_null(other);
        assert_int_equal(flashbwd_plan_set_tensor(b.plan, FLASHBWD_TENSOR_DQ, other, NULL, 0),
                         FLASHBWD_OK);
        assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
        assert_int_equal(fake_calls(C_GRAPH_SET_PARAMS), 2 * nodes);
        assert_ptr_equal(last_set_params.dq, other);
        assert_int_equal(flashbwd_plan_set_workspace(b.plan, other + slot, ws), FLASHBWD_OK);
        assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
        assert_int_equal(fake_calls(C_GRAPH_SET_PARAMS), 3 * nodes);
        assert_int_equal(fake_calls(C_GRAPH_LAUNCH), 4);

        /* A stream being captured into the caller's graph: direct launches. */
        capture_status = cudaStreamCaptureStatusActive;
        assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
        capture_status = cudaStreamCaptureStatusNone;
        assert_int_equal(fake_calls(C_GRAPH_LAUNCH), 4);
        assert_int_equal(fake_calls(C_GET_LAST_ERROR), nodes);
        bound_plan_free(&b);
        free(other);
    }
    reap_and_expect_no_live_graphs("replay");
}

/* A failed parameter update leaves the nodes in doubt: the next execute sets them all. */
static void test_graph_params_are_set_again_after_a_failed_update(void **state)
{
    (void)state;
    bound_plan b = bound_plan_make(4);
    fake_zero_counts();
    fake_fail(C_GRAPH_SET_PARAMS, 2, cudaErrorInvalidValue);
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_ERR_CUDA);
    expect_contains(flashbwd_plan_last_error(b.plan), "cudaGraphExecKernelNodeSetParams",
                    "set params");
    assert_int_equal(fake_calls(C_GRAPH_LAUNCH), 0);
    fake_fail(-1, 0, cudaSuccess);
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
    const flashbwd_plan_info info = info_of(b.plan);
    assert_int_equal(fake_calls(C_GRAPH_SET_PARAMS), 2 + launched(&info));
    assert_int_equal(fake_calls(C_GRAPH_LAUNCH), 1);
    bound_plan_free(&b);
}

/* Destroy makes no CUDA call: the graph waits for the next plan creation on its device. */
static void test_a_destroyed_plans_graph_is_destroyed_by_the_next_create(void **state)
{
    (void)state;
    reap_and_expect_no_live_graphs("before");
    bound_plan b = bound_plan_make(4);
    assert_int_equal(atomic_load(&live_execs), 1);
    fake_zero_counts();
    bound_plan_free(&b);
    assert_int_equal(total_calls(), 0);
    assert_int_equal(atomic_load(&live_execs), 1); /* queued */
    b = bound_plan_make(4);
    assert_int_equal(fake_calls(C_GRAPH_EXEC_DESTROY), 1);
    assert_int_equal(fake_calls(C_GRAPH_DESTROY), 1);
    assert_int_equal(atomic_load(&live_execs), 1); /* the new plan's */
    bound_plan_free(&b);
    reap_and_expect_no_live_graphs("after");
}

static void test_execute_on_another_current_device_is_wrong_device(void **state)
{
    (void)state;
    bound_plan b = bound_plan_make(4);
    fake_zero_counts();
    current_device = 5;
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_ERR_WRONG_DEVICE);
    expect_contains(flashbwd_plan_last_error(b.plan),
                    "the current CUDA device is 5, but the plan was created for device 0",
                    "wrong device");
    assert_int_equal(fake_calls(C_GET_LAST_ERROR), 0); /* nothing was launched */
    current_device = 0;
    assert_int_equal(flashbwd_execute(b.plan, NULL), FLASHBWD_OK);
    bound_plan_free(&b);
}

static void test_destroy_makes_no_cuda_call(void **state)
{
    (void)state;
    bound_plan b = bound_plan_make(2);
    const int before = total_calls();
    flashbwd_plan_destroy(b.plan);
    b.plan = NULL;
    assert_int_equal(total_calls(), before);
    free(b.mem);
}

/* ======================================================================================
 * flashbwd_workspace_alloc and _free on the fake device and driver
 * ====================================================================================== */

/* A plan on ORD_GRAPH: prepared, and not the current device (0), so alloc must switch to
 * it and back. */
static flashbwd_plan *ws_plan(void)
{
    flashbwd_problem p = device_problem(ORD_GRAPH);
    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) fail_msg("%s", flashbwd_last_error());
    vmm_fail = NULL, vmm_decline = 0, vmm_missing = 0;
    for (int d = 0; d < FAKE_DEVICES; ++d) fake.dev[d].compression = 1;
    fake_zero_counts();
    return plan;
}

static void expect_nothing_live(const char *row)
{
    if (atomic_load(&live_mallocs) || atomic_load(&live_handles) ||
        atomic_load(&live_reserved) || atomic_load(&live_mapped))
        fail_msg("[%s] live after free: %d cudaMalloc, %d handles, %d reservations, %d maps",
                 row, atomic_load(&live_mallocs), atomic_load(&live_handles),
                 atomic_load(&live_reserved), atomic_load(&live_mapped));
}

/* Allocate for plan, expecting success; checks the size, the device restored, and returns
 * the memory. */
static void *ws_alloc_ok(flashbwd_plan *plan, const char *row, size_t *bytes, int32_t *compressed)
{
    void *ptr = NULL;
    size_t need = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &need), FLASHBWD_OK);
    const int32_t st = flashbwd_workspace_alloc(plan, &ptr, bytes, compressed);
    if (st != FLASHBWD_OK) fail_msg("[%s] %s: %s", row, flashbwd_status_name(st),
                                    flashbwd_plan_last_error(plan));
    if (!ptr || *bytes < need) fail_msg("[%s] %p, %zu bytes of %zu", row, ptr, *bytes, need);
    if (current_device != 0) fail_msg("[%s] left device %d current", row, current_device);
    assert_int_equal(flashbwd_plan_set_workspace(plan, ptr, *bytes), FLASHBWD_OK);
    return ptr;
}

/* Runs first of the workspace tests: the driver lookup failing (or an old driver) gives
 * cudaMalloc's memory, and is not remembered: the next allocation finds the driver. */
static void test_workspace_alloc_without_the_drivers_calls_gives_plain_memory(void **state)
{
    (void)state;
    flashbwd_plan *plan = ws_plan();
    size_t bytes = 0, need = 0;
    int32_t compressed = -1;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &need), FLASHBWD_OK);
    fake_fail(C_GET_DRIVER_ENTRY_POINT, 1, cudaErrorUnknown);
    void *a = ws_alloc_ok(plan, "lookup fails", &bytes, &compressed);
    assert_int_equal(compressed, 0);
    assert_int_equal(bytes, need);
    assert_int_equal(atomic_load(&live_mallocs), 1);
    fake_fail(-1, 0, cudaSuccess);
    vmm_missing = 1;
    void *b = ws_alloc_ok(plan, "old driver", &bytes, &compressed);
    assert_int_equal(compressed, 0);
    assert_int_equal(atomic_load(&live_mallocs), 2);
    vmm_missing = 0;
    void *c = ws_alloc_ok(plan, "driver found", &bytes, &compressed);
    assert_int_equal(compressed, 1);
    assert_int_equal(atomic_load(&live_handles), 1);
    for (void **p = (void *[]){a, b, c, NULL}; *p; ++p)
        assert_int_equal(flashbwd_workspace_free(*p), FLASHBWD_OK);
    expect_nothing_live("lookup");
    flashbwd_plan_destroy(plan);
}

static void test_workspace_alloc_gives_compressible_memory_on_the_plans_device(void **state)
{
    (void)state;
    flashbwd_plan *plan = ws_plan();
    size_t bytes = 0, need = 0;
    int32_t compressed = -1;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &need), FLASHBWD_OK);
    void *ws = ws_alloc_ok(plan, "compressible", &bytes, &compressed);
    assert_int_equal(compressed, 1);
    assert_true(bytes % FAKE_GRANULARITY == 0 && bytes - need < FAKE_GRANULARITY);
    assert_int_equal(atomic_load(&live_handles), 1);
    assert_int_equal(atomic_load(&live_mapped), 1);
    assert_int_equal(atomic_load(&live_mallocs), 0);
    assert_int_equal(fake_calls(C_SET_DEVICE), 2); /* to ORD_GRAPH and back */
    /* compressed may be NULL; the plan's message is cleared by the successful calls */
    void *ws2 = NULL;
    assert_int_equal(flashbwd_workspace_alloc(plan, &ws2, &bytes, NULL), FLASHBWD_OK);
    assert_ptr_not_equal(ws, ws2);
    assert_string_equal(flashbwd_plan_last_error(plan), "");
    fake_zero_counts();
    assert_int_equal(flashbwd_workspace_free(ws), FLASHBWD_OK);
    assert_int_equal(fake_calls(C_DEVICE_SYNCHRONIZE), 1); /* freed like cudaFree frees */
    assert_int_equal(current_device, 0);
    assert_int_equal(flashbwd_workspace_free(ws2), FLASHBWD_OK);
    expect_nothing_live("compressible");
    flashbwd_plan_destroy(plan);
}

static void test_workspace_alloc_without_compression_gives_plain_memory(void **state)
{
    (void)state;
    flashbwd_plan *plan = ws_plan();
    size_t bytes = 0, need = 0;
    int32_t compressed = -1;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &need), FLASHBWD_OK);
    fake.dev[ORD_GRAPH].compression = 0; /* a device without compute data compression */
    void *a = ws_alloc_ok(plan, "unsupported", &bytes, &compressed);
    assert_int_equal(compressed, 0);
    assert_int_equal(bytes, need);
    assert_int_equal(atomic_load(&live_mallocs), 1);
    assert_int_equal(atomic_load(&live_handles), 0);
    fake.dev[ORD_GRAPH].compression = 1;
    vmm_decline = 1; /* supported, but this allocation gets none */
    void *b = ws_alloc_ok(plan, "declined", &bytes, &compressed);
    assert_int_equal(compressed, 0);
    assert_int_equal(atomic_load(&live_handles), 1);
    assert_int_equal(flashbwd_workspace_free(a), FLASHBWD_OK);
    assert_int_equal(flashbwd_workspace_free(b), FLASHBWD_OK);
    expect_nothing_live("no compression");
    flashbwd_plan_destroy(plan);
}

/* Any driver call failing on the way to compressible memory: plain memory instead, and
 * what the driver had made is released. */
static void test_workspace_alloc_falls_back_when_a_driver_call_fails(void **state)
{
    (void)state;
    static const char *const calls_in_order[] = {
        "cuDeviceGet", "cuDeviceGetAttribute", "cuMemGetAllocationGranularity", "cuMemCreate",
        "cuMemGetAllocationPropertiesFromHandle", "cuMemAddressReserve", "cuMemMap",
        "cuMemSetAccess"};
    flashbwd_plan *plan = ws_plan();
    for (size_t i = 0; i < COUNT_OF(calls_in_order); ++i) {
        size_t bytes = 0;
        int32_t compressed = -1;
        vmm_fail = calls_in_order[i];
        void *ws = ws_alloc_ok(plan, vmm_fail, &bytes, &compressed);
        if (compressed != 0 || atomic_load(&live_mallocs) != 1 || atomic_load(&live_handles) ||
            atomic_load(&live_reserved) || atomic_load(&live_mapped))
            fail_msg("[%s fails] compressed %d; live: %d cudaMalloc, %d handles, %d "
                     "reservations, %d maps", vmm_fail, (int)compressed,
                     atomic_load(&live_mallocs), atomic_load(&live_handles),
                     atomic_load(&live_reserved), atomic_load(&live_mapped));
        assert_int_equal(flashbwd_workspace_free(ws), FLASHBWD_OK);
        expect_nothing_live(vmm_fail);
    }
    flashbwd_plan_destroy(plan);
}

/* A runtime call of alloc failing: a clean status naming the call and error, *ptr NULL and
 * *bytes 0, nothing left allocated, the caller's device restored (unless restoring it is
 * what failed). */
static void test_workspace_alloc_runtime_failure_gives_a_clean_status(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int call, nth, compression;
        const char *names;
    } rows[] = {
        {"cudaGetDevice", C_GET_DEVICE, 1, 1, "cudaGetDevice failed"},
        {"cudaSetDevice to the plan's", C_SET_DEVICE, 1, 1, "cudaSetDevice failed"},
        {"cudaFree(NULL) (context)", C_FREE, 1, 1, "cudaFree(NULL) failed"},
        {"cudaMalloc", C_MALLOC, 1, 0, "cudaMalloc of a"},
        {"cudaSetDevice back (compressible)", C_SET_DEVICE, 2, 1, "restoring the caller's"},
        {"cudaSetDevice back (cudaMalloc)", C_SET_DEVICE, 2, 0, "restoring the caller's"},
    };
    for (size_t r = 0; r < COUNT_OF(rows); ++r)
        for (size_t c = 0; c < COUNT_OF(codes); ++c) {
            flashbwd_plan *plan = ws_plan();
            fake.dev[ORD_GRAPH].compression = rows[r].compression;
            fake_fail(rows[r].call, rows[r].nth, codes[c].err);
            void *ptr = (void *)plan;
            size_t bytes = 1;
            int32_t compressed = -1;
            const int32_t st = flashbwd_workspace_alloc(plan, &ptr, &bytes, &compressed);
            fake_fail(-1, 0, cudaSuccess);
            const char *msg = flashbwd_plan_last_error(plan);
            char row[128];
            snprintf(row, sizeof row, "%s: %s", rows[r].name, cudaGetErrorName(codes[c].err));
            if (st != codes[c].expect)
                fail_msg("[%s] status %s; expected %s (%s)", row, flashbwd_status_name(st),
                         flashbwd_status_name(codes[c].expect), msg);
            if (ptr || bytes || compressed)
                fail_msg("[%s] failed, but *ptr %p, *bytes %zu, *compressed %d", row, ptr,
                         bytes, (int)compressed);
            expect_contains(msg, rows[r].names, row);
            expect_contains(msg, cudaGetErrorName(codes[c].err), row);
            if (strcmp(msg, flashbwd_last_error()) != 0)
                fail_msg("[%s] plan message \"%s\" differs from the thread's \"%s\"", row, msg,
                         flashbwd_last_error());
            if (!strstr(rows[r].names, "restoring") && current_device != 0)
                fail_msg("[%s] the current device is %d after the call", row, current_device);
            current_device = 0;
            expect_nothing_live(row);
            flashbwd_plan_destroy(plan);
        }
}

/* Free: a failing synchronize or release still frees everything and forgets the pointer;
 * a pointer alloc never gave, or gave and was freed, is refused by name. */
static void test_workspace_free_failures_free_everything_and_name_the_pointer(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int call;
        const char *vmm;
        int compression;
        const char *names;
    } rows[] = {
        {"cudaDeviceSynchronize", C_DEVICE_SYNCHRONIZE, NULL, 1, "cudaDeviceSynchronize failed"},
        {"cuMemUnmap", -1, "cuMemUnmap", 1, "cuMemUnmap"},
        {"cuMemRelease", -1, "cuMemRelease", 1, "cuMemRelease"},
        {"cudaFree", C_FREE, NULL, 0, "cudaFree failed"},
        {"cudaSetDevice to the memory's", C_SET_DEVICE, NULL, 1, "cudaSetDevice failed"},
    };
    for (size_t r = 0; r < COUNT_OF(rows); ++r) {
        flashbwd_plan *plan = ws_plan();
        fake.dev[ORD_GRAPH].compression = rows[r].compression;
        size_t bytes = 0;
        int32_t compressed = -1;
        void *ws = ws_alloc_ok(plan, rows[r].name, &bytes, &compressed);
        fake_zero_counts();
        if (rows[r].call >= 0) fake_fail(rows[r].call, 1, cudaErrorUnknown);
        vmm_fail = rows[r].vmm;
        const int32_t st = flashbwd_workspace_free(ws);
        fake_fail(-1, 0, cudaSuccess);
        vmm_fail = NULL;
        if (rows[r].call == C_SET_DEVICE) { /* nothing could be freed: it stays registered */
            assert_int_equal(st, FLASHBWD_ERR_CUDA);
            expect_contains(flashbwd_last_error(), rows[r].names, rows[r].name);
            assert_int_equal(flashbwd_workspace_free(ws), FLASHBWD_OK);
        } else {
            if (st != FLASHBWD_ERR_CUDA)
                fail_msg("[%s] status %s (%s)", rows[r].name, flashbwd_status_name(st),
                         flashbwd_last_error());
            expect_contains(flashbwd_last_error(), rows[r].names, rows[r].name);
            assert_int_equal(flashbwd_workspace_free(ws), FLASHBWD_ERR_INVALID_VALUE);
        }
        assert_int_equal(current_device, 0);
        expect_nothing_live(rows[r].name);
        flashbwd_plan_destroy(plan);
    }
    int local = 0;
    char hex[32];
    snprintf(hex, sizeof hex, "%p", (void *)&local);
    assert_int_equal(flashbwd_workspace_free(&local), FLASHBWD_ERR_INVALID_VALUE);
    expect_contains(flashbwd_last_error(), hex, "a foreign pointer");
    expect_contains(flashbwd_last_error(), "did not come from flashbwd_workspace_alloc",
                    "a foreign pointer");
    assert_int_equal(flashbwd_workspace_free(NULL), FLASHBWD_OK);
}

/* ======================================================================================
 * main: fixed tests, then one test per (call site, error code) and per launch fault
 * ====================================================================================== */

static void add_test(struct CMUnitTest *t, const char *name, CMUnitTestFunction fn, void *state)
{
    *t = (struct CMUnitTest){name, fn, setup, NULL, state};
}

int main(void)
{
    /* A head dim this build compiled a kernel for: 128 first, whose split plans overlap the
     * convert pass (FB_SPLIT_DQ_OVERLAP), so the graph has its programmatic edge. */
    const int32_t candidates[] = {128, 64};
    for (size_t i = 0; i < COUNT_OF(candidates) && !head_dim; ++i) {
        const fb_kernel_key key = {FLASHBWD_DTYPE_BF16, 90, candidates[i]};
        if (fb_kernel_find(&key) >= 0) head_dim = candidates[i];
    }
    if (!head_dim) {
        fprintf(stderr, "test_faults: this build has no bf16 sm_90 kernel for head dim 64 or "
                        "128 (FLASHBWD_HEAD_DIMS); nothing to prepare\n");
        return 1;
    }

    const struct {
        const char *name;
        CMUnitTestFunction fn;
    } fixed[] = {
#define T(f) {#f, f}
        T(test_tma_maps_are_encoded_per_binding_and_fall_back_to_cp_async), /* first */
        T(test_plan_on_a_device_takes_its_properties),
        T(test_plan_raises_the_kernels_smem_limit_once_per_device),
        T(test_plan_on_an_sm86_device_takes_an_sm86_row),
        T(test_plan_on_a_device_too_small_for_the_split_kernel_runs_the_main_kernel),
        T(test_plan_on_an_sm75_device_is_not_supported),
        T(test_plan_with_kernels_older_than_the_device_is_a_cuda_error),
        T(test_plan_with_zero_devices_is_no_device),
        T(test_plan_for_a_device_past_the_count_is_invalid),
        T(test_plan_for_device_64_or_above_is_not_supported),
        T(test_plan_sm_count_override_leaves_the_cached_count_alone),
        T(test_device_query_failure_is_not_cached_and_is_retried),
        T(test_device_cache_queries_once_across_many_creates_and_threads),
        T(test_execute_without_graph_checks_every_launch_and_returns_ok),
        T(test_execute_replays_the_graph_and_sets_params_only_when_they_change),
        T(test_graph_params_are_set_again_after_a_failed_update),
        T(test_a_destroyed_plans_graph_is_destroyed_by_the_next_create),
        T(test_execute_on_another_current_device_is_wrong_device),
        T(test_destroy_makes_no_cuda_call),
        T(test_workspace_alloc_without_the_drivers_calls_gives_plain_memory), /* first alloc */
        T(test_workspace_alloc_gives_compressible_memory_on_the_plans_device),
        T(test_workspace_alloc_without_compression_gives_plain_memory),
        T(test_workspace_alloc_falls_back_when_a_driver_call_fails),
        T(test_workspace_alloc_runtime_failure_gives_a_clean_status),
        T(test_workspace_free_failures_free_everything_and_name_the_pointer),
#undef T
    };
    enum { NAME_BYTES = 192 };
    const size_t n = COUNT_OF(fixed) + COUNT_OF(faults) + COUNT_OF(launch_faults);
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    char *names = calloc(n, NAME_BYTES);
    if (!tests || !names) return 1;
    size_t k = 0;
    for (size_t i = 0; i < COUNT_OF(fixed); ++i, ++k)
        add_test(&tests[k], fixed[i].name, fixed[i].fn, NULL);
    for (size_t s = 0; s < COUNT_OF(sites); ++s)
        for (size_t c = 0; c < COUNT_OF(codes); ++c, ++k) {
            fault *f = &faults[s * COUNT_OF(codes) + c];
            f->site = &sites[s];
            f->code = &codes[c];
            char *name = names + k * NAME_BYTES;
            snprintf(name, NAME_BYTES,
                     "test_cuda_call_failure_gives_a_clean_status_and_names_the_error [%s: %s]",
                     sites[s].name, cudaGetErrorName(codes[c].err));
            add_test(&tests[k], name,
                     test_cuda_call_failure_gives_a_clean_status_and_names_the_error, f);
        }
    for (size_t i = 0; i < COUNT_OF(launch_faults); ++i, ++k) {
        char *name = names + k * NAME_BYTES;
        snprintf(name, NAME_BYTES,
                 "test_launch_failure_gives_cuda_status_and_names_the_error [%s: %s]",
                 launch_faults[i].name, cudaGetErrorName(launch_faults[i].err));
        add_test(&tests[k], name, test_launch_failure_gives_cuda_status_and_names_the_error,
                 (void *)&launch_faults[i]);
    }
    const int failed = _cmocka_run_group_tests("test_faults", tests, k, NULL, NULL);
    free(names);
    free(tests);
    return failed;
}
