//! Transposed convolution, upsampling, and the group and batch norm composites.

use half::{bf16, f16};
use rlx::ir::{ConvTranspose, Upsample};
use rlx::ir::{DType, Graph, Op, UpsampleMode};
use rlx::typed::{Const, Float, Tensor, build};

use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, indices, random, to_tensor};

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

type N = Const<2>;
type C = Const<6>;

fn group_norm_graph<E: Float>() -> Graph {
    rlx::dims!(Batch);
    build(|g| {
        let x: Tensor<(Batch, C, Const<3>, Const<4>), E> = g.input("x");
        let (w, b): (Tensor<(C,), E>, _) = (g.input("w"), g.input("b"));
        g.output("y", x.group_norm(3, w, b, 1e-5));
    })
    .unwrap()
}

fn batch_norm_graph<E: Float>() -> Graph {
    build(|g| {
        let x: Tensor<(N, C, Const<5>), E> = g.input("x");
        let (mean, var): (Tensor<(C,), E>, _) = (g.input("mean"), g.input("var"));
        let (w, b) = (g.input("w"), g.input("b"));
        g.output("y", x.batch_norm(mean, var, w, b, 1e-3));
    })
    .unwrap()
}

/// The typed graph `make::<E>()` for `dtype`.
fn for_dtype(dtype: DType, make: [fn() -> Graph; 4]) -> Graph {
    match dtype {
        DType::F32 => make[0](),
        DType::F64 => make[1](),
        DType::F16 => make[2](),
        DType::BF16 => make[3](),
        other => panic!("{other:?} is not a float"),
    }
}

#[test]
fn group_norm_composite() {
    let mut rng = Rng(64);
    let (groups, eps) = (3, 1e-5);
    for dtype in FLOATS {
        let graph = for_dtype(
            dtype,
            [
                group_norm_graph::<f32>,
                group_norm_graph::<f64>,
                group_norm_graph::<f16>,
                group_norm_graph::<bf16>,
            ],
        );
        let xs = [2, 6, 3, 4];
        let x = random(&mut rng, dtype, &xs, -2.0, 3.0);
        let w = random(&mut rng, dtype, &[6], 0.5, 1.5);
        let b = random(&mut rng, dtype, &[6], -1.0, 1.0);
        let (nx, nw, nb) = (Nd::of(&x), Nd::of(&w), Nd::of(&b));
        let per_group = xs[1] / groups;
        let stats = |n: usize, g: usize| {
            let vals: Vec<f64> = indices(&xs)
                .iter()
                .filter(|i| i[0] == n && i[1] / per_group == g)
                .map(|i| nx.at(i))
                .collect();
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64;
            (mean, var)
        };
        let data = indices(&xs)
            .iter()
            .map(|i| {
                let (mean, var) = stats(i[0], i[1] / per_group);
                (nx.at(i) - mean) / (var + eps).sqrt() * nw.at(&[i[1]]) + nb.at(&[i[1]])
            })
            .collect();
        let expected = Nd::new(&xs, data);
        let inputs = [("x", &x), ("w", &w), ("b", &b)];
        check(&graph, &inputs, &[], &[to_tensor(&expected, dtype)], 8.0);
    }
}

#[test]
fn batch_norm_composite() {
    let mut rng = Rng(65);
    let eps = 1e-3;
    for dtype in FLOATS {
        let graph = for_dtype(
            dtype,
            [
                batch_norm_graph::<f32>,
                batch_norm_graph::<f64>,
                batch_norm_graph::<f16>,
                batch_norm_graph::<bf16>,
            ],
        );
        let xs = [2, 6, 5];
        let x = random(&mut rng, dtype, &xs, -2.0, 2.0);
        let mean = random(&mut rng, dtype, &[6], -0.5, 0.5);
        let var = random(&mut rng, dtype, &[6], 0.25, 2.0);
        let w = random(&mut rng, dtype, &[6], 0.5, 1.5);
        let b = random(&mut rng, dtype, &[6], -1.0, 1.0);
        let [nx, nm, nv, nw, nb] = [&x, &mean, &var, &w, &b].map(Nd::of);
        let data = indices(&xs)
            .iter()
            .map(|i| {
                let c = [i[1]];
                (nx.at(i) - nm.at(&c)) / (nv.at(&c) + eps).sqrt() * nw.at(&c) + nb.at(&c)
            })
            .collect();
        let expected = Nd::new(&xs, data);
        let inputs = [
            ("x", &x),
            ("mean", &mean),
            ("var", &var),
            ("w", &w),
            ("b", &b),
        ];
        check(&graph, &inputs, &[], &[to_tensor(&expected, dtype)], 8.0);
    }
}
