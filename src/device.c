/* device.c — the per-device property cache and the only CUDA runtime calls of planning.
 *
 * Properties are read once per device per process under a lock (thread-safe), so plan
 * creation after the first costs no CUDA query. The kernels' dynamic shared-memory limit is
 * raised here too, once per (device, kernel), and each plan's launch graph is built, both on
 * the plan's device with the caller's current device restored afterwards.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "internal.h"

#ifdef FB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define FB_MAX_DEVICES 64
#define FB_MAX_KERNELS 64

#ifdef FB_WITH_CUDA /* a CPU-only build has no device to cache */
typedef struct device_entry {
    int ready;
    fb_device_props props;
    int32_t raised_smem[FB_MAX_KERNELS]; /* dynamic smem limit already set per kernel */
} device_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static device_entry cache[FB_MAX_DEVICES];
#endif
static atomic_llong query_count;

int64_t fb_device_query_count(void) { return (int64_t)atomic_load(&query_count); }

#ifdef FB_WITH_CUDA

int32_t fb_cuda_fail(flashbwd_plan *plan, int err_code, const char *call)
{
    const cudaError_t err = (cudaError_t)err_code;
    if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ||
        err == cudaErrorStubLibrary)
        return fb_fail(plan, FLASHBWD_ERR_NO_DEVICE, "%s failed: %s (%s)", call,
                       cudaGetErrorName(err), cudaGetErrorString(err));
    return fb_fail(plan, FLASHBWD_ERR_CUDA, "%s failed: %s (%s)", call, cudaGetErrorName(err),
                   cudaGetErrorString(err));
}

static int32_t query(flashbwd_plan *plan, int32_t ordinal, fb_device_props *out)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return fb_cuda_fail(plan, err, "cudaGetDeviceCount");
    FB_FAIL_IF(plan, count == 0, FLASHBWD_ERR_NO_DEVICE, "no CUDA device is visible");
    FB_FAIL_IF(plan, ordinal >= count, FLASHBWD_ERR_INVALID_VALUE,
               "problem.device = %d, but only %d CUDA device(s) are visible", ordinal, count);
    FB_FAIL_IF(plan, ordinal >= FB_MAX_DEVICES, FLASHBWD_ERR_NOT_SUPPORTED,
               "problem.device = %d; flashbwd supports device ordinals below %d", ordinal,
               FB_MAX_DEVICES);
    int major = 0, minor = 0, sms = 0, smem = 0;
    atomic_fetch_add(&query_count, 1);
    if ((err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal)) ||
        (err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal)) ||
        (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal)) ||
        (err = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal)))
        return fb_cuda_fail(plan, err, "cudaDeviceGetAttribute");
    out->arch = major * 10 + minor;
    out->sm_count = sms;
    out->smem_per_block = smem;
    return FLASHBWD_OK;
}

int32_t fb_device_get(flashbwd_plan *plan, int32_t ordinal, fb_device_props *out)
{
    FB_FAIL_IF(plan, ordinal < 0, FLASHBWD_ERR_INVALID_VALUE, "device ordinal %d < 0", ordinal);
    pthread_mutex_lock(&cache_lock);
    int32_t status = FLASHBWD_OK;
    if (ordinal < FB_MAX_DEVICES && cache[ordinal].ready) {
        *out = cache[ordinal].props;
    } else {
        status = query(plan, ordinal, out);
        if (status == FLASHBWD_OK) {
            cache[ordinal].props = *out;
            cache[ordinal].ready = 1;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return status;
}

int32_t fb_device_prepare_kernel(flashbwd_plan *plan, int32_t ordinal, int kernel_index,
                                 int smem_bytes)
{
    FB_FAIL_IF(plan, kernel_index < 0 || kernel_index >= FB_MAX_KERNELS ||
                         ordinal < 0 || ordinal >= FB_MAX_DEVICES,
               FLASHBWD_ERR_INTERNAL, "kernel index %d or device %d out of range",
               kernel_index, ordinal);
    pthread_mutex_lock(&cache_lock);
    int32_t status = FLASHBWD_OK;
    if (cache[ordinal].raised_smem[kernel_index] < smem_bytes) {
        int current = 0;
        cudaError_t err = cudaGetDevice(&current);
        if (err != cudaSuccess) {
            status = fb_cuda_fail(plan, err, "cudaGetDevice");
        } else if (current != ordinal && (err = cudaSetDevice(ordinal)) != cudaSuccess) {
            status = fb_cuda_fail(plan, err, "cudaSetDevice");
        } else {
            err = (cudaError_t)fb_kernel_prepare(kernel_index, smem_bytes);
            if (err != cudaSuccess)
                status = fb_cuda_fail(plan, err, "preparing the kernel (cudaFuncGetAttributes, "
                                                 "cudaFuncSetAttribute MaxDynamicSharedMemorySize)");
            else
                cache[ordinal].raised_smem[kernel_index] = smem_bytes;
            if (current != ordinal) {
                cudaError_t back = cudaSetDevice(current);
                if (back != cudaSuccess && status == FLASHBWD_OK)
                    status = fb_cuda_fail(plan, back, "cudaSetDevice (restoring the caller's)");
            }
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return status;
}

int32_t fb_device_build_graph(flashbwd_plan *plan, int32_t ordinal)
{
    int current = 0;
    cudaError_t err = cudaGetDevice(&current);
    if (err != cudaSuccess) return fb_cuda_fail(plan, err, "cudaGetDevice");
    if (current != ordinal && (err = cudaSetDevice(ordinal)) != cudaSuccess)
        return fb_cuda_fail(plan, err, "cudaSetDevice");
    const char *call = "";
    err = (cudaError_t)fb_graph_create(&plan->launches, ordinal, &plan->graph, &call);
    int32_t status = FLASHBWD_OK;
    if (err != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "building the launch graph: %s", call);
        status = fb_cuda_fail(plan, err, what);
    }
    if (current != ordinal) {
        const cudaError_t back = cudaSetDevice(current);
        if (back != cudaSuccess && status == FLASHBWD_OK)
            status = fb_cuda_fail(plan, back, "cudaSetDevice (restoring the caller's)");
    }
    if (status != FLASHBWD_OK) { /* no half-made plan keeps a graph */
        fb_graph_release(plan->graph);
        plan->graph = NULL;
    }
    return status;
}

int32_t fb_device_check_current(flashbwd_plan *plan, int32_t ordinal)
{
    int current = -1;
    cudaError_t err = cudaGetDevice(&current);
    if (err != cudaSuccess) return fb_cuda_fail(plan, err, "cudaGetDevice");
    FB_FAIL_IF(plan, current != ordinal, FLASHBWD_ERR_WRONG_DEVICE,
               "the current CUDA device is %d, but the plan was created for device %d",
               current, ordinal);
    return FLASHBWD_OK;
}

#else /* !FB_WITH_CUDA: a CPU-only build */

int32_t fb_device_get(flashbwd_plan *plan, int32_t ordinal, fb_device_props *out)
{
    (void)ordinal, (void)out;
    return fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED,
                   "this flashbwd was built without CUDA; use FLASHBWD_BACKEND_CPU");
}

int32_t fb_device_prepare_kernel(flashbwd_plan *plan, int32_t ordinal, int kernel_index,
                                 int smem_bytes)
{
    (void)ordinal, (void)kernel_index, (void)smem_bytes;
    return fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED, "this flashbwd was built without CUDA");
}

int32_t fb_device_build_graph(flashbwd_plan *plan, int32_t ordinal)
{
    (void)ordinal;
    return fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED, "this flashbwd was built without CUDA");
}

void fb_graph_release(fb_launch_graph *graph) { (void)graph; }

int32_t fb_device_check_current(flashbwd_plan *plan, int32_t ordinal)
{
    (void)ordinal;
    return fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED, "this flashbwd was built without CUDA");
}

/* kernels/launch.cu is not compiled: no variant exists (plan.c only asks for real devices,
 * which fb_device_get already refused, but the symbol must link). */
int fb_kernel_find(const fb_kernel_key *key)
{
    (void)key;
    return -1;
}

#endif
