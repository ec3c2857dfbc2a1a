//! Fixtures the integration tests share.

use std::path::PathBuf;

use rlx::builder::GraphBuilder;
use rlx::ir::{Attention, AttentionMask, DType, Graph, Op, SliceUpdate};
use rlx::models::bert::BertConfig;

/// The folder of the tests' reference files: `$RLX_TEST_DATA` when set (a copy packed for a
/// machine without the source tree, which `scripts/gpu-check.sh run` points it at), else
/// `tests/data` of the checkout the tests were built from.
///
/// ```
/// assert!(rlx_testkit::testing::data_dir().ends_with("data"));
/// ```
pub fn data_dir() -> PathBuf {
    match std::env::var_os("RLX_TEST_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data")),
    }
}

/// A two-layer BERT small enough to run thousands of times in a test: hidden size 32,
/// 4 heads, sequences of up to 16 tokens.
///
/// ```
/// assert_eq!(rlx_testkit::testing::tiny_bert().num_hidden_layers, 2);
/// ```
pub fn tiny_bert() -> BertConfig {
    BertConfig::from_json(
        r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64,
            "max_position_embeddings": 16, "type_vocab_size": 2,
            "layer_norm_eps": 1e-12, "hidden_act": "gelu"}"#,
    )
    .expect("a valid config")
}

/// One decode step of attention over a key/value cache held as states `k` and `v`
/// (`[1, heads, cap, dim]`): inputs `q`, `k_row`, `v_row` (`[1, heads, 1, dim]`) and `pos`
/// (an `i32` scalar); the rows go in at `pos`, in place, and output `y` attends the first
/// `pos + 1` rows of the cache where they are.
///
/// ```
/// let g = rlx_testkit::testing::decode_step(16, 2, 4);
/// assert_eq!(g.writes().len(), 2);
/// ```
pub fn decode_step(cap: usize, heads: usize, dim: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let cache = [1, heads, cap, dim];
    let row = [1, heads, 1, dim];
    let kc = b.state("k", DType::F32, cache).expect("a state");
    let vc = b.state("v", DType::F32, cache).expect("a state");
    let q = b.input("q", DType::F32, row).expect("an input");
    let k = b.input("k_row", DType::F32, row).expect("an input");
    let v = b.input("v_row", DType::F32, row).expect("an input");
    let pos = b.input("pos", DType::I32, [0usize; 0]).expect("an input");
    let at = Op::SliceUpdate(SliceUpdate { axes: vec![2] });
    let kc = b
        .op(at.clone(), &[kc, k, pos])
        .expect("a row fits the cache");
    let vc = b.op(at, &[vc, v, pos]).expect("a row fits the cache");
    b.write("k", kc).expect("a write of the cache's type");
    b.write("v", vc).expect("a write of the cache's type");
    let one = b.scalar(1, DType::I32);
    let filled = b.add(pos, one).expect("an add of scalars");
    let attend = Op::Attention(Attention {
        scale: 1.0 / (dim as f64).sqrt(),
        mask: AttentionMask::None,
        key_length: true,
    });
    let y = b.op(attend, &[q, kc, vc, filled]).expect("an attention");
    b.output("y", y).expect("an output");
    b.finish().expect("a valid graph")
}
