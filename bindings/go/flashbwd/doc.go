// Package flashbwd calls libflashbwd, the FlashAttention backward pass (dQ, dK, dV), from Go.
//
// The flow is the C API's: describe the problem, make a Plan once, bind tensors and a
// workspace, execute (many times), Close.
//
//	plan, err := flashbwd.NewPlan(flashbwd.Problem{Backend: flashbwd.BackendCUDA,
//		HeadDim: 128, Batch: 2, HeadsQ: 16, SeqlenQ: 4096, SeqlenK: 4096, Causal: true})
//	if err != nil { ... }
//	defer plan.Close()
//	plan.SetTensor(flashbwd.TensorQ, qDevicePtr, nil) // nil strides: packed; also K, V, O, dO, LSE, dQ, dK, dV
//	n, _ := plan.WorkspaceSize()
//	plan.SetWorkspace(wsDevicePtr, n)
//	err = plan.Execute(stream) // enqueues on the stream; does not wait
//
// Since 1.1 the library can allocate the workspace itself, in the memory the plan runs
// fastest with (compressible device memory on Hopper): Plan.AllocWorkspace returns a
// Workspace, which the caller binds with SetWorkspace(ws.Addr(), ws.Len()) and releases with
// Free once no plan uses it.
//
// # Memory and pointers
//
// Device pointers and CUDA streams are uintptr values (from whatever CUDA binding the
// program uses). The conversion to void * happens in C, so neither this package nor its
// callers convert integers to unsafe.Pointer.
//
// The library keeps the pointers given to SetTensor and SetWorkspace until Execute runs.
// The cgo rules forbid C from keeping pointers into Go memory after a call returns, so
// host tensors of the CPU backend come in two sound forms:
//
//   - Go slices, through Plan.ExecuteHost: one cgo call binds them, executes and unbinds
//     them again, so the library holds the Go pointers only during that call. The
//     workspace is C memory owned by the Plan and freed by Close.
//   - C memory, through HostBuffer: allocated with C's allocator, viewed from Go as slices
//     (unsafe.Slice), bound with SetTensor like device memory, released with Free.
//
// A Workspace from Plan.AllocWorkspace is C or device memory too, kept as an address
// (uintptr). Like HostBuffer it has no finalizer: Free it explicitly, after unbinding it.
//
// # Errors
//
// Failures return an *Error with the operation, the Status and the library's detailed
// message, which names the offending field and value. The message is read inside the same
// cgo call as the failing function: goroutines move between OS threads between cgo calls,
// and flashbwd_last_error() is thread-local. errors.Is(err, flashbwd.StatusInvalidValue)
// tests the status. Methods of a closed Plan return ErrClosed.
//
// # Lifetime and threads
//
// Close destroys the plan; it is idempotent. A finalizer closes an unreachable Plan as a
// safety net (flashbwd_plan_destroy makes no CUDA call, so any thread may run it), and every
// method keeps the Plan alive across its C call (runtime.KeepAlive). A Plan serializes its
// own methods with a mutex, so it may be shared between goroutines; different Plans run
// concurrently.
//
// # Versions
//
// The first NewPlan checks the loaded library against the header this package was built
// with: the same major version and a runtime at least as new (CheckVersion). The package
// calls the 1.1 functions (flashbwd_workspace_alloc, flashbwd_workspace_free), so it needs
// libflashbwd 1.1 or newer; the dynamic loader refuses a 1.0 library before any Go code runs.
//
// # Building
//
// The cgo preamble uses `#cgo pkg-config: flashbwd`, so PKG_CONFIG_PATH must lead to a
// flashbwd.pc: the installed one (lib/pkgconfig under the install prefix), or one written
// for a build directory, as ../ci.sh does.
package flashbwd
