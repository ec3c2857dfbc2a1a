//! Host package of the repository-level `examples/` and `tests/`. Its crate docs are the
//! README, so the README's example is compiled and run as a doc test.
#![doc = include_str!("../README.md")]

pub mod bench;
pub mod block;
pub mod digits;
pub mod fuzz;
pub mod rng;
pub mod testing;
