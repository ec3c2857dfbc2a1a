//! Raw bindings to the RLX C ABI shim over Apple's MLX.
//!
//! The shim, the pinned MLX payload and the build script arrive with the MLX backend (see
//! `ARCHITECTURE.md`); until then this crate is empty and links nothing.
