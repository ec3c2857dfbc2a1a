//! The op table: every op on random inputs of several shapes and dtypes (broadcasting,
//! runtime dims bound at run time, transposed operands) against naive f64 references, and
//! every gradient rule against central finite differences in f64 (and on every MLX mode
//! against the CPU). One file per op family of `rlx/src/ops`, holding both. The harnesses are
//! generic over [`rlx::backend::Backend`], so the same cases run on every backend.

mod attention_int8;
mod custom;
mod delta_rule;
mod elementwise;
mod experts;
mod gradient;
mod gradient_errors;
mod harness;
mod linalg;
mod movement;
mod nn;
mod norm;
mod random;
mod reduce;
mod reference;
mod sample;
mod softmax;
mod sort;
mod spatial;

/// `RLX_CPU_ISA` caps the instruction set the CPU kernels use, so CI can run this table
/// through the AVX2 and portable paths on a wider machine: check the cap took effect.
#[test]
fn instruction_set_cap_from_environment() {
    use rlx::cpu::{Isa, detected_isa, isa};
    let cap = match std::env::var("RLX_CPU_ISA").as_deref() {
        Ok("baseline") => Isa::Baseline,
        Ok("avx2") => Isa::Avx2,
        Ok("avx512") => Isa::Avx512,
        _ => detected_isa(),
    };
    assert_eq!(isa(), cap.min(detected_isa()));
    eprintln!(
        "op table kernels: {} (CPU has {})",
        isa().name(),
        detected_isa().name()
    );
}
