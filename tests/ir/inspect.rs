use rlx::ir::{
    ArgReduce, Attention, Broadcast, Concat, Conv, Cumsum, Gather, LayerNorm, MatMul, Pad, Permute,
    Pool, QuantizedMatMul, Reduce, Reshape, RmsNorm, Rope, ScatterAdd, Slice, Softmax, Sort, TopK,
};
use std::process::Command;

use rlx::ir::{ConstantData, Scalar};
use rlx::prelude::*;

use crate::support::shape;

/// A two-layer MLP with a masked, scaled softmax: covers inputs, params, constants of each
/// printed form, attributes, labels and several outputs.
fn sample() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, shape("[batch,4]")).unwrap();
    let w1 = b.param("fc1.weight", DType::F32, [8, 4]).unwrap();
    let b1 = b.param("fc1.bias", DType::F32, [8]).unwrap();
    let h = b
        .op(
            Op::MatMul(MatMul {
                transpose_a: false,
                transpose_b: true,
            }),
            &[x, w1],
        )
        .unwrap();
    let h = b.add(h, b1).unwrap();
    let h = b.unary(UnaryOp::Gelu, h).unwrap();
    b.set_label(h, "hidden");
    let scale = b.scalar(0.5, DType::F32);
    let h = b.mul(h, scale).unwrap();
    let bias = b.constant(
        ConstantData::from_slice(&[1.0f32, -2.0, 0.5, 0.0, 1.0, 1.0, 1.0, 1.0], [8]).unwrap(),
    );
    let big = b.constant(ConstantData::from_slice(&[0i64; 16], [2, 8]).unwrap());
    let big = b.cast(big, DType::F32).unwrap();
    let big = b.reduce(ReduceOp::Sum, big, &[0], false).unwrap();
    let h = b.add(h, bias).unwrap();
    let h = b.add(h, big).unwrap();
    let probs = b.softmax(h, 1).unwrap();
    let wide = b
        .op(
            Op::Pad(Pad {
                pads: vec![(0, 0), (1, 1)],
                value: Scalar::Float(0.0),
            }),
            &[probs],
        )
        .unwrap();
    let picked = b
        .op(
            Op::Slice(Slice {
                axis: 1,
                start: 1,
                stop: Some(-1),
                step: 1,
            }),
            &[wide],
        )
        .unwrap();
    let best = b
        .op(
            Op::ArgReduce(ArgReduce {
                op: ArgReduceOp::ArgMax,
                axis: 1,
                keep_dims: false,
            }),
            &[picked],
        )
        .unwrap();
    b.output("probs", picked).unwrap();
    b.output("class", best).unwrap();
    b.finish().unwrap()
}

#[test]
fn text_snapshot() {
    let expected = r#"%0:f32[batch,4] = input "x"
%1:f32[8,4] = param "fc1.weight"
%2:f32[8] = param "fc1.bias"
%3:f32[batch,8] = matmul[transpose_b] %0, %1
%4:f32[batch,8] = add %3, %2
%5:f32[batch,8] = gelu %4  # hidden
%6:f32[] = const 0.5
%7:f32[batch,8] = mul %5, %6
%8:f32[8] = const [1.0, -2.0, 0.5, 0.0, 1.0, 1.0, 1.0, 1.0]
%9:i64[2,8] = const <16 values>
%10:f32[2,8] = cast[to=f32] %9
%11:f32[8] = sum[axes=[0]] %10
%12:f32[batch,8] = add %7, %8
%13:f32[batch,8] = add %12, %11
%14:f32[batch,8] = softmax[axis=1] %13
%15:f32[batch,10] = pad[pads=[0:0,1:1], value=0.0] %14
%16:f32[batch,8] = slice[axis=1, 1:-1] %15
%17:i64[batch] = argmax[axis=1] %16
return probs=%16, class=%17
"#;
    assert_eq!(sample().to_string(), expected);
}

#[test]
fn every_op_prints_its_attributes() {
    let cases: Vec<(Op, &str)> = vec![
        (
            Op::Reduce(Reduce {
                op: ReduceOp::Max,
                axes: vec![1, 2],
                keep_dims: true,
            }),
            "reduce_max[axes=[1, 2], keep_dims]",
        ),
        (
            Op::Cumsum(Cumsum {
                axis: 0,
                exclusive: true,
                reverse: true,
            }),
            "cumsum[axis=0, exclusive, reverse]",
        ),
        (
            Op::Softmax(Softmax { axis: 2, log: true }),
            "log_softmax[axis=2]",
        ),
        (
            Op::LayerNorm(LayerNorm {
                eps: 1e-12,
                has_weight: true,
                has_bias: false,
            }),
            "layer_norm[eps=1e-12, no_bias]",
        ),
        (
            Op::RmsNorm(RmsNorm {
                eps: 1e-6,
                has_weight: true,
            }),
            "rms_norm[eps=1e-6]",
        ),
        (
            Op::Reshape(Reshape {
                shape: shape("[batch,2,3]"),
            }),
            "reshape[shape=[batch,2,3]]",
        ),
        (
            Op::Permute(Permute { perm: vec![1, 0] }),
            "permute[perm=[1, 0]]",
        ),
        (
            Op::Slice(Slice {
                axis: 0,
                start: 0,
                stop: None,
                step: 2,
            }),
            "slice[axis=0, 0::2]",
        ),
        (Op::Concat(Concat { axis: 1 }), "concat[axis=1]"),
        (
            Op::Broadcast(Broadcast {
                shape: shape("[4,3]"),
            }),
            "broadcast[shape=[4,3]]",
        ),
        (Op::Gather(Gather { axis: 0 }), "gather[axis=0]"),
        (
            Op::ScatterAdd(ScatterAdd { axis: 1 }),
            "scatter_add[axis=1]",
        ),
        (
            Op::Attention(Attention {
                scale: 0.125,
                mask: AttentionMask::SlidingWindow(4),
                key_length: false,
            }),
            "attention[scale=0.125, window=4]",
        ),
        (
            Op::Rope(Rope {
                dims: 64,
                base: 10000.0,
                scale: 1.0,
                traditional: true,
                freqs: None,
            }),
            "rope[dims=64, base=10000, traditional]",
        ),
        (
            Op::Conv(Conv {
                stride: vec![2, 2],
                padding: vec![(1, 1), (1, 1)],
                dilation: vec![1, 1],
                groups: 4,
            }),
            "conv[stride=[2, 2], padding=[(1, 1), (1, 1)], groups=4]",
        ),
        (
            Op::Pool(Pool {
                kind: PoolKind::Avg,
                kernel: vec![2],
                stride: vec![2],
                padding: vec![(0, 0)],
            }),
            "avg_pool[kernel=[2], stride=[2], padding=[(0, 0)]]",
        ),
        (
            Op::TopK(TopK {
                k: 5,
                axis: 1,
                output: SortOutput::Indices,
            }),
            "topk[k=5, axis=1, indices]",
        ),
        (
            Op::Sort(Sort {
                axis: 0,
                descending: true,
                output: SortOutput::Indices,
            }),
            "argsort[axis=0, descending]",
        ),
        (Op::Solve, "solve"),
        (
            Op::QuantizedMatMul(QuantizedMatMul {
                bits: 4,
                group_size: 64,
            }),
            "quantized_matmul[bits=4, group_size=64]",
        ),
        (Op::Compare(CompareOp::Le), "le"),
        (Op::Where, "where"),
    ];
    for (op, text) in cases {
        assert_eq!(op.to_string(), text);
    }
}

#[test]
fn dot_structure_and_escaping() {
    let mut b = GraphBuilder::new();
    let x = b.input("say \"hi\"", DType::F32, [2]).unwrap();
    let y = b.unary(UnaryOp::Tanh, x).unwrap();
    let z = b.add(y, x).unwrap();
    b.output("out\\1", z).unwrap();
    let dot = b.finish().unwrap().to_dot();
    assert!(
        dot.contains(
            r#"n0 [label="%0 input \"say \\\"hi\\\"\"\nf32[2]", shape=ellipse, style=solid];"#
        ),
        "{dot}"
    );
    assert!(dot.contains("n0 -> n1;\n"));
    assert!(dot.contains("n1 -> n2 [label=\"0\"];\n"));
    assert!(dot.contains("n0 -> n2 [label=\"1\"];\n"));
    assert!(
        dot.contains(r#"out0 [label="out\\1", shape=doubleoctagon, style=solid];"#),
        "{dot}"
    );
    assert!(dot.contains("n2 -> out0;\n"));
    assert!(dot.trim_end().ends_with('}'));
}

/// Graphviz must accept the export. CI installs graphviz and sets `RLX_REQUIRE_GRAPHVIZ=1`
/// so that this cannot pass by skipping there.
#[test]
fn dot_renders_with_graphviz() {
    let dot = sample().to_dot();
    let path = std::env::temp_dir().join(format!("rlx-inspect-{}.dot", std::process::id()));
    std::fs::write(&path, &dot).unwrap();
    let run = Command::new("dot").arg("-Tsvg").arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let output = match run {
        Ok(output) => output,
        Err(e) => {
            assert!(
                std::env::var_os("RLX_REQUIRE_GRAPHVIZ").is_none(),
                "graphviz is required but `dot` could not run: {e}"
            );
            eprintln!("skipping: graphviz `dot` is not installed ({e})");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "dot failed: {stderr}");
    assert!(stderr.is_empty(), "dot warned: {stderr}");
    let svg = String::from_utf8(output.stdout).unwrap();
    assert!(svg.contains("<svg"));
    // Every node and output is drawn.
    assert_eq!(svg.matches("class=\"node\"").count(), sample().len() + 2);
}
