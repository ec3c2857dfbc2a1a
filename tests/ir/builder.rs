use rlx::builder::BuildErrorKind;
use rlx::ir::Gather;
use rlx::ir::{InferError, NodeId, VerifyError};
use rlx::prelude::*;

use crate::support::shape;

#[test]
fn errors_name_op_operands_reason_and_caller() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, shape("[batch,384]")).unwrap();
    let w = b.param("w", DType::F32, [385, 1536]).unwrap();
    let line = line!() + 1;
    let err = b.matmul(x, w).unwrap_err();
    assert_eq!(err.op(), "matmul");
    assert_eq!(err.location().file(), file!());
    assert_eq!(err.location().line(), line);
    assert_eq!(
        err.operands()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["f32[batch,384]", "f32[385,1536]"]
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}:{line}:{}: `matmul` on (f32[batch,384], f32[385,1536]): inner dims 384 and 385 differ",
            file!(),
            err.location().column()
        )
    );
    assert!(matches!(
        err.kind(),
        BuildErrorKind::Infer(InferError::DimMismatch { .. })
    ));
    // The failed op added nothing.
    assert_eq!(b.len(), 2);
}

#[test]
fn attributes_appear_in_the_error() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2, 3]).unwrap();
    let err = b.softmax(x, 2).unwrap_err();
    assert_eq!(err.op(), "softmax[axis=2]");
    assert!(
        err.to_string()
            .ends_with("`softmax[axis=2]` on (f32[2,3]): axis 2 is out of range for rank 2")
    );
    let err = b.transpose(x, 0, 5).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("axis 5 is out of range for rank 2"),
        "{err}"
    );
}

#[test]
fn duplicate_names_are_rejected() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2]).unwrap();
    let e = b.input("x", DType::F32, [3]).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("`input`: an input named \"x\" already exists"),
        "{e}"
    );
    // The same name may be an input and a param: they are bound separately.
    let w = b.param("x", DType::F32, [2]).unwrap();
    let e = b.param("x", DType::F32, [2]).unwrap_err();
    assert!(matches!(
        e.kind(),
        BuildErrorKind::DuplicateName { kind: "param", .. }
    ));
    b.output("y", x).unwrap();
    let e = b.output("y", w).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("`output[\"y\"]` on (f32[2]): an output named \"y\" already exists"),
        "{e}"
    );
}

#[test]
fn unknown_nodes_and_leaf_ops_are_rejected() {
    let mut other = GraphBuilder::new();
    for i in 0..5 {
        other.input(&format!("i{i}"), DType::F32, [1]).unwrap();
    }
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2]).unwrap();
    let e = b.add(x, NodeId::new(4)).unwrap_err();
    assert_eq!(e.kind(), &BuildErrorKind::UnknownNode(NodeId::new(4)));
    assert!(
        e.to_string()
            .ends_with("`add` on (f32[2]): operand %4 does not exist in this graph"),
        "{e}"
    );
    let e = b.output("y", NodeId::new(9)).unwrap_err();
    assert_eq!(e.kind(), &BuildErrorKind::UnknownNode(NodeId::new(9)));
    let e = b.op(Op::Input, &[]).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("`input` nodes are made with input(), param() or constant()"),
        "{e}"
    );
}

#[test]
fn finish_verifies() {
    let mut b = GraphBuilder::new();
    b.input("x", DType::F32, [2]).unwrap();
    let e = b.finish().unwrap_err();
    assert_eq!(e.kind(), &BuildErrorKind::Verify(VerifyError::NoOutputs));
    assert_eq!(e.location().file(), file!());
}

#[test]
fn nodes_record_their_origin_and_labels() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2]).unwrap();
    let line = line!() + 1;
    let y = b.unary(UnaryOp::Exp, x).unwrap();
    let c = b.scalar(2.0, DType::F32);
    assert!(b.set_label(y, "activation"));
    assert!(b.set_label(c, "two"));
    assert!(!b.set_label(x, "renamed"));
    assert!(!b.set_label(NodeId::new(99), "nothing"));
    let z = b.mul(y, c).unwrap();
    b.output("z", z).unwrap();
    let g = b.finish().unwrap();
    let origin = g[y].origin.unwrap();
    assert_eq!((origin.file(), origin.line()), (file!(), line));
    assert_eq!(g[y].name.as_deref(), Some("activation"));
    assert_eq!(g[x].name.as_deref(), Some("x"));
}

#[test]
fn graph_accessors() {
    let mut b = GraphBuilder::new();
    let ids = b.input("ids", DType::I64, shape("[batch,seq]")).unwrap();
    let mask = b.input("mask", DType::Bool, shape("[batch,seq]")).unwrap();
    let table = b.param("embeddings", DType::F32, [100, 8]).unwrap();
    let e = b.op(Op::Gather(Gather { axis: 0 }), &[table, ids]).unwrap();
    let zero = b.scalar(0.0, DType::F32);
    let mask = b.reshape(mask, shape("[batch,seq,1]")).unwrap();
    let e = b.select(mask, e, zero).unwrap();
    b.output("embedded", e).unwrap();
    let g = b.finish().unwrap();
    assert_eq!(
        g.inputs().map(|(id, _)| id).collect::<Vec<_>>(),
        [ids, NodeId::new(1)]
    );
    assert_eq!(g.params().count(), 1);
    assert_eq!(g.param("embeddings"), Some(table));
    assert_eq!(g.input("nope"), None);
    assert_eq!(
        g.symbols()
            .iter()
            .map(|s| s.name().to_string())
            .collect::<Vec<_>>(),
        ["batch", "seq"]
    );
    assert_eq!(g[e].ty.to_string(), "f32[batch,seq,8]");
    let (nodes, outputs, _) = g.clone().into_parts();
    assert_eq!(Graph::from_parts(nodes, outputs).unwrap(), g);
}
