//! backward_cpu.rs — the README's example: one attention backward pass on the CPU backend.
//! The part between the README markers is copied verbatim into bindings/rust/README.md
//! (tests/readme_example.rs fails if they differ, and runs `backward_on_cpu`).
//!
//!   FLASHBWD_LIB_DIR=<cmake build dir> cargo run --example backward_cpu

// README-BEGIN
use flashbwd::{Backend, Dtype, Error, Plan, Problem, TensorId};

/// dQ, dK and dV of one attention backward pass, on the CPU backend. Every tensor is packed
/// in its `TensorId` layout; the 16-bit ones hold bf16 bit patterns.
pub fn backward_on_cpu(
    problem: &Problem,
    (q, k, v): (&[u16], &[u16], &[u16]),
    (o, d_o, lse): (&[u16], &[u16], &[f32]),
) -> Result<[Vec<u16>; 3], Error> {
    let mut dq = vec![0u16; problem.tensor_len(TensorId::DQ)];
    let mut dk = vec![0u16; problem.tensor_len(TensorId::DK)];
    let mut dv = vec![0u16; problem.tensor_len(TensorId::DV)];

    let mut plan = Plan::new(problem)?; // validates; the expensive part, done once
    plan.bind_host()? // borrows the slices until the binding is dropped
        .input(TensorId::Q, q)?
        .input(TensorId::K, k)?
        .input(TensorId::V, v)?
        .input(TensorId::O, o)?
        .input(TensorId::DO, d_o)?
        .input(TensorId::Lse, lse)?
        .output(TensorId::DQ, &mut dq)?
        .output(TensorId::DK, &mut dk)?
        .output(TensorId::DV, &mut dv)?
        .execute()?;
    Ok([dq, dk, dv])
}

fn main() -> Result<(), Error> {
    // 2 sequences of 128 tokens, 8 query heads sharing 2 key/value heads, head dim 64.
    let problem = Problem::new(2, 8, 128, 128, 64)
        .backend(Backend::Cpu)
        .dtype(Dtype::Bf16)
        .heads_kv(2)
        .causal(true);
    let q = random_bf16(problem.tensor_len(TensorId::Q), 1);
    let k = random_bf16(problem.tensor_len(TensorId::K), 2);
    let v = random_bf16(problem.tensor_len(TensorId::V), 3);
    let d_o = random_bf16(problem.tensor_len(TensorId::DO), 4);
    let (o, lse) = forward(&problem, &q, &k, &v); // what a forward pass would have saved

    let [dq, dk, dv] = backward_on_cpu(&problem, (&q, &k, &v), (&o, &d_o, &lse))?;
    let norm = |x: &[u16]| x.iter().map(|&b| Dtype::Bf16.to_f32(b).powi(2)).sum::<f32>().sqrt();
    println!("|dQ| = {:.4}  |dK| = {:.4}  |dV| = {:.4}", norm(&dq), norm(&dk), norm(&dv));
    Ok(())
}
// README-END

/// Reproducible pseudo-random values in [-1, 1), as bf16 bits.
fn random_bf16(n: usize, seed: u64) -> Vec<u16> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            Dtype::Bf16.from_f32((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

/// A plain causal GQA attention forward in f32 for packed (batch, seq, head, dim) tensors:
/// O (as bf16) and the natural-log LSE of the scaled scores, (batch, head, seq).
fn forward(p: &Problem, q: &[u16], k: &[u16], v: &[u16]) -> (Vec<u16>, Vec<f32>) {
    let r = p.as_raw();
    let (b, hq, hkv, sq, sk, d) = (r.batch as usize, r.heads_q as usize, r.heads_kv as usize,
                                   r.seqlen_q as usize, r.seqlen_k as usize, r.head_dim as usize);
    let f = |x: u16| Dtype::Bf16.to_f32(x);
    let scale = 1.0 / (d as f32).sqrt();
    let mut o = vec![0u16; p.tensor_len(TensorId::O)];
    let mut lse = vec![0f32; p.tensor_len(TensorId::Lse)];
    for (bi, h, i) in (0..b).flat_map(|bi| (0..hq).flat_map(move |h| (0..sq).map(move |i| (bi, h, i)))) {
        let kh = h / (hq / hkv);
        let qrow = &q[((bi * sq + i) * hq + h) * d..][..d];
        let last = i + sk - sq; // causal, aligned bottom-right
        let s: Vec<f32> = (0..=last)
            .map(|j| {
                let krow = &k[((bi * sk + j) * hkv + kh) * d..][..d];
                scale * qrow.iter().zip(krow).map(|(&a, &c)| f(a) * f(c)).sum::<f32>()
            })
            .collect();
        let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = s.iter().map(|&x| (x - m).exp()).sum();
        lse[(bi * hq + h) * sq + i] = m + sum.ln();
        for c in 0..d {
            let acc: f32 = s.iter().enumerate()
                .map(|(j, &x)| (x - m).exp() / sum * f(v[((bi * sk + j) * hkv + kh) * d + c]))
                .sum();
            o[((bi * sq + i) * hq + h) * d + c] = Dtype::Bf16.from_f32(acc);
        }
    }
    (o, lse)
}
