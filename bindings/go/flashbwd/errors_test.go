package flashbwd_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"flashbwd/bindings/go/flashbwd"
	"flashbwd/bindings/go/internal/cudadrv"
)

func smallProblem() flashbwd.Problem {
	return flashbwd.Problem{Backend: flashbwd.BackendCPU, HeadDim: 16, Batch: 1, HeadsQ: 2,
		SeqlenQ: 8, SeqlenK: 8}
}

// asError unwraps err to *flashbwd.Error, failing the test if it is not one.
func asError(t *testing.T, err error) *flashbwd.Error {
	t.Helper()
	var fe *flashbwd.Error
	if !errors.As(err, &fe) {
		t.Fatalf("got %v (%T), want a *flashbwd.Error", err, err)
	}
	return fe
}

func wantStatus(t *testing.T, err error, status flashbwd.Status, words ...string) *flashbwd.Error {
	t.Helper()
	fe := asError(t, err)
	if fe.Status != status || !errors.Is(err, status) {
		t.Fatalf("status %v, want %v (%v)", fe.Status, status, err)
	}
	for _, w := range words {
		if !strings.Contains(fe.Message, w) || !strings.Contains(err.Error(), w) {
			t.Errorf("message %q does not name %q", fe.Message, w)
		}
	}
	return fe
}

func TestBadHeadDimIsInvalidValueNamingHeadDim(t *testing.T) {
	for _, hd := range []int32{0, 7, 12, 264, -8} {
		p := smallProblem()
		p.HeadDim = hd
		plan, err := flashbwd.NewPlan(p)
		if plan != nil {
			t.Errorf("head_dim %d: got a plan", hd)
		}
		fe := wantStatus(t, err, flashbwd.StatusInvalidValue, "head_dim", fmt.Sprint(hd))
		if fe.Op != "flashbwd_plan_create" {
			t.Errorf("Op = %q", fe.Op)
		}
		if fe.Status.Name() != "FLASHBWD_ERR_INVALID_VALUE" {
			t.Errorf("Status.Name() = %q", fe.Status.Name())
		}
	}
}

// Other fields' errors name them too (the Problem -> C struct mapping of each).
func TestBadFieldsAreNamed(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*flashbwd.Problem)
	}{
		{"batch", func(p *flashbwd.Problem) { p.Batch = 0 }},
		{"heads_q", func(p *flashbwd.Problem) { p.HeadsQ = -1 }},
		{"heads_kv", func(p *flashbwd.Problem) { p.HeadsKV = 3 }},
		{"seqlen_q", func(p *flashbwd.Problem) { p.SeqlenQ = 0 }},
		{"seqlen_k", func(p *flashbwd.Problem) { p.SeqlenK = -5 }},
		{"dtype", func(p *flashbwd.Problem) { p.DType = 7 }},
		{"backend", func(p *flashbwd.Problem) { p.Backend = 9 }},
		{"softmax_scale", func(p *flashbwd.Problem) { p.SoftmaxScale = -1 }},
	}
	for _, c := range cases {
		p := smallProblem()
		c.edit(&p)
		_, err := flashbwd.NewPlan(p)
		if err == nil {
			t.Errorf("%s: no error", c.field)
			continue
		}
		if fe := asError(t, err); !strings.Contains(fe.Message, c.field) {
			t.Errorf("%s: message %q does not name the field", c.field, fe.Message)
		}
	}
}

// Each failure's message is its own, even with many goroutines failing at once on threads
// they share: the message is read in the same cgo call as the failing function.
func TestErrorMessagesAreReadInTheFailingCall(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			p := smallProblem()
			p.HeadDim = int32(8*g + 1) // a different invalid value per goroutine
			want := fmt.Sprintf("head_dim = %d;", p.HeadDim)
			for i := 0; i < 3000; i++ {
				_, err := flashbwd.NewPlan(p)
				var fe *flashbwd.Error
				if !errors.As(err, &fe) || !strings.Contains(fe.Message, want) {
					errs <- fmt.Sprintf("goroutine %d: got %v, want a message with %q", g, err, want)
					return
				}
				if i%16 == 0 {
					runtime.Gosched()
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	plan, err := flashbwd.NewPlan(smallProblem())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := plan.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
}

func TestUseAfterCloseReturnsErrClosed(t *testing.T) {
	plan, err := flashbwd.NewPlan(smallProblem())
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]uint16, 256)
	calls := map[string]func() error{
		"SetTensor":     func() error { return plan.SetTensor(flashbwd.TensorQ, 0, nil) },
		"WorkspaceSize": func() error { _, err := plan.WorkspaceSize(); return err },
		"SetWorkspace":  func() error { return plan.SetWorkspace(0, 0) },
		"Execute":       func() error { return plan.Execute(0) },
		"Info":          func() error { _, err := plan.Info(); return err },
		"ExecuteHost":   func() error { return plan.ExecuteHost(&flashbwd.HostTensors{Q: buf}) },
		"AllocWorkspace": func() error {
			ws, err := plan.AllocWorkspace()
			if ws != nil {
				t.Error("AllocWorkspace after Close returned a workspace")
			}
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, flashbwd.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
	if got := plan.Problem(); got.HeadDim != 16 {
		t.Errorf("Problem() after Close: head_dim %d", got.HeadDim)
	}
}

func TestExecuteWithoutTensorsIsTensorNotSet(t *testing.T) {
	plan := mustPlan(t, smallProblem())
	fe := wantStatus(t, plan.Execute(0), flashbwd.StatusTensorNotSet, "Q")
	if fe.Op != "flashbwd_execute" {
		t.Errorf("Op = %q", fe.Op)
	}
}

func TestSetTensorErrorsNameTheProblem(t *testing.T) {
	plan := mustPlan(t, smallProblem())
	buf, err := flashbwd.NewHostBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	defer plan.Close() // unbind before Free
	wantStatus(t, plan.SetTensor(99, buf.Addr(), nil), flashbwd.StatusInvalidValue, "99")
	// Q is rank 4: three strides are wrong, and so is a last stride other than 1.
	wantStatus(t, plan.SetTensor(flashbwd.TensorQ, buf.Addr(), []int64{256, 32, 1}),
		flashbwd.StatusInvalidValue, "Q")
	wantStatus(t, plan.SetTensor(flashbwd.TensorQ, buf.Addr(), []int64{512, 64, 32, 2}),
		flashbwd.StatusInvalidValue, "Q")
	// An output on top of an input.
	if err := plan.SetTensor(flashbwd.TensorQ, buf.Addr(), nil); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, plan.SetTensor(flashbwd.TensorDQ, buf.Addr(), nil), flashbwd.StatusOverlap)
}

func TestSmallWorkspaceIsRejected(t *testing.T) {
	plan := mustPlan(t, smallProblem())
	n, err := plan.WorkspaceSize()
	if err != nil || n == 0 {
		t.Fatalf("WorkspaceSize = %d, %v; want > 0 on the CPU backend", n, err)
	}
	buf, err := flashbwd.NewHostBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	defer plan.Close()
	wantStatus(t, plan.SetWorkspace(buf.Addr(), n-4), flashbwd.StatusWorkspaceTooSmall,
		fmt.Sprint(n))
}

func TestExecuteHostRejectsShortSlices(t *testing.T) {
	c := cpuCases[0]
	r := makeData(c, caseRand(t, c.name))
	plan := mustPlan(t, c.problem(flashbwd.BackendCPU))
	dq, dk, dv := poisoned(len(r.q)), poisoned(len(r.k)), poisoned(len(r.v))
	ht := flashbwd.HostTensors{Q: r.q, K: r.k, V: r.v, O: r.o, DO: r.dout, LSE: r.lse,
		DQ: dq, DK: dk[:len(dk)-1], DV: dv}
	wantStatus(t, plan.ExecuteHost(&ht), flashbwd.StatusInvalidValue, "HostTensors.dK",
		fmt.Sprint(len(dk)))
	ht.DK, ht.LSE = dk, r.lse[:3]
	wantStatus(t, plan.ExecuteHost(&ht), flashbwd.StatusInvalidValue, "HostTensors.LSE")
	wantStatus(t, plan.ExecuteHost(nil), flashbwd.StatusNullArgument)
}

// A failing ExecuteHost also unbinds what it bound, and reports the library's message.
func TestExecuteHostOverlapFailsCleanly(t *testing.T) {
	c := cpuCases[0]
	r := makeData(c, caseRand(t, c.name))
	plan := mustPlan(t, c.problem(flashbwd.BackendCPU))
	dk, dv := poisoned(len(r.k)), poisoned(len(r.v))
	err := plan.ExecuteHost(&flashbwd.HostTensors{Q: r.q, K: r.k, V: r.v, O: r.o, DO: r.dout,
		LSE: r.lse, DQ: r.q, DK: dk, DV: dv}) // dQ on top of Q
	wantStatus(t, err, flashbwd.StatusOverlap, "dQ")
	wantStatus(t, plan.Execute(0), flashbwd.StatusTensorNotSet)
}

// A planning-only CUDA plan (Arch set) needs no device: Info reports the plan, Execute is
// not supported, and host slices are refused before any pointer reaches C.
func TestPlanningOnlyCUDAPlan(t *testing.T) {
	p := exampleProblem
	p.Backend, p.Arch = flashbwd.BackendCUDA, 90
	plan := mustPlan(t, p)
	info, err := plan.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Backend != flashbwd.BackendCUDA || info.Arch != 90 || info.SMCount <= 0 ||
		info.KernelHeadDim < 64 || len(info.Launches) < 3 || info.Launches[1].Block[0] <= 0 {
		t.Errorf("Info = %+v", info)
	}
	n, err := plan.WorkspaceSize()
	if err != nil || n != info.WorkspaceBytes {
		t.Errorf("WorkspaceSize = %d, %v; Info says %d", n, err, info.WorkspaceBytes)
	}
	// Bind every tensor at distinct, aligned addresses that are never dereferenced: the
	// plan is refused at execute before anything is launched.
	for id := flashbwd.TensorQ; id <= flashbwd.TensorDV; id++ {
		if err := plan.SetTensor(id, uintptr(1)<<40+uintptr(id)<<30, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := plan.SetWorkspace(uintptr(1)<<44, n); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, plan.Execute(0), flashbwd.StatusNotSupported)
	wantStatus(t, plan.ExecuteHost(&flashbwd.HostTensors{}), flashbwd.StatusInvalidValue,
		"backend")
}

// With no driver the CUDA backend fails with NO_DEVICE: there is no silent CPU fallback.
func TestCUDAPlanWithoutDriverIsNoDevice(t *testing.T) {
	if ctx, err := cudadrv.Open(0); err == nil {
		_ = ctx.Close()
		t.Skip("a CUDA device is present; this test is for machines without one")
	} else if !cudadrv.Unavailable(err) {
		t.Fatal(err)
	}
	p := smallProblem()
	p.Backend = flashbwd.BackendCUDA
	_, err := flashbwd.NewPlan(p)
	fe := asError(t, err)
	if fe.Status != flashbwd.StatusNoDevice && fe.Status != flashbwd.StatusNotSupported {
		t.Fatalf("got %v, want NO_DEVICE (or NOT_SUPPORTED from a build without CUDA)", err)
	}
	t.Logf("%v", err)
}

func TestStatusNamesAndStrings(t *testing.T) {
	names := map[flashbwd.Status]string{
		flashbwd.StatusOK: "FLASHBWD_OK", flashbwd.StatusNullArgument: "FLASHBWD_ERR_NULL_ARGUMENT",
		flashbwd.StatusStructSize: "FLASHBWD_ERR_STRUCT_SIZE", flashbwd.StatusInvalidValue: "FLASHBWD_ERR_INVALID_VALUE",
		flashbwd.StatusNotSupported: "FLASHBWD_ERR_NOT_SUPPORTED", flashbwd.StatusNoDevice: "FLASHBWD_ERR_NO_DEVICE",
		flashbwd.StatusWrongDevice: "FLASHBWD_ERR_WRONG_DEVICE", flashbwd.StatusMisaligned: "FLASHBWD_ERR_MISALIGNED",
		flashbwd.StatusTensorNotSet: "FLASHBWD_ERR_TENSOR_NOT_SET", flashbwd.StatusWorkspaceTooSmall: "FLASHBWD_ERR_WORKSPACE_TOO_SMALL",
		flashbwd.StatusCUDA: "FLASHBWD_ERR_CUDA", flashbwd.StatusOutOfMemory: "FLASHBWD_ERR_OUT_OF_MEMORY",
		flashbwd.StatusOverflow: "FLASHBWD_ERR_OVERFLOW", flashbwd.StatusBusy: "FLASHBWD_ERR_BUSY",
		flashbwd.StatusOverlap: "FLASHBWD_ERR_OVERLAP", flashbwd.StatusInvalidLengths: "FLASHBWD_ERR_INVALID_LENGTHS",
		flashbwd.StatusInternal: "FLASHBWD_ERR_INTERNAL", 999: "FLASHBWD_ERR_UNKNOWN",
	}
	for s, want := range names {
		if s.Name() != want || s.String() != want {
			t.Errorf("Status(%d).Name() = %q, want %q", int32(s), s.Name(), want)
		}
		if s.Description() == "" || !strings.HasPrefix(s.Error(), want) {
			t.Errorf("Status(%d): Description %q, Error %q", int32(s), s.Description(), s.Error())
		}
	}
}
