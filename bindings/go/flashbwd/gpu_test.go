package flashbwd_test

// GPU tests: the README example's problem (and two more shapes) on device memory from the
// CUDA driver API, against the float64 reference and the CPU backend. Without a driver or
// device they skip, unless FLASHBWD_REQUIRE_GPU is set (on the GPU machine, so that a
// broken driver setup cannot pass as a skip).

import (
	"os"
	"runtime"
	"testing"

	"flashbwd/bindings/go/flashbwd"
	"flashbwd/bindings/go/internal/cudadrv"
)

func openGPU(t *testing.T) *cudadrv.Context {
	t.Helper()
	ctx, err := cudadrv.Open(0)
	if err != nil {
		if cudadrv.Unavailable(err) && os.Getenv("FLASHBWD_REQUIRE_GPU") == "" {
			t.Skipf("no CUDA driver or device (%v); set FLASHBWD_REQUIRE_GPU=1 to fail instead", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctx.Close() })
	t.Logf("device 0: %s", ctx.Name)
	return ctx
}

// gpuCases use head_dim 64, which every kernel build has.
func gpuCases() []refCase {
	return []refCase{
		exampleCase(),
		{name: "fp16 odd lengths", dtype: flashbwd.DTypeFP16, d: 64, b: 1, hq: 4, hkv: 4,
			sq: 77, sk: 133},
		{name: "bf16 causal sq>sk GQA 3:1", dtype: flashbwd.DTypeBF16, d: 64, b: 2, hq: 6, hkv: 2,
			sq: 150, sk: 61, causal: true},
	}
}

// deviceAlloc allocates device memory that is freed when the test ends.
func deviceAlloc(t *testing.T, ctx *cudadrv.Context, bytes uintptr) uintptr {
	t.Helper()
	p, err := ctx.Alloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctx.Free(p) })
	return p
}

// deviceCopy allocates device memory holding src, or bytes of 0xff when src is nil.
func deviceCopy[T any](t *testing.T, ctx *cudadrv.Context, src []T, bytes uintptr) uintptr {
	t.Helper()
	p := deviceAlloc(t, ctx, bytes)
	var err error
	if src == nil {
		err = ctx.Memset(p, 0xff, bytes) // NaN in fp16 and bf16: unwritten outputs show
	} else {
		err = cudadrv.Upload(ctx, p, src)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGPUBackwardMatchesReferenceAndCPU(t *testing.T) {
	ctx := openGPU(t)
	for _, c := range gpuCases() {
		c := c
		t.Run(c.name, func(t *testing.T) {
			// The CUDA runtime inside the library works on the calling thread's context.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := ctx.MakeCurrent(); err != nil {
				t.Fatal(err)
			}
			r := makeData(c, caseRand(t, c.name))

			// CPU: the README example itself for its problem, ExecuteHost otherwise.
			var cq, ck, cv []uint16
			if c.name == exampleCase().name {
				var err error
				if cq, ck, cv, err = backward(r.q, r.k, r.v, r.o, r.dout, r.lse); err != nil {
					t.Fatal(err)
				}
			} else {
				cq, ck, cv = executeHost(t, mustPlan(t, c.problem(flashbwd.BackendCPU)), r)
			}

			gq, gk, gv := gpuBackward(t, ctx, c, r, false)
			checkGrads(t, c, r, gq, gk, gv)
			for _, g := range []struct {
				name     string
				gpu, cpu []uint16
			}{{"dQ", gq, cq}, {"dK", gk, ck}, {"dV", gv, cv}} {
				e, bad := relErr(c.dtype, g.gpu, decode(c.dtype, g.cpu))
				if bad != 0 || e > tolerance(c.dtype) {
					t.Errorf("%s: GPU vs CPU backend: relative difference %.3g, %d NaN/Inf", g.name,
						e, bad)
				} else {
					t.Logf("%s: GPU vs CPU backend: relative difference %.3g", g.name, e)
				}
			}
		})
	}
}

// A workspace from AllocWorkspace (1.1): device memory on the plan's device, compressible on
// Hopper where the driver allows it; the backward with it matches the float64 reference.
func TestGPUAllocWorkspace(t *testing.T) {
	ctx := openGPU(t)
	for _, c := range gpuCases() {
		c := c
		t.Run(c.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := ctx.MakeCurrent(); err != nil {
				t.Fatal(err)
			}
			r := makeData(c, caseRand(t, c.name))
			gq, gk, gv := gpuBackward(t, ctx, c, r, true)
			checkGrads(t, c, r, gq, gk, gv)
		})
	}
}

// The CUDA backend's pointer checks reach Go as errors naming the tensor.
func TestGPUMisalignedPointerIsRejected(t *testing.T) {
	ctx := openGPU(t)
	p := exampleProblem
	p.Backend = flashbwd.BackendCUDA
	plan := mustPlan(t, p)
	q := deviceCopy[uint16](t, ctx, nil, uintptr(p.PackedBytes(flashbwd.TensorQ)+16))
	wantStatus(t, plan.SetTensor(flashbwd.TensorQ, q+2, nil), flashbwd.StatusMisaligned, "Q")
}

// gpuBackward runs c's backward on device memory, on a non-default stream, and downloads dQ,
// dK and dV. The workspace is Plan.AllocWorkspace's with libWorkspace (1.1), else the
// driver's (cuMemAlloc). The caller has locked the OS thread and made ctx current.
func gpuBackward(t *testing.T, ctx *cudadrv.Context, c refCase, r *refData,
	libWorkspace bool) (gq, gk, gv []uint16) {
	t.Helper()
	plan := mustPlan(t, c.problem(flashbwd.BackendCUDA))
	info, err := plan.Info()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sm_%d, %d SMs, block %dx%d, %d threads, %d B smem, workspace %d B",
		info.Arch, info.SMCount, info.BlockM, info.BlockN, info.NumThreads,
		info.SMemBytes, info.WorkspaceBytes)
	bind := func(id flashbwd.TensorID, p uintptr) {
		if err := plan.SetTensor(id, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	bind(flashbwd.TensorQ, deviceCopy(t, ctx, r.q, uintptr(2*len(r.q))))
	bind(flashbwd.TensorK, deviceCopy(t, ctx, r.k, uintptr(2*len(r.k))))
	bind(flashbwd.TensorV, deviceCopy(t, ctx, r.v, uintptr(2*len(r.v))))
	bind(flashbwd.TensorO, deviceCopy(t, ctx, r.o, uintptr(2*len(r.o))))
	bind(flashbwd.TensorDO, deviceCopy(t, ctx, r.dout, uintptr(2*len(r.dout))))
	bind(flashbwd.TensorLSE, deviceCopy(t, ctx, r.lse, uintptr(4*len(r.lse))))
	dqp := deviceCopy[uint16](t, ctx, nil, uintptr(2*len(r.q)))
	dkp := deviceCopy[uint16](t, ctx, nil, uintptr(2*len(r.k)))
	dvp := deviceCopy[uint16](t, ctx, nil, uintptr(2*len(r.v)))
	bind(flashbwd.TensorDQ, dqp)
	bind(flashbwd.TensorDK, dkp)
	bind(flashbwd.TensorDV, dvp)
	n, err := plan.WorkspaceSize()
	if err != nil {
		t.Fatal(err)
	}
	if libWorkspace {
		ws, err := plan.AllocWorkspace()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = plan.Close() // unbind first
			if err := ws.Free(); err != nil {
				t.Error(err)
			}
			if err := ws.Free(); err != nil {
				t.Errorf("second Free: %v", err)
			}
		})
		t.Logf("AllocWorkspace: %d B at %#x (WorkspaceSize %d B), compressed %v", ws.Len(),
			ws.Addr(), n, ws.Compressed())
		if ws.Len() < n || ws.Addr()%256 != 0 || (n > 0) != (ws.Addr() != 0) {
			t.Fatalf("workspace at %#x of %d bytes; want >= %d bytes, 256-byte aligned",
				ws.Addr(), ws.Len(), n)
		}
		if err := plan.SetWorkspace(ws.Addr(), ws.Len()); err != nil {
			t.Fatal(err)
		}
	} else if n > 0 {
		if err := plan.SetWorkspace(deviceAlloc(t, ctx, n), n); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctx.DestroyStream(stream) }()
	if err := plan.Execute(stream); err != nil {
		t.Fatal(err)
	}
	if err := ctx.SyncStream(stream); err != nil {
		t.Fatal(err)
	}
	gq, gk, gv = make([]uint16, len(r.q)), make([]uint16, len(r.k)), make([]uint16, len(r.v))
	for _, d := range []struct {
		dst []uint16
		src uintptr
	}{{gq, dqp}, {gk, dkp}, {gv, dvp}} {
		if err := cudadrv.Download(ctx, d.dst, d.src); err != nil {
			t.Fatal(err)
		}
	}
	return gq, gk, gv
}
