package flashbwd_test

import (
	"os"
	"strings"
	"testing"

	"flashbwd/bindings/go/flashbwd"
)

// The README's example, verbatim (TestReadmeExampleIsThisCode keeps the two equal).

// begin README example

// One bf16 attention layer: 8 query heads sharing 2 K/V heads (GQA), causal.
var exampleProblem = flashbwd.Problem{
	Backend: flashbwd.BackendCPU, // host memory; BackendCUDA takes device pointers
	DType:   flashbwd.DTypeBF16,
	HeadDim: 64,
	Batch:   2,
	HeadsQ:  8,
	HeadsKV: 2, // each K/V head serves 4 query heads
	SeqlenQ: 128,
	SeqlenK: 128,
	Causal:  true,
}

// backward returns dQ, dK and dV from the forward's Q, K, V, O, LSE and the incoming
// gradient dO. 16-bit tensors hold raw bf16 bits, packed (batch, seq, heads, head_dim);
// LSE is (batch, heads_q, seqlen_q).
func backward(q, k, v, o, dO []uint16, lse []float32) (dq, dk, dv []uint16, err error) {
	plan, err := flashbwd.NewPlan(exampleProblem)
	if err != nil {
		return nil, nil, nil, err // a *flashbwd.Error naming the bad field and value
	}
	defer plan.Close()
	dq, dk, dv = make([]uint16, len(q)), make([]uint16, len(k)), make([]uint16, len(v))
	err = plan.ExecuteHost(&flashbwd.HostTensors{
		Q: q, K: k, V: v, O: o, DO: dO, LSE: lse, DQ: dq, DK: dk, DV: dv,
	})
	return dq, dk, dv, err
}

// end README example

// exampleCase is exampleProblem as a reference case.
func exampleCase() refCase {
	p := exampleProblem
	return refCase{name: "readme example", dtype: p.DType, d: int(p.HeadDim), b: int(p.Batch),
		hq: int(p.HeadsQ), hkv: int(p.HeadsKV), sq: int(p.SeqlenQ), sk: int(p.SeqlenK),
		causal: p.Causal}
}

// TestReadmeExampleIsThisCode: the README shows exactly the code that the next test runs.
func TestReadmeExampleIsThisCode(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	// README: the first ```go block after the marker comment.
	rest := string(readme)
	for _, cut := range []string{"<!-- the code of flashbwd/example_test.go's README example -->",
		"```go\n"} {
		i := strings.Index(rest, cut)
		if i < 0 {
			t.Fatalf("README.md: %q not found", cut)
		}
		rest = rest[i+len(cut):]
	}
	end := strings.Index(rest, "\n```")
	if end < 0 {
		t.Fatal("README.md: the example block does not end")
	}
	shown := strings.TrimSpace(rest[:end])
	// Here: between the begin and end comments.
	code := string(self)
	b := strings.Index(code, "// begin README"+" example")
	e := strings.Index(code, "// end README"+" example")
	if b < 0 || e < b {
		t.Fatal("example_test.go: markers not found")
	}
	code = strings.TrimSpace(code[b+len("// begin README example") : e])
	if shown != code {
		t.Errorf("README.md's example differs from example_test.go's:\n--- README\n%s\n--- "+
			"example_test.go\n%s", shown, code)
	}
}

// TestReadmeExampleMatchesLibraryAndReference runs the README example on fresh random
// inputs and compares its gradients with the library's own result on the same inputs
// through the raw API (C memory, SetTensor, SetWorkspace, Execute: bitwise equal, as the
// CPU backend is deterministic) and with the float64 reference (within the bound).
func TestReadmeExampleMatchesLibraryAndReference(t *testing.T) {
	c := exampleCase()
	r := makeData(c, caseRand(t, c.name))
	dq, dk, dv, err := backward(r.q, r.k, r.v, r.o, r.dout, r.lse)
	if err != nil {
		t.Fatal(err)
	}
	checkGrads(t, c, r, dq, dk, dv)
	rq, rk, rv := rawBackward(t, c.problem(flashbwd.BackendCPU), c, r, nil)
	for _, g := range []struct {
		name      string
		got, want []uint16
	}{{"dQ", dq, rq}, {"dK", dk, rk}, {"dV", dv, rv}} {
		requireEqual(t, g.name+" of the example vs the raw API", g.got, g.want)
	}
}

// firstDiff is the first index where equally long a and b differ, or -1.
func firstDiff(a, b []uint16) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
