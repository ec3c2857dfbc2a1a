use rlx::ir::Cast;
use rlx::ir::{BinaryOp, CompareOp, DType, Op, UnaryOp};

use crate::support::{err, ok};

#[test]
fn unary_keeps_type() {
    for kind in UnaryOp::ALL {
        ok(&Op::Unary(kind), &["f32[batch,3]"], "f32[batch,3]");
        ok(&Op::Unary(kind), &["bf16[]"], "bf16[]");
        ok(&Op::Unary(kind), &["f64[0]"], "f64[0]");
    }
}

#[test]
fn unary_dtype_rules() {
    for kind in [UnaryOp::Abs, UnaryOp::Sign, UnaryOp::Relu] {
        ok(&Op::Unary(kind), &["i32[4]"], "i32[4]");
        ok(&Op::Unary(kind), &["u8[4]"], "u8[4]");
        err(
            &Op::Unary(kind),
            &["bool[4]"],
            "operand 0 has dtype bool, expected a numeric dtype (not bool)",
        );
    }
    ok(&Op::Unary(UnaryOp::Neg), &["i8[4]"], "i8[4]");
    err(
        &Op::Unary(UnaryOp::Neg),
        &["u8[4]"],
        "operand 0 has dtype u8, expected a signed dtype",
    );
    for kind in [
        UnaryOp::Exp,
        UnaryOp::Gelu,
        UnaryOp::Round,
        UnaryOp::Softplus,
    ] {
        err(
            &Op::Unary(kind),
            &["i64[4]"],
            "operand 0 has dtype i64, expected a float dtype",
        );
    }
    err(
        &Op::Unary(UnaryOp::Exp),
        &["f32[2]", "f32[2]"],
        "expected 1 operands, got 2",
    );
}

#[test]
fn binary_broadcasts_like_numpy() {
    let add = Op::Binary(BinaryOp::Add);
    ok(&add, &["f32[batch,384]", "f32[384]"], "f32[batch,384]");
    ok(&add, &["f32[384]", "f32[batch,384]"], "f32[batch,384]");
    ok(&add, &["f32[2,1,4]", "f32[3,1]"], "f32[2,3,4]");
    ok(&add, &["f32[batch,1]", "f32[1,seq]"], "f32[batch,seq]");
    ok(&add, &["f32[]", "f32[batch,seq]"], "f32[batch,seq]");
    ok(
        &add,
        &["f32[batch,seq]", "f32[batch,seq]"],
        "f32[batch,seq]",
    );
    ok(&add, &["f32[0,3]", "f32[1,3]"], "f32[0,3]");
}

#[test]
fn binary_rejects_what_cannot_be_proven_equal() {
    let add = Op::Binary(BinaryOp::Add);
    err(
        &add,
        &["f32[2,3]", "f32[4]"],
        "shapes [2,3] and [4] do not broadcast: dims 3 and 4 differ",
    );
    err(
        &add,
        &["f32[batch,3]", "f32[4,3]"],
        "shapes [batch,3] and [4,3] do not broadcast: dims batch and 4 cannot be proven equal",
    );
    err(
        &add,
        &["f32[batch]", "f32[seq]"],
        "shapes [batch] and [seq] do not broadcast: dims batch and seq cannot be proven equal",
    );
}

#[test]
fn binary_dtype_rules() {
    for kind in BinaryOp::ALL {
        let op = Op::Binary(kind);
        ok(&op, &["f16[2]", "f16[2]"], "f16[2]");
        err(
            &op,
            &["f32[2]", "f16[2]"],
            "operands 0 and 1 have dtypes f32 and f16; insert an explicit cast",
        );
        if kind == BinaryOp::Pow {
            err(
                &op,
                &["i32[2]", "i32[2]"],
                "operand 0 has dtype i32, expected a float dtype",
            );
        } else {
            ok(&op, &["i32[2]", "i32[2]"], "i32[2]");
            err(
                &op,
                &["bool[2]", "bool[2]"],
                "operand 0 has dtype bool, expected a numeric dtype (not bool)",
            );
        }
    }
    err(
        &Op::Binary(BinaryOp::Mul),
        &["f32[2]"],
        "expected 2 operands, got 1",
    );
}

#[test]
fn compare_gives_bool() {
    for kind in CompareOp::ALL {
        let op = Op::Compare(kind);
        ok(&op, &["f32[batch,4]", "f32[]"], "bool[batch,4]");
        ok(&op, &["i64[3]", "i64[2,1]"], "bool[2,3]");
        err(
            &op,
            &["i64[3]", "i32[3]"],
            "operands 0 and 1 have dtypes i64 and i32; insert an explicit cast",
        );
        err(
            &op,
            &["f32[3]", "f32[4]"],
            "shapes [3] and [4] do not broadcast: dims 3 and 4 differ",
        );
    }
    ok(
        &Op::Compare(CompareOp::Eq),
        &["bool[3]", "bool[3]"],
        "bool[3]",
    );
    err(
        &Op::Compare(CompareOp::Lt),
        &["bool[3]", "bool[3]"],
        "operand 0 has dtype bool, expected a numeric dtype (not bool)",
    );
}

#[test]
fn where_broadcasts_three_ways() {
    ok(
        &Op::Where,
        &["bool[seq,seq]", "f32[batch,1,seq,seq]", "f32[]"],
        "f32[batch,1,seq,seq]",
    );
    ok(&Op::Where, &["bool[3,1]", "i32[4]", "i32[1]"], "i32[3,4]");
    err(
        &Op::Where,
        &["f32[3]", "f32[3]", "f32[3]"],
        "operand 0 has dtype f32, expected bool",
    );
    err(
        &Op::Where,
        &["bool[3]", "f32[3]", "f16[3]"],
        "operands 1 and 2 have dtypes f32 and f16; insert an explicit cast",
    );
    err(
        &Op::Where,
        &["bool[3]", "f32[3]", "f32[2]"],
        "shapes [3] and [2] do not broadcast: dims 3 and 2 differ",
    );
    err(
        &Op::Where,
        &["bool[3]", "f32[3]"],
        "expected 3 operands, got 2",
    );
}

#[test]
fn cast_changes_only_dtype() {
    for to in DType::ALL {
        for from in DType::ALL {
            let input = format!("{from}[batch,2]");
            ok(&Op::Cast(Cast { to }), &[&input], &format!("{to}[batch,2]"));
        }
    }
    err(
        &Op::Cast(Cast { to: DType::F32 }),
        &[],
        "expected 1 operands, got 0",
    );
}
