package flashbwd

import (
	"runtime"
	"sync"
)

// Workspace is scratch memory for a plan's Execute that the library allocated, in the kind
// of memory the plan runs fastest with (flashbwd_workspace_alloc). For a CUDA plan it is
// device memory on the plan's device: compressible where the device supports compute data
// compression (Hopper and newer; every execute writes zeros over its fp32 dQ sums, which
// compressed memory stores almost for free), else ordinary cudaMalloc memory. For a CPU plan
// it is host memory, 256-byte aligned. Any memory that meets SetWorkspace's rules works as
// well; this is a convenience.
//
// The caller owns it: it is not bound to the plan that sized it (bind it with
// plan.SetWorkspace(ws.Addr(), ws.Len())), it outlives that plan, and it suits every plan of
// the same backend and device whose WorkspaceSize is not larger. (ExecuteHost binds the
// plan's own host workspace instead; a Workspace serves SetTensor and Execute.)
//
// Free releases it explicitly. There is deliberately no finalizer: the address given to
// SetWorkspace does not keep the Workspace reachable, so a finalizer could free memory a
// plan still has bound; and freeing device memory synchronizes the device, which must not
// happen at a moment the garbage collector picks (during a stream capture, say).
//
// Since 1.1 (ABI node FLASHBWD_1.1).
type Workspace struct {
	mu         sync.Mutex
	addr       uintptr // device or host address from the library; 0 when none or freed
	n          uintptr
	compressed bool
}

// AllocWorkspace allocates a workspace for the plan (flashbwd_workspace_alloc): at least
// WorkspaceSize bytes (rounded up to the allocation granularity), on the plan's device for
// CUDA plans (the calling thread's current device does not matter and is left as it was),
// host memory for CPU plans. When the plan needs no workspace the Workspace is empty: Addr
// and Len are 0, and binding it with SetWorkspace(0, 0) is valid. Like cudaMalloc it is
// synchronous, not stream-ordered; do not call it while a stream of the device is being
// captured. Planning-only plans (Problem.Arch set) fail with StatusNotSupported.
//
// Release the Workspace with Free; it does not need the plan, which may be closed first.
//
// Since 1.1.
func (p *Plan) AllocWorkspace() (*Workspace, error) {
	if err := p.lock(); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	addr, bytes, compressed, status, msg := cWorkspaceAlloc(p.c)
	runtime.KeepAlive(p)
	if status != 0 {
		return nil, newError("flashbwd_workspace_alloc", status, msg)
	}
	return &Workspace{addr: addr, n: bytes, compressed: compressed}, nil
}

// Addr is the workspace's address (device memory for CUDA plans, host memory for CPU
// plans), for SetWorkspace; 0 when the plan needed none, and after Free. Go code must not
// convert it to a pointer: host or device, it is only for the library.
//
// Since 1.1.
func (w *Workspace) Addr() uintptr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addr
}

// Len is the size in bytes, at least the WorkspaceSize of the plan it was allocated for;
// 0 when the plan needed none, and after Free.
//
// Since 1.1.
func (w *Workspace) Len() uintptr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Compressed reports whether the memory is compressible device memory; always false for
// CPU plans, on devices or drivers without compute data compression, and after Free.
//
// Since 1.1.
func (w *Workspace) Compressed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.compressed
}

// Free releases the memory (flashbwd_workspace_free). It is idempotent: later calls do
// nothing and return nil. Device memory is freed like cudaFree frees it: the device is
// synchronized first, so work still using it finishes before it goes. No plan may execute
// with it bound after Free (it would use freed memory): unbind it (SetWorkspace(0, 0)), bind
// another, or close the plan.
//
// A failure (StatusCUDA, with the failing call in the message) still leaves the Workspace
// freed, as far as the driver allowed: Addr and Len are 0 afterwards.
//
// Since 1.1.
func (w *Workspace) Free() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.addr == 0 {
		w.n, w.compressed = 0, false
		return nil
	}
	status, msg := cWorkspaceFree(w.addr)
	w.addr, w.n, w.compressed = 0, 0, false
	return newError("flashbwd_workspace_free", status, msg)
}
