package flashbwd

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Version is the loaded library's version, encoded MAJOR*10000 + MINOR*100 + PATCH.
func Version() uint32 { return cVersion() }

// CompiledVersion is the version of flashbwd.h this package was compiled against.
func CompiledVersion() uint32 { return compiledVersion }

var (
	versionOnce sync.Once
	versionErr  error
)

// CheckVersion reports whether the loaded library can serve this package: the same major
// version and a runtime at least as new as the header compiled in (so every function and
// struct field this package uses exists), and struct sizes the library knows. NewPlan calls
// it once, on first use.
func CheckVersion() error {
	versionOnce.Do(func() { versionErr = checkVersion(cVersion(), compiledVersion) })
	return versionErr
}

func checkVersion(runtimeV, compiledV uint32) error {
	if runtimeV/10000 != compiledV/10000 || runtimeV < compiledV {
		return fmt.Errorf("flashbwd: the loaded library is version %s, but this package was "+
			"compiled against %s; it needs major %d and at least %s",
			versionString(runtimeV), versionString(compiledV), compiledV/10000,
			versionString(compiledV))
	}
	if got, want := cStructSize(structProblem), compiledProblemSize(); got < want {
		return fmt.Errorf("flashbwd: the loaded library knows %d bytes of flashbwd_problem; "+
			"this package needs %d", got, want)
	}
	if got, want := cStructSize(structPlanInfo), compiledPlanInfoSize(); got < want {
		return fmt.Errorf("flashbwd: the loaded library knows %d bytes of flashbwd_plan_info; "+
			"this package needs %d", got, want)
	}
	return nil
}

func versionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// Plan is a flashbwd plan: an immutable problem plus the tensors and workspace bound to it.
//
// Release it with Close. A finalizer closes a plan that becomes unreachable, as a safety
// net only: the plan holds no device memory, but its host memory (and, for host tensors,
// the workspace) is freed only then. The methods of one Plan may be called from several
// goroutines; they are serialized by a mutex, because the C plan must not be used from two
// threads at once.
type Plan struct {
	mu      sync.Mutex
	c       unsafe.Pointer // *C.flashbwd_plan; nil once closed
	problem Problem
	hostWS  unsafe.Pointer // C memory for ExecuteHost's workspace, owned by the plan
	hostWSN uintptr
}

// NewPlan validates p and builds a plan for it (flashbwd_plan_create). Failures are an
// *Error whose Message names the offending field and value.
func NewPlan(p Problem) (*Plan, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	if p.Window != nil {
		w := *p.Window // keep the caller's Window out of the plan's copy
		p.Window = &w
	}
	c, status, msg := cPlanCreate(&p)
	if status != 0 {
		return nil, newError("flashbwd_plan_create", status, msg)
	}
	plan := &Plan{c: c, problem: p}
	runtime.SetFinalizer(plan, (*Plan).finalize)
	return plan, nil
}

func (p *Plan) finalize() {
	finalized.Add(1)
	_ = p.Close()
}

// finalized counts plans closed by the finalizer (what the finalizer test observes).
var finalized atomic.Int64

// Close destroys the plan (flashbwd_plan_destroy) and frees the host memory the Plan
// allocated. It is idempotent: later calls do nothing and return nil. Work already
// enqueued on a CUDA stream keeps running; the caller's tensors and workspace must stay
// valid until it has finished.
func (p *Plan) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return nil
	}
	cPlanDestroy(p.c)
	p.c = nil
	if p.hostWS != nil {
		cHostFree(p.hostWS)
		p.hostWS, p.hostWSN = nil, 0
	}
	runtime.SetFinalizer(p, nil)
	return nil
}

// lock locks the plan and fails with ErrClosed once it is closed.
func (p *Plan) lock() error {
	p.mu.Lock()
	if p.c == nil {
		p.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Problem returns the problem the plan was made for, as given (defaults not applied).
func (p *Plan) Problem() Problem {
	q := p.problem
	if q.Window != nil {
		w := *q.Window
		q.Window = &w
	}
	return q
}

// SetTensor binds tensor id at address ptr with element strides, outermost first
// (flashbwd_plan_set_tensor); nil strides means packed row-major, ptr 0 unbinds.
//
// ptr is a device address for CUDA plans. For CPU plans it must be memory that stays put
// and that C may keep a pointer to: a HostBuffer, or other C-allocated memory, never the
// address of Go memory (the library keeps ptr until the next Execute; the cgo rules forbid
// C from keeping Go pointers). To run on Go slices use ExecuteHost instead.
func (p *Plan) SetTensor(id TensorID, ptr uintptr, strides []int64) error {
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	status, msg := cSetTensor(p.c, id, ptr, strides)
	runtime.KeepAlive(p)
	return newError("flashbwd_plan_set_tensor", status, msg)
}

// WorkspaceSize is the scratch memory Execute needs, in bytes (device memory for CUDA plans,
// host memory for CPU plans); it may be 0.
func (p *Plan) WorkspaceSize() (uintptr, error) {
	if err := p.lock(); err != nil {
		return 0, err
	}
	defer p.mu.Unlock()
	bytes, status, msg := cWorkspaceSize(p.c)
	runtime.KeepAlive(p)
	return bytes, newError("flashbwd_plan_workspace_size", status, msg)
}

// SetWorkspace binds the caller's scratch memory (flashbwd_plan_set_workspace): at least
// WorkspaceSize bytes, 256-byte aligned for CUDA plans. The same rules as SetTensor say
// what ptr may be; a Workspace from AllocWorkspace (since 1.1) meets them, bound as
// SetWorkspace(ws.Addr(), ws.Len()). ptr 0 unbinds.
func (p *Plan) SetWorkspace(ptr, bytes uintptr) error {
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	status, msg := cSetWorkspace(p.c, ptr, bytes)
	runtime.KeepAlive(p)
	return newError("flashbwd_plan_set_workspace", status, msg)
}

// Execute computes dQ, dK and dV for the bound tensors (flashbwd_execute). On CUDA plans it
// enqueues the kernels on stream (a cudaStream_t or CUstream as uintptr; 0 is the legacy
// default stream) and returns without waiting; on CPU plans it computes before returning.
func (p *Plan) Execute(stream uintptr) error {
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	status, msg := cExecute(p.c, stream)
	runtime.KeepAlive(p)
	return newError("flashbwd_execute", status, msg)
}

// Launch is the grid and block shape of one kernel launch.
type Launch struct {
	Grid, Block [3]int32
}

// Info is what a plan chose (flashbwd_plan_info).
type Info struct {
	Backend        Backend
	Arch           int32 // 10*major+minor of the device planned for; 0 on the CPU
	SMCount        int32
	SMemPerBlock   int32 // the device's opt-in shared memory per block, bytes
	KernelHeadDim  int32
	BlockM, BlockN int32
	NumThreads     int32
	StagesQ        int32
	StagesDO       int32
	SMemBytes      int32    // dynamic shared memory of the main kernel, bytes
	Launches       []Launch // preprocess, main, convert dQ (grid 0: not launched), [convert dK/dV]
	WorkspaceBytes uintptr
}

// Info reports the plan's configuration, launch shapes and workspace size.
func (p *Plan) Info() (Info, error) {
	if err := p.lock(); err != nil {
		return Info{}, err
	}
	defer p.mu.Unlock()
	info, status, msg := cPlanInfo(p.c)
	runtime.KeepAlive(p)
	return info, newError("flashbwd_plan_get_info", status, msg)
}
