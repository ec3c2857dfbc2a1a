//! Tests of the IR through the public API: inference for every op, the builder, the
//! verifier and the printers.

mod builder;
mod elementwise;
mod inspect;
mod linalg;
mod movement;
mod nn;
mod reduce;
mod support;
mod verify;
