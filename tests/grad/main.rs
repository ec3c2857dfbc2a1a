//! The gradient table: every gradient rule against central finite differences in f64
//! (random shapes, broadcasting, symbolic dims), and on every MLX mode against the CPU.

mod errors;
mod harness;
mod rules;
