/* workspace_alloc.c — flashbwd_workspace_alloc/free: a workspace in the memory execute runs
 * fastest with.
 *
 * Every execute starts by writing zeros over its fp32 dQ sums (134 MB at 16k tokens of
 * head dim 128). On devices with compute data compression (Hopper), memory created through
 * cuMemCreate with CU_MEM_ALLOCATION_COMP_GENERIC stores such zero lines compressed, so
 * the zero fill and the first reads of the sums cost little DRAM traffic: 1-2% of a whole
 * backward pass at 512-1k keys on the H200 (docs/performance.md, thirty-fourth session).
 * The runtime API cannot ask for compressible memory, so this file takes the driver's
 * virtual-memory calls through cudaGetDriverEntryPointByVersion (the library links no
 * libcuda). Where compression is unsupported or declined the memory is cudaMalloc's.
 *
 * A registry of live allocations (under a lock) lets free tell the three kinds apart
 * (host, cudaMalloc, cuMemCreate), and refuse a pointer it never gave or already freed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifdef FB_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

enum { WS_HOST = 1, WS_CUDA_MALLOC = 2, WS_CUDA_VMM = 3 };

typedef struct ws_entry {
    struct ws_entry *next;
    void *ptr;
    size_t bytes;
    int kind;
    int device;
#ifdef FB_WITH_CUDA
    CUmemGenericAllocationHandle handle; /* WS_CUDA_VMM */
#endif
} ws_entry;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ws_entry *registry;

static void registry_add(ws_entry *e)
{
    pthread_mutex_lock(&registry_lock);
    e->next = registry;
    registry = e;
    pthread_mutex_unlock(&registry_lock);
}

/* Unlink and return the entry of ptr, or NULL if ptr is not live. */
static ws_entry *registry_take(void *ptr)
{
    pthread_mutex_lock(&registry_lock);
    ws_entry **link = &registry;
    while (*link && (*link)->ptr != ptr) link = &(*link)->next;
    ws_entry *e = *link;
    if (e) *link = e->next;
    pthread_mutex_unlock(&registry_lock);
    return e;
}

#ifdef FB_WITH_CUDA

/* The driver calls used here; when one is missing (an old driver) the memory is
 * cudaMalloc's. */
typedef struct driver_vmm {
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                            CUmemAllocationGranularity_flags);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*properties)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                    unsigned long long);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
} driver_vmm;

static driver_vmm vmm;
static int vmm_complete; /* under vmm_lock; once set, vmm never changes again */
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

static void vmm_lookup(void)
{
    static const struct {
        const char *name;
        size_t offset;
    } calls[] = {
        {"cuDeviceGet", offsetof(driver_vmm, device_get)},
        {"cuDeviceGetAttribute", offsetof(driver_vmm, device_attribute)},
        {"cuMemGetAllocationGranularity", offsetof(driver_vmm, granularity)},
        {"cuMemCreate", offsetof(driver_vmm, create)},
        {"cuMemGetAllocationPropertiesFromHandle", offsetof(driver_vmm, properties)},
        {"cuMemAddressReserve", offsetof(driver_vmm, reserve)},
        {"cuMemMap", offsetof(driver_vmm, map)},
        {"cuMemSetAccess", offsetof(driver_vmm, set_access)},
        {"cuMemUnmap", offsetof(driver_vmm, unmap)},
        {"cuMemAddressFree", offsetof(driver_vmm, address_free)},
        {"cuMemRelease", offsetof(driver_vmm, release)},
    };
    int complete = 1;
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; ++i) {
        void *fn = NULL;
        enum cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion(calls[i].name, &fn, 12000, cudaEnableDefault,
                                             &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess || !fn)
            complete = 0;
        else /* a data pointer into a function pointer's bytes: the same size on POSIX */
            memcpy((char *)&vmm + calls[i].offset, &fn, sizeof fn);
    }
    vmm_complete = complete;
}

/* The driver calls, or NULL when one is missing. A failed lookup is not remembered: the
 * next allocation asks again (allocations are rare, and a query may fail transiently). */
static const driver_vmm *vmm_get(void)
{
    pthread_mutex_lock(&vmm_lock);
    if (!vmm_complete) vmm_lookup();
    const int complete = vmm_complete;
    pthread_mutex_unlock(&vmm_lock);
    return complete ? &vmm : NULL;
}

/* Compressible memory of at least `bytes` on `device` (the current device), in e: 1 on
 * success, 0 when the device or driver cannot give it (nothing is left allocated). */
static int vmm_alloc(int device, size_t bytes, ws_entry *e, int32_t *compressed)
{
    const driver_vmm *d = vmm_get();
    CUdevice dev;
    int vmm_ok = 0, compress_ok = 0;
    if (!d || d->device_get(&dev, device) != CUDA_SUCCESS ||
        d->device_attribute(&vmm_ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                            dev) != CUDA_SUCCESS ||
        d->device_attribute(&compress_ok, CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED,
                            dev) != CUDA_SUCCESS ||
        !vmm_ok || !compress_ok)
        return 0;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
    size_t gran = 0;
    if (d->granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
        gran == 0 || bytes > SIZE_MAX - gran)
        return 0;
    const size_t size = (bytes + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle handle;
    if (d->create(&handle, size, &prop, 0) != CUDA_SUCCESS) return 0;
    CUmemAllocationProp got;
    memset(&got, 0, sizeof got);
    CUdeviceptr base = 0;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    int reserved = 0, mapped = 0, ready = 0;
    if (d->properties(&got, handle) == CUDA_SUCCESS) {
        reserved = d->reserve(&base, size, gran, 0, 0) == CUDA_SUCCESS;
        mapped = reserved && d->map(base, size, 0, handle, 0) == CUDA_SUCCESS;
        ready = mapped && d->set_access(base, size, &access, 1) == CUDA_SUCCESS;
    }
    if (ready) {
        e->ptr = (void *)(uintptr_t)base;
        e->bytes = size;
        e->kind = WS_CUDA_VMM;
        e->handle = handle;
        *compressed = got.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC;
        return 1;
    }
    if (mapped) d->unmap(base, size);
    if (reserved) d->address_free(base, size);
    d->release(handle);
    return 0;
}

/* Allocate on the plan's device, the caller's current device restored afterwards. */
static int32_t alloc_device(flashbwd_plan *plan, size_t bytes, ws_entry *e, int32_t *compressed)
{
    int caller = -1;
    cudaError_t err = cudaGetDevice(&caller);
    if (err != cudaSuccess) return fb_cuda_fail(plan, err, "cudaGetDevice");
    const int device = plan->prob.device;
    if (device != caller && (err = cudaSetDevice(device)) != cudaSuccess)
        return fb_cuda_fail(plan, err, "cudaSetDevice");
    /* cudaFree(0) makes the device's primary context current for the driver calls. */
    int32_t status = FLASHBWD_OK;
    if ((err = cudaFree(NULL)) != cudaSuccess) status = fb_cuda_fail(plan, err, "cudaFree(NULL)");
    if (status == FLASHBWD_OK && !vmm_alloc(device, bytes, e, compressed)) {
        void *p = NULL;
        err = cudaMalloc(&p, bytes);
        if (err != cudaSuccess) {
            char what[96];
            snprintf(what, sizeof what, "cudaMalloc of a %zu-byte workspace on device %d",
                     bytes, device);
            status = fb_cuda_fail(plan, err, what);
        } else
            e->ptr = p, e->bytes = bytes, e->kind = WS_CUDA_MALLOC;
    }
    e->device = device;
    if (device != caller && (err = cudaSetDevice(caller)) != cudaSuccess &&
        status == FLASHBWD_OK) {
        status = fb_cuda_fail(plan, err, "cudaSetDevice (restoring the caller's)");
    }
    return status;
}

/* Free device memory like cudaFree: the device is synchronized first. *released is 0 when
 * nothing could be freed (the memory's device could not be made current). */
static int32_t free_device(ws_entry *e, int *released)
{
    *released = 0;
    int caller = -1;
    cudaError_t err = cudaGetDevice(&caller);
    if (err != cudaSuccess) return fb_cuda_fail(NULL, err, "cudaGetDevice");
    if (e->device != caller && (err = cudaSetDevice(e->device)) != cudaSuccess)
        return fb_cuda_fail(NULL, err, "cudaSetDevice");
    *released = 1;
    int32_t status = FLASHBWD_OK;
    if (e->kind == WS_CUDA_MALLOC) {
        if ((err = cudaFree(e->ptr)) != cudaSuccess) status = fb_cuda_fail(NULL, err, "cudaFree");
    } else {
        const driver_vmm *d = vmm_get(); /* complete: it made this memory */
        const CUdeviceptr base = (CUdeviceptr)(uintptr_t)e->ptr;
        if ((err = cudaDeviceSynchronize()) != cudaSuccess)
            status = fb_cuda_fail(NULL, err, "cudaDeviceSynchronize");
        const CUresult r1 = d->unmap(base, e->bytes), r2 = d->address_free(base, e->bytes),
                       r3 = d->release(e->handle);
        if (status == FLASHBWD_OK && (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS ||
                                      r3 != CUDA_SUCCESS))
            status = fb_fail(NULL, FLASHBWD_ERR_CUDA,
                             "freeing workspace %p: cuMemUnmap, cuMemAddressFree, cuMemRelease "
                             "returned %d, %d, %d", e->ptr, (int)r1, (int)r2, (int)r3);
    }
    if (e->device != caller && (err = cudaSetDevice(caller)) != cudaSuccess &&
        status == FLASHBWD_OK)
        status = fb_cuda_fail(NULL, err, "cudaSetDevice (restoring the caller's)");
    return status;
}

#else /* !FB_WITH_CUDA: no CUDA plan can exist, so these are never reached */

static int32_t alloc_device(flashbwd_plan *plan, size_t bytes, ws_entry *e, int32_t *compressed)
{
    (void)bytes, (void)e, (void)compressed;
    return fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED, "this flashbwd was built without CUDA");
}

static int32_t free_device(ws_entry *e, int *released)
{
    (void)e;
    *released = 0;
    return fb_fail(NULL, FLASHBWD_ERR_INTERNAL, "device workspace in a build without CUDA");
}

#endif

int32_t flashbwd_workspace_alloc(flashbwd_plan *plan, void **ptr, size_t *bytes,
                                 int32_t *compressed)
{
    if (ptr) *ptr = NULL;
    if (bytes) *bytes = 0;
    if (compressed) *compressed = 0;
    FB_FAIL_IF(NULL, plan == NULL, FLASHBWD_ERR_NULL_ARGUMENT,
               "flashbwd_workspace_alloc: plan is NULL");
    FB_FAIL_IF(NULL, atomic_exchange(&plan->busy, 1), FLASHBWD_ERR_BUSY,
               "flashbwd_workspace_alloc: the plan is in use by another call");
    int32_t status = FLASHBWD_OK, packed = 0;
    const size_t need = plan->ws.total_bytes;
    ws_entry *e = NULL;
    if (!ptr || !bytes)
        status = fb_fail(plan, FLASHBWD_ERR_NULL_ARGUMENT, "flashbwd_workspace_alloc: %s is NULL",
                         !ptr ? "ptr" : "bytes");
    else if (plan->planning_only)
        status = fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED,
                         "flashbwd_workspace_alloc: the plan is planning-only (created from "
                         "explicit device properties) and has no device to allocate on");
    else if (need > 0 && !(e = calloc(1, sizeof *e)))
        status = fb_fail(plan, FLASHBWD_ERR_OUT_OF_MEMORY, "out of host memory");
    else if (need > 0 && plan->prob.backend == FLASHBWD_BACKEND_CPU) {
        const size_t rounded = (need + 255) / 256 * 256; /* aligned_alloc wants a multiple */
        e->ptr = rounded >= need ? aligned_alloc(256, rounded) : NULL;
        e->bytes = rounded, e->kind = WS_HOST, e->device = -1;
        if (!e->ptr)
            status = fb_fail(plan, FLASHBWD_ERR_OUT_OF_MEMORY,
                             "out of host memory for a %zu-byte workspace", need);
    } else if (need > 0) {
        status = alloc_device(plan, need, e, &packed);
    }
    if (status == FLASHBWD_OK && e) {
        registry_add(e);
        *ptr = e->ptr, *bytes = e->bytes;
        if (compressed) *compressed = packed;
        e = NULL;
    }
    int released;
    if (e && e->ptr && e->kind != WS_HOST) free_device(e, &released); /* made, then failed */
    else if (e) free(e->ptr);
    free(e);
    if (status == FLASHBWD_OK) fb_clear_plan_message(plan);
    atomic_store(&plan->busy, 0);
    return status;
}

int32_t flashbwd_workspace_free(void *ptr)
{
    if (!ptr) return FLASHBWD_OK;
    ws_entry *e = registry_take(ptr);
    FB_FAIL_IF(NULL, !e, FLASHBWD_ERR_INVALID_VALUE,
               "flashbwd_workspace_free: %p did not come from flashbwd_workspace_alloc, or "
               "was freed already", ptr);
    int32_t status = FLASHBWD_OK;
    int released = 1;
    if (e->kind == WS_HOST) free(e->ptr);
    else status = free_device(e, &released);
    if (released) free(e);
    else registry_add(e); /* still allocated: the caller may try again */
    return status;
}
