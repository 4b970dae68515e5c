package flashbwd_test

import (
	"errors"
	"testing"

	"flashbwd/bindings/go/flashbwd"
)

// cpuCases: the CPU backend against the float64 reference. Small sizes, odd ones included.
var cpuCases = []refCase{
	{name: "non-causal", dtype: flashbwd.DTypeBF16, d: 32, b: 2, hq: 4, hkv: 4, sq: 17, sk: 23},
	{name: "causal square", dtype: flashbwd.DTypeBF16, d: 64, b: 1, hq: 2, hkv: 2, sq: 33, sk: 33,
		causal: true},
	{name: "causal sq<sk (bottom-right)", dtype: flashbwd.DTypeBF16, d: 16, b: 2, hq: 2, hkv: 2,
		sq: 9, sk: 31, causal: true},
	{name: "causal sq>sk (rows with no key)", dtype: flashbwd.DTypeBF16, d: 16, b: 1, hq: 2,
		hkv: 2, sq: 20, sk: 7, causal: true},
	{name: "GQA 4:1 causal", dtype: flashbwd.DTypeBF16, d: 32, b: 2, hq: 8, hkv: 2, sq: 19,
		sk: 19, causal: true},
	{name: "MQA 3:1", dtype: flashbwd.DTypeBF16, d: 8, b: 1, hq: 3, hkv: 1, sq: 5, sk: 12},
	{name: "fp16 GQA 2:1", dtype: flashbwd.DTypeFP16, d: 64, b: 1, hq: 4, hkv: 2, sq: 24, sk: 40},
	{name: "fp16 causal GQA", dtype: flashbwd.DTypeFP16, d: 24, b: 3, hq: 6, hkv: 3, sq: 13,
		sk: 13, causal: true},
	{name: "window (5, 2)", dtype: flashbwd.DTypeBF16, d: 32, b: 1, hq: 2, hkv: 2, sq: 30, sk: 30,
		window: &flashbwd.Window{Left: 5, Right: 2}},
	{name: "softcap and scale", dtype: flashbwd.DTypeBF16, d: 16, b: 1, hq: 2, hkv: 1, sq: 11,
		sk: 14, softcap: 5, scale: 0.3},
	{name: "seqlen 1", dtype: flashbwd.DTypeBF16, d: 8, b: 3, hq: 2, hkv: 2, sq: 1, sk: 1,
		causal: true},
}

func mustPlan(t *testing.T, p flashbwd.Problem) *flashbwd.Plan {
	t.Helper()
	plan, err := flashbwd.NewPlan(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plan.Close() })
	return plan
}

// executeHost runs ExecuteHost with outputs poisoned first.
func executeHost(t *testing.T, plan *flashbwd.Plan, r *refData) (dq, dk, dv []uint16) {
	t.Helper()
	dq, dk, dv = poisoned(len(r.q)), poisoned(len(r.k)), poisoned(len(r.v))
	err := plan.ExecuteHost(&flashbwd.HostTensors{Q: r.q, K: r.k, V: r.v, O: r.o, DO: r.dout,
		LSE: r.lse, DQ: dq, DK: dk, DV: dv})
	if err != nil {
		t.Fatal(err)
	}
	return dq, dk, dv
}

func TestCPUBackwardMatchesFloat64Reference(t *testing.T) {
	for _, c := range cpuCases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			r := makeData(c, caseRand(t, c.name))
			plan := mustPlan(t, c.problem(flashbwd.BackendCPU))
			dq, dk, dv := executeHost(t, plan, r)
			checkGrads(t, c, r, dq, dk, dv)
		})
	}
}

// One plan, several executes on new inputs: bindings and workspace are redone each time.
func TestExecuteHostReusesPlan(t *testing.T) {
	c := cpuCases[4]
	plan := mustPlan(t, c.problem(flashbwd.BackendCPU))
	rng := caseRand(t, "reuse")
	for i := 0; i < 3; i++ {
		r := makeData(c, rng)
		dq, dk, dv := executeHost(t, plan, r)
		checkGrads(t, c, r, dq, dk, dv)
	}
}

// ExecuteHost leaves nothing bound: the library keeps no pointer into Go memory.
func TestExecuteHostLeavesTensorsUnbound(t *testing.T) {
	c := cpuCases[0]
	plan := mustPlan(t, c.problem(flashbwd.BackendCPU))
	executeHost(t, plan, makeData(c, caseRand(t, c.name)))
	err := plan.Execute(0)
	if !errors.Is(err, flashbwd.StatusTensorNotSet) {
		t.Fatalf("Execute after ExecuteHost: got %v, want FLASHBWD_ERR_TENSOR_NOT_SET", err)
	}
}

// layout copies packed (n0, n1, n2, d) data to a buffer with the given element strides
// (or back, when toPacked).
func layout(packed, buf []uint16, dims [4]int, strides []int64, toPacked bool) {
	i := 0
	for a := 0; a < dims[0]; a++ {
		for b := 0; b < dims[1]; b++ {
			for c := 0; c < dims[2]; c++ {
				for x := 0; x < dims[3]; x++ {
					off := int64(a)*strides[0] + int64(b)*strides[1] + int64(c)*strides[2] + int64(x)
					if toPacked {
						packed[i] = buf[off]
					} else {
						buf[off] = packed[i]
					}
					i++
				}
			}
		}
	}
}

// rawBackward runs the raw API path: every tensor in C memory (HostBuffer), bound with
// SetTensor, a HostBuffer workspace, Execute. kvStrides, when not nil, lays out K, V, dK
// and dV with those (batch, seq, head, dim) strides instead of packed.
func rawBackward(t *testing.T, p flashbwd.Problem, c refCase, r *refData,
	kvStrides []int64) (dq, dk, dv []uint16) {
	t.Helper()
	return rawBackwardOn(t, mustPlan(t, p), c, r, kvStrides, nil)
}

// rawBackwardOn is rawBackward on a given plan, which it closes when the test ends (before
// freeing its buffers). With ws not nil the workspace bound is ws, not a HostBuffer.
func rawBackwardOn(t *testing.T, plan *flashbwd.Plan, c refCase, r *refData,
	kvStrides []int64, ws *flashbwd.Workspace) (dq, dk, dv []uint16) {
	t.Helper()
	packedQ := []int64{int64(c.sq * c.hq * c.d), int64(c.hq * c.d), int64(c.d), 1}
	packedK := []int64{int64(c.sk * c.hkv * c.d), int64(c.hkv * c.d), int64(c.d), 1}
	kStrides, passK := packedK, []int64(nil)
	if kvStrides != nil {
		kStrides, passK = kvStrides, kvStrides
	}
	qDims, kDims := [4]int{c.b, c.sq, c.hq, c.d}, [4]int{c.b, c.sk, c.hkv, c.d}
	span := func(dims [4]int, s []int64) int {
		last := int64(0)
		for i := range dims {
			last += int64(dims[i]-1) * s[i]
		}
		return int(last + 1)
	}
	var bufs []*flashbwd.HostBuffer
	t.Cleanup(func() {
		_ = plan.Close() // unbind before the memory goes
		for _, b := range bufs {
			b.Free()
		}
	})
	alloc := func(bytes int) *flashbwd.HostBuffer {
		b, err := flashbwd.NewHostBuffer(uintptr(bytes))
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
		return b
	}
	bind16 := func(id flashbwd.TensorID, data []uint16, kside, output bool) *flashbwd.HostBuffer {
		dims, s, pass := qDims, packedQ, []int64(nil)
		if kside {
			dims, s, pass = kDims, kStrides, passK
		}
		b := alloc(2 * span(dims, s))
		if output {
			s := b.Uint16s()
			for i := range s {
				s[i] = 0xffff // NaN: unwritten elements show
			}
		} else {
			layout(data, b.Uint16s(), dims, s, false)
		}
		if err := plan.SetTensor(id, b.Addr(), pass); err != nil {
			t.Fatal(err)
		}
		return b
	}
	bind16(flashbwd.TensorQ, r.q, false, false)
	bind16(flashbwd.TensorK, r.k, true, false)
	bind16(flashbwd.TensorV, r.v, true, false)
	bind16(flashbwd.TensorO, r.o, false, false)
	bind16(flashbwd.TensorDO, r.dout, false, false)
	bq := bind16(flashbwd.TensorDQ, nil, false, true)
	bk := bind16(flashbwd.TensorDK, nil, true, true)
	bv := bind16(flashbwd.TensorDV, nil, true, true)
	lse := alloc(4 * len(r.lse))
	copy(lse.Float32s(), r.lse)
	if err := plan.SetTensor(flashbwd.TensorLSE, lse.Addr(), nil); err != nil {
		t.Fatal(err)
	}
	if ws != nil {
		if err := plan.SetWorkspace(ws.Addr(), ws.Len()); err != nil {
			t.Fatal(err)
		}
	} else {
		n, err := plan.WorkspaceSize()
		if err != nil {
			t.Fatal(err)
		}
		if err := plan.SetWorkspace(alloc(int(n)).Addr(), n); err != nil {
			t.Fatal(err)
		}
	}
	if err := plan.Execute(0); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv = make([]uint16, len(r.q)), make([]uint16, len(r.k)), make([]uint16, len(r.v))
	layout(dq, bq.Uint16s(), qDims, packedQ, true)
	layout(dk, bk.Uint16s(), kDims, kStrides, true)
	layout(dv, bv.Uint16s(), kDims, kStrides, true)
	return dq, dk, dv
}

func requireEqual(t *testing.T, what string, got, want []uint16) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Errorf("%s differs at element %d: %#04x vs %#04x", what, i, got[i], want[i])
	}
}

// The raw API on C memory and ExecuteHost on Go slices give bitwise the same gradients, and
// so does a strided (batch, head, seq, dim) K/V/dK/dV layout passed through SetTensor.
func TestRawAPIPathMatchesExecuteHost(t *testing.T) {
	for _, c := range []refCase{cpuCases[4], cpuCases[6]} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			r := makeData(c, caseRand(t, c.name))
			hq, hk, hv := executeHost(t, mustPlan(t, c.problem(flashbwd.BackendCPU)), r)
			checkGrads(t, c, r, hq, hk, hv)
			for _, kv := range []struct {
				name    string
				strides []int64
			}{
				{"packed", nil},
				{"bhsd", []int64{int64(c.hkv * c.sk * c.d), int64(c.d), int64(c.sk * c.d), 1}},
			} {
				rq, rk, rv := rawBackward(t, c.problem(flashbwd.BackendCPU), c, r, kv.strides)
				requireEqual(t, kv.name+" dQ", rq, hq)
				requireEqual(t, kv.name+" dK", rk, hk)
				requireEqual(t, kv.name+" dV", rv, hv)
			}
		})
	}
}
