//! Bad input at compile and run time becomes a typed error naming the tensor or dim.

use rlx::backend::{Backend, CompileError, Executable, RunError};
use rlx::cpu::CpuBackend;
use rlx::ir::{Attention, Broadcast, Custom, Slice};
use rlx::ir::{AttentionMask, Dim, Op, Shape};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

/// `y = x @ w + bias` with `x: f32[batch, 3]`, and a second input `z: f32[batch*2]`.
fn model() -> CpuExecutableWithWeights {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [Dim::sym("batch"), Dim::from(3)])
        .unwrap();
    let z = b
        .input("z", DType::F32, [Dim::sym("batch").mul(&Dim::from(2))])
        .unwrap();
    let w = b.param("w", DType::F32, [3, 2]).unwrap();
    let bias = b.param("bias", DType::F32, [2]).unwrap();
    let h = b.matmul(x, w).unwrap();
    let y = b.add(h, bias).unwrap();
    b.output("y", y).unwrap();
    b.output("z", z).unwrap();
    let graph = b.finish().unwrap();
    CpuExecutableWithWeights(CpuBackend::default().compile(&graph).unwrap())
}

struct CpuExecutableWithWeights(rlx::cpu::CpuExecutable);

impl CpuExecutableWithWeights {
    fn bound(self) -> Self {
        let w = HostTensor::from_vec(vec![1.0f32; 6], [3, 2]).unwrap();
        let b = HostTensor::from_vec(vec![0.5f32; 2], [2]).unwrap();
        self.0.set_weight("w", w.view()).unwrap();
        self.0.set_weight("bias", b.view()).unwrap();
        self
    }
}

fn x(rows: usize) -> HostTensor {
    HostTensor::from_vec(vec![1.0f32; rows * 3], [rows, 3]).unwrap()
}

fn z(n: usize) -> HostTensor {
    HostTensor::from_vec(vec![2.0f32; n], [n]).unwrap()
}

#[test]
fn a_good_run_works_and_reads_dims_from_inputs() {
    let exe = model().bound().0;
    let out = exe
        .run(&[("x", x(2).view()), ("z", z(4).view())], &[])
        .unwrap();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[3.5; 4]);
    assert_eq!(out[0].shape(), &[2, 2]);
    assert_eq!(out[1].as_slice::<f32>().unwrap(), &[2.0; 4]);
    // Another batch size gets its own plan; the first stays cached.
    let out = exe
        .run(&[("z", z(10).view()), ("x", x(5).view())], &[("batch", 5)])
        .unwrap();
    assert_eq!(out[0].shape(), &[5, 2]);
}

#[test]
fn missing_and_unknown_inputs() {
    let exe = model().bound().0;
    let err = exe.run(&[("x", x(2).view())], &[]).unwrap_err();
    assert_eq!(err, RunError::MissingInput { name: "z".into() });
    assert_eq!(err.to_string(), "missing input \"z\"");
    let err = exe
        .run(
            &[("x", x(2).view()), ("z", z(4).view()), ("q", z(1).view())],
            &[],
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown input \"q\"; the graph's inputs are [\"x\", \"z\"]"
    );
}

#[test]
fn wrong_dtype_and_shape() {
    let exe = model().bound().0;
    let xi = HostTensor::from_vec(vec![1i32; 6], [2, 3]).unwrap();
    let err = exe
        .run(&[("x", xi.view()), ("z", z(4).view())], &[])
        .unwrap_err();
    assert_eq!(err.to_string(), "input \"x\" has dtype i32, expected f32");
    let x4 = HostTensor::from_vec(vec![1.0f32; 8], [2, 4]).unwrap();
    let err = exe
        .run(&[("x", x4.view()), ("z", z(4).view())], &[])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "input \"x\" has shape [2, 4], expected [batch,3] = [2, 3]"
    );
    // `z` is 2*batch: with batch = 2 from `x`, a length of 5 is wrong.
    let err = exe
        .run(&[("x", x(2).view()), ("z", z(5).view())], &[])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "input \"z\" has shape [5], expected [2*batch] = [4]"
    );
    let flat = HostTensor::from_vec(vec![1.0f32; 6], [6]).unwrap();
    let err = exe
        .run(&[("x", flat.view()), ("z", z(4).view())], &[])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "input \"x\" has rank 1 (shape [6]), expected rank 2"
    );
    // A rank mistake is reported as one before any dim is read from the tensor: here the
    // extra axis would otherwise bind `batch` to 5 and blame `z`.
    let x3 = HostTensor::from_vec(vec![1.0f32; 15], [5, 3, 1]).unwrap();
    let err = exe
        .run(&[("x", x3.view()), ("z", z(4).view())], &[])
        .unwrap_err();
    assert!(
        matches!(&err, RunError::Rank { name, expected: 2, got, .. } if name == "x" && got == &[5, 3, 1]),
        "{err}"
    );
}

#[test]
fn symbols_unbound_unknown_and_inconsistent() {
    let mut b = GraphBuilder::new();
    let input = b
        .input("z", DType::F32, [Dim::sym("n").mul(&Dim::from(2))])
        .unwrap();
    let y = b.unary(UnaryOp::Neg, input).unwrap();
    b.output("y", y).unwrap();
    let exe = CpuBackend::default().compile(&b.finish().unwrap()).unwrap();
    let err = exe.run(&[("z", z4().view())], &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "runtime dim `n` is not bound; pass it in `dims`"
    );
    assert!(exe.run(&[("z", z4().view())], &[("n", 2)]).is_ok());
    let err = exe.run(&[("z", z4().view())], &[("m", 2)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`m` is not a runtime dim of this graph; its dims are [\"n\"]"
    );

    let exe = model().bound().0;
    let err = exe
        .run(&[("x", x(2).view()), ("z", z(4).view())], &[("batch", 3)])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "runtime dim `batch` is 3 from `dims` but 2 from input \"x\" axis 0"
    );
}

fn z4() -> HostTensor {
    z(4)
}

#[test]
fn weights_missing_unknown_and_mismatched() {
    let exe = model().0;
    let err = exe
        .run(&[("x", x(2).view()), ("z", z(4).view())], &[])
        .unwrap_err();
    assert_eq!(err.to_string(), "weight \"w\" is not bound");
    let w = HostTensor::from_vec(vec![1.0f32; 6], [3, 2]).unwrap();
    assert_eq!(
        exe.set_weight("W", w.view()).unwrap_err().to_string(),
        "unknown weight \"W\""
    );
    let w64 = HostTensor::from_vec(vec![1.0f64; 6], [3, 2]).unwrap();
    assert_eq!(
        exe.set_weight("w", w64.view()).unwrap_err().to_string(),
        "weight \"w\" has dtype f64, expected f32"
    );
    let wt = HostTensor::from_vec(vec![1.0f32; 6], [2, 3]).unwrap();
    assert_eq!(
        exe.set_weight("w", wt.view()).unwrap_err().to_string(),
        "weight \"w\" has shape [2, 3], expected [3, 2]"
    );
    exe.set_weight("w", w.view()).unwrap();
    let err = exe
        .run(&[("x", x(2).view()), ("z", z(4).view())], &[])
        .unwrap_err();
    assert_eq!(
        err,
        RunError::MissingWeight {
            name: "bias".into()
        }
    );
}

#[test]
fn bindings_that_break_an_op_name_the_node_and_its_origin() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [Dim::sym("seq")]).unwrap();
    let head = b
        .op(
            Op::Slice(Slice {
                axis: 0,
                start: 0,
                stop: Some(5),
                step: 1,
            }),
            &[x],
        )
        .unwrap();
    b.output("head", head).unwrap();
    let graph = b.finish().unwrap();
    let origin = graph[head].origin.unwrap();
    assert_eq!(origin.file(), file!());
    let exe = CpuBackend::default().compile(&graph).unwrap();
    let short = HostTensor::from_vec(vec![0.0f32; 3], [3]).unwrap();
    let err = exe.run(&[("x", short.view())], &[]).unwrap_err();
    let text = err.to_string();
    let origin = format!("(built at {origin})");
    assert!(text.starts_with("with seq=3: %1 `slice` "), "{text}");
    let RunError::Binding { at, reason, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!((at.id.index(), at.op), (1, "slice"));
    assert!(
        matches!(**reason, rlx::backend::BindingFailure::Infer(_)),
        "{reason:?}"
    );
    assert!(text.contains(&origin), "{text}");
    assert!(
        text.ends_with("): slice stop 5 is out of range for an axis of size 3"),
        "{text}"
    );
    let long = HostTensor::from_vec(vec![1.0f32; 8], [8]).unwrap();
    assert_eq!(exe.run(&[("x", long.view())], &[]).unwrap()[0].len(), 5);

    // A symbolic size that becomes negative.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [Dim::sym("seq")]).unwrap();
    let tail = b
        .op(
            Op::Slice(Slice {
                axis: 0,
                start: -4,
                stop: None,
                step: 1,
            }),
            &[x],
        )
        .unwrap();
    let rest = b
        .op(
            Op::Slice(Slice {
                axis: 0,
                start: 4,
                stop: None,
                step: 1,
            }),
            &[x],
        )
        .unwrap();
    b.output("tail", tail).unwrap();
    b.output("rest", rest).unwrap();
    let exe = CpuBackend::default().compile(&b.finish().unwrap()).unwrap();
    let err = exe.run(&[("x", short.view())], &[]).unwrap_err();
    assert!(matches!(err, RunError::Binding { .. }), "{err}");
    assert!(err.to_string().starts_with("with seq=3: %"), "{err}");
}

#[test]
fn unsupported_ops_are_listed_at_compile_time() {
    let mut b = GraphBuilder::new();
    let q = b.input("q", DType::F32, [2, 4, 8]).unwrap();
    let a = b
        .op(
            Op::Attention(Attention {
                scale: 0.5,
                mask: AttentionMask::Causal,
                key_length: false,
            }),
            &[q, q, q],
        )
        .unwrap();
    let c = b
        .op(
            Op::Custom(Custom {
                name: "my_op".into(),
                attrs: Default::default(),
                output: rlx::ir::TensorType::new(DType::F32, Shape::from([2])),
            }),
            &[a],
        )
        .unwrap();
    b.output("a", a).unwrap();
    b.output("c", c).unwrap();
    let err = CpuBackend::default()
        .compile(&b.finish().unwrap())
        .unwrap_err();
    assert!(matches!(err, CompileError::Unsupported { .. }));
    assert_eq!(
        err.to_string(),
        "the cpu backend does not support: custom[\"my_op\", -> f32[2]]"
    );
}

#[test]
fn symbolic_params_are_rejected() {
    let mut b = GraphBuilder::new();
    let w = b.param("w", DType::F32, [Dim::sym("n")]).unwrap();
    b.output("w", w).unwrap();
    let err = CpuBackend::default()
        .compile(&b.finish().unwrap())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "param \"w\" has the symbolic shape [n]; weights need static shapes"
    );
}

#[test]
fn byte_counts_that_do_not_match_the_shape_are_rejected() {
    use rlx::tensor::TensorRef;
    let exe = model().0;
    let six = [0u8; 24];
    let short = TensorRef {
        dtype: DType::F32,
        shape: &[3, 2],
        bytes: &six[..20],
    };
    let err = exe.set_weight("w", short).unwrap_err();
    assert_eq!(
        err.to_string(),
        "weight \"w\" has 20 bytes, but f32[3, 2] needs 24"
    );
    let exe = model().bound().0;
    let long = [0u8; 100];
    let x = TensorRef {
        dtype: DType::F32,
        shape: &[2, 3],
        bytes: &long,
    };
    let err = exe.run(&[("x", x), ("z", z(4).view())], &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "input \"x\" has 100 bytes, but f32[2, 3] needs 24"
    );
}

#[test]
fn runtime_dims_too_large_for_memory_are_an_error() {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [Dim::sym("n").mul(&Dim::from(2))])
        .unwrap();
    let y = b
        .op(
            Op::Broadcast(Broadcast {
                shape: Shape::new([Dim::sym("m"), Dim::sym("n").mul(&Dim::from(2))]),
            }),
            &[x],
        )
        .unwrap();
    b.output("y", y).unwrap();
    let exe = CpuBackend::default().compile(&b.finish().unwrap()).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32; 4], [4]).unwrap();
    let err = exe
        .run(&[("x", x.view())], &[("n", 2), ("m", usize::MAX / 2)])
        .unwrap_err();
    assert!(matches!(err, RunError::Binding { .. }), "{err}");
    assert!(err.to_string().contains("does not fit in memory"), "{err}");
}
