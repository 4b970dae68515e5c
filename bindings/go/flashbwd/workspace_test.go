package flashbwd_test

// Tests of Plan.AllocWorkspace and Workspace (ABI 1.1) on the CPU backend; the GPU test is
// in gpu_test.go.

import (
	"testing"

	"flashbwd/bindings/go/flashbwd"
)

// allocWorkspace allocates a workspace for plan and checks what the C API promises of a
// CPU plan's: at least WorkspaceSize bytes, 256-byte aligned host memory, not compressed.
func allocWorkspace(t *testing.T, plan *flashbwd.Plan) *flashbwd.Workspace {
	t.Helper()
	n, err := plan.WorkspaceSize()
	if err != nil {
		t.Fatal(err)
	}
	ws, err := plan.AllocWorkspace()
	if err != nil {
		t.Fatal(err)
	}
	if ws.Len() < n || ws.Addr() == 0 || ws.Addr()%256 != 0 {
		t.Errorf("workspace at %#x of %d bytes; want >= %d bytes (WorkspaceSize), 256-byte "+
			"aligned", ws.Addr(), ws.Len(), n)
	}
	if ws.Compressed() {
		t.Error("a CPU plan's workspace is reported compressed")
	}
	t.Logf("WorkspaceSize %d B, workspace %d B at %#x", n, ws.Len(), ws.Addr())
	return ws
}

// freeTwice frees ws twice: both calls succeed and leave it empty.
func freeTwice(t *testing.T, ws *flashbwd.Workspace) {
	t.Helper()
	for i := 1; i <= 2; i++ {
		if err := ws.Free(); err != nil {
			t.Fatalf("Free #%d: %v", i, err)
		}
		if ws.Addr() != 0 || ws.Len() != 0 || ws.Compressed() {
			t.Fatalf("after Free #%d: %#x, %d bytes, compressed %v", i, ws.Addr(), ws.Len(),
				ws.Compressed())
		}
	}
}

// A backward with a workspace from AllocWorkspace, bound with SetWorkspace, matches the
// float64 reference, and bitwise ExecuteHost (the CPU backend is deterministic).
func TestAllocWorkspaceBackwardMatchesReference(t *testing.T) {
	for _, c := range []refCase{cpuCases[1], cpuCases[4], cpuCases[6], exampleCase()} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			r := makeData(c, caseRand(t, c.name))
			plan := mustPlan(t, c.problem(flashbwd.BackendCPU))
			ws := allocWorkspace(t, plan)
			dq, dk, dv := rawBackwardOn(t, plan, c, r, nil, ws)
			checkGrads(t, c, r, dq, dk, dv)
			hq, hk, hv := executeHost(t, mustPlan(t, c.problem(flashbwd.BackendCPU)), r)
			requireEqual(t, "dQ", dq, hq)
			requireEqual(t, "dK", dk, hk)
			requireEqual(t, "dV", dv, hv)
			// Unbind, then free (twice): the plan no longer executes without a workspace.
			if err := plan.SetWorkspace(0, 0); err != nil {
				t.Fatal(err)
			}
			freeTwice(t, ws)
			wantStatus(t, plan.Execute(0), flashbwd.StatusWorkspaceTooSmall, "no workspace")
		})
	}
}

// The workspace belongs to the caller, not to the plan that sized it: it outlives that
// plan and serves another plan of the same backend whose workspace is not larger.
func TestAllocWorkspaceOutlivesItsPlan(t *testing.T) {
	c := cpuCases[4]
	r := makeData(c, caseRand(t, c.name))
	first, err := flashbwd.NewPlan(c.problem(flashbwd.BackendCPU))
	if err != nil {
		t.Fatal(err)
	}
	ws := allocWorkspace(t, first)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if ws.Addr() == 0 {
		t.Fatal("Close of the plan freed its workspace")
	}
	small := cpuCases[5] // a smaller problem
	sr := makeData(small, caseRand(t, small.name))
	for _, run := range []struct {
		c refCase
		r *refData
	}{{c, r}, {small, sr}} {
		plan := mustPlan(t, run.c.problem(flashbwd.BackendCPU))
		if n, err := plan.WorkspaceSize(); err != nil || n > ws.Len() {
			t.Fatalf("%s: WorkspaceSize %d (%v) > the workspace's %d", run.c.name, n, err,
				ws.Len())
		}
		dq, dk, dv := rawBackwardOn(t, plan, run.c, run.r, nil, ws)
		checkGrads(t, run.c, run.r, dq, dk, dv)
		if err := plan.Close(); err != nil { // unbind before Free
			t.Fatal(err)
		}
	}
	freeTwice(t, ws)
}

// A Workspace that was never allocated (the zero value) frees as a no-op.
func TestZeroWorkspaceFreeIsNoOp(t *testing.T) {
	freeTwice(t, &flashbwd.Workspace{})
}

// A planning-only plan has no device to allocate on: NOT_SUPPORTED, with the library's
// message, from flashbwd_workspace_alloc. (After Close: TestUseAfterCloseReturnsErrClosed.)
func TestAllocWorkspaceOnPlanningOnlyPlan(t *testing.T) {
	p := exampleProblem
	p.Backend, p.Arch = flashbwd.BackendCUDA, 90
	plan := mustPlan(t, p)
	ws, err := plan.AllocWorkspace()
	if ws != nil {
		t.Errorf("got a workspace %#x from a planning-only plan", ws.Addr())
	}
	fe := wantStatus(t, err, flashbwd.StatusNotSupported, "planning-only")
	if fe.Op != "flashbwd_workspace_alloc" {
		t.Errorf("Op = %q", fe.Op)
	}
}
