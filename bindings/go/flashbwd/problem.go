package flashbwd

import (
	"fmt"
	"math"
)

// DType is the element type of Q, K, V, O, dO, dQ, dK and dV (FLASHBWD_DTYPE_*).
type DType int32

const (
	DTypeDefault DType = 0 // bf16
	DTypeBF16    DType = 1
	DTypeFP16    DType = 2
)

func (d DType) String() string {
	switch d {
	case DTypeDefault, DTypeBF16:
		return "bf16"
	case DTypeFP16:
		return "fp16"
	}
	return fmt.Sprintf("DType(%d)", int32(d))
}

// Backend says where a plan runs (FLASHBWD_BACKEND_*). It is always chosen explicitly by the
// caller; the zero value means CUDA, as in the C API.
type Backend int32

const (
	BackendDefault Backend = 0 // CUDA
	BackendCUDA    Backend = 1 // device pointers and a CUDA stream
	BackendCPU     Backend = 2 // the CPU reference: host memory, fp32 math, slow
)

func (b Backend) String() string {
	switch b {
	case BackendDefault, BackendCUDA:
		return "cuda"
	case BackendCPU:
		return "cpu"
	}
	return fmt.Sprintf("Backend(%d)", int32(b))
}

// TensorID names a tensor of the backward pass (FLASHBWD_TENSOR_*).
type TensorID int32

const (
	TensorQ           TensorID = 1  // in, 16-bit, (batch, seqlen_q, heads_q, head_dim)
	TensorK           TensorID = 2  // in, 16-bit, (batch, seqlen_k, heads_kv, head_dim)
	TensorV           TensorID = 3  // in, 16-bit, like K
	TensorO           TensorID = 4  // in, 16-bit, like Q: the forward's output
	TensorDO          TensorID = 5  // in, 16-bit, like Q: the gradient of O
	TensorLSE         TensorID = 6  // in, float32, (batch, heads_q, seqlen_q)
	TensorDQ          TensorID = 7  // out, 16-bit, like Q
	TensorDK          TensorID = 8  // out, 16-bit, like K
	TensorDV          TensorID = 9  // out, 16-bit, like K
	TensorCuSeqlensQ  TensorID = 10 // in, int32, batch+1 entries, varlen only
	TensorCuSeqlensK  TensorID = 11 // in, int32, batch+1 entries, varlen only
	TensorSequsedQ    TensorID = 12 // in, int32, batch entries, varlen, optional
	TensorSequsedK    TensorID = 13 // in, int32, batch entries, varlen, optional
	TensorAlibiSlopes TensorID = 14 // in, float32, (heads_q) or (batch, heads_q), optional
)

var tensorNames = [...]string{"?", "Q", "K", "V", "O", "dO", "LSE", "dQ", "dK", "dV",
	"cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "alibi_slopes"}

func (id TensorID) String() string {
	if id > 0 && int(id) < len(tensorNames) {
		return tensorNames[id]
	}
	return fmt.Sprintf("TensorID(%d)", int32(id))
}

// Window is a sliding attention window: query i sees keys
// [i + sk - sq - Left, i + sk - sq + Right]; a negative bound is unbounded.
type Window struct {
	Left, Right int32
}

// Problem describes one backward pass; it mirrors flashbwd_problem. As in C, the zero value
// of every field means its default, and the fields marked required must be set.
type Problem struct {
	Backend       Backend // BackendCPU or BackendCUDA (the zero value: CUDA)
	Device        int32   // CUDA device ordinal; ignored by the CPU backend
	DType         DType   // zero: bf16
	HeadDim       int32   // required: 8..256, a multiple of 8
	Batch         int64   // required (varlen: number of sequences)
	HeadsQ        int64   // required
	HeadsKV       int64   // must divide HeadsQ (GQA/MQA); zero: HeadsQ
	SeqlenQ       int64   // required (varlen: the longest query sequence)
	SeqlenK       int64   // required (varlen: the longest key sequence)
	TotalQ        int64   // varlen only: rows of packed Q; zero: Batch*SeqlenQ
	TotalK        int64   // varlen only: rows of packed K; zero: Batch*SeqlenK
	SoftmaxScale  float32 // zero: 1/sqrt(HeadDim)
	Softcap       float32 // score = softcap*tanh(scale*q.k/softcap); zero: off
	Causal        bool    // bottom-right aligned causal mask
	Window        *Window // nil: no sliding window
	Varlen        bool    // packed sequences with cu_seqlens
	Deterministic bool    // bitwise-identical outputs run to run
	SMCount       int32   // SMs to schedule for; zero: the device's
	Arch          int32   // planning only: 80, 86, 89 or 90 instead of querying a device
	SMemPerBlock  int32   // with Arch: opt-in shared memory per block; zero: the arch's limit
}

// headsKV, totalQ and totalK apply the documented defaults.
func (p *Problem) headsKV() int64 {
	if p.HeadsKV == 0 {
		return p.HeadsQ
	}
	return p.HeadsKV
}

func (p *Problem) rowsQ() int64 {
	if p.Varlen && p.TotalQ != 0 {
		return p.TotalQ
	}
	return p.Batch * p.SeqlenQ
}

func (p *Problem) rowsK() int64 {
	if p.Varlen && p.TotalK != 0 {
		return p.TotalK
	}
	return p.Batch * p.SeqlenK
}

// PackedLen is the number of elements of tensor id in its packed row-major layout (the one
// a nil strides argument means): rows*heads*head_dim for the 16-bit tensors,
// heads_q*rows for LSE, batch+1 for cu_seqlens, batch for seqused, heads_q for ALiBi
// slopes (the (heads_q) form). It returns 0 for an unknown id and -1 when the size
// overflows int64 (the library then rejects the problem).
func (p *Problem) PackedLen(id TensorID) int64 {
	d := int64(p.HeadDim)
	switch id {
	case TensorQ, TensorO, TensorDO, TensorDQ:
		return mulChecked(p.rowsQ(), p.HeadsQ, d)
	case TensorK, TensorV, TensorDK, TensorDV:
		return mulChecked(p.rowsK(), p.headsKV(), d)
	case TensorLSE:
		return mulChecked(p.HeadsQ, p.rowsQ())
	case TensorCuSeqlensQ, TensorCuSeqlensK:
		return p.Batch + 1
	case TensorSequsedQ, TensorSequsedK:
		return p.Batch
	case TensorAlibiSlopes:
		return p.HeadsQ
	}
	return 0
}

// mulChecked multiplies non-negative factors; -1 on overflow or a negative factor.
func mulChecked(xs ...int64) int64 {
	r := int64(1)
	for _, x := range xs {
		if x < 0 || (x != 0 && r > math.MaxInt64/x) {
			return -1
		}
		r *= x
	}
	return r
}
