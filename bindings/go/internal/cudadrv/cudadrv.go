// Package cudadrv is the little of the CUDA driver API that the GPU tests need: a context,
// device memory, copies and a stream. libcuda.so.1 is opened with dlopen at run time, not
// linked, so test binaries build and run on machines with no driver, where Open fails and
// the tests skip.
//
// The primary context is used (cuDevicePrimaryCtxRetain), the one the CUDA runtime inside
// libflashbwd uses, so memory allocated here is valid in the library's kernels. Every call
// makes the context current first: the current context is per OS thread, and a goroutine
// may change threads between cgo calls.
package cudadrv

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// Our own declarations of the few driver types and functions used (cuda.h is not needed
// to build). Versioned symbol names are those cuda.h maps the plain names to.
typedef int fbcu_result;           // CUresult
typedef int fbcu_device;           // CUdevice
typedef void *fbcu_context;        // CUcontext
typedef unsigned long long fbcu_ptr; // CUdeviceptr
typedef void *fbcu_stream;         // CUstream

static struct {
	fbcu_result (*init)(unsigned);
	fbcu_result (*device_get_count)(int *);
	fbcu_result (*device_get)(fbcu_device *, int);
	fbcu_result (*device_get_name)(char *, int, fbcu_device);
	fbcu_result (*primary_retain)(fbcu_context *, fbcu_device);
	fbcu_result (*primary_release)(fbcu_device);
	fbcu_result (*ctx_set_current)(fbcu_context);
	fbcu_result (*ctx_synchronize)(void);
	fbcu_result (*mem_alloc)(fbcu_ptr *, size_t);
	fbcu_result (*mem_free)(fbcu_ptr);
	fbcu_result (*memcpy_htod)(fbcu_ptr, const void *, size_t);
	fbcu_result (*memcpy_dtoh)(void *, fbcu_ptr, size_t);
	fbcu_result (*memset_d8)(fbcu_ptr, unsigned char, size_t);
	fbcu_result (*stream_create)(fbcu_stream *, unsigned);
	fbcu_result (*stream_synchronize)(fbcu_stream);
	fbcu_result (*stream_destroy)(fbcu_stream);
	fbcu_result (*get_error_name)(fbcu_result, const char **);
} fbcu;

// Load libcuda.so.1 and resolve every function; 0 on success, else -1 with the reason in
// msg (dlerror's text is thread-local, so it is copied here, in the same call).
static int fbcu_load(char *msg, size_t cap)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(msg, cap, "dlopen(libcuda.so.1): %s", dlerror());
		return -1;
	}
#define FBCU_SYM(field, name)                                                        \
	if (!(*(void **)&fbcu.field = dlsym(h, name))) {                                 \
		snprintf(msg, cap, "libcuda.so.1 has no symbol %s", name);                     \
		return -1;                                                                      \
	}
	FBCU_SYM(init, "cuInit")
	FBCU_SYM(device_get_count, "cuDeviceGetCount")
	FBCU_SYM(device_get, "cuDeviceGet")
	FBCU_SYM(device_get_name, "cuDeviceGetName")
	FBCU_SYM(primary_retain, "cuDevicePrimaryCtxRetain")
	FBCU_SYM(primary_release, "cuDevicePrimaryCtxRelease_v2")
	FBCU_SYM(ctx_set_current, "cuCtxSetCurrent")
	FBCU_SYM(ctx_synchronize, "cuCtxSynchronize")
	FBCU_SYM(mem_alloc, "cuMemAlloc_v2")
	FBCU_SYM(mem_free, "cuMemFree_v2")
	FBCU_SYM(memcpy_htod, "cuMemcpyHtoD_v2")
	FBCU_SYM(memcpy_dtoh, "cuMemcpyDtoH_v2")
	FBCU_SYM(memset_d8, "cuMemsetD8_v2")
	FBCU_SYM(stream_create, "cuStreamCreate")
	FBCU_SYM(stream_synchronize, "cuStreamSynchronize")
	FBCU_SYM(stream_destroy, "cuStreamDestroy_v2")
	FBCU_SYM(get_error_name, "cuGetErrorName")
#undef FBCU_SYM
	return 0;
}

static const char *fbcu_error_name(fbcu_result r)
{
	const char *s = NULL;
	if (fbcu.get_error_name && fbcu.get_error_name(r, &s) == 0 && s) return s;
	return "CUDA_ERROR_UNKNOWN";
}

// cuInit, device `ordinal`, its name and its retained primary context.
static fbcu_result fbcu_open(int ordinal, int *count, fbcu_device *dev, fbcu_context *ctx,
                             char *name, int name_cap)
{
	fbcu_result r = fbcu.init(0);
	if (r == 0) r = fbcu.device_get_count(count);
	if (r == 0 && ordinal >= *count) return 101; // CUDA_ERROR_INVALID_DEVICE
	if (r == 0) r = fbcu.device_get(dev, ordinal);
	if (r == 0) r = fbcu.device_get_name(name, name_cap, *dev);
	if (r == 0) r = fbcu.primary_retain(ctx, *dev);
	return r;
}

static fbcu_result fbcu_release(fbcu_device dev) { return fbcu.primary_release(dev); }

static fbcu_result fbcu_alloc(fbcu_context ctx, uintptr_t *out, size_t bytes)
{
	fbcu_ptr p = 0;
	fbcu_result r = fbcu.ctx_set_current(ctx);
	if (r == 0) r = fbcu.mem_alloc(&p, bytes);
	*out = (uintptr_t)p;
	return r;
}

static fbcu_result fbcu_free(fbcu_context ctx, uintptr_t p)
{
	fbcu_result r = fbcu.ctx_set_current(ctx);
	return r == 0 ? fbcu.mem_free((fbcu_ptr)p) : r;
}

// Synchronous copies (pageable host memory): src/dst are not kept after the call.
static fbcu_result fbcu_htod(fbcu_context ctx, uintptr_t dst, const void *src, size_t bytes)
{
	fbcu_result r = fbcu.ctx_set_current(ctx);
	return r == 0 ? fbcu.memcpy_htod((fbcu_ptr)dst, src, bytes) : r;
}

static fbcu_result fbcu_dtoh(fbcu_context ctx, void *dst, uintptr_t src, size_t bytes)
{
	fbcu_result r = fbcu.ctx_set_current(ctx);
	return r == 0 ? fbcu.memcpy_dtoh(dst, (fbcu_ptr)src, bytes) : r;
}

static fbcu_result fbcu_memset(fbcu_context ctx, uintptr_t dst, unsigned char v, size_t bytes)
{
	fbcu_result r = fbcu.ctx_set_current(ctx);
	return r == 0 ? fbcu.memset_d8((fbcu_ptr)dst, v, bytes) : r;
}

static fbcu_result fbcu_set_current(fbcu_context ctx) { return fbcu.ctx_set_current(ctx); }

static fbcu_result fbcu_synchronize(fbcu_context ctx)
{
	fbcu_result r = fbcu.ctx_set_current(ctx);
	return r == 0 ? fbcu.ctx_synchronize() : r;
}

static fbcu_result fbcu_stream_create(fbcu_context ctx, uintptr_t *out)
{
	fbcu_stream s = NULL;
	fbcu_result r = fbcu.ctx_set_current(ctx);
	if (r == 0) r = fbcu.stream_create(&s, 1); // CU_STREAM_NON_BLOCKING
	*out = (uintptr_t)s;
	return r;
}

static fbcu_result fbcu_stream_sync(fbcu_context ctx, uintptr_t s)
{
	fbcu_result r = fbcu.ctx_set_current(ctx);
	return r == 0 ? fbcu.stream_synchronize((fbcu_stream)s) : r;
}

static fbcu_result fbcu_stream_destroy(fbcu_context ctx, uintptr_t s)
{
	fbcu_result r = fbcu.ctx_set_current(ctx);
	return r == 0 ? fbcu.stream_destroy((fbcu_stream)s) : r;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
)

func load() error {
	loadOnce.Do(func() {
		var msg [512]C.char
		if C.fbcu_load(&msg[0], C.size_t(len(msg))) != 0 {
			loadErr = fmt.Errorf("cudadrv: %s", C.GoString(&msg[0]))
		}
	})
	return loadErr
}

func check(op string, r C.fbcu_result) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cudadrv: %s failed: %s (%d)", op, C.GoString(C.fbcu_error_name(r)), int(r))
}

// Context is a device's retained primary context.
type Context struct {
	dev  C.fbcu_device
	ctx  C.fbcu_context
	Name string // the device's name, e.g. "NVIDIA H200"
}

// Unavailable reports whether err means "no CUDA here" (no driver library, or the driver
// found no device) rather than a failure of a working driver.
func Unavailable(err error) bool {
	var u *unavailable
	return errors.As(err, &u)
}

type unavailable struct{ err error }

func (u *unavailable) Error() string { return u.err.Error() }
func (u *unavailable) Unwrap() error { return u.err }

// Open loads the driver and retains device ordinal's primary context. Without a driver or
// device the error satisfies Unavailable.
func Open(ordinal int) (*Context, error) {
	if err := load(); err != nil {
		return nil, &unavailable{err}
	}
	var count C.int
	var c Context
	var name [256]C.char
	r := C.fbcu_open(C.int(ordinal), &count, &c.dev, &c.ctx, &name[0], C.int(len(name)))
	switch r {
	case 0:
	case 100, 34, 3: // CUDA_ERROR_NO_DEVICE, CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_NOT_INITIALIZED
		return nil, &unavailable{check("cuInit/cuDeviceGet", r)}
	default:
		return nil, check(fmt.Sprintf("opening device %d (of %d)", ordinal, int(count)), r)
	}
	c.Name = C.GoString(&name[0])
	return &c, nil
}

// MakeCurrent makes the context current on the calling OS thread (lock the goroutine to
// its thread with runtime.LockOSThread to keep it so).
func (c *Context) MakeCurrent() error {
	return check("cuCtxSetCurrent", C.fbcu_set_current(c.ctx))
}

// Close releases the primary context.
func (c *Context) Close() error {
	return check("cuDevicePrimaryCtxRelease", C.fbcu_release(c.dev))
}

// Alloc allocates device memory (cuMemAlloc: 256-byte aligned or better).
func (c *Context) Alloc(bytes uintptr) (uintptr, error) {
	var p C.uintptr_t
	r := C.fbcu_alloc(c.ctx, &p, C.size_t(bytes))
	return uintptr(p), check(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), r)
}

// Free frees device memory from Alloc.
func (c *Context) Free(p uintptr) error {
	return check("cuMemFree", C.fbcu_free(c.ctx, C.uintptr_t(p)))
}

// Memset sets bytes of device memory to v.
func (c *Context) Memset(dst uintptr, v byte, bytes uintptr) error {
	return check("cuMemsetD8", C.fbcu_memset(c.ctx, C.uintptr_t(dst), C.uchar(v), C.size_t(bytes)))
}

// Synchronize waits for all work of the context.
func (c *Context) Synchronize() error {
	return check("cuCtxSynchronize", C.fbcu_synchronize(c.ctx))
}

// NewStream creates a non-blocking stream; its handle is a CUstream (= cudaStream_t).
func (c *Context) NewStream() (uintptr, error) {
	var s C.uintptr_t
	r := C.fbcu_stream_create(c.ctx, &s)
	return uintptr(s), check("cuStreamCreate", r)
}

// SyncStream waits for the stream's work.
func (c *Context) SyncStream(s uintptr) error {
	return check("cuStreamSynchronize", C.fbcu_stream_sync(c.ctx, C.uintptr_t(s)))
}

// DestroyStream destroys a stream from NewStream.
func (c *Context) DestroyStream(s uintptr) error {
	return check("cuStreamDestroy", C.fbcu_stream_destroy(c.ctx, C.uintptr_t(s)))
}

// Upload copies a Go slice to device memory at dst (synchronous; the slice is not kept).
func Upload[T any](c *Context, dst uintptr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	bytes := uintptr(len(src)) * unsafe.Sizeof(src[0])
	return check("cuMemcpyHtoD", C.fbcu_htod(c.ctx, C.uintptr_t(dst), unsafe.Pointer(&src[0]),
		C.size_t(bytes)))
}

// Download copies device memory at src into a Go slice (synchronous).
func Download[T any](c *Context, dst []T, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	bytes := uintptr(len(dst)) * unsafe.Sizeof(dst[0])
	return check("cuMemcpyDtoH", C.fbcu_dtoh(c.ctx, unsafe.Pointer(&dst[0]), C.uintptr_t(src),
		C.size_t(bytes)))
}
