//! workspace.rs — `Plan::alloc_workspace` and `Workspace` (ABI 1.1) on the CPU backend: a
//! workspace the library allocated, bound with `HostBinding::workspace`, gives bitwise the
//! C API's dQ, dK, dV and matches the f64 reference; it is 256-byte aligned host memory of
//! at least the plan's size, never compressed, and outlives its plan; dropping it frees it
//! through `flashbwd_workspace_free`; and errors carry the library's status and message.
//!
//! The library keeps a registry of live workspaces per process. The test that asks it
//! whether an address is still live holds LOCK, as does every test here that allocates, so
//! no allocation can reuse a freed address in between.

mod common;
use common::*;
use flashbwd::{sys, Backend, Plan, Problem, Status, TensorId as T, Workspace};
use std::sync::{Mutex, MutexGuard};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn cpu(b: i64, h: i64, sq: i64, sk: i64, d: i32) -> Problem {
    Problem::new(b, h, sq, sk, d).backend(Backend::Cpu)
}

/// Check what alloc_workspace promises for a CPU plan.
fn check_host_workspace(plan: &Plan, ws: &Workspace) {
    let need = plan.workspace_size().unwrap();
    assert!(ws.bytes() >= need, "{ws:?}: smaller than the {need} bytes the plan needs");
    assert!(!ws.is_compressed(), "{ws:?}: host memory is never compressible");
    assert_eq!(ws.backend(), Backend::Cpu);
    assert!(!ws.as_ptr().is_null(), "a CPU plan always needs a workspace");
    assert_eq!(ws.ptr().0, ws.as_ptr() as u64);
    assert_eq!(ws.ptr().0 % 256, 0, "{ws:?}: not 256-byte aligned");
}

#[test]
fn library_workspace_gives_the_c_result_and_matches_the_reference() {
    let _g = lock();
    let mut case = Case::new("bf16 gqa causal, library workspace", Kind::Bf16, 2, 4, 2, 33, 47, 64);
    case.causal = true;
    let mut rng = Rng::new(seed());
    let (first, second) = (make(&case, &mut rng), make(&case, &mut rng));
    let mut plan = Plan::new(&case.problem(Backend::Cpu)).unwrap();
    let mut ws = plan.alloc_workspace().unwrap();
    check_host_workspace(&plan, &ws);
    // Two bindings, one workspace: it is borrowed for each binding, and reused.
    for data in [&first, &second] {
        let out = run_safe_with(&case, data, &mut plan, Some(&mut ws)).unwrap_or_else(|e| panic!("{e}"));
        let raw = run_raw(&case, data);
        assert!(out.0 == raw.0 && out.1 == raw.1 && out.2 == raw.2, "{}: differs from the C API's result", case.name);
        assert_close(&case, data, &out);
    }
    ws.free().unwrap();
}

#[test]
fn workspace_suits_a_smaller_plan_and_outlives_its_own() {
    let _g = lock();
    let big = Case::new("fp16 head-major, borrowed workspace", Kind::Fp16, 1, 3, 1, 40, 29, 32);
    let mut small = Case::new("fp16 head-major window, smaller plan", Kind::Fp16, 1, 3, 1, 20, 17, 32);
    small.window = Some((5, 3));
    small.layout = Layout::HeadMajor;
    let mut ws = {
        let plan = Plan::new(&big.problem(Backend::Cpu)).unwrap();
        plan.alloc_workspace().unwrap()
    }; // the plan is gone; the memory is the caller's
    let mut plan = Plan::new(&small.problem(Backend::Cpu)).unwrap();
    assert!(plan.workspace_size().unwrap() < ws.bytes());
    let data = make(&small, &mut Rng::new(seed()));
    let out = run_safe_with(&small, &data, &mut plan, Some(&mut ws)).unwrap_or_else(|e| panic!("{e}"));
    assert!(out == run_raw(&small, &data), "{}: differs from the C API's result", small.name);
    assert_close(&small, &data, &out);
}

#[test]
fn dropping_a_workspace_frees_it_through_the_library() {
    let _g = lock();
    // Whether the library holds no live workspace at `addr`: then freeing it is refused
    // with INVALID_VALUE. (Asked only once its Workspace is gone, and under LOCK: were it
    // still live, this would free it.)
    let freed_already = |addr: *mut std::ffi::c_void| {
        let st = unsafe { sys::flashbwd_workspace_free(addr) };
        if st == sys::FLASHBWD_OK {
            return false;
        }
        assert_eq!(Status(st), Status::INVALID_VALUE);
        let msg = unsafe { std::ffi::CStr::from_ptr(sys::flashbwd_last_error()) }.to_string_lossy().into_owned();
        assert!(msg.contains("did not come from flashbwd_workspace_alloc, or was freed already"), "{msg}");
        true
    };
    let plan = Plan::new(&cpu(1, 2, 16, 16, 32)).unwrap();
    let ws = plan.alloc_workspace().unwrap();
    let addr = ws.as_ptr();
    drop(ws);
    assert!(freed_already(addr), "drop left the workspace allocated");
    let ws = plan.alloc_workspace().unwrap();
    let addr = ws.as_ptr();
    ws.free().unwrap();
    assert!(freed_already(addr), "free() left the workspace allocated");
}

#[test]
fn workspace_moves_to_another_thread_and_is_freed_there() {
    fn assert_send_sync<S: Send + Sync>() {}
    assert_send_sync::<Workspace>();
    let _g = lock();
    let case = Case::new("thread, library workspace", Kind::Bf16, 1, 2, 2, 9, 11, 16);
    let data = make(&case, &mut Rng::new(seed()));
    let mut plan = Plan::new(&case.problem(Backend::Cpu)).unwrap();
    let ws = plan.alloc_workspace().unwrap();
    let (case, data, out) = std::thread::spawn(move || {
        let mut ws = ws;
        let out = run_safe_with(&case, &data, &mut plan, Some(&mut ws)).unwrap();
        drop(ws);
        (case, data, out)
    })
    .join()
    .unwrap();
    assert_close(&case, &data, &out);
}

#[test]
fn workspace_smaller_than_the_plan_needs_is_refused_with_the_library_message() {
    let _g = lock();
    let p = cpu(1, 2, 64, 64, 32);
    let mut small = Plan::new(&cpu(1, 2, 8, 8, 32)).unwrap().alloc_workspace().unwrap();
    let mut plan = Plan::new(&p).unwrap();
    let need = plan.workspace_size().unwrap();
    assert!(small.bytes() < need);
    let n = p.tensor_len(T::Q);
    let (q, lse) = (vec![0u16; n], vec![0f32; p.tensor_len(T::Lse)]);
    let (mut dq, mut dk, mut dv) = (vec![1u16; n], vec![1u16; n], vec![1u16; n]);
    let mut b = plan.bind_host().unwrap();
    let err = b.workspace(&mut small).map(|_| ()).unwrap_err();
    assert_eq!(err.status(), Status::WORKSPACE_TOO_SMALL);
    assert!(err.message().contains(&format!("{need} this plan needs")), "{err}");
    // The binding goes on with its own workspace: what fails binds nothing.
    b.input(T::Q, &q).unwrap().input(T::K, &q).unwrap().input(T::V, &q).unwrap()
        .input(T::O, &q).unwrap().input(T::DO, &q).unwrap().input(T::Lse, &lse).unwrap()
        .output(T::DQ, &mut dq).unwrap().output(T::DK, &mut dk).unwrap().output(T::DV, &mut dv).unwrap()
        .execute().unwrap();
    drop(b);
    assert!(dq.iter().chain(&dk).chain(&dv).all(|&x| x == 0), "zero inputs give zero gradients");
}

#[test]
fn planning_only_plan_has_no_device_to_allocate_on() {
    // A planning-only CUDA plan (explicit arch) exists without a GPU.
    let plan = Plan::new(&Problem::new(1, 1, 64, 64, 64).backend(Backend::Cuda { device: 0 }).arch(90, 0)).unwrap();
    let err = plan.alloc_workspace().unwrap_err();
    assert_eq!(err.status(), Status::NOT_SUPPORTED);
    assert!(err.message().contains("planning-only"), "{err}");
    assert_eq!(plan.last_error(), format!("FLASHBWD_ERR_NOT_SUPPORTED: {}", err.message()));
}

#[test]
fn device_workspace_on_a_gpu_is_refused_by_a_host_binding() {
    // CI has no GPU, and a CUDA plan cannot be made there; on a GPU machine the workspace is
    // device memory, which a host binding must refuse (the CPU would write through it).
    let Ok(gpu) = Plan::new(&Problem::new(1, 2, 256, 256, 64).backend(Backend::Cuda { device: 0 })) else {
        eprintln!("no CUDA plan here (no GPU, or a CPU-only build): nothing to check");
        return;
    };
    let _g = lock();
    let mut ws = gpu.alloc_workspace().unwrap();
    assert!(!ws.as_ptr().is_null() && ws.bytes() >= gpu.workspace_size().unwrap(), "{ws:?}");
    assert_eq!(ws.ptr().0 % 256, 0, "{ws:?}");
    assert_eq!(ws.backend(), Backend::Cuda { device: 0 });
    eprintln!("CUDA workspace: {ws:?}");
    let mut plan = Plan::new(&cpu(1, 1, 4, 4, 8)).unwrap();
    let err = plan.bind_host().unwrap().workspace(&mut ws).map(|_| ()).unwrap_err();
    assert_eq!(err.status(), Status::INVALID_VALUE);
    assert!(err.message().contains("Backend::Cpu"), "{err}");
    ws.free().unwrap();
}
