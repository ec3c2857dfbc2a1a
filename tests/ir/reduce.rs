use rlx::ir::{ArgReduce, Cumsum, LayerNorm, Reduce, RmsNorm, Softmax, Sort, TopK};
use rlx::ir::{ArgReduceOp, Op, ReduceOp, SortOutput};

use crate::support::{err, ok};

fn reduce(op: ReduceOp, axes: &[usize], keep_dims: bool) -> Op {
    Op::Reduce(Reduce {
        op,
        axes: axes.to_vec(),
        keep_dims,
    })
}

#[test]
fn reductions() {
    for op in ReduceOp::ALL {
        ok(
            &reduce(op, &[1], false),
            &["f32[batch,seq,4]"],
            "f32[batch,4]",
        );
        ok(
            &reduce(op, &[1], true),
            &["f32[batch,seq,4]"],
            "f32[batch,1,4]",
        );
        ok(
            &reduce(op, &[0, 2], false),
            &["f64[batch,seq,4]"],
            "f64[seq]",
        );
        ok(&reduce(op, &[0], false), &["f32[5]"], "f32[]");
        err(
            &reduce(op, &[3], false),
            &["f32[2,3,4]"],
            "axis 3 is out of range for rank 3",
        );
        err(
            &reduce(op, &[1, 0], false),
            &["f32[2,3,4]"],
            "axes [1, 0] must be sorted and unique",
        );
        err(
            &reduce(op, &[1, 1], false),
            &["f32[2,3,4]"],
            "axes [1, 1] must be sorted and unique",
        );
        err(
            &reduce(op, &[], false),
            &["f32[2,3,4]"],
            "a reduction needs at least one axis",
        );
        err(
            &reduce(op, &[0], false),
            &["bool[3]"],
            if op == ReduceOp::Mean {
                "operand 0 has dtype bool, expected a float dtype"
            } else {
                "operand 0 has dtype bool, expected a numeric dtype (not bool)"
            },
        );
    }
    ok(&reduce(ReduceOp::Sum, &[0], false), &["i64[3,2]"], "i64[2]");
    err(
        &reduce(ReduceOp::Mean, &[0], false),
        &["i64[3,2]"],
        "operand 0 has dtype i64, expected a float dtype",
    );
}

#[test]
fn arg_reductions() {
    for op in [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin] {
        let arg = |axis, keep_dims| {
            Op::ArgReduce(ArgReduce {
                op,
                axis,
                keep_dims,
            })
        };
        ok(&arg(1, false), &["f32[batch,10]"], "i64[batch]");
        ok(&arg(1, true), &["i32[batch,10]"], "i64[batch,1]");
        err(
            &arg(2, false),
            &["f32[batch,10]"],
            "axis 2 is out of range for rank 2",
        );
        err(
            &arg(0, false),
            &["bool[3]"],
            "operand 0 has dtype bool, expected a numeric dtype (not bool)",
        );
    }
}

#[test]
fn cumsum() {
    let op = |axis| {
        Op::Cumsum(Cumsum {
            axis,
            exclusive: false,
            reverse: true,
        })
    };
    ok(&op(1), &["i32[batch,seq]"], "i32[batch,seq]");
    ok(&op(0), &["f32[7]"], "f32[7]");
    err(&op(2), &["f32[2,3]"], "axis 2 is out of range for rank 2");
    err(
        &op(0),
        &["bool[3]"],
        "operand 0 has dtype bool, expected a numeric dtype (not bool)",
    );
}

#[test]
fn softmax() {
    for log in [false, true] {
        let op = |axis| Op::Softmax(Softmax { axis, log });
        ok(&op(3), &["f32[b,h,seq,seq]"], "f32[b,h,seq,seq]");
        err(
            &op(4),
            &["f32[b,h,seq,seq]"],
            "axis 4 is out of range for rank 4",
        );
        err(
            &op(0),
            &["i32[3]"],
            "operand 0 has dtype i32, expected a float dtype",
        );
        err(&op(0), &["f32[]"], "axis 0 is out of range for rank 0");
    }
}

#[test]
fn layer_norm() {
    let ln = |has_weight, has_bias| {
        Op::LayerNorm(LayerNorm {
            eps: 1e-12,
            has_weight,
            has_bias,
        })
    };
    ok(
        &ln(true, true),
        &["f32[batch,seq,384]", "f32[384]", "f32[384]"],
        "f32[batch,seq,384]",
    );
    ok(&ln(false, false), &["f16[seq,hidden]"], "f16[seq,hidden]");
    ok(&ln(true, false), &["f32[2,8]", "f32[8]"], "f32[2,8]");
    ok(&ln(false, true), &["f32[2,8]", "f32[8]"], "f32[2,8]");
    err(
        &ln(true, true),
        &["f32[batch,384]", "f32[384]", "f32[385]"],
        "normalized features and affine parameter size 384 and 385 differ",
    );
    err(
        &ln(true, true),
        &["f32[batch,384]", "f16[384]", "f16[384]"],
        "operands 0 and 1 have dtypes f32 and f16; insert an explicit cast",
    );
    err(
        &ln(true, true),
        &["f32[batch,384]", "f32[1,384]", "f32[384]"],
        "operand 1 has rank 2, expected 1",
    );
    err(
        &ln(true, true),
        &["f32[batch,384]", "f32[384]"],
        "expected 3 (x, weight, bias) operands, got 2",
    );
    err(
        &ln(false, false),
        &["f32[]"],
        "operand 0 has rank 0, expected at least 1",
    );
    err(
        &ln(false, false),
        &["i32[4]"],
        "operand 0 has dtype i32, expected a float dtype",
    );
    err(
        &Op::LayerNorm(LayerNorm {
            eps: -1.0,
            has_weight: false,
            has_bias: false,
        }),
        &["f32[4]"],
        "eps must be finite and non-negative, got -1",
    );
}

#[test]
fn rms_norm() {
    let rms = |has_weight| {
        Op::RmsNorm(RmsNorm {
            eps: 1e-6,
            has_weight,
        })
    };
    ok(
        &rms(true),
        &["bf16[batch,seq,4096]", "bf16[4096]"],
        "bf16[batch,seq,4096]",
    );
    ok(&rms(false), &["f32[3,4]"], "f32[3,4]");
    err(
        &rms(true),
        &["f32[3,4]"],
        "expected 2 (x, weight) operands, got 1",
    );
    err(
        &rms(true),
        &["f32[3,4]", "f32[3]"],
        "normalized features and affine parameter size 4 and 3 differ",
    );
    err(
        &Op::RmsNorm(RmsNorm {
            eps: f64::NAN,
            has_weight: false,
        }),
        &["f32[4]"],
        "eps must be finite and non-negative, got NaN",
    );
}

#[test]
fn topk_and_sort() {
    for output in [SortOutput::Values, SortOutput::Indices] {
        let out = if output == SortOutput::Values {
            "f32"
        } else {
            "i64"
        };
        let topk = |k, axis| Op::TopK(TopK { k, axis, output });
        ok(&topk(5, 1), &["f32[batch,100]"], &format!("{out}[batch,5]"));
        // A symbolic axis is checked against k when its size is bound.
        ok(
            &topk(5, 1),
            &["f32[batch,vocab]"],
            &format!("{out}[batch,5]"),
        );
        err(
            &topk(101, 1),
            &["f32[batch,100]"],
            "k = 101 exceeds the size 100 of axis 1",
        );
        err(&topk(0, 1), &["f32[batch,100]"], "k must be at least 1");
        err(
            &topk(1, 2),
            &["f32[batch,100]"],
            "axis 2 is out of range for rank 2",
        );
        err(
            &topk(1, 0),
            &["bool[4]"],
            "operand 0 has dtype bool, expected a numeric dtype (not bool)",
        );

        let sort = |axis| {
            Op::Sort(Sort {
                axis,
                descending: true,
                output,
            })
        };
        ok(&sort(0), &["f32[seq,3]"], &format!("{out}[seq,3]"));
        err(
            &sort(2),
            &["f32[seq,3]"],
            "axis 2 is out of range for rank 2",
        );
        err(
            &sort(0),
            &["bool[3]"],
            "operand 0 has dtype bool, expected a numeric dtype (not bool)",
        );
    }
    ok(
        &Op::Sort(Sort {
            axis: 0,
            descending: false,
            output: SortOutput::Values,
        }),
        &["i32[5]"],
        "i32[5]",
    );
}
