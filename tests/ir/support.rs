//! Helpers: tensor types written as text, and assertions on inference.

use rlx::ir::{DType, Dim, InferError, Op, Shape, TensorType};

/// Parses `f32[batch,384]`, `bool[]` or `i64[2*seq]`-free simple forms: each dim is a number
/// or a symbol name.
pub fn ty(text: &str) -> TensorType {
    let (dtype, rest) = text.split_once('[').expect("type needs [dims]");
    let dtype = DType::ALL
        .into_iter()
        .find(|d| d.name() == dtype)
        .unwrap_or_else(|| panic!("unknown dtype {dtype}"));
    TensorType::new(dtype, shape(&format!("[{rest}")))
}

/// Parses `[batch,384]`.
pub fn shape(text: &str) -> Shape {
    let inner = text.trim_start_matches('[').trim_end_matches(']');
    if inner.is_empty() {
        return Shape::scalar();
    }
    Shape::new(inner.split(',').map(|d| match d.trim().parse::<usize>() {
        Ok(n) => Dim::Static(n),
        Err(_) => Dim::sym(d.trim()),
    }))
}

pub fn infer(op: &Op, inputs: &[&str]) -> Result<TensorType, InferError> {
    let types: Vec<TensorType> = inputs.iter().map(|t| ty(t)).collect();
    op.infer(&types)
}

/// Asserts the op accepts `inputs` and produces `expected` (printed form).
#[track_caller]
pub fn ok(op: &Op, inputs: &[&str], expected: &str) {
    match infer(op, inputs) {
        Ok(t) => assert_eq!(t.to_string(), expected, "{op} on {inputs:?}"),
        Err(e) => panic!("{op} on {inputs:?} failed: {e}"),
    }
}

/// Asserts the op rejects `inputs` with a message equal to `expected`.
#[track_caller]
pub fn err(op: &Op, inputs: &[&str], expected: &str) {
    match infer(op, inputs) {
        Ok(t) => panic!("{op} on {inputs:?} should fail, gave {t}"),
        Err(e) => assert_eq!(e.to_string(), expected, "{op} on {inputs:?}"),
    }
}
