//! The gradient table: every gradient rule against central finite differences in f64
//! (random shapes, broadcasting, symbolic dims), and on every MLX mode against the CPU.

mod errors;
mod harness;
mod rules;

/// The op table's deterministic generator (and reference arrays, unused here).
#[allow(dead_code)]
#[path = "../ops/reference.rs"]
mod reference;
