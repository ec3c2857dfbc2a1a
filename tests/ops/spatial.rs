//! Transposed convolution, upsampling, and the group and batch norm composites.

use rlx::ir::{Conv, ConvTranspose, DType, Op, Pool, PoolKind, Shape, Upsample, UpsampleMode};
use rlx::typed::{Const, Tensor, build};

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, indices, random, to_tensor};

/// A convolution's shapes and attributes: x, w, stride, padding, dilation, groups, and
/// whether it has a bias.
type ConvCase = (
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<(usize, usize)>,
    Vec<usize>,
    usize,
    bool,
);

/// One transposed convolution case: shapes and attributes as the IR takes them.
struct ConvTransposeCase {
    x: Vec<usize>,
    w: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<(usize, usize)>,
    output_padding: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
    bias: bool,
}

/// The definition, term by term: input position `i` and tap `k` add
/// `x[n, c, i] · w[c, o, k]` into output position `i·stride + k·dilation − padding.0`.
fn conv_transpose_ref(c: &ConvTransposeCase, x: &Nd, w: &Nd, bias: Option<&Nd>) -> Nd {
    let s = c.stride.len();
    let og = c.w[1];
    let cg = c.x[1] / c.groups;
    let out_channels = og * c.groups;
    let mut out_shape = vec![c.x[0], out_channels];
    for a in 0..s {
        let full = (c.x[2 + a] - 1) * c.stride[a]
            + c.dilation[a] * (c.w[2 + a] - 1)
            + 1
            + c.output_padding[a];
        out_shape.push(full - c.padding[a].0 - c.padding[a].1);
    }
    let mut out = Nd::new(&out_shape, vec![0.0; out_shape.iter().product()]);
    let out_strides = crate::reference::strides(&out_shape);
    for idx in indices(&out_shape) {
        let at: usize = idx.iter().zip(&out_strides).map(|(i, s)| i * s).sum();
        out.data[at] = bias.map_or(0.0, |b| b.at(&[idx[1]]));
    }
    for xi in indices(&c.x) {
        let (n, ci) = (xi[0], xi[1]);
        let g = ci / cg;
        for o in 0..og {
            for k in indices(&c.w[2..]) {
                let mut pos = vec![n, g * og + o];
                let inside = (0..s).all(|a| {
                    let p = (xi[2 + a] * c.stride[a] + k[a] * c.dilation[a])
                        .checked_sub(c.padding[a].0);
                    match p.filter(|p| *p < out_shape[2 + a]) {
                        Some(p) => {
                            pos.push(p);
                            true
                        }
                        None => false,
                    }
                });
                if inside {
                    let mut wi = vec![ci, o];
                    wi.extend(&k);
                    let at: usize = pos.iter().zip(&out_strides).map(|(i, s)| i * s).sum();
                    out.data[at] += x.at(&xi) * w.at(&wi);
                }
            }
        }
    }
    out
}

#[test]
fn conv_transpose_1d_and_2d() {
    let mut rng = Rng(61);
    let cases = [
        // Strided with asymmetric crop, output padding and dilation, with bias.
        ConvTransposeCase {
            x: vec![2, 4, 5, 4],
            w: vec![4, 3, 3, 3],
            stride: vec![2, 1],
            padding: vec![(1, 1), (0, 1)],
            output_padding: vec![1, 0],
            dilation: vec![1, 2],
            groups: 1,
            bias: true,
        },
        // Two groups, stride equal to the kernel (no overlap), no bias.
        ConvTransposeCase {
            x: vec![1, 4, 3, 3],
            w: vec![4, 2, 2, 2],
            stride: vec![2, 2],
            padding: vec![(0, 0), (0, 0)],
            output_padding: vec![0, 0],
            dilation: vec![1, 1],
            groups: 2,
            bias: false,
        },
        // 1-D, three groups, stride 3 with output padding 2, dilation 2.
        ConvTransposeCase {
            x: vec![2, 6, 7],
            w: vec![6, 1, 3],
            stride: vec![3],
            padding: vec![(2, 0)],
            output_padding: vec![2],
            dilation: vec![2],
            groups: 3,
            bias: true,
        },
        // A crop wider than the kernel's reach: one output position remains.
        ConvTransposeCase {
            x: vec![1, 2, 5],
            w: vec![2, 2, 2],
            stride: vec![1],
            padding: vec![(3, 2)],
            output_padding: vec![0],
            dilation: vec![1],
            groups: 1,
            bias: true,
        },
        // Two cases MLX's input-dilated convolution got wrong on CUDA (fuzz_graphs on an
        // H100): stride 3 with output padding over two positions, and one input channel.
        ConvTransposeCase {
            x: vec![1, 2, 2],
            w: vec![2, 1, 3],
            stride: vec![3],
            padding: vec![(1, 1)],
            output_padding: vec![1],
            dilation: vec![1],
            groups: 1,
            bias: true,
        },
        ConvTransposeCase {
            x: vec![3, 1, 4],
            w: vec![1, 2, 2],
            stride: vec![1],
            padding: vec![(0, 0)],
            output_padding: vec![0],
            dilation: vec![1],
            groups: 1,
            bias: false,
        },
    ];
    for dtype in FLOATS {
        for case in &cases {
            let x = random(&mut rng, dtype, &case.x, -1.0, 1.0);
            let w = random(&mut rng, dtype, &case.w, -1.0, 1.0);
            let out_channels = case.w[1] * case.groups;
            let bias = random(&mut rng, dtype, &[out_channels], -1.0, 1.0);
            let op = Op::ConvTranspose(ConvTranspose {
                stride: case.stride.clone(),
                padding: case.padding.clone(),
                output_padding: case.output_padding.clone(),
                dilation: case.dilation.clone(),
                groups: case.groups,
            });
            let mut inputs = vec![
                ("x", dtype, declared(&case.x, &[(0, "n")])),
                ("w", dtype, declared(&case.w, &[])),
            ];
            let mut given = vec![("x", &x), ("w", &w)];
            if case.bias {
                inputs.push(("b", dtype, declared(&[out_channels], &[])));
                given.push(("b", &bias));
            }
            let g = graph_of(&inputs, |b, i| b.op(op.clone(), i).unwrap());
            let nb = Nd::of(&bias);
            let expected =
                conv_transpose_ref(case, &Nd::of(&x), &Nd::of(&w), case.bias.then_some(&nb));
            check(&g, &given, &[], &[to_tensor(&expected, dtype)], 6.0);
        }
    }
}

/// PyTorch's source index for output position `p` (`upsample_*` kernels, sizes given).
fn torch_source(mode: UpsampleMode, p: usize, input: usize, output: usize) -> (usize, usize, f64) {
    let src = match mode {
        UpsampleMode::Nearest => {
            let i = ((p * input) as f64 / output as f64).floor() as usize;
            let i = i.min(input - 1);
            return (i, i, 0.0);
        }
        UpsampleMode::Bilinear => {
            let scale = input as f64 / output as f64;
            (scale * (p as f64 + 0.5) - 0.5).max(0.0)
        }
        UpsampleMode::BilinearAlignCorners => {
            if output > 1 {
                (input - 1) as f64 / (output - 1) as f64 * p as f64
            } else {
                0.0
            }
        }
    };
    let i0 = src as usize;
    let i1 = if i0 < input - 1 { i0 + 1 } else { i0 };
    (i0, i1, src - i0 as f64)
}

fn upsample_ref(mode: UpsampleMode, x: &Nd, size: [usize; 2]) -> Nd {
    let (h, w) = (x.shape[2], x.shape[3]);
    let shape = [x.shape[0], x.shape[1], size[0], size[1]];
    let data = indices(&shape)
        .iter()
        .map(|o| {
            let (y0, y1, ly) = torch_source(mode, o[2], h, size[0]);
            let (x0, x1, lx) = torch_source(mode, o[3], w, size[1]);
            let v = |y: usize, xx: usize| x.at(&[o[0], o[1], y, xx]);
            (1.0 - ly) * ((1.0 - lx) * v(y0, x0) + lx * v(y0, x1))
                + ly * ((1.0 - lx) * v(y1, x0) + lx * v(y1, x1))
        })
        .collect();
    Nd::new(&shape, data)
}

#[test]
fn upsample_nearest_and_bilinear() {
    let mut rng = Rng(62);
    for dtype in FLOATS {
        for mode in UpsampleMode::ALL {
            // Doubling, a mix of growing and shrinking, one pixel, unchanged.
            for size in [[8, 10], [7, 3], [1, 1], [4, 5]] {
                let xs = [2, 3, 4, 5];
                let x = random(&mut rng, dtype, &xs, -1.0, 1.0);
                let op = Op::Upsample(Upsample {
                    mode,
                    size: size.into(),
                });
                let g = graph_of(&[("x", dtype, declared(&xs, &[(0, "n")]))], |b, i| {
                    b.op(op.clone(), i).unwrap()
                });
                let expected = upsample_ref(mode, &Nd::of(&x), size);
                check(&g, &[("x", &x)], &[], &[to_tensor(&expected, dtype)], 2.0);
            }
        }
    }
}

#[test]
fn upsample_by_a_factor_of_a_runtime_size() {
    rlx::dims!(Height, Width);
    let graph = build(|g| {
        let x: Tensor<(Const<1>, Const<2>, Height, Width)> = g.input("x");
        let y: Tensor<(Const<1>, Const<2>, rlx::typed::Dyn, rlx::typed::Dyn)> =
            x.upsample2d_by(UpsampleMode::BilinearAlignCorners, [3, 2]);
        g.output("y", y);
    })
    .unwrap();
    let mut rng = Rng(63);
    for (h, w) in [(2, 3), (5, 1)] {
        let x = random(&mut rng, DType::F32, &[1, 2, h, w], -1.0, 1.0);
        let expected = upsample_ref(
            UpsampleMode::BilinearAlignCorners,
            &Nd::of(&x),
            [3 * h, 2 * w],
        );
        check(
            &graph,
            &[("x", &x)],
            &[],
            &[to_tensor(&expected, DType::F32)],
            2.0,
        );
    }
}

/// A direct (no im2col) convolution or pooling reference over `[N, C, H, W]`.
#[allow(clippy::too_many_arguments)]
fn window_ref(
    x: &Nd,
    out_hw: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dil: [usize; 2],
    f: impl Fn(usize, usize, &dyn Fn(usize, usize) -> Option<(usize, usize)>) -> f64,
    n_out_channels: usize,
) -> Nd {
    let shape = [x.shape[0], n_out_channels, out_hw[0], out_hw[1]];
    let data = indices(&shape)
        .iter()
        .map(|o| {
            let tap = |ky: usize, kx: usize| -> Option<(usize, usize)> {
                let y = (o[2] * stride[0] + ky * dil[0]).checked_sub(pad[0])?;
                let xx = (o[3] * stride[1] + kx * dil[1]).checked_sub(pad[1])?;
                (y < x.shape[2] && xx < x.shape[3]).then_some((y, xx))
            };
            f(o[0], o[1], &tap)
        })
        .collect();
    Nd::new(&shape, data)
}

#[test]
fn conv_1d_and_2d_with_groups() {
    let mut rng = Rng(45);
    for dtype in FLOATS {
        let cases: Vec<ConvCase> = vec![
            (
                vec![2, 3, 7, 6],
                vec![4, 3, 3, 3],
                vec![1, 1],
                vec![(1, 1), (1, 1)],
                vec![1, 1],
                1,
                true,
            ),
            (
                vec![1, 4, 9, 9],
                vec![6, 2, 3, 2],
                vec![2, 1],
                vec![(1, 1), (0, 0)],
                vec![1, 2],
                2,
                false,
            ),
            (
                vec![2, 4, 10],
                vec![4, 1, 3],
                vec![1],
                vec![(2, 0)],
                vec![1],
                4,
                true,
            ),
        ];
        for (xs, ws, stride, padding, dilation, groups, with_bias) in cases {
            let x = random(&mut rng, dtype, &xs, -1.0, 1.0);
            let w = random(&mut rng, dtype, &ws, -1.0, 1.0);
            let bias = random(&mut rng, dtype, &[ws[0]], -1.0, 1.0);
            let op = Op::Conv(Conv {
                stride: stride.clone(),
                padding: padding.clone(),
                dilation: dilation.clone(),
                groups,
            });
            let mut inputs = vec![
                ("x", dtype, declared(&xs, &[(0, "n")])),
                ("w", dtype, declared(&ws, &[])),
            ];
            if with_bias {
                inputs.push(("b", dtype, declared(&[ws[0]], &[])));
            }
            let g = graph_of(&inputs, |b, i| b.op(op.clone(), i).unwrap());
            let out_ty = g[g.outputs()[0].node].ty.shape.clone();
            // View 1-D as 2-D with height 1.
            let two = |v: &[usize], fill: usize| {
                if v.len() == 1 {
                    [fill, v[0]]
                } else {
                    [v[0], v[1]]
                }
            };
            let mut x4 = Nd::of(&x);
            let mut w4 = Nd::of(&w);
            if xs.len() == 3 {
                x4.shape = vec![xs[0], xs[1], 1, xs[2]];
                w4.shape = vec![ws[0], ws[1], 1, ws[2]];
            }
            let dims: Vec<usize> = out_ty
                .dims()
                .iter()
                .skip(2)
                .map(|d| d.as_static().unwrap_or(0))
                .collect();
            let out_hw = two(&dims, 1);
            let (cg, og) = (xs[1] / groups, ws[0] / groups);
            let pads: Vec<usize> = padding.iter().map(|p| p.0).collect();
            let nb = Nd::of(&bias);
            let k = [w4.shape[2], w4.shape[3]];
            let expected = window_ref(
                &x4,
                out_hw,
                two(&stride, 1),
                two(&pads, 0),
                two(&dilation, 1),
                |n, o, tap| {
                    let g = o / og;
                    let mut acc = if with_bias { nb.at(&[o]) } else { 0.0 };
                    for c in 0..cg {
                        for ky in 0..k[0] {
                            for kx in 0..k[1] {
                                if let Some((y, xx)) = tap(ky, kx) {
                                    acc += x4.at(&[n, g * cg + c, y, xx]) * w4.at(&[o, c, ky, kx]);
                                }
                            }
                        }
                    }
                    acc
                },
                ws[0],
            );
            let expected = Nd {
                shape: out_ty
                    .dims()
                    .iter()
                    .map(|d| d.as_static().unwrap_or(xs[0]))
                    .collect(),
                data: expected.data,
            };
            let mut given = vec![("x", &x), ("w", &w)];
            if with_bias {
                given.push(("b", &bias));
            }
            check(&g, &given, &[], &[to_tensor(&expected, dtype)], 6.0);
        }
    }
}

#[test]
fn max_and_avg_pooling() {
    let mut rng = Rng(46);
    for dtype in FLOATS {
        for kind in [PoolKind::Max, PoolKind::Avg] {
            for (xs, kernel, stride, padding) in [
                (
                    vec![2, 3, 6, 7],
                    vec![2, 2],
                    vec![2, 2],
                    vec![(0, 0), (1, 1)],
                ),
                (vec![1, 2, 9], vec![3], vec![2], vec![(1, 1)]),
            ] {
                let x = random(&mut rng, dtype, &xs, -1.0, 1.0);
                let op = Op::Pool(Pool {
                    kind,
                    kernel: kernel.clone(),
                    stride: stride.clone(),
                    padding: padding.clone(),
                });
                let g = graph_of(&[("x", dtype, declared(&xs, &[]))], |b, i| {
                    b.op(op.clone(), i).unwrap()
                });
                let out_ty = g[g.outputs()[0].node].ty.shape.clone();
                let two = |v: &[usize], fill: usize| {
                    if v.len() == 1 {
                        [fill, v[0]]
                    } else {
                        [v[0], v[1]]
                    }
                };
                let mut x4 = Nd::of(&x);
                if xs.len() == 3 {
                    x4.shape = vec![xs[0], xs[1], 1, xs[2]];
                }
                let dims: Vec<usize> = out_ty
                    .dims()
                    .iter()
                    .skip(2)
                    .map(|d| d.as_static().unwrap())
                    .collect();
                let k = two(&kernel, 1);
                let pads: Vec<usize> = padding.iter().map(|p| p.0).collect();
                let expected = window_ref(
                    &x4,
                    two(&dims, 1),
                    two(&stride, 1),
                    two(&pads, 0),
                    [1, 1],
                    |n, c, tap| {
                        let mut vals = Vec::new();
                        for ky in 0..k[0] {
                            for kx in 0..k[1] {
                                match tap(ky, kx) {
                                    Some((y, xx)) => vals.push(x4.at(&[n, c, y, xx])),
                                    None if kind == PoolKind::Avg => vals.push(0.0),
                                    None => {}
                                }
                            }
                        }
                        match kind {
                            PoolKind::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                            PoolKind::Avg => vals.iter().sum::<f64>() / (k[0] * k[1]) as f64,
                        }
                    },
                    xs[1],
                );
                let expected = Nd {
                    shape: out_ty
                        .dims()
                        .iter()
                        .map(|d| d.as_static().unwrap())
                        .collect(),
                    data: expected.data,
                };
                check(&g, &[("x", &x)], &[], &[to_tensor(&expected, dtype)], 2.0);
            }
        }
    }
}

#[test]
fn gradient_conv_and_its_transpose() {
    let cases: Vec<ConvCase> = vec![
        (
            vec![2, 3, 5, 6],
            vec![4, 3, 3, 2],
            vec![2, 1],
            vec![(1, 0), (1, 1)],
            vec![1, 2],
            1,
            true,
        ),
        (
            vec![1, 4, 7],
            vec![6, 2, 3],
            vec![2],
            vec![(1, 1)],
            vec![1],
            2,
            false,
        ),
        (
            vec![2, 2, 9],
            vec![2, 2, 2],
            vec![3],
            vec![(0, 2)],
            vec![2],
            1,
            true,
        ),
    ];
    for (seed, (xs, ws, stride, padding, dilation, groups, bias)) in cases.into_iter().enumerate() {
        let mut inputs = vec![Input::float("x", &xs), Input::float("w", &ws)];
        if bias {
            inputs.push(Input::float("b", &[ws[0]]));
        }
        let conv = Op::Conv(Conv {
            stride: stride.clone(),
            padding: padding.clone(),
            dilation: dilation.clone(),
            groups,
        });
        grad_check(
            &format!("conv {conv}"),
            1200 + seed as u64,
            &inputs,
            &|g, i| op(g, conv.clone(), i),
        );
        // The transpose with the same geometry: the weight [C_in, C_out/groups, *k].
        let tw = {
            let mut t = ws.clone();
            t[0] = xs[1];
            t[1] = ws[0] / groups;
            t
        };
        let mut inputs = vec![Input::float("x", &xs), Input::float("w", &tw)];
        if bias {
            inputs.push(Input::float("b", &[tw[1] * groups]));
        }
        let output_padding: Vec<usize> = stride.iter().map(|s| s - 1).collect();
        let t = Op::ConvTranspose(ConvTranspose {
            stride: stride.clone(),
            padding: padding.clone(),
            output_padding,
            dilation: dilation.clone(),
            groups,
        });
        grad_check(&format!("{t}"), 1210 + seed as u64, &inputs, &|g, i| {
            op(g, t.clone(), i)
        });
    }
}

#[test]
fn gradient_pooling_both_kinds() {
    use rlx::ir::PoolKind;
    for (seed, kind) in [PoolKind::Avg, PoolKind::Max].into_iter().enumerate() {
        let x = Input::float("x", &[2, 3, 5, 6]);
        let p = Op::Pool(Pool {
            kind,
            kernel: vec![3, 2],
            stride: vec![2, 2],
            padding: vec![(1, 1), (0, 1)],
        });
        grad_check(&format!("{p}"), 1300 + seed as u64, &[x], &|g, i| {
            op(g, p.clone(), i)
        });
        let x = Input::float("x", &[1, 2, 7]);
        let p = Op::Pool(Pool {
            kind,
            kernel: vec![3],
            stride: vec![1],
            padding: vec![(1, 1)],
        });
        grad_check(
            &format!("{p} 1-D overlapping"),
            1310 + seed as u64,
            &[x],
            &|g, i| op(g, p.clone(), i),
        );
    }
}

#[test]
fn gradient_upsampling_every_mode() {
    use rlx::ir::UpsampleMode;
    for (seed, mode) in UpsampleMode::ALL.into_iter().enumerate() {
        for size in [[7, 4], [2, 9]] {
            let x = Input::float("x", &[2, 2, 3, 5]);
            let u = Op::Upsample(Upsample {
                mode,
                size: Shape::from(size),
            });
            grad_check(&format!("{u}"), 1400 + seed as u64, &[x], &|g, i| {
                op(g, u.clone(), i)
            });
        }
    }
}
