use rlx::ir::Op;
use rlx::ir::{MatMul, QuantizedMatMul};

use crate::support::{err, ok};

fn mm(transpose_a: bool, transpose_b: bool) -> Op {
    Op::MatMul(MatMul {
        transpose_a,
        transpose_b,
    })
}

#[test]
fn matmul_shapes() {
    ok(
        &mm(false, false),
        &["f32[batch,384]", "f32[384,1536]"],
        "f32[batch,1536]",
    );
    ok(
        &mm(false, false),
        &["f32[b,h,seq,64]", "f32[b,h,64,seq]"],
        "f32[b,h,seq,seq]",
    );
    // Batch dims broadcast.
    ok(
        &mm(false, false),
        &["f32[batch,seq,384]", "f32[384,384]"],
        "f32[batch,seq,384]",
    );
    ok(
        &mm(false, false),
        &["f16[4,1,2,3]", "f16[5,3,7]"],
        "f16[4,5,2,7]",
    );
    // Transposed operands are read in place.
    ok(
        &mm(false, true),
        &["f32[batch,384]", "f32[1536,384]"],
        "f32[batch,1536]",
    );
    ok(
        &mm(true, false),
        &["f32[384,batch]", "f32[384,1536]"],
        "f32[batch,1536]",
    );
    ok(&mm(true, true), &["f64[3,2]", "f64[4,3]"], "f64[2,4]");
    ok(&mm(false, false), &["f32[seq,k]", "f32[k,n]"], "f32[seq,n]");
}

#[test]
fn matmul_errors() {
    err(
        &mm(false, false),
        &["f32[batch,384]", "f32[385,1536]"],
        "inner dims 384 and 385 differ",
    );
    err(
        &mm(false, true),
        &["f32[batch,384]", "f32[384,1536]"],
        "inner dims 384 and 1536 differ",
    );
    err(
        &mm(false, false),
        &["f32[4,seq]", "f32[batch,8]"],
        "inner dims seq and batch cannot be proven equal",
    );
    err(
        &mm(false, false),
        &["f32[2,4,3]", "f32[5,3,7]"],
        "shapes [2] and [5] do not broadcast: dims 2 and 5 differ",
    );
    err(
        &mm(false, false),
        &["f32[3]", "f32[3,4]"],
        "operand 0 has rank 1, expected at least 2",
    );
    err(
        &mm(false, false),
        &["f32[2,3]", "f32[3]"],
        "operand 1 has rank 1, expected at least 2",
    );
    err(
        &mm(false, false),
        &["i32[2,3]", "i32[3,4]"],
        "operand 0 has dtype i32, expected a float dtype",
    );
    err(
        &mm(false, false),
        &["f32[2,3]", "bf16[3,4]"],
        "operands 0 and 1 have dtypes f32 and bf16; insert an explicit cast",
    );
    err(
        &mm(false, false),
        &["f32[2,3]"],
        "expected 2 operands, got 1",
    );
}

#[test]
fn solve() {
    ok(&Op::Solve, &["f32[4,4]", "f32[4,2]"], "f32[4,2]");
    ok(
        &Op::Solve,
        &["f64[batch,n,n]", "f64[batch,n,1]"],
        "f64[batch,n,1]",
    );
    err(
        &Op::Solve,
        &["f32[4,3]", "f32[4,2]"],
        "rows and columns of the square matrix 4 and 3 differ",
    );
    err(
        &Op::Solve,
        &["f32[4,4]", "f32[3,2]"],
        "rows of the matrix and of the right-hand side 4 and 3 differ",
    );
    err(
        &Op::Solve,
        &["f32[4,4]", "f32[4]"],
        "operand 1 has rank 1, expected 2",
    );
    err(
        &Op::Solve,
        &["f32[2,4,4]", "f32[3,4,1]"],
        "batch dims [2] and [3] of the matrix and the right-hand side differ",
    );
    err(
        &Op::Solve,
        &["i32[2,2]", "i32[2,1]"],
        "operand 0 has dtype i32, expected a float dtype",
    );
}

#[test]
fn quantized_matmul() {
    let q = |bits, group_size| Op::QuantizedMatMul(QuantizedMatMul { bits, group_size });
    ok(
        &q(4, 64),
        &["f32[batch,256]", "u8[512,128]", "f32[512,4]", "f32[512,4]"],
        "f32[batch,512]",
    );
    ok(
        &q(8, 32),
        &["f16[b,s,64]", "u8[10,64]", "f16[10,2]", "f16[10,2]"],
        "f16[b,s,10]",
    );
    let inputs = ["f32[2,256]", "u8[512,128]", "f32[512,4]", "f32[512,4]"];
    err(&q(3, 64), &inputs, "bits must be 4 or 8, got 3");
    err(
        &q(4, 48),
        &inputs,
        "group_size must be 32, 64 or 128, got 48",
    );
    err(
        &q(8, 64),
        &inputs,
        "packed weight bytes per row and input features 128 and 256 differ",
    );
    err(
        &q(4, 128),
        &inputs,
        "scales must have shape [512,2], got [512,4]",
    );
    err(
        &q(4, 64),
        &["f32[2,256]", "i8[512,128]", "f32[512,4]", "f32[512,4]"],
        "operand 1 has dtype i8, expected u8 (packed weights)",
    );
    err(
        &q(4, 64),
        &["f32[2,256]", "u8[512,128]", "f16[512,4]", "f32[512,4]"],
        "operands 0 and 2 have dtypes f32 and f16; insert an explicit cast",
    );
    err(
        &q(4, 64),
        &["f32[2,k]", "u8[512,128]", "f32[512,4]", "f32[512,4]"],
        "the input features of x must be static, got [2,k]",
    );
    err(
        &q(4, 32),
        &["f32[2,48]", "u8[512,24]", "f32[512,1]", "f32[512,1]"],
        "input features 48 are not a multiple of group_size 32",
    );
    err(
        &q(4, 64),
        &inputs[..3],
        "expected 4 (x, w, scales, biases) operands, got 3",
    );
}
