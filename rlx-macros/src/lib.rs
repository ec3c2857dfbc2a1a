//! Procedural macros of RLX.
//!
//! This crate will hold `#[rlx::model]` and `#[derive(Params)]` (see `ARCHITECTURE.md`);
//! `rlx` re-exports them, so users never depend on it directly. It has no macros yet.
