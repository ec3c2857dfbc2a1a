//! `#[rlx::model]` and `#[derive(Params)]` end to end: build, compile on the CPU, bind
//! weights (by hand and from safetensors files), run, and compare with hand-computed
//! references; every weight-file error case returns a typed error naming the tensors.

mod declare;
mod models;
mod running;
mod weights;
