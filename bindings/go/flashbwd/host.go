package flashbwd

import (
	"runtime"
	"sync"
	"unsafe"
)

// HostTensors are the tensors of one backward pass in Go memory, packed row-major in the
// layouts of Problem (see PackedLen). 16-bit tensors hold raw bf16 or fp16 bits (convert
// with BF16FromFloat32, FP16ToFloat32, ...). A nil slice leaves that id as it is bound (or
// unbound). Each non-nil slice must hold at least PackedLen elements.
type HostTensors struct {
	Q, K, V, O, DO []uint16  // inputs
	LSE            []float32 // input: the forward's natural-log logsumexp
	DQ, DK, DV     []uint16  // outputs, overwritten
	CuSeqlensQ     []int32   // varlen only
	CuSeqlensK     []int32   // varlen only
	SequsedQ       []int32   // varlen, optional
	SequsedK       []int32   // varlen, optional
	AlibiSlopes    []float32 // optional, (heads_q)
}

// ExecuteHost runs the backward of a CPU-backend plan on Go slices. It binds every non-nil
// tensor, binds a workspace the plan owns (C memory, allocated on first use and freed by
// Close), executes, and unbinds the tensors again, all within one cgo call: the library
// holds pointers into Go memory only while that call runs, as the cgo pointer rules
// require. The tensors it bound are left unbound afterwards.
func (p *Plan) ExecuteHost(t *HostTensors) error {
	const op = "ExecuteHost"
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	if p.problem.Backend != BackendCPU {
		return invalid(op, "problem.backend = %s; host slices need a BackendCPU plan "+
			"(for CUDA plans bind device memory with SetTensor)", p.problem.Backend)
	}
	if t == nil {
		return &Error{Op: op, Status: StatusNullArgument,
			Message: StatusNullArgument.Name() + ": the HostTensors argument is nil"}
	}
	check := []struct {
		id TensorID
		n  int
	}{
		{TensorQ, len(t.Q)}, {TensorK, len(t.K)}, {TensorV, len(t.V)}, {TensorO, len(t.O)},
		{TensorDO, len(t.DO)}, {TensorLSE, len(t.LSE)}, {TensorDQ, len(t.DQ)},
		{TensorDK, len(t.DK)}, {TensorDV, len(t.DV)}, {TensorCuSeqlensQ, len(t.CuSeqlensQ)},
		{TensorCuSeqlensK, len(t.CuSeqlensK)}, {TensorSequsedQ, len(t.SequsedQ)},
		{TensorSequsedK, len(t.SequsedK)}, {TensorAlibiSlopes, len(t.AlibiSlopes)},
	}
	for _, c := range check {
		// The library reads and writes need elements through each pointer without knowing
		// the slice length: a short slice must be rejected here.
		if need := p.problem.PackedLen(c.id); c.n > 0 && int64(c.n) < need {
			return invalid(op, "HostTensors.%s has %d elements; the plan's packed %s layout "+
				"needs %d", c.id, c.n, c.id, need)
		}
	}
	bytes, status, msg := cWorkspaceSize(p.c)
	if status != 0 {
		return newError("flashbwd_plan_workspace_size", status, msg)
	}
	if bytes > p.hostWSN {
		if p.hostWS != nil {
			cHostFree(p.hostWS)
			p.hostWS, p.hostWSN = nil, 0
		}
		if p.hostWS = cHostAlloc(bytes); p.hostWS == nil {
			return &Error{Op: op, Status: StatusOutOfMemory, Message: StatusOutOfMemory.Name() +
				": cannot allocate the host workspace"}
		}
		p.hostWSN = bytes
	}
	status, msg = cExecuteHost(p.c, t, uintptr(p.hostWS), bytes)
	runtime.KeepAlive(p)
	runtime.KeepAlive(t)
	return newError("flashbwd_execute", status, msg)
}

// HostBuffer is host memory allocated by C (256-byte aligned, zeroed). Unlike Go memory,
// its address may be bound with Plan.SetTensor or SetWorkspace on a CPU-backend plan and
// kept by the library between calls. Go code reads and writes it through the slices its
// methods return.
//
// Free releases it explicitly. There is deliberately no finalizer: the slices returned by
// Uint16s, Float32s, ... do not keep the HostBuffer reachable, so a finalizer could free
// the memory while a slice still points into it. Slices must not be used after Free.
type HostBuffer struct {
	mu sync.Mutex
	p  unsafe.Pointer
	n  uintptr
}

// NewHostBuffer allocates bytes of zeroed C memory.
func NewHostBuffer(bytes uintptr) (*HostBuffer, error) {
	p := cHostAlloc(bytes)
	if p == nil {
		return nil, &Error{Op: "NewHostBuffer", Status: StatusOutOfMemory,
			Message: StatusOutOfMemory.Name() + ": cannot allocate the host buffer"}
	}
	return &HostBuffer{p: p, n: bytes}, nil
}

// Addr is the buffer's address, for SetTensor and SetWorkspace; 0 after Free.
func (b *HostBuffer) Addr() uintptr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return uintptr(b.p)
}

// Len is the size in bytes; 0 after Free.
func (b *HostBuffer) Len() uintptr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func hostSlice[T any](b *HostBuffer) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	var zero T
	if b.p == nil {
		return nil
	}
	return unsafe.Slice((*T)(b.p), b.n/unsafe.Sizeof(zero))
}

// Bytes, Uint16s, Float32s and Int32s view the buffer; nil after Free.
func (b *HostBuffer) Bytes() []byte       { return hostSlice[byte](b) }
func (b *HostBuffer) Uint16s() []uint16   { return hostSlice[uint16](b) }
func (b *HostBuffer) Float32s() []float32 { return hostSlice[float32](b) }
func (b *HostBuffer) Int32s() []int32     { return hostSlice[int32](b) }

// Free releases the memory; idempotent. Unbind it from every plan first (or close them).
func (b *HostBuffer) Free() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.p != nil {
		cHostFree(b.p)
		b.p, b.n = nil, 0
	}
}

// ElemBytes is the size of one element of tensor id: 2 for the 16-bit tensors, 4 for LSE,
// ALiBi slopes and the int32 length vectors, 0 for an unknown id.
func ElemBytes(id TensorID) int64 {
	switch {
	case id >= TensorQ && id <= TensorDV && id != TensorLSE:
		return 2
	case id == TensorLSE || (id >= TensorCuSeqlensQ && id <= TensorAlibiSlopes):
		return 4
	}
	return 0
}

// PackedBytes is PackedLen(id) * ElemBytes(id); -1 on overflow.
func (p *Problem) PackedBytes(id TensorID) int64 {
	return mulChecked(p.PackedLen(id), ElemBytes(id))
}
