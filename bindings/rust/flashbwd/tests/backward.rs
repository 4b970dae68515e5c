//! backward.rs — the safe crate end to end on the CPU backend: fresh random problems in
//! packed, head-major and padded layouts (GQA, causal, windows with fully masked rows,
//! variable length) must give bitwise the same dQ, dK, dV as the raw C API on the same
//! inputs, and match an independent f64 reference within the design's bounds.

mod common;
use common::*;

fn run(case: Case) {
    let mut rng = Rng::new(seed());
    let data = make(&case, &mut rng);
    let safe = run_safe(&case, &data).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let raw = run_raw(&case, &data);
    assert!(safe.0 == raw.0, "{}: dQ differs from the C API's", case.name);
    assert!(safe.1 == raw.1, "{}: dK differs from the C API's", case.name);
    assert!(safe.2 == raw.2, "{}: dV differs from the C API's", case.name);
    assert_close(&case, &data, &safe);
}

#[test]
fn tiny_problem_matches_reference() {
    run(Case::new("tiny", Kind::Bf16, 1, 1, 1, 3, 5, 8));
}

#[test]
fn bf16_gqa_causal_packed_matches_c_and_reference() {
    let mut c = Case::new("bf16 gqa causal packed", Kind::Bf16, 2, 4, 2, 33, 47, 64);
    c.causal = true;
    run(c);
}

#[test]
fn fp16_head_major_window_with_masked_rows_matches_c_and_reference() {
    let mut c = Case::new("fp16 head-major window", Kind::Fp16, 1, 3, 1, 40, 29, 32);
    c.window = Some((5, 3));
    c.scale = 0.3;
    c.layout = Layout::HeadMajor;
    run(c);
}

#[test]
fn bf16_padded_causal_more_queries_than_keys_matches_c_and_reference() {
    let mut c = Case::new("bf16 padded causal sq>sk", Kind::Bf16, 2, 2, 2, 20, 13, 16);
    c.causal = true;
    c.layout = Layout::Padded;
    run(c);
}

#[test]
fn fp16_varlen_padded_matches_c_and_reference() {
    let mut c = Case::new("fp16 varlen padded", Kind::Fp16, 3, 2, 1, 12, 9, 24);
    c.varlen = Some((vec![5, 12, 1], vec![9, 3, 7]));
    c.layout = Layout::Padded;
    run(c);
}

#[test]
fn a_plan_runs_again_with_new_bindings() {
    // Two bindings on one plan: the second sees only its own slices and its own result.
    let case = Case::new("rebinding", Kind::Bf16, 1, 2, 2, 9, 11, 16);
    let mut rng = Rng::new(seed());
    let (first, second) = (make(&case, &mut rng), make(&case, &mut rng));
    let mut plan = flashbwd::Plan::new(&case.problem(flashbwd::Backend::Cpu)).unwrap();
    for data in [&first, &second] {
        use flashbwd::TensorId as T;
        let (mut dq, mut dk, mut dv) = (data.dq.data.clone(), data.dk.data.clone(), data.dv.data.clone());
        plan.bind_host().unwrap()
            .input(T::Q, &data.q.data).unwrap().input(T::K, &data.k.data).unwrap()
            .input(T::V, &data.v.data).unwrap().input(T::O, &data.o.data).unwrap()
            .input(T::DO, &data.d_o.data).unwrap().input(T::Lse, &data.lse.data).unwrap()
            .output(T::DQ, &mut dq).unwrap().output(T::DK, &mut dk).unwrap()
            .output(T::DV, &mut dv).unwrap()
            .execute().unwrap();
        assert_close(&case, data, &(dq, dk, dv));
    }
}
