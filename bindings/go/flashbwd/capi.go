package flashbwd

// capi.go is the package's only cgo file: the preamble's shims and thin Go wrappers that
// return raw statuses. Everything above it (plan.go, host.go) is plain Go.
//
// Why shims instead of calling flashbwd_* directly from Go:
//   - A failing call's message must be read in the same C call. Between two cgo calls the
//     goroutine may move to another OS thread, so reading the thread-local
//     flashbwd_last_error() in a second call could return another thread's message.
//   - Device pointers and streams arrive as uintptr_t and become void * in C. Doing that
//     conversion in Go (unsafe.Pointer(uintptr)) is what `go vet` rightly flags.

/*
#cgo pkg-config: flashbwd
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flashbwd.h"

// Copy the failing call's message into msg (cap bytes, always NUL-terminated). The plan's
// message is preferred; a failure with no plan (create, NULL plan) only sets the thread's.
static void fbgo_copy_message(const flashbwd_plan *plan, char *msg, size_t cap)
{
	const char *m = plan ? flashbwd_plan_last_error(plan) : "";
	if (m[0] == '\0') m = flashbwd_last_error();
	size_t n = strlen(m);
	if (n >= cap) n = cap - 1;
	memcpy(msg, m, n);
	msg[n] = '\0';
}

static int32_t fbgo_plan_create(const flashbwd_problem *problem, flashbwd_plan **out,
                                char *msg, size_t cap)
{
	int32_t s = flashbwd_plan_create(problem, out);
	if (s != FLASHBWD_OK) fbgo_copy_message(NULL, msg, cap);
	return s;
}

static int32_t fbgo_set_tensor(flashbwd_plan *plan, int32_t id, uintptr_t ptr,
                               const int64_t *strides, int32_t num_strides, char *msg, size_t cap)
{
	int32_t s = flashbwd_plan_set_tensor(plan, id, (void *)ptr, strides, num_strides);
	if (s != FLASHBWD_OK) fbgo_copy_message(plan, msg, cap);
	return s;
}

static int32_t fbgo_workspace_size(const flashbwd_plan *plan, size_t *bytes, char *msg,
                                   size_t cap)
{
	int32_t s = flashbwd_plan_workspace_size(plan, bytes);
	if (s != FLASHBWD_OK) fbgo_copy_message(plan, msg, cap);
	return s;
}

static int32_t fbgo_set_workspace(flashbwd_plan *plan, uintptr_t ptr, size_t bytes, char *msg,
                                  size_t cap)
{
	int32_t s = flashbwd_plan_set_workspace(plan, (void *)ptr, bytes);
	if (s != FLASHBWD_OK) fbgo_copy_message(plan, msg, cap);
	return s;
}

// Since 1.1. The memory comes back as uintptr_t: it may be device memory, and Go keeps it
// as an address, never as an unsafe.Pointer.
static int32_t fbgo_workspace_alloc(flashbwd_plan *plan, uintptr_t *ptr, size_t *bytes,
                                    int32_t *compressed, char *msg, size_t cap)
{
	void *p = NULL;
	int32_t s = flashbwd_workspace_alloc(plan, &p, bytes, compressed);
	*ptr = (uintptr_t)p;
	if (s != FLASHBWD_OK) fbgo_copy_message(plan, msg, cap);
	return s;
}

// Since 1.1. There is no plan: a failure's message is only the thread's.
static int32_t fbgo_workspace_free(uintptr_t ptr, char *msg, size_t cap)
{
	int32_t s = flashbwd_workspace_free((void *)ptr);
	if (s != FLASHBWD_OK) fbgo_copy_message(NULL, msg, cap);
	return s;
}

static int32_t fbgo_execute(flashbwd_plan *plan, uintptr_t stream, char *msg, size_t cap)
{
	int32_t s = flashbwd_execute(plan, (void *)stream);
	if (s != FLASHBWD_OK) fbgo_copy_message(plan, msg, cap);
	return s;
}

static int32_t fbgo_get_info(const flashbwd_plan *plan, flashbwd_plan_info *info, char *msg,
                             size_t cap)
{
	memset(info, 0, sizeof *info);
	info->struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
	int32_t s = flashbwd_plan_get_info(plan, info);
	if (s != FLASHBWD_OK) fbgo_copy_message(plan, msg, cap);
	return s;
}

// One backward on Go-owned host memory (the CPU backend), in one C call: bind every
// non-NULL tensor (packed), bind the workspace, execute, then unbind the tensors it bound,
// whatever happened, so the library holds no pointer into Go memory once this returns
// (the cgo pointer rules). The pointers come as separate arguments because Go may not pass
// C an array of Go pointers.
static int32_t fbgo_execute_host(flashbwd_plan *plan,
                                 void *q, void *k, void *v, void *o, void *dout, void *lse,
                                 void *dq, void *dk, void *dv, void *cu_q, void *cu_k,
                                 void *used_q, void *used_k, void *slopes,
                                 uintptr_t workspace, size_t workspace_bytes,
                                 char *msg, size_t cap)
{
	void *ptrs[FLASHBWD_TENSOR_COUNT] = {0};
	ptrs[FLASHBWD_TENSOR_Q] = q;
	ptrs[FLASHBWD_TENSOR_K] = k;
	ptrs[FLASHBWD_TENSOR_V] = v;
	ptrs[FLASHBWD_TENSOR_O] = o;
	ptrs[FLASHBWD_TENSOR_DO] = dout;
	ptrs[FLASHBWD_TENSOR_LSE] = lse;
	ptrs[FLASHBWD_TENSOR_DQ] = dq;
	ptrs[FLASHBWD_TENSOR_DK] = dk;
	ptrs[FLASHBWD_TENSOR_DV] = dv;
	ptrs[FLASHBWD_TENSOR_CU_SEQLENS_Q] = cu_q;
	ptrs[FLASHBWD_TENSOR_CU_SEQLENS_K] = cu_k;
	ptrs[FLASHBWD_TENSOR_SEQUSED_Q] = used_q;
	ptrs[FLASHBWD_TENSOR_SEQUSED_K] = used_k;
	ptrs[FLASHBWD_TENSOR_ALIBI_SLOPES] = slopes;
	int32_t s = FLASHBWD_OK, bound[FLASHBWD_TENSOR_COUNT] = {0};
	for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT && s == FLASHBWD_OK; ++id) {
		if (!ptrs[id]) continue;
		s = flashbwd_plan_set_tensor(plan, id, ptrs[id], NULL, 0);
		bound[id] = s == FLASHBWD_OK;
	}
	if (s == FLASHBWD_OK && workspace_bytes > 0)
		s = flashbwd_plan_set_workspace(plan, (void *)workspace, workspace_bytes);
	if (s == FLASHBWD_OK) s = flashbwd_execute(plan, NULL);
	if (s != FLASHBWD_OK) fbgo_copy_message(plan, msg, cap); // before unbinding clears it
	for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id)
		if (bound[id]) (void)flashbwd_plan_set_tensor(plan, id, NULL, NULL, 0);
	return s;
}

// Host memory for the CPU backend that C may keep pointers to: 256-byte aligned like
// cudaMalloc, zeroed. NULL when out of memory.
static void *fbgo_host_alloc(size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return NULL;
	memset(p, 0, bytes ? bytes : 1);
	return p;
}
*/
import "C"

import (
	"unsafe"
)

// messageBytes holds any library message (the library keeps at most 512 bytes).
const messageBytes = 1024

// The version of the header this package was compiled against.
const compiledVersion = uint32(C.FLASHBWD_VERSION)

func cVersion() uint32 { return uint32(C.flashbwd_version()) }

func cStatusName(s int32) string   { return C.GoString(C.flashbwd_status_name(C.int32_t(s))) }
func cStatusString(s int32) string { return C.GoString(C.flashbwd_status_string(C.int32_t(s))) }

// cStructSize is what the loaded library knows of a struct (0: unknown id).
func cStructSize(id int32) uintptr { return uintptr(C.flashbwd_struct_size(C.int32_t(id))) }

// Struct ids and sizes of the compiled header.
const (
	structProblem  = int32(C.FLASHBWD_STRUCT_PROBLEM)
	structPlanInfo = int32(C.FLASHBWD_STRUCT_PLAN_INFO)
)

func compiledProblemSize() uintptr  { return uintptr(C.FLASHBWD_PROBLEM_STRUCT_SIZE) }
func compiledPlanInfoSize() uintptr { return uintptr(C.FLASHBWD_PLAN_INFO_STRUCT_SIZE) }

func cBool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// cPlanCreate builds the C problem from a checked Problem and creates the plan.
func cPlanCreate(p *Problem) (unsafe.Pointer, int32, string) {
	var cp C.flashbwd_problem // zero: every field at its default
	cp.struct_size = C.FLASHBWD_PROBLEM_STRUCT_SIZE
	cp.backend = C.int32_t(p.Backend)
	cp.device = C.int32_t(p.Device)
	cp.dtype = C.int32_t(p.DType)
	cp.head_dim = C.int32_t(p.HeadDim)
	cp.batch = C.int64_t(p.Batch)
	cp.heads_q = C.int64_t(p.HeadsQ)
	cp.heads_kv = C.int64_t(p.HeadsKV)
	cp.seqlen_q = C.int64_t(p.SeqlenQ)
	cp.seqlen_k = C.int64_t(p.SeqlenK)
	cp.total_q = C.int64_t(p.TotalQ)
	cp.total_k = C.int64_t(p.TotalK)
	cp.softmax_scale = C.float(p.SoftmaxScale)
	cp.softcap = C.float(p.Softcap)
	cp.causal = cBool(p.Causal)
	if p.Window != nil {
		cp.use_window = 1
		cp.window_left = C.int32_t(p.Window.Left)
		cp.window_right = C.int32_t(p.Window.Right)
	}
	cp.varlen = cBool(p.Varlen)
	cp.deterministic = cBool(p.Deterministic)
	cp.sm_count = C.int32_t(p.SMCount)
	cp.arch = C.int32_t(p.Arch)
	cp.smem_per_block = C.int32_t(p.SMemPerBlock)

	var out *C.flashbwd_plan
	var msg [messageBytes]C.char
	s := C.fbgo_plan_create(&cp, &out, &msg[0], messageBytes)
	if s != C.FLASHBWD_OK {
		return nil, int32(s), C.GoString(&msg[0])
	}
	return unsafe.Pointer(out), 0, ""
}

func cPlanDestroy(h unsafe.Pointer) { C.flashbwd_plan_destroy((*C.flashbwd_plan)(h)) }

func cSetTensor(h unsafe.Pointer, id TensorID, ptr uintptr, strides []int64) (int32, string) {
	var sp *C.int64_t
	if strides != nil {
		// A zero-length non-nil slice still means "strides given, none of them": pass a
		// valid pointer so the library sees num_strides = 0 rather than NULL (packed).
		var one [1]int64
		if len(strides) > 0 {
			sp = (*C.int64_t)(unsafe.Pointer(&strides[0]))
		} else {
			sp = (*C.int64_t)(unsafe.Pointer(&one[0]))
		}
	}
	var msg [messageBytes]C.char
	s := C.fbgo_set_tensor((*C.flashbwd_plan)(h), C.int32_t(id), C.uintptr_t(ptr), sp,
		C.int32_t(len(strides)), &msg[0], messageBytes)
	return int32(s), C.GoString(&msg[0])
}

func cWorkspaceSize(h unsafe.Pointer) (uintptr, int32, string) {
	var bytes C.size_t
	var msg [messageBytes]C.char
	s := C.fbgo_workspace_size((*C.flashbwd_plan)(h), &bytes, &msg[0], messageBytes)
	return uintptr(bytes), int32(s), C.GoString(&msg[0])
}

func cSetWorkspace(h unsafe.Pointer, ptr, bytes uintptr) (int32, string) {
	var msg [messageBytes]C.char
	s := C.fbgo_set_workspace((*C.flashbwd_plan)(h), C.uintptr_t(ptr), C.size_t(bytes),
		&msg[0], messageBytes)
	return int32(s), C.GoString(&msg[0])
}

// cWorkspaceAlloc allocates a workspace for the plan (flashbwd_workspace_alloc, since 1.1):
// its address (0 when the plan needs none), size and whether it is compressible.
func cWorkspaceAlloc(h unsafe.Pointer) (uintptr, uintptr, bool, int32, string) {
	var ptr C.uintptr_t
	var bytes C.size_t
	var compressed C.int32_t
	var msg [messageBytes]C.char
	s := C.fbgo_workspace_alloc((*C.flashbwd_plan)(h), &ptr, &bytes, &compressed, &msg[0],
		messageBytes)
	if s != C.FLASHBWD_OK {
		return 0, 0, false, int32(s), C.GoString(&msg[0])
	}
	return uintptr(ptr), uintptr(bytes), compressed != 0, 0, ""
}

// cWorkspaceFree frees what cWorkspaceAlloc gave (flashbwd_workspace_free, since 1.1).
func cWorkspaceFree(ptr uintptr) (int32, string) {
	var msg [messageBytes]C.char
	s := C.fbgo_workspace_free(C.uintptr_t(ptr), &msg[0], messageBytes)
	return int32(s), C.GoString(&msg[0])
}

func cExecute(h unsafe.Pointer, stream uintptr) (int32, string) {
	var msg [messageBytes]C.char
	s := C.fbgo_execute((*C.flashbwd_plan)(h), C.uintptr_t(stream), &msg[0], messageBytes)
	return int32(s), C.GoString(&msg[0])
}

func cPlanInfo(h unsafe.Pointer) (Info, int32, string) {
	var ci C.flashbwd_plan_info
	var msg [messageBytes]C.char
	s := C.fbgo_get_info((*C.flashbwd_plan)(h), &ci, &msg[0], messageBytes)
	if s != C.FLASHBWD_OK {
		return Info{}, int32(s), C.GoString(&msg[0])
	}
	info := Info{
		Backend:        Backend(ci.backend),
		Arch:           int32(ci.arch),
		SMCount:        int32(ci.sm_count),
		SMemPerBlock:   int32(ci.smem_per_block),
		KernelHeadDim:  int32(ci.kernel_head_dim),
		BlockM:         int32(ci.block_m),
		BlockN:         int32(ci.block_n),
		NumThreads:     int32(ci.num_threads),
		StagesQ:        int32(ci.stages_q),
		StagesDO:       int32(ci.stages_do),
		SMemBytes:      int32(ci.smem_bytes),
		WorkspaceBytes: uintptr(ci.workspace_bytes),
	}
	for i := 0; i < int(ci.num_launches) && i < len(ci.grid); i++ {
		var l Launch
		for j := 0; j < 3; j++ {
			l.Grid[j] = int32(ci.grid[i][j])
			l.Block[j] = int32(ci.block[i][j])
		}
		info.Launches = append(info.Launches, l)
	}
	return info, 0, ""
}

// slicePtr is the address of a slice's first element, or nil for an empty slice.
func slicePtr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// cExecuteHost runs fbgo_execute_host: the Go slices are passed as separate arguments,
// which the cgo rules allow because their memory holds no Go pointers and the shim keeps
// none of them after it returns.
func cExecuteHost(h unsafe.Pointer, t *HostTensors, ws, wsBytes uintptr) (int32, string) {
	var msg [messageBytes]C.char
	s := C.fbgo_execute_host((*C.flashbwd_plan)(h),
		slicePtr(t.Q), slicePtr(t.K), slicePtr(t.V), slicePtr(t.O), slicePtr(t.DO),
		slicePtr(t.LSE), slicePtr(t.DQ), slicePtr(t.DK), slicePtr(t.DV),
		slicePtr(t.CuSeqlensQ), slicePtr(t.CuSeqlensK), slicePtr(t.SequsedQ),
		slicePtr(t.SequsedK), slicePtr(t.AlibiSlopes),
		C.uintptr_t(ws), C.size_t(wsBytes), &msg[0], messageBytes)
	return int32(s), C.GoString(&msg[0])
}

// cHostAlloc returns zeroed, 256-byte aligned C memory, or nil.
func cHostAlloc(bytes uintptr) unsafe.Pointer { return C.fbgo_host_alloc(C.size_t(bytes)) }

func cHostFree(p unsafe.Pointer) { C.free(p) }

// headerValues lists constants of the compiled header by name, for the test that checks
// this package's Go constants against them.
func headerValues() map[string]int64 {
	return map[string]int64{
		"FLASHBWD_OK":                      C.FLASHBWD_OK,
		"FLASHBWD_ERR_NULL_ARGUMENT":       C.FLASHBWD_ERR_NULL_ARGUMENT,
		"FLASHBWD_ERR_STRUCT_SIZE":         C.FLASHBWD_ERR_STRUCT_SIZE,
		"FLASHBWD_ERR_INVALID_VALUE":       C.FLASHBWD_ERR_INVALID_VALUE,
		"FLASHBWD_ERR_NOT_SUPPORTED":       C.FLASHBWD_ERR_NOT_SUPPORTED,
		"FLASHBWD_ERR_NO_DEVICE":           C.FLASHBWD_ERR_NO_DEVICE,
		"FLASHBWD_ERR_WRONG_DEVICE":        C.FLASHBWD_ERR_WRONG_DEVICE,
		"FLASHBWD_ERR_MISALIGNED":          C.FLASHBWD_ERR_MISALIGNED,
		"FLASHBWD_ERR_TENSOR_NOT_SET":      C.FLASHBWD_ERR_TENSOR_NOT_SET,
		"FLASHBWD_ERR_WORKSPACE_TOO_SMALL": C.FLASHBWD_ERR_WORKSPACE_TOO_SMALL,
		"FLASHBWD_ERR_CUDA":                C.FLASHBWD_ERR_CUDA,
		"FLASHBWD_ERR_OUT_OF_MEMORY":       C.FLASHBWD_ERR_OUT_OF_MEMORY,
		"FLASHBWD_ERR_OVERFLOW":            C.FLASHBWD_ERR_OVERFLOW,
		"FLASHBWD_ERR_BUSY":                C.FLASHBWD_ERR_BUSY,
		"FLASHBWD_ERR_OVERLAP":             C.FLASHBWD_ERR_OVERLAP,
		"FLASHBWD_ERR_INVALID_LENGTHS":     C.FLASHBWD_ERR_INVALID_LENGTHS,
		"FLASHBWD_ERR_INTERNAL":            C.FLASHBWD_ERR_INTERNAL,
		"FLASHBWD_STATUS_COUNT":            C.FLASHBWD_STATUS_COUNT,
		"FLASHBWD_DTYPE_BF16":              C.FLASHBWD_DTYPE_BF16,
		"FLASHBWD_DTYPE_FP16":              C.FLASHBWD_DTYPE_FP16,
		"FLASHBWD_BACKEND_CUDA":            C.FLASHBWD_BACKEND_CUDA,
		"FLASHBWD_BACKEND_CPU":             C.FLASHBWD_BACKEND_CPU,
		"FLASHBWD_TENSOR_Q":                C.FLASHBWD_TENSOR_Q,
		"FLASHBWD_TENSOR_K":                C.FLASHBWD_TENSOR_K,
		"FLASHBWD_TENSOR_V":                C.FLASHBWD_TENSOR_V,
		"FLASHBWD_TENSOR_O":                C.FLASHBWD_TENSOR_O,
		"FLASHBWD_TENSOR_DO":               C.FLASHBWD_TENSOR_DO,
		"FLASHBWD_TENSOR_LSE":              C.FLASHBWD_TENSOR_LSE,
		"FLASHBWD_TENSOR_DQ":               C.FLASHBWD_TENSOR_DQ,
		"FLASHBWD_TENSOR_DK":               C.FLASHBWD_TENSOR_DK,
		"FLASHBWD_TENSOR_DV":               C.FLASHBWD_TENSOR_DV,
		"FLASHBWD_TENSOR_CU_SEQLENS_Q":     C.FLASHBWD_TENSOR_CU_SEQLENS_Q,
		"FLASHBWD_TENSOR_CU_SEQLENS_K":     C.FLASHBWD_TENSOR_CU_SEQLENS_K,
		"FLASHBWD_TENSOR_SEQUSED_Q":        C.FLASHBWD_TENSOR_SEQUSED_Q,
		"FLASHBWD_TENSOR_SEQUSED_K":        C.FLASHBWD_TENSOR_SEQUSED_K,
		"FLASHBWD_TENSOR_ALIBI_SLOPES":     C.FLASHBWD_TENSOR_ALIBI_SLOPES,
		"FLASHBWD_TENSOR_COUNT":            C.FLASHBWD_TENSOR_COUNT,
	}
}
