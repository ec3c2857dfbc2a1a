//! What `gradients` refuses, and the shape of what it returns.

use rlx::autodiff::{GradError, Wrt, gradients};
use rlx::builder::GraphBuilder;
use rlx::ir::{ArgReduce, QuantizedMatMul};
use rlx::ir::{ArgReduceOp, CompareOp, DType, Dim, Graph, Op, ReduceOp};

fn sum_all(b: &mut GraphBuilder, x: rlx::ir::NodeId, rank: usize) -> rlx::ir::NodeId {
    let axes: Vec<usize> = (0..rank).collect();
    b.reduce(ReduceOp::Sum, x, &axes, false).unwrap()
}

#[test]
fn an_argmax_on_the_path_is_named_with_its_line() {
    let mut b = GraphBuilder::new();
    let w = b.param("w", DType::F32, [4, 3]).unwrap();
    let argmax = Op::ArgReduce(ArgReduce {
        op: ArgReduceOp::ArgMax,
        axis: 1,
        keep_dims: false,
    });
    let (line, arg) = (line!(), b.op(argmax, &[w]).unwrap());
    let f = b.cast(arg, DType::F32).unwrap();
    let loss = sum_all(&mut b, f, 1);
    b.output("loss", loss).unwrap();
    let graph = b.finish().unwrap();
    let err = gradients(&graph, "loss", &Wrt::Params).unwrap_err();
    assert!(matches!(err, GradError::NoGradient { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("`argmax`"), "{text}");
    assert!(text.contains(&format!("errors.rs:{line}")), "{text}");
}

#[test]
fn a_comparison_cast_to_float_is_named() {
    let mut b = GraphBuilder::new();
    let w = b.param("w", DType::F32, [3]).unwrap();
    let zero = b.scalar(0.0, DType::F32);
    let positive = b.compare(CompareOp::Gt, w, zero).unwrap();
    let f = b.cast(positive, DType::F32).unwrap();
    let loss = sum_all(&mut b, f, 1);
    b.output("loss", loss).unwrap();
    let err = gradients(&b.finish().unwrap(), "loss", &Wrt::Params).unwrap_err();
    assert!(err.to_string().contains("`gt`"), "{err}");
}

fn linear() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [Dim::sym("batch"), Dim::from(3)])
        .unwrap();
    let w = b.param("w", DType::F32, [3, 2]).unwrap();
    let unused = b.param("unused", DType::F32, [5]).unwrap();
    let y = b.matmul(x, w).unwrap();
    let loss = sum_all(&mut b, y, 2);
    b.output("y", y).unwrap();
    b.output("loss", loss).unwrap();
    b.output("unused_out", unused).unwrap();
    b.finish().unwrap()
}

#[test]
fn bad_requests_are_typed_errors() {
    let g = linear();
    assert!(matches!(
        gradients(&g, "nope", &Wrt::Params),
        Err(GradError::UnknownOutput { .. })
    ));
    assert!(matches!(
        gradients(&g, "y", &Wrt::Params),
        Err(GradError::NotAScalar { .. })
    ));
    assert!(matches!(
        gradients(&g, "loss", &Wrt::Named(vec!["missing".into()])),
        Err(GradError::BadLeaf { .. })
    ));
}

#[test]
fn params_by_default_inputs_on_request_unused_leaves_get_zeros() {
    let g = linear();
    let t = gradients(&g, "loss", &Wrt::Params).unwrap();
    let names: Vec<&str> = t.outputs().iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["y", "loss", "unused_out", "grad/w", "grad/unused"]);
    let unused = t.outputs()[4].node;
    assert_eq!(t[unused].ty.to_string(), "f32[5]");
    let t = gradients(&g, "loss", &Wrt::Named(vec!["x".into()])).unwrap();
    let gx = t.outputs()[3].node;
    assert_eq!(t[gx].ty.to_string(), "f32[batch,3]");
    t.verify().unwrap();
}

#[test]
fn quantized_weights_take_no_gradient() {
    // y = x · dequant(w)ᵀ + b: the float bias and the activations train; the scales of the
    // quantized weight cannot, which is an error naming the op when they are asked for.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2, 64]).unwrap();
    let w = b.param("w", DType::U8, [8, 32]).unwrap();
    let scales = b.param("scales", DType::F32, [8, 1]).unwrap();
    let offsets = b.param("offsets", DType::F32, [8, 1]).unwrap();
    let bias = b.param("bias", DType::F32, [8]).unwrap();
    let q = Op::QuantizedMatMul(QuantizedMatMul {
        bits: 4,
        group_size: 64,
    });
    let y = b.op(q, &[x, w, scales, offsets]).unwrap();
    let y = b.add(y, bias).unwrap();
    let loss = sum_all(&mut b, y, 2);
    b.output("loss", loss).unwrap();
    let g = b.finish().unwrap();
    let only_bias = gradients(&g, "loss", &Wrt::Named(vec!["bias".into()])).unwrap();
    assert_eq!(only_bias.outputs()[1].name, "grad/bias");
    let err = gradients(&g, "loss", &Wrt::Named(vec!["scales".into()])).unwrap_err();
    assert!(matches!(err, GradError::NoGradient { .. }), "{err}");
    assert!(err.to_string().contains("`quantized_matmul`"), "{err}");
    // The activations take one (`gradient_quantized_matmul_activations` checks its value).
    let dx = gradients(&g, "loss", &Wrt::Named(vec!["x".into()])).unwrap();
    assert_eq!(dx.outputs()[1].name, "grad/x");
}
