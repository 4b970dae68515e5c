//! readme_example.rs — the README's example, end to end on the CPU backend: its code is
//! the README's, verbatim, and on fresh random inputs its `backward_on_cpu` gives bitwise
//! the C library's own result (the raw C API on the same inputs) and matches an
//! independent f64 reference.

mod common;
use common::*;

#[allow(dead_code)] // the example's main and helpers are not called here
#[path = "../examples/backward_cpu.rs"]
mod example;

#[test]
fn readme_shows_the_example_verbatim() {
    let example = include_str!("../examples/backward_cpu.rs");
    let readme = include_str!("../../README.md");
    let begin = example.find("// README-BEGIN\n").expect("README-BEGIN marker") + "// README-BEGIN\n".len();
    let end = example.find("// README-END").expect("README-END marker");
    let code = &example[begin..end];
    assert!(
        readme.contains(&format!("```rust\n{code}```")),
        "bindings/rust/README.md must show examples/backward_cpu.rs between the README \
         markers verbatim, in one ```rust block"
    );
}

fn run(case: Case) {
    let data = make(&case, &mut Rng::new(seed()));
    let problem = case.problem(flashbwd::Backend::Cpu);
    let [dq, dk, dv] = example::backward_on_cpu(
        &problem,
        (&data.q.data, &data.k.data, &data.v.data),
        (&data.o.data, &data.d_o.data, &data.lse.data),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let c = run_raw(&case, &data);
    assert!(dq == c.0 && dk == c.1 && dv == c.2, "{}: differs from the C API's result", case.name);
    assert_close(&case, &data, &(dq, dk, dv));
}

#[test]
fn readme_example_equals_c_library_bf16_gqa_causal() {
    let mut case = Case::new("readme bf16 gqa causal", Kind::Bf16, 2, 8, 2, 48, 48, 64);
    case.causal = true;
    run(case);
}

#[test]
fn readme_example_equals_c_library_tiny() {
    run(Case::new("readme tiny", Kind::Bf16, 1, 1, 1, 2, 3, 8));
}
