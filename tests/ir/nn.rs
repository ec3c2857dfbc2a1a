use rlx::ir::{Attention, Conv, ConvTranspose, Custom, Pool, Rope, Upsample};
use std::collections::BTreeMap;

use rlx::ir::{AttentionMask, AttrValue, ConstantData, DType, Op, PoolKind, TensorType};

use crate::support::{err, ok, ty};

fn attn(mask: AttentionMask) -> Op {
    Op::Attention(Attention {
        scale: 0.125,
        mask,
        key_length: false,
    })
}

/// A key length: a scalar, or one per row of axis 0 for operands of rank 3 or more.
#[test]
fn attention_key_lengths() {
    let upto = Op::Attention(Attention {
        scale: 0.125,
        mask: AttentionMask::Causal,
        key_length: true,
    });
    let qkv = ["f32[b,8,1,64]", "f32[b,2,ctx,64]", "f32[b,2,ctx,64]"];
    ok(&upto, &[qkv[0], qkv[1], qkv[2], "i64[]"], "f32[b,8,1,64]");
    ok(&upto, &[qkv[0], qkv[1], qkv[2], "i32[b]"], "f32[b,8,1,64]");
    err(
        &upto,
        &[qkv[0], qkv[1], qkv[2], "i64[2]"],
        "the key length must be a scalar, or a vector of one length per row of axis 0 (b) \
         for operands of rank 3 or more, got [2]",
    );
}

#[test]
fn attention_shapes() {
    let qkv = ["f32[b,12,seq,64]", "f32[b,12,seq,64]", "f32[b,12,seq,64]"];
    for mask in [
        AttentionMask::None,
        AttentionMask::Causal,
        AttentionMask::SlidingWindow(128),
    ] {
        ok(&attn(mask), &qkv, "f32[b,12,seq,64]");
    }
    // Decoding with a cache: one query, many keys; values may have another width.
    ok(
        &attn(AttentionMask::Causal),
        &["f16[b,8,1,64]", "f16[b,8,ctx,64]", "f16[b,8,ctx,32]"],
        "f16[b,8,1,32]",
    );
    // Grouped-query attention: 32 query heads over 8 key/value heads.
    ok(
        &attn(AttentionMask::None),
        &["f32[b,32,seq,128]", "f32[b,8,seq,128]", "f32[b,8,seq,128]"],
        "f32[b,32,seq,128]",
    );
    ok(
        &attn(AttentionMask::None),
        &["f32[5,8]", "f32[7,8]", "f32[7,3]"],
        "f32[5,3]",
    );
}

#[test]
fn attention_mask_tensor() {
    let m = attn(AttentionMask::Tensor);
    let qkv = ["f32[b,12,seq,64]", "f32[b,12,seq,64]", "f32[b,12,seq,64]"];
    for mask in [
        "bool[b,1,1,seq]",
        "f32[seq,seq]",
        "f32[b,12,seq,seq]",
        "bool[]",
    ] {
        let inputs = [qkv[0], qkv[1], qkv[2], mask];
        ok(&m, &inputs, "f32[b,12,seq,64]");
    }
    err(
        &m,
        &[qkv[0], qkv[1], qkv[2], "f32[b,12,seq,7]"],
        "mask [b,12,seq,7] does not broadcast to the scores [b,12,seq,seq]",
    );
    err(
        &m,
        &[qkv[0], qkv[1], qkv[2], "f32[seq,b]"],
        "mask [seq,b] does not broadcast to the scores [b,12,seq,seq]",
    );
    err(
        &m,
        &[qkv[0], qkv[1], qkv[2], "f16[seq,seq]"],
        "operands 0 and 3 have dtypes f32 and f16; insert an explicit cast",
    );
    err(&m, &qkv, "expected 4 (q, k, v, mask) operands, got 3");
}

#[test]
fn attention_errors() {
    let a = attn(AttentionMask::None);
    err(
        &a,
        &["f32[b,12,seq,64]", "f32[b,12,seq,32]", "f32[b,12,seq,64]"],
        "head dims of q and k 64 and 32 differ",
    );
    err(
        &a,
        &["f32[b,12,seq,64]", "f32[b,12,seq,64]", "f32[b,12,ctx,64]"],
        "sequence lengths of k and v seq and ctx cannot be proven equal",
    );
    err(
        &a,
        &["f32[b,12,seq,64]", "f32[b,5,seq,64]", "f32[b,5,seq,64]"],
        "dims of axis 1 of q and k 12 and 5 differ",
    );
    err(
        &a,
        &["f32[b,12,seq,64]", "f32[c,12,seq,64]", "f32[c,12,seq,64]"],
        "dims of axis 0 of q and k b and c cannot be proven equal",
    );
    err(
        &a,
        &["f32[b,12,seq,64]", "f32[b,12,seq,64]", "f32[b,6,seq,64]"],
        "dims of axis 1 of k and v 12 and 6 differ",
    );
    err(
        &a,
        &["f32[12,seq,64]", "f32[b,12,seq,64]", "f32[b,12,seq,64]"],
        "operand 1 has rank 4, expected 3",
    );
    err(
        &a,
        &["i32[4,4]", "i32[4,4]", "i32[4,4]"],
        "operand 0 has dtype i32, expected a float dtype",
    );
    err(
        &a,
        &["f32[4,4]", "f16[4,4]", "f32[4,4]"],
        "operands 0 and 1 have dtypes f32 and f16; insert an explicit cast",
    );
    err(
        &a,
        &["f32[4]", "f32[4]", "f32[4]"],
        "operand 0 has rank 1, expected at least 2",
    );
    err(
        &attn(AttentionMask::SlidingWindow(0)),
        &["f32[4,4]", "f32[4,4]", "f32[4,4]"],
        "a sliding window must hold at least 1 position",
    );
    err(
        &Op::Attention(Attention {
            scale: f64::INFINITY,
            mask: AttentionMask::None,
            key_length: false,
        }),
        &["f32[4,4]", "f32[4,4]", "f32[4,4]"],
        "scale must be finite, got inf",
    );
}

fn rope(dims: usize) -> Op {
    Op::Rope(Rope {
        dims,
        base: 10000.0,
        scale: 1.0,
        traditional: false,
        freqs: None,
    })
}

#[test]
fn rope_shapes_and_errors() {
    ok(&rope(64), &["f32[b,h,seq,64]"], "f32[b,h,seq,64]");
    ok(
        &rope(32),
        &["bf16[b,h,seq,64]", "i32[]"],
        "bf16[b,h,seq,64]",
    );
    err(
        &rope(63),
        &["f32[b,h,seq,64]"],
        "rotary dims must be even, positive and at most the feature size 64, got 63",
    );
    err(
        &rope(128),
        &["f32[b,h,seq,64]"],
        "rotary dims must be even, positive and at most the feature size 64, got 128",
    );
    err(
        &rope(8),
        &["f32[b,h,seq,d]"],
        "rotary dims must be even, positive and at most the feature size d, got 8",
    );
    // One offset per row of axis 0, for operands of rank 3 or more.
    ok(&rope(8), &["f32[b,h,seq,64]", "i64[b]"], "f32[b,h,seq,64]");
    err(
        &rope(8),
        &["f32[b,h,seq,64]", "i32[1]"],
        "the offset must be a scalar, or a vector of one offset per row of axis 0 (b) of an \
         operand of rank 3 or more, got [1]",
    );
    err(
        &rope(8),
        &["f32[seq,64]", "i32[seq]"],
        "the offset must be a scalar, or a vector of one offset per row of axis 0 (seq) of an \
         operand of rank 3 or more, got [seq]",
    );
    err(
        &rope(8),
        &["f32[b,h,seq,64]", "f32[]"],
        "operand 1 has dtype f32, expected i32 or i64",
    );
    err(
        &rope(8),
        &["f32[64]"],
        "operand 0 has rank 1, expected at least 2",
    );
    err(
        &rope(8),
        &["i32[4,64]"],
        "operand 0 has dtype i32, expected a float dtype",
    );
    err(
        &Op::Rope(Rope {
            dims: 8,
            base: 0.0,
            scale: 1.0,
            traditional: true,
            freqs: None,
        }),
        &["f32[4,64]"],
        "base must be finite and positive, got 0",
    );
    err(&rope(8), &[], "expected 1 or 2 (x, offset) operands, got 0");
}

fn conv(stride: &[usize], padding: &[(usize, usize)], dilation: &[usize], groups: usize) -> Op {
    Op::Conv(Conv {
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    })
}

#[test]
fn conv_shapes() {
    let c2 = conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], 1);
    ok(&c2, &["f32[n,3,32,32]", "f32[16,3,3,3]"], "f32[n,16,32,32]");
    ok(
        &c2,
        &["f32[n,3,32,32]", "f32[16,3,3,3]", "f32[16]"],
        "f32[n,16,32,32]",
    );
    let strided = conv(&[2, 2], &[(3, 3), (3, 3)], &[1, 1], 1);
    ok(
        &strided,
        &["f32[1,3,224,224]", "f32[64,3,7,7]"],
        "f32[1,64,112,112]",
    );
    let dilated = conv(&[1], &[(0, 0)], &[2], 1);
    ok(&dilated, &["f32[2,4,10]", "f32[8,4,3]"], "f32[2,8,6]");
    // Depthwise: groups = channels.
    let depthwise = conv(&[1], &[(1, 1)], &[1], 4);
    ok(&depthwise, &["f32[2,4,10]", "f32[4,1,3]"], "f32[2,4,10]");
    // Symbolic length: stride 1 keeps it symbolic; causal padding of k-1 keeps it exact.
    let c1 = conv(&[1], &[(2, 0)], &[1], 1);
    ok(&c1, &["f32[batch,8,seq]", "f32[8,8,3]"], "f32[batch,8,seq]");
    let valid = conv(&[1], &[(0, 0)], &[1], 1);
    ok(
        &valid,
        &["f32[batch,8,seq]", "f32[8,8,3]"],
        "f32[batch,8,seq-2]",
    );
}

#[test]
fn conv_errors() {
    let c1 = conv(&[1], &[(0, 0)], &[1], 1);
    err(
        &c1,
        &["f32[2,4,10]", "f32[8,3,3]"],
        "input channels and weight channels x groups 4 and 3 differ",
    );
    err(
        &c1,
        &["f32[2,4,2]", "f32[8,4,3]"],
        "window of 3 is larger than the padded size 2 of spatial axis 0",
    );
    err(
        &c1,
        &["f32[2,4,10]", "f32[8,4,3]", "f32[7]"],
        "output channels and bias size 8 and 7 differ",
    );
    err(
        &c1,
        &["f32[2,4,10]", "f32[8,4,k]"],
        "kernel size k of spatial axis 0 must be static and positive",
    );
    err(
        &c1,
        &["f32[2,4,10,10]", "f32[8,4,3,3]"],
        "operand 0 has rank 4, expected 3 ([N, C] and 1 spatial)",
    );
    err(
        &c1,
        &["f32[2,4,10]", "f32[8,4,3,3]"],
        "operand 1 has rank 4, expected 3",
    );
    err(
        &c1,
        &["i32[2,4,10]", "i32[8,4,3]"],
        "operand 0 has dtype i32, expected a float dtype",
    );
    err(
        &conv(&[1, 1], &[(0, 0)], &[1, 1], 1),
        &["f32[2,4,10,10]", "f32[8,4,3,3]"],
        "padding has 1 entries, expected 2",
    );
    err(
        &conv(&[1, 1, 1], &[(0, 0); 3], &[1; 3], 1),
        &["f32[2,4,5,5,5]", "f32[8,4,3,3,3]"],
        "stride has 3 entries; only 1-D and 2-D windows are supported",
    );
    err(
        &conv(&[0], &[(0, 0)], &[1], 1),
        &["f32[2,4,10]", "f32[8,4,3]"],
        "stride, dilation and groups must be at least 1",
    );
    err(
        &conv(&[1], &[(0, 0)], &[1], 2),
        &["f32[2,4,10]", "f32[7,2,3]"],
        "output channels 7 are not a multiple of groups 2",
    );
    err(
        &conv(&[2], &[(0, 0)], &[1], 1),
        &["f32[batch,8,seq]", "f32[8,8,3]"],
        "stride 2 over the symbolic size seq of spatial axis 0 has no exact output size",
    );
    err(
        &c1,
        &["f32[2,4,10]"],
        "expected 2 or 3 (x, w, bias) operands, got 1",
    );
}

fn pool(kind: PoolKind, kernel: &[usize], stride: &[usize], padding: &[(usize, usize)]) -> Op {
    Op::Pool(Pool {
        kind,
        kernel: kernel.to_vec(),
        stride: stride.to_vec(),
        padding: padding.to_vec(),
    })
}

#[test]
fn pool_shapes_and_errors() {
    for kind in [PoolKind::Max, PoolKind::Avg] {
        ok(
            &pool(kind, &[2, 2], &[2, 2], &[(0, 0); 2]),
            &["f32[n,64,112,112]"],
            "f32[n,64,56,56]",
        );
        ok(
            &pool(kind, &[3, 3], &[2, 2], &[(1, 1); 2]),
            &["f32[1,64,112,112]"],
            "f32[1,64,56,56]",
        );
        ok(
            &pool(kind, &[2], &[1], &[(0, 0)]),
            &["f32[n,8,seq]"],
            "f32[n,8,seq-1]",
        );
        err(
            &pool(kind, &[2, 2], &[2, 2], &[(2, 0), (0, 0)]),
            &["f32[1,3,8,8]"],
            "padding 2:0 of spatial axis 0 exceeds half the window 2",
        );
        err(
            &pool(kind, &[4], &[1], &[(0, 0)]),
            &["f32[1,3,2]"],
            "window of 4 is larger than the padded size 2 of spatial axis 0",
        );
        err(
            &pool(kind, &[2], &[0], &[(0, 0)]),
            &["f32[1,3,8]"],
            "kernel and stride must be at least 1",
        );
        err(
            &pool(kind, &[2], &[2], &[(0, 0)]),
            &["f32[3,8]"],
            "operand 0 has rank 2, expected 3 ([N, C] and 1 spatial)",
        );
        err(
            &pool(kind, &[2], &[2], &[(0, 0)]),
            &["u8[1,3,8]"],
            "operand 0 has dtype u8, expected a float dtype",
        );
        err(
            &pool(kind, &[2, 2], &[2], &[(0, 0)]),
            &["f32[1,3,8,8]"],
            "stride has 1 entries, expected 2",
        );
    }
}

#[test]
fn custom_op_declares_its_output() {
    let op = Op::Custom(Custom {
        name: "my_fused_gate".into(),
        attrs: BTreeMap::from([("alpha".into(), AttrValue::Float(0.5))]),
        output: ty("f16[batch,7]"),
    });
    ok(&op, &["f32[batch,3]", "i64[2]"], "f16[batch,7]");
    ok(&op, &[], "f16[batch,7]");
    assert_eq!(
        op.to_string(),
        r#"custom["my_fused_gate", alpha=0.5, -> f16[batch,7]]"#
    );
}

#[test]
fn leaves() {
    let c = ConstantData::from_slice(&[1i32, 2, 3, 4, 5, 6], [2, 3]).unwrap();
    ok(&Op::Constant(c.clone()), &[], "i32[2,3]");
    err(&Op::Constant(c), &["f32[1]"], "expected 0 operands, got 1");
    for leaf in [Op::Input, Op::Param] {
        let e = leaf.infer(&[]).unwrap_err().to_string();
        assert!(e.contains("take their type from their declaration"), "{e}");
    }
    let bad = ConstantData::from_bytes(DType::F32, [2], vec![0u8; 7]).unwrap_err();
    assert_eq!(
        bad.to_string(),
        "constant of type f32[2] needs 8 bytes, got 7"
    );
    let sym = ConstantData::from_bytes(DType::F32, ty("f32[n]").shape, vec![]).unwrap_err();
    assert_eq!(sym.to_string(), "constant shape [n] must be static");
    assert_eq!(
        ConstantData::scalar(3, DType::BF16).ty(),
        &TensorType::new(DType::BF16, rlx::ir::Shape::scalar())
    );
}

fn conv_t(
    stride: &[usize],
    padding: &[(usize, usize)],
    output_padding: &[usize],
    dilation: &[usize],
    groups: usize,
) -> Op {
    Op::ConvTranspose(ConvTranspose {
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        output_padding: output_padding.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    })
}

#[test]
fn conv_transpose_shapes() {
    // The usual doubling: (7 - 1)·2 + 3 + 1 - 2 = 14.
    let double = conv_t(&[2, 2], &[(1, 1); 2], &[1, 1], &[1, 1], 1);
    ok(
        &double,
        &["f32[n,16,7,7]", "f32[16,8,3,3]", "f32[8]"],
        "f32[n,8,14,14]",
    );
    // Groups multiply the weight's output channels.
    let grouped = conv_t(&[1], &[(0, 0)], &[0], &[2], 4);
    ok(&grouped, &["f32[2,8,10]", "f32[8,3,3]"], "f32[2,12,14]");
    // Symbolic lengths stay exact: stride·seq + constant.
    let up = conv_t(&[2], &[(1, 1)], &[0], &[1], 1);
    ok(&up, &["f32[b,4,seq]", "f32[4,4,4]"], "f32[b,4,2*seq]");
    let same = conv_t(&[1], &[(1, 1)], &[0], &[1], 1);
    ok(&same, &["bf16[b,4,seq]", "bf16[4,2,3]"], "bf16[b,2,seq]");
}

#[test]
fn conv_transpose_errors() {
    let c1 = conv_t(&[1], &[(0, 0)], &[0], &[1], 1);
    err(
        &c1,
        &["f32[2,4,10]", "f32[3,8,3]"],
        "input channels and weight input channels 4 and 3 differ",
    );
    err(
        &c1,
        &["f32[2,4,10]", "f32[4,8,3]", "f32[4]"],
        "output channels and bias size 8 and 4 differ",
    );
    err(
        &conv_t(&[2], &[(0, 0)], &[2], &[1], 1),
        &["f32[2,4,10]", "f32[4,8,3]"],
        "output padding 2 of spatial axis 0 must be less than the stride or the dilation",
    );
    err(
        &conv_t(&[1], &[(2, 2)], &[0], &[1], 1),
        &["f32[2,4,1]", "f32[4,8,3]"],
        "padding 2:2 of spatial axis 0 crops the whole output of input size 1",
    );
    err(
        &conv_t(&[1], &[(0, 0)], &[0], &[1], 3),
        &["f32[2,4,10]", "f32[4,2,3]"],
        "input channels 4 are not a multiple of groups 3",
    );
    err(
        &c1,
        &["f32[2,4,10]", "f32[4,8,k]"],
        "kernel size k of spatial axis 0 must be static and positive",
    );
    err(
        &c1,
        &["i32[2,4,10]", "i32[4,8,3]"],
        "operand 0 has dtype i32, expected a float dtype",
    );
    err(
        &conv_t(&[1, 1], &[(0, 0); 2], &[0], &[1, 1], 1),
        &["f32[2,4,5,5]", "f32[4,8,3,3]"],
        "output_padding has 1 entries, expected 2",
    );
    err(
        &conv_t(&[1], &[(0, 0)], &[0], &[0], 1),
        &["f32[2,4,10]", "f32[4,8,3]"],
        "stride, dilation and groups must be at least 1",
    );
}

#[test]
fn upsample_shapes_and_errors() {
    use rlx::ir::{Dim, Shape, UpsampleMode};
    for mode in UpsampleMode::ALL {
        let to = |h: Dim, w: Dim| {
            Op::Upsample(Upsample {
                mode,
                size: Shape::new([h, w]),
            })
        };
        ok(
            &to(Dim::Static(64), Dim::Static(48)),
            &["f16[n,3,32,32]"],
            "f16[n,3,64,48]",
        );
        ok(
            &to(Dim::Static(1), Dim::Static(1)),
            &["f32[n,3,h,w]"],
            "f32[n,3,1,1]",
        );
        let twice = |d: &str| Dim::sym(d).mul(&Dim::Static(2));
        ok(
            &to(twice("h"), twice("w")),
            &["f32[n,3,h,w]"],
            "f32[n,3,2*h,2*w]",
        );
        err(
            &to(Dim::Static(0), Dim::Static(4)),
            &["f32[1,3,4,4]"],
            "output size 0 must be at least 1",
        );
        err(
            &to(Dim::Static(4), Dim::Static(4)),
            &["f32[1,3,0,4]"],
            "cannot upsample from an empty spatial axis (size 0)",
        );
        err(
            &to(Dim::Static(4), Dim::Static(4)),
            &["f32[1,3,4]"],
            "operand 0 has rank 3, expected 4",
        );
        err(
            &to(Dim::Static(4), Dim::Static(4)),
            &["i32[1,3,4,4]"],
            "operand 0 has dtype i32, expected a float dtype",
        );
    }
    let three = Op::Upsample(Upsample {
        mode: UpsampleMode::Nearest,
        size: Shape::from([2, 2, 2]),
    });
    err(
        &three,
        &["f32[1,3,4,4]"],
        "size has 3 entries; upsampling resizes the 2 spatial axes [H, W]",
    );
}
