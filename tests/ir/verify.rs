use rlx::ir::{
    BinaryOp, DType, Graph, InferError, Node, NodeId, Op, Output, TensorType, UnaryOp, VerifyError,
};

fn f32_2() -> TensorType {
    TensorType::new(DType::F32, [2])
}

fn input(name: &str) -> Node {
    Node::new(Op::Input, vec![], f32_2()).named(name)
}

fn exp(of: usize) -> Node {
    Node::new(Op::Unary(UnaryOp::Exp), vec![NodeId::new(of)], f32_2())
}

fn out(node: usize) -> Vec<Output> {
    vec![Output {
        name: "y".into(),
        node: NodeId::new(node),
    }]
}

#[test]
fn a_valid_graph_passes() {
    let g = Graph::from_parts(vec![input("x"), exp(0)], out(1)).unwrap();
    assert!(g.verify().is_ok());
}

#[test]
fn operands_must_exist_and_come_first() {
    let e = Graph::from_parts(vec![input("x"), exp(5)], out(1)).unwrap_err();
    assert_eq!(
        e,
        VerifyError::UnknownOperand {
            node: NodeId::new(1),
            operand: 0,
            input: NodeId::new(5),
            len: 2
        }
    );
    assert_eq!(
        e.to_string(),
        "%1 operand 0 is %5, which does not exist (2 nodes)"
    );
    let e = Graph::from_parts(vec![input("x"), exp(1)], out(1)).unwrap_err();
    assert_eq!(e.to_string(), "%1 uses %1, which does not come before it");
    let e = Graph::from_parts(vec![input("x"), exp(2), exp(0)], out(1)).unwrap_err();
    assert_eq!(e.to_string(), "%1 uses %2, which does not come before it");
}

#[test]
fn leaves_need_names_and_no_operands() {
    let unnamed = Node::new(Op::Param, vec![], f32_2());
    let e = Graph::from_parts(vec![unnamed, exp(0)], out(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "%0 is an unnamed param; inputs, params and states need names"
    );
    let with_operand = Node::new(Op::Input, vec![NodeId::new(0)], f32_2()).named("b");
    let e = Graph::from_parts(vec![input("a"), with_operand], out(1)).unwrap_err();
    assert_eq!(e.to_string(), "%1 is a leaf (`input`) but has 1 operands");
    let e = Graph::from_parts(vec![input("a"), input("a")], out(1)).unwrap_err();
    assert_eq!(e.to_string(), "two inputs are named \"a\"");
}

#[test]
fn stored_types_must_match_inference() {
    let wrong = Node::new(
        Op::Unary(UnaryOp::Exp),
        vec![NodeId::new(0)],
        TensorType::new(DType::F32, [3]),
    );
    let e = Graph::from_parts(vec![input("x"), wrong], out(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "%1 `exp` is stored as f32[3] but its operands give f32[2]"
    );
    let bad_arity = Node::new(Op::Binary(BinaryOp::Add), vec![NodeId::new(0)], f32_2());
    let e = Graph::from_parts(vec![input("x"), bad_arity], out(1)).unwrap_err();
    assert!(matches!(
        &e,
        VerifyError::Infer { source, .. } if **source == InferError::Arity { expected: "2", got: 1 }
    ));
    assert_eq!(e.to_string(), "%1 `add`: expected 2 operands, got 1");
}

#[test]
fn outputs_must_exist_and_be_unique() {
    let e = Graph::from_parts(vec![input("x")], out(3)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "output \"y\" is %3, which does not exist (1 nodes)"
    );
    let mut twice = out(0);
    twice.extend(out(0));
    let e = Graph::from_parts(vec![input("x")], twice).unwrap_err();
    assert_eq!(e.to_string(), "two outputs are named \"y\"");
    let e = Graph::from_parts(vec![input("x")], vec![]).unwrap_err();
    assert_eq!(e, VerifyError::NoOutputs);
}

#[test]
fn writes_name_states_of_their_type_once() {
    use rlx::builder::GraphBuilder;
    let mut b = GraphBuilder::new();
    let s = b.state("s", DType::F32, [2]).unwrap();
    let x = b.input("x", DType::F32, [2]).unwrap();
    let y = b.add(s, x).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    let write = |name: &str, node| Output {
        name: name.into(),
        node,
    };
    let e = g.clone().with_writes(vec![write("t", y)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a write names \"t\", which is not a state of the graph"
    );
    let e = g
        .clone()
        .with_writes(vec![write("s", y), write("s", x)])
        .unwrap_err();
    assert_eq!(e.to_string(), "two writes are named \"s\"");
    let (nodes, outputs, _) = g.clone().into_parts();
    let mut b = rlx::builder::GraphBuilder::from_graph(Graph::from_parts(nodes, outputs).unwrap());
    let n = b.input("n", DType::I64, [2]).unwrap();
    let err = b.write("s", n).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("state \"s\" is f32[2] but is written a i64[2]"),
        "{err}"
    );
    // A graph that only writes is complete; its writes survive the passes, and keep the
    // state's dtype when the graph computes in a narrower one.
    let mut b = GraphBuilder::new();
    let s = b.state("s", DType::F32, [2]).unwrap();
    let one = b.scalar(1.0, DType::F32);
    let next = b.add(s, one).unwrap();
    let _dead = b.unary(UnaryOp::Exp, s).unwrap();
    b.write("s", next).unwrap();
    let g = b.finish().unwrap();
    let optimized = rlx::passes::dce(&rlx::passes::cse(&g).unwrap()).unwrap();
    assert_eq!(optimized.len(), 3);
    assert_eq!(optimized[optimized.writes()[0].node].op.name(), "add");
    let narrow = rlx::passes::compute_in(&g, DType::BF16).unwrap();
    assert_eq!(narrow[narrow.writes()[0].node].ty.dtype, DType::F32);
}
