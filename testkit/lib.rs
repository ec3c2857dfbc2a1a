//! `rlx_testkit`: what the repository's tests, benchmarks and tools share (the random-graph
//! checker, a seeded RNG, the digits data set, a BERT block, fixtures). It is the library of
//! the root package, which hosts `examples/` and `tests/`; its crate docs are the README, so
//! the README's example is compiled and run as a doc test.
#![doc = include_str!("../README.md")]

pub mod bench;
pub mod block;
pub mod digits;
pub mod fuzz;
pub mod gguf;
pub mod llm;
pub mod report;
pub mod rng;
pub mod testing;
