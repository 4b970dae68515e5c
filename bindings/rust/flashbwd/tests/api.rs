//! api.rs — the safe crate's contract apart from the numbers: errors carry the library's
//! status and message, host bindings refuse what would be unsound (short slices, wrong
//! element types, inputs bound as outputs, CUDA plans), leaked bindings leave nothing
//! behind, plans move between threads, versions are checked, and info reads back.

mod common;
use common::*;
use flashbwd::{Backend, Dtype, Error, Plan, Problem, Status, TensorId as T};

fn cpu(b: i64, h: i64, sq: i64, sk: i64, d: i32) -> Problem {
    Problem::new(b, h, sq, sk, d).backend(Backend::Cpu)
}

#[test]
fn invalid_problem_error_names_field_and_value() {
    let err = Plan::new(&cpu(1, 1, 4, 4, 7)).unwrap_err();
    assert_eq!(err.status(), Status::INVALID_VALUE);
    assert_eq!(err.name(), "FLASHBWD_ERR_INVALID_VALUE");
    assert!(err.message().contains("head_dim") && err.message().contains('7'), "{err}");
    assert!(err.to_string().starts_with("FLASHBWD_ERR_INVALID_VALUE: "), "{err}");
    let err = Plan::new(&cpu(1, 6, 4, 4, 8).heads_kv(4)).unwrap_err();
    assert_eq!(err.status(), Status::INVALID_VALUE);
    assert!(err.message().contains("heads_kv"), "{err}");
}

#[test]
fn error_of_a_struct_size_the_library_does_not_know() {
    let mut raw = *cpu(1, 1, 4, 4, 8).as_raw();
    raw.struct_size = 3;
    let err = Plan::new(&Problem::from_raw(raw)).unwrap_err();
    assert_eq!(err.status(), Status::STRUCT_SIZE);
    assert!(err.message().contains("struct_size"), "{err}");
}

#[test]
fn execute_without_tensors_reports_the_missing_one() {
    let mut plan = Plan::new(&cpu(1, 1, 4, 4, 8)).unwrap();
    let q = vec![0u16; 32];
    let mut binding = plan.bind_host().unwrap();
    let err = binding.input(T::Q, &q).unwrap().execute().unwrap_err();
    assert_eq!(err.status(), Status::TENSOR_NOT_SET);
    assert!(err.message().starts_with("tensor K "), "{err}");
    assert_eq!(err.to_string(), format!("FLASHBWD_ERR_TENSOR_NOT_SET: {}", err.message()));
    drop(binding);
    // The plan's own message is the library's, status name first; the binding's Drop
    // unbinds (successful calls) and so clears it.
    assert_eq!(plan.last_error(), "");
}

#[test]
fn short_slice_is_refused_before_the_library_sees_it() {
    let p = cpu(2, 2, 8, 8, 16);
    let mut plan = Plan::new(&p).unwrap();
    let q = vec![0u16; p.tensor_len(T::Q) - 1];
    let err = plan.bind_host().unwrap().input(T::Q, &q).map(|_| ()).unwrap_err();
    assert_eq!(err.status(), Status::INVALID_VALUE);
    assert!(err.message().contains("tensor Q") && err.message().contains(&format!("{}", q.len())), "{err}");
    // Strides that reach further than the slice: one gap of 8 per row.
    let q = vec![0u16; p.tensor_len(T::Q)];
    let strides = [8 * 2 * 24, 2 * 24, 24, 1];
    let err = plan.bind_host().unwrap().input_strided(T::Q, &q, &strides).map(|_| ()).unwrap_err();
    assert_eq!(err.status(), Status::INVALID_VALUE, "{err}");
    let long = vec![0u16; 1 + (2 - 1) * 384 + (8 - 1) * 48 + (2 - 1) * 24 + 15];
    plan.bind_host().unwrap().input_strided(T::Q, &long, &strides).unwrap();
}

#[test]
fn wrong_rank_and_negative_strides_are_refused() {
    let p = cpu(1, 1, 4, 4, 8);
    let mut plan = Plan::new(&p).unwrap();
    let q = vec![0u16; 64];
    let mut b = plan.bind_host().unwrap();
    let err = b.input_strided(T::Q, &q, &[8, 1]).map(|_| ()).unwrap_err();
    assert!(err.message().contains("2 strides") && err.message().contains("rank 4"), "{err}");
    let err = b.input_strided(T::Q, &q, &[32, -8, 8, 1]).map(|_| ()).unwrap_err();
    assert!(err.message().contains("strides[1] = -8"), "{err}");
    // A rank the library checks itself: its message comes through.
    let err = b.input_strided(T::Q, &q, &[32, 8, 8, 2]).map(|_| ()).unwrap_err();
    assert_eq!(err.status(), Status::INVALID_VALUE);
    assert!(err.message().contains("contiguous"), "{err}");
}

#[test]
fn element_type_and_direction_must_match_the_tensor() {
    let p = cpu(1, 1, 4, 4, 8);
    let mut plan = Plan::new(&p).unwrap();
    let f = vec![0f32; 64];
    let h = vec![0u16; 64];
    let mut out = vec![0u16; 64];
    let mut b = plan.bind_host().unwrap();
    let err = b.input(T::Q, &f).map(|_| ()).unwrap_err();
    assert!(err.message().contains("Bits16") && err.message().contains("f32"), "{err}");
    let err = b.input(T::Lse, &h).map(|_| ()).unwrap_err();
    assert!(err.message().contains("tensor LSE"), "{err}");
    let err = b.input(T::DQ, &h).map(|_| ()).unwrap_err();
    assert!(err.message().contains("output()"), "{err}");
    let err = b.output(T::Q, &mut out).map(|_| ()).unwrap_err();
    assert!(err.message().contains("input()"), "{err}");
}

#[test]
fn host_binding_refuses_a_cuda_plan() {
    // A planning-only CUDA plan (explicit arch) exists without a GPU.
    let p = Problem::new(1, 1, 64, 64, 64).backend(Backend::Cuda { device: 0 }).arch(90, 0);
    let mut plan = Plan::new(&p).unwrap();
    let err = plan.bind_host().map(|_| ()).unwrap_err();
    assert_eq!(err.status(), Status::INVALID_VALUE);
    assert!(err.message().contains("Cpu"), "{err}");
    // And it reports what it planned.
    let info = plan.info().unwrap();
    assert_eq!(info.arch, 90);
    assert_eq!(info.backend, Backend::Cuda { device: 0 });
    assert!(info.launches.len() >= 3, "{info:?}");
    assert!(info.kernel_head_dim >= 64 && info.smem_bytes > 0 && info.num_threads > 0, "{info:?}");
    assert_eq!(info.launches[1].block[0], info.num_threads);
    assert_eq!(info.workspace_bytes, plan.workspace_size().unwrap());
    // Executing a planning-only plan is refused, with the reason.
    let err = unsafe { plan.execute(flashbwd::Stream::DEFAULT) }.unwrap_err();
    assert!(err.status() == Status::NOT_SUPPORTED || err.status() == Status::TENSOR_NOT_SET, "{err}");
}

#[test]
fn cuda_plan_without_a_gpu_fails_cleanly_or_plans() {
    // CI has no GPU: NO_DEVICE (or NOT_SUPPORTED from a CPU-only build), with a message.
    // On a GPU machine the plan is made; both are correct, a crash or a silent CPU plan not.
    match Plan::new(&Problem::new(1, 1, 64, 64, 64)) {
        Ok(plan) => assert_eq!(plan.info().unwrap().backend, Backend::Cuda { device: 0 }),
        Err(e) => {
            assert!(e.status() == Status::NO_DEVICE || e.status() == Status::NOT_SUPPORTED, "{e}");
            assert!(!e.message().is_empty(), "{e:?}");
        }
    }
}

#[test]
fn cpu_plan_info_reports_the_cpu_and_its_workspace() {
    let plan = Plan::new(&cpu(2, 4, 33, 47, 64)).unwrap();
    let info = plan.info().unwrap();
    assert_eq!(info.backend, Backend::Cpu);
    assert_eq!(info.arch, 0);
    assert_eq!(info.workspace_bytes, plan.workspace_size().unwrap());
}

#[test]
fn leaked_binding_leaves_no_pointer_behind() {
    // mem::forget skips the binding's Drop; the next binding must still start from nothing,
    // or its execute would reach the first binding's (by then freed) slices.
    let p = cpu(1, 1, 4, 4, 8);
    let mut plan = Plan::new(&p).unwrap();
    let n = p.tensor_len(T::Q);
    {
        let (q, k, v, o, d_o) = (vec![0u16; n], vec![0u16; n], vec![0u16; n], vec![0u16; n], vec![0u16; n]);
        let lse = vec![0f32; p.tensor_len(T::Lse)];
        let (mut dq, mut dk, mut dv) = (vec![0u16; n], vec![0u16; n], vec![0u16; n]);
        let mut b = plan.bind_host().unwrap();
        b.input(T::Q, &q).unwrap().input(T::K, &k).unwrap().input(T::V, &v).unwrap()
            .input(T::O, &o).unwrap().input(T::DO, &d_o).unwrap().input(T::Lse, &lse).unwrap()
            .output(T::DQ, &mut dq).unwrap().output(T::DK, &mut dk).unwrap();
        std::mem::forget(b);
        let _ = (&mut dv, q, k, v, o, d_o, lse, dq, dk); // all freed at the end of this block
    }
    let mut dv = vec![0u16; n];
    let err = plan.bind_host().unwrap().output(T::DV, &mut dv).unwrap().execute().unwrap_err();
    assert_eq!(err.status(), Status::TENSOR_NOT_SET, "{err}");
}

#[test]
fn plan_moves_to_another_thread_and_runs_there() {
    fn assert_send<S: Send>() {}
    assert_send::<Plan>();
    let case = Case::new("thread", Kind::Fp16, 1, 2, 1, 7, 5, 8);
    let data = make(&case, &mut Rng::new(seed()));
    let plan = Plan::new(&case.problem(Backend::Cpu)).unwrap();
    let out = std::thread::spawn(move || {
        let mut plan = plan;
        let (mut dq, mut dk, mut dv) = (data.dq.data.clone(), data.dk.data.clone(), data.dv.data.clone());
        plan.bind_host().unwrap()
            .input(T::Q, &data.q.data).unwrap().input(T::K, &data.k.data).unwrap()
            .input(T::V, &data.v.data).unwrap().input(T::O, &data.o.data).unwrap()
            .input(T::DO, &data.d_o.data).unwrap().input(T::Lse, &data.lse.data).unwrap()
            .output(T::DQ, &mut dq).unwrap().output(T::DK, &mut dk).unwrap()
            .output(T::DV, &mut dv).unwrap()
            .execute().unwrap();
        (data, (dq, dk, dv))
    })
    .join()
    .unwrap();
    assert_close(&case, &out.0, &out.1);
}

#[test]
fn version_rule_is_same_major_and_not_older() {
    let rows = [
        ("equal", 10000, 10000, true),
        ("newer patch", 10001, 10000, true),
        ("newer minor", 10100, 10002, true),
        ("older patch", 10000, 10001, false),
        ("older minor", 10002, 10100, false),
        ("newer major", 20000, 10000, false),
        ("older major", 10000, 20000, false),
    ];
    for (name, runtime, compiled, ok) in rows {
        assert_eq!(flashbwd::version_compatible(runtime, compiled), ok, "{name}");
    }
    let v = flashbwd::check_version().unwrap();
    assert_eq!(v, flashbwd::version());
    assert!(flashbwd::version_compatible(v, flashbwd::COMPILED_VERSION));
}

#[test]
fn shapes_follow_the_header_layouts() {
    let p = Problem::new(2, 8, 5, 7, 16).heads_kv(2);
    assert_eq!(p.shape(T::Q), [2, 5, 8, 16]);
    assert_eq!(p.shape(T::DK), [2, 7, 2, 16]);
    assert_eq!(p.shape(T::Lse), [2, 8, 5]);
    assert_eq!(p.shape(T::CuSeqlensQ), [3]);
    assert_eq!(p.shape(T::SequsedK), [2]);
    assert_eq!(p.shape(T::AlibiSlopes), [8]);
    let v = p.varlen(9, 0);
    assert_eq!(v.shape(T::O), [9, 8, 16]);
    assert_eq!(v.shape(T::V), [14, 2, 16]);
    assert_eq!(v.shape(T::Lse), [8, 9]);
    assert_eq!(v.tensor_len(T::Lse), 72);
    // Defaults: heads_kv 0 reads as heads_q.
    assert_eq!(Problem::new(1, 3, 4, 4, 8).shape(T::K), [1, 4, 3, 8]);
}

#[test]
fn tensor_ids_are_the_header_values() {
    use flashbwd::sys;
    let expected = [
        (T::Q, sys::FLASHBWD_TENSOR_Q), (T::K, sys::FLASHBWD_TENSOR_K), (T::V, sys::FLASHBWD_TENSOR_V),
        (T::O, sys::FLASHBWD_TENSOR_O), (T::DO, sys::FLASHBWD_TENSOR_DO), (T::Lse, sys::FLASHBWD_TENSOR_LSE),
        (T::DQ, sys::FLASHBWD_TENSOR_DQ), (T::DK, sys::FLASHBWD_TENSOR_DK), (T::DV, sys::FLASHBWD_TENSOR_DV),
        (T::CuSeqlensQ, sys::FLASHBWD_TENSOR_CU_SEQLENS_Q), (T::CuSeqlensK, sys::FLASHBWD_TENSOR_CU_SEQLENS_K),
        (T::SequsedQ, sys::FLASHBWD_TENSOR_SEQUSED_Q), (T::SequsedK, sys::FLASHBWD_TENSOR_SEQUSED_K),
        (T::AlibiSlopes, sys::FLASHBWD_TENSOR_ALIBI_SLOPES),
    ];
    assert_eq!(T::ALL.len() as i32, sys::FLASHBWD_TENSOR_COUNT - 1, "a tensor id has no TensorId");
    for (i, (id, raw)) in expected.iter().enumerate() {
        assert_eq!(id.raw(), *raw, "{id:?}");
        assert_eq!(T::ALL[i], *id);
    }
    assert_eq!(Dtype::Bf16.raw(), sys::FLASHBWD_DTYPE_BF16);
    assert_eq!(Dtype::Fp16.raw(), sys::FLASHBWD_DTYPE_FP16);
    let raw = *Problem::new(1, 1, 1, 1, 8).backend(Backend::Cpu).as_raw();
    assert_eq!(raw.backend, sys::FLASHBWD_BACKEND_CPU);
    let raw = *Problem::new(1, 1, 1, 1, 8).backend(Backend::Cuda { device: 3 }).as_raw();
    assert_eq!((raw.backend, raw.device), (sys::FLASHBWD_BACKEND_CUDA, 3));
}

#[test]
fn error_is_a_std_error_with_status_and_message() {
    let e = Error::new(Status::OVERLAP, "tensor dK overlaps dV");
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e.clone());
    assert_eq!(boxed.to_string(), "FLASHBWD_ERR_OVERLAP: tensor dK overlaps dV");
    let bare = Error::new(Status::BUSY, "");
    assert_eq!(bare.to_string(), format!("FLASHBWD_ERR_BUSY: {}", Status::BUSY.description()));
}

#[test]
fn raw_binding_errors_come_back_with_the_plan_message() {
    let p = Problem::new(1, 1, 64, 64, 64).backend(Backend::Cuda { device: 0 }).arch(90, 0);
    let mut plan = Plan::new(&p).unwrap();
    let err = plan.set_tensor(T::Q, flashbwd::DevicePtr(0x1002), None).unwrap_err();
    assert_eq!(err.status(), Status::MISALIGNED);
    assert!(err.message().contains("tensor Q") && err.message().contains("16-byte"), "{err}");
    assert_eq!(plan.last_error(), format!("FLASHBWD_ERR_MISALIGNED: {}", err.message()));
    let err = plan.set_workspace(flashbwd::DevicePtr(0x1080), 1 << 20).unwrap_err();
    assert_eq!(err.status(), Status::MISALIGNED);
    assert!(err.message().contains("256"), "{err}");
    plan.set_tensor(T::Q, flashbwd::DevicePtr(0x10000), Some(&[64 * 64, 64, 64, 1])).unwrap();
    assert_eq!(plan.last_error(), "");
}
