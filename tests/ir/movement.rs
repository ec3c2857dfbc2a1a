use rlx::ir::{Broadcast, Concat, Gather, Pad, Permute, Reshape, ScatterAdd, Slice};
use rlx::ir::{DType, Dim, Op, Scalar, Shape, TensorType};

use crate::support::{err, ok, shape, ty};

fn reshape(to: Shape) -> Op {
    Op::Reshape(Reshape { shape: to })
}

fn d(name: &str) -> Dim {
    Dim::sym(name)
}

#[test]
fn reshape_static_and_symbolic() {
    ok(&reshape(shape("[6,4]")), &["f32[2,3,4]"], "f32[6,4]");
    ok(&reshape(shape("[]")), &["f32[1,1]"], "f32[]");
    ok(
        &reshape(shape("[batch,seq,12,32]")),
        &["f32[batch,seq,384]"],
        "f32[batch,seq,12,32]",
    );
    // Flatten and unflatten symbolic dims.
    let flat = Shape::new([d("batch").mul(&d("seq")), Dim::from(384)]);
    ok(
        &reshape(flat.clone()),
        &["f32[batch,seq,384]"],
        "f32[batch*seq,384]",
    );
    let back = reshape(shape("[batch,seq,384]"));
    assert_eq!(
        back.infer(&[TensorType::new(DType::F32, flat)])
            .unwrap()
            .to_string(),
        "f32[batch,seq,384]"
    );
    let seq_first = Shape::new([d("seq").mul(&Dim::from(2)), d("batch")]);
    ok(&reshape(seq_first), &["i8[batch,seq,2]"], "i8[2*seq,batch]");
}

#[test]
fn reshape_errors() {
    err(
        &reshape(shape("[5,4]")),
        &["f32[2,3,4]"],
        "cannot reshape [2,3,4] (24 elements) to [5,4] (20 elements)",
    );
    err(
        &reshape(shape("[batch,384]")),
        &["f32[batch,seq,384]"],
        "cannot reshape [batch,seq,384] (384*batch*seq elements) to [batch,384] (384*batch elements)",
    );
    err(
        &reshape(shape("[seq,384]")),
        &["f32[batch,384]"],
        "cannot reshape [batch,384] (384*batch elements) to [seq,384] (384*seq elements)",
    );
    err(&reshape(shape("[4]")), &[], "expected 1 operands, got 0");
}

#[test]
fn permute() {
    let p = |perm: &[usize]| {
        Op::Permute(Permute {
            perm: perm.to_vec(),
        })
    };
    ok(
        &p(&[0, 2, 1, 3]),
        &["f32[batch,seq,12,32]"],
        "f32[batch,12,seq,32]",
    );
    ok(&p(&[1, 0]), &["bool[2,3]"], "bool[3,2]");
    ok(&p(&[]), &["f32[]"], "f32[]");
    err(
        &p(&[0, 0]),
        &["f32[2,3]"],
        "[0, 0] is not a permutation of the 2 axes of [2,3]",
    );
    err(
        &p(&[0]),
        &["f32[2,3]"],
        "[0] is not a permutation of the 2 axes of [2,3]",
    );
    err(
        &p(&[0, 1, 2]),
        &["f32[2,3]"],
        "axis 2 is out of range for rank 2",
    );
}

fn slice(axis: usize, start: i64, stop: Option<i64>, step: usize) -> Op {
    Op::Slice(Slice {
        axis,
        start,
        stop,
        step,
    })
}

#[test]
fn slice_static() {
    ok(&slice(1, 1, Some(3), 1), &["f32[4,5]"], "f32[4,2]");
    ok(&slice(1, 0, None, 2), &["f32[4,5]"], "f32[4,3]");
    ok(&slice(1, 1, None, 2), &["f32[4,5]"], "f32[4,2]");
    ok(&slice(0, -2, None, 1), &["f32[4,5]"], "f32[2,5]");
    ok(&slice(0, 0, Some(-1), 1), &["f32[4,5]"], "f32[3,5]");
    ok(&slice(0, 2, Some(2), 1), &["f32[4,5]"], "f32[0,5]");
    ok(&slice(0, 0, Some(4), 3), &["f32[4,5]"], "f32[2,5]");
}

#[test]
fn slice_symbolic() {
    ok(
        &slice(1, 1, None, 1),
        &["f32[batch,seq]"],
        "f32[batch,seq-1]",
    );
    ok(
        &slice(1, 0, Some(-1), 1),
        &["f32[batch,seq]"],
        "f32[batch,seq-1]",
    );
    // The last 8 positions: a static length from a symbolic axis.
    ok(&slice(1, -8, None, 1), &["f32[batch,seq]"], "f32[batch,8]");
    ok(&slice(1, -8, None, 2), &["f32[batch,seq]"], "f32[batch,4]");
    // Bounds against a symbolic size are checked when it is bound.
    ok(
        &slice(1, 0, Some(5), 1),
        &["f32[batch,seq]"],
        "f32[batch,5]",
    );
    // A stride that divides the symbolic length exactly.
    let two_seq = TensorType::new(DType::F32, [d("seq").mul(&Dim::from(2))]);
    assert_eq!(
        slice(0, 0, None, 2).infer(&[two_seq]).unwrap().to_string(),
        "f32[seq]"
    );
    err(
        &slice(1, 0, None, 2),
        &["f32[batch,seq]"],
        "a step of 2 over the symbolic length seq has no exact size",
    );
}

#[test]
fn slice_errors() {
    err(
        &slice(0, 0, Some(6), 1),
        &["f32[4,5]"],
        "slice stop 6 is out of range for an axis of size 4",
    );
    err(
        &slice(0, 5, None, 1),
        &["f32[4,5]"],
        "slice start 5 is out of range for an axis of size 4",
    );
    err(
        &slice(0, -5, None, 1),
        &["f32[4,5]"],
        "slice start -5 is out of range for an axis of size 4",
    );
    err(
        &slice(0, 3, Some(1), 1),
        &["f32[4,5]"],
        "slice 3:1 ends before it starts on an axis of size 4",
    );
    err(
        &slice(0, 0, None, 0),
        &["f32[4,5]"],
        "slice step must be at least 1",
    );
    err(
        &slice(2, 0, None, 1),
        &["f32[4,5]"],
        "axis 2 is out of range for rank 2",
    );
}

#[test]
fn concat() {
    let c = |axis| Op::Concat(Concat { axis });
    ok(&c(0), &["f32[2,3]", "f32[4,3]"], "f32[6,3]");
    ok(
        &c(1),
        &["f32[batch,seq]", "f32[batch,seq]", "f32[batch,1]"],
        "f32[batch,2*seq+1]",
    );
    ok(&c(0), &["i32[5]"], "i32[5]");
    err(&c(0), &[], "expected at least 1 operands, got 0");
    err(
        &c(1),
        &["f32[2,3]", "f32[4,3]"],
        "dims of axis 0 of operands 0 and 1 2 and 4 differ",
    );
    err(
        &c(0),
        &["f32[2,3]", "f16[4,3]"],
        "operands 0 and 1 have dtypes f32 and f16; insert an explicit cast",
    );
    err(
        &c(0),
        &["f32[2,3]", "f32[3]"],
        "operand 1 has rank 1, expected 2",
    );
    err(
        &c(2),
        &["f32[2,3]", "f32[2,3]"],
        "axis 2 is out of range for rank 2",
    );
}

#[test]
fn broadcast() {
    let b = |to: &str| Op::Broadcast(Broadcast { shape: shape(to) });
    ok(&b("[batch,seq,384]"), &["f32[384]"], "f32[batch,seq,384]");
    ok(
        &b("[batch,12,seq,seq]"),
        &["bool[batch,1,1,seq]"],
        "bool[batch,12,seq,seq]",
    );
    ok(&b("[2,3]"), &["f32[]"], "f32[2,3]");
    err(
        &b("[2,4]"),
        &["f32[3]"],
        "shapes [3] and [2,4] do not broadcast: dims 3 and 4 differ",
    );
    err(
        &b("[batch,4]"),
        &["f32[seq,4]"],
        "shapes [seq,4] and [batch,4] do not broadcast: dims seq and batch cannot be proven equal",
    );
    err(
        &b("[3]"),
        &["f32[2,3]"],
        "cannot broadcast [2,3] to [3]: the target has fewer axes",
    );
}

#[test]
fn pad() {
    let p = |pads: &[(usize, usize)]| {
        Op::Pad(Pad {
            pads: pads.to_vec(),
            value: Scalar::Float(0.0),
        })
    };
    ok(&p(&[(0, 0), (1, 2)]), &["f32[3,4]"], "f32[3,7]");
    ok(
        &p(&[(0, 0), (2, 0)]),
        &["i64[batch,seq]"],
        "i64[batch,seq+2]",
    );
    ok(&p(&[]), &["f32[]"], "f32[]");
    err(
        &p(&[(1, 1)]),
        &["f32[3,4]"],
        "1 (before, after) pairs given for 2 axes",
    );
}

#[test]
fn gather() {
    let g = |axis| Op::Gather(Gather { axis });
    // Embedding lookup.
    ok(
        &g(0),
        &["f32[30522,384]", "i64[batch,seq]"],
        "f32[batch,seq,384]",
    );
    ok(&g(1), &["f32[4,10,3]", "i32[5]"], "f32[4,5,3]");
    ok(&g(0), &["f32[10]", "i32[]"], "f32[]");
    err(
        &g(0),
        &["f32[10,3]", "f32[4]"],
        "operand 1 has dtype f32, expected i32 or i64",
    );
    err(
        &g(0),
        &["f32[10,3]", "u8[4]"],
        "operand 1 has dtype u8, expected i32 or i64",
    );
    err(
        &g(2),
        &["f32[10,3]", "i64[4]"],
        "axis 2 is out of range for rank 2",
    );
    err(
        &g(0),
        &["f32[]", "i64[4]"],
        "operand 0 has rank 0, expected at least 1",
    );
    err(
        &g(0),
        &["f32[10,3]"],
        "expected 2 (data, indices) operands, got 1",
    );
}

#[test]
fn scatter_add() {
    let s = |axis| Op::ScatterAdd(ScatterAdd { axis });
    ok(
        &s(0),
        &["f32[30522,384]", "i64[batch,seq]", "f32[batch,seq,384]"],
        "f32[30522,384]",
    );
    ok(&s(1), &["i32[4,10]", "i64[3]", "i32[4,3]"], "i32[4,10]");
    err(
        &s(0),
        &["f32[10,3]", "i64[5]", "f32[5,4]"],
        "updates must have shape [5,3] (data dims around axis 0 with the index dims in between), got [5,4]",
    );
    err(
        &s(0),
        &["f32[10,3]", "i64[5]", "f64[5,3]"],
        "operands 0 and 2 have dtypes f32 and f64; insert an explicit cast",
    );
    err(
        &s(0),
        &["bool[10]", "i64[5]", "bool[5]"],
        "operand 0 has dtype bool, expected a numeric dtype (not bool)",
    );
    err(
        &s(0),
        &["f32[10]", "f32[5]", "f32[5]"],
        "operand 1 has dtype f32, expected i32 or i64",
    );
    err(
        &s(1),
        &["f32[10]", "i64[5]", "f32[5]"],
        "axis 1 is out of range for rank 1",
    );
}

#[test]
fn type_parser_sanity() {
    assert_eq!(ty("bool[]").to_string(), "bool[]");
    assert_eq!(ty("f32[batch,3]").shape[0], d("batch"));
}

/// Window offsets: one per axis (a scalar for one axis), or one row of them per row of
/// axis 0, which is then not sliced.
#[test]
fn window_offsets_per_axis_or_per_row() {
    use rlx::ir::{DynamicSlice, SliceUpdate};
    let read = |axes: Vec<usize>, sizes: Vec<usize>| {
        Op::DynamicSlice(DynamicSlice {
            axes,
            sizes: sizes.into_iter().map(Dim::from).collect(),
        })
    };
    ok(
        &read(vec![1], vec![2]),
        &["f32[b,16,8]", "i64[]"],
        "f32[b,2,8]",
    );
    ok(
        &read(vec![1], vec![2]),
        &["f32[b,16,8]", "i64[b,1]"],
        "f32[b,2,8]",
    );
    ok(
        &read(vec![1, 2], vec![2, 4]),
        &["f32[3,16,8]", "i32[3,2]"],
        "f32[3,2,4]",
    );
    err(
        &read(vec![0], vec![1]),
        &["f32[3,16,8]", "i64[3,1]"],
        "offsets per row of axis 0 cannot slice axis 0 as well",
    );
    err(
        &read(vec![1], vec![2]),
        &["f32[3,16,8]", "i64[2,1]"],
        "offsets must have shape [1] (one per axis, or be a scalar) or [3,1] (one per axis for \
         each row of axis 0), got [2,1]",
    );
    let write = Op::SliceUpdate(SliceUpdate { axes: vec![2] });
    ok(
        &write,
        &["f32[b,3,64,8]", "f32[b,3,1,8]", "i64[b,1]"],
        "f32[b,3,64,8]",
    );
}
