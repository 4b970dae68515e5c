package flashbwd

// White-box tests: the version rule, the Go constants against the compiled header, and the
// finalizer.

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestVersionRule(t *testing.T) {
	cases := []struct {
		runtime, compiled uint32
		ok                bool
	}{
		{10000, 10000, true},  // same
		{10203, 10000, true},  // newer minor and patch at run time
		{10001, 10000, true},  // newer patch
		{10000, 10100, false}, // older minor at run time: functions may be missing
		{10100, 10100, true},  // 1.1 against 1.1 (AllocWorkspace needs FLASHBWD_1.1)
		{10102, 10100, true},  // newer patch
		{10200, 10100, true},  // newer minor
		{10099, 10100, false}, // any 1.0 against 1.1
		{20100, 10100, false}, // other major
		{10100, 10101, false}, // older patch
		{20000, 10000, false}, // other major
		{9900, 10000, false},  // older major
	}
	for _, c := range cases {
		err := checkVersion(c.runtime, c.compiled)
		if (err == nil) != c.ok {
			t.Errorf("checkVersion(%d, %d) = %v, want ok=%v", c.runtime, c.compiled, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), versionString(c.runtime)) {
			t.Errorf("message %q does not give the loaded version", err)
		}
	}
}

func TestLoadedLibraryPassesVersionCheck(t *testing.T) {
	if err := CheckVersion(); err != nil {
		t.Fatal(err)
	}
	t.Logf("library %s, compiled against %s", versionString(Version()),
		versionString(CompiledVersion()))
}

// The package calls the 1.1 functions (flashbwd_workspace_alloc, flashbwd_workspace_free),
// so it must be compiled against a 1.1 header and, by the version rule, load a library of
// 1.1 or newer. (Against a 1.0 library the dynamic loader already refuses the binary: the
// symbols are in the FLASHBWD_1.1 node.)
func TestCompiledAgainstABI11(t *testing.T) {
	if c := CompiledVersion(); c/10000 != 1 || c < 10100 {
		t.Errorf("compiled against %s; this package needs a 1.x header of 1.1 or newer",
			versionString(c))
	}
	if v := Version(); v < 10100 {
		t.Errorf("loaded library %s is older than 1.1", versionString(v))
	}
}

// A failing flashbwd_workspace_free reaches Go as an *Error with the library's message
// (read in the same cgo call, from the thread's message: there is no plan). The Workspace
// counts as freed afterwards. An address the library never gave is refused; it is only
// looked up, never dereferenced.
func TestWorkspaceFreeErrorCarriesMessage(t *testing.T) {
	w := &Workspace{addr: 0x1000, n: 256}
	err := w.Free()
	var fe *Error
	if !errors.As(err, &fe) || fe.Status != StatusInvalidValue ||
		fe.Op != "flashbwd_workspace_free" ||
		!strings.Contains(fe.Message, "did not come from flashbwd_workspace_alloc") {
		t.Fatalf("Free of a foreign address: got %v, want INVALID_VALUE from "+
			"flashbwd_workspace_free naming the reason", err)
	}
	if w.Addr() != 0 || w.Len() != 0 {
		t.Errorf("after a failed Free: %#x, %d bytes", w.Addr(), w.Len())
	}
	if err := w.Free(); err != nil {
		t.Errorf("second Free: %v", err)
	}
}

func TestConstantsMatchHeader(t *testing.T) {
	h := headerValues()
	goValues := map[string]int64{
		"FLASHBWD_OK": int64(StatusOK), "FLASHBWD_ERR_NULL_ARGUMENT": int64(StatusNullArgument),
		"FLASHBWD_ERR_STRUCT_SIZE": int64(StatusStructSize), "FLASHBWD_ERR_INVALID_VALUE": int64(StatusInvalidValue),
		"FLASHBWD_ERR_NOT_SUPPORTED": int64(StatusNotSupported), "FLASHBWD_ERR_NO_DEVICE": int64(StatusNoDevice),
		"FLASHBWD_ERR_WRONG_DEVICE": int64(StatusWrongDevice), "FLASHBWD_ERR_MISALIGNED": int64(StatusMisaligned),
		"FLASHBWD_ERR_TENSOR_NOT_SET": int64(StatusTensorNotSet), "FLASHBWD_ERR_WORKSPACE_TOO_SMALL": int64(StatusWorkspaceTooSmall),
		"FLASHBWD_ERR_CUDA": int64(StatusCUDA), "FLASHBWD_ERR_OUT_OF_MEMORY": int64(StatusOutOfMemory),
		"FLASHBWD_ERR_OVERFLOW": int64(StatusOverflow), "FLASHBWD_ERR_BUSY": int64(StatusBusy),
		"FLASHBWD_ERR_OVERLAP": int64(StatusOverlap), "FLASHBWD_ERR_INVALID_LENGTHS": int64(StatusInvalidLengths),
		"FLASHBWD_ERR_INTERNAL": int64(StatusInternal), "FLASHBWD_STATUS_COUNT": int64(StatusInternal) + 1,
		"FLASHBWD_DTYPE_BF16": int64(DTypeBF16), "FLASHBWD_DTYPE_FP16": int64(DTypeFP16),
		"FLASHBWD_BACKEND_CUDA": int64(BackendCUDA), "FLASHBWD_BACKEND_CPU": int64(BackendCPU),
		"FLASHBWD_TENSOR_Q": int64(TensorQ), "FLASHBWD_TENSOR_K": int64(TensorK),
		"FLASHBWD_TENSOR_V": int64(TensorV), "FLASHBWD_TENSOR_O": int64(TensorO),
		"FLASHBWD_TENSOR_DO": int64(TensorDO), "FLASHBWD_TENSOR_LSE": int64(TensorLSE),
		"FLASHBWD_TENSOR_DQ": int64(TensorDQ), "FLASHBWD_TENSOR_DK": int64(TensorDK),
		"FLASHBWD_TENSOR_DV": int64(TensorDV), "FLASHBWD_TENSOR_CU_SEQLENS_Q": int64(TensorCuSeqlensQ),
		"FLASHBWD_TENSOR_CU_SEQLENS_K": int64(TensorCuSeqlensK), "FLASHBWD_TENSOR_SEQUSED_Q": int64(TensorSequsedQ),
		"FLASHBWD_TENSOR_SEQUSED_K": int64(TensorSequsedK), "FLASHBWD_TENSOR_ALIBI_SLOPES": int64(TensorAlibiSlopes),
		"FLASHBWD_TENSOR_COUNT": int64(len(tensorNames)),
	}
	if len(goValues) != len(h) {
		t.Errorf("%d Go values for %d header constants", len(goValues), len(h))
	}
	for name, want := range h {
		if got, ok := goValues[name]; !ok || got != want {
			t.Errorf("%s: Go has %d (present %v), the header %d", name, got, ok, want)
		}
	}
}

// A Plan that becomes unreachable without Close is closed by its finalizer.
func TestFinalizerClosesUnreachablePlans(t *testing.T) {
	before := finalized.Load()
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := NewPlan(Problem{Backend: BackendCPU, HeadDim: 8, Batch: 1, HeadsQ: 1,
			SeqlenQ: 4, SeqlenK: 4}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for finalized.Load()-before < n && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := finalized.Load() - before; got < n {
		t.Fatalf("%d of %d unreachable plans were finalized", got, n)
	}
	// An explicitly closed plan has no finalizer left to run.
	p, err := NewPlan(Problem{Backend: BackendCPU, HeadDim: 8, Batch: 1, HeadsQ: 1,
		SeqlenQ: 4, SeqlenK: 4})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	p = nil
	mark := finalized.Load()
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := finalized.Load(); got != mark {
		t.Errorf("a closed plan was finalized (%d -> %d)", mark, got)
	}
}

func TestPackedLen(t *testing.T) {
	p := Problem{HeadDim: 8, Batch: 2, HeadsQ: 4, HeadsKV: 2, SeqlenQ: 3, SeqlenK: 5}
	want := map[TensorID]int64{TensorQ: 2 * 3 * 4 * 8, TensorDK: 2 * 5 * 2 * 8,
		TensorLSE: 2 * 4 * 3, TensorCuSeqlensQ: 3, TensorSequsedK: 2, TensorAlibiSlopes: 4, 0: 0}
	for id, n := range want {
		if got := p.PackedLen(id); got != n {
			t.Errorf("PackedLen(%v) = %d, want %d", id, got, n)
		}
	}
	p.Varlen, p.TotalQ = true, 7
	if got := p.PackedLen(TensorDO); got != 7*4*8 {
		t.Errorf("varlen PackedLen(dO) = %d", got)
	}
	if got := p.PackedLen(TensorLSE); got != 4*7 {
		t.Errorf("varlen PackedLen(LSE) = %d", got)
	}
	huge := Problem{HeadDim: 256, Batch: 1 << 40, HeadsQ: 1 << 20, SeqlenQ: 1 << 10}
	if got := huge.PackedLen(TensorQ); got != -1 {
		t.Errorf("overflowing PackedLen = %d, want -1", got)
	}
}
