//! The transformer's own ops: attention (a primitive) and rotary position embedding (a
//! composite).

mod attention;
mod rope;

pub use attention::Attention;
pub use rope::Rope;
