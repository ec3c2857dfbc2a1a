//! The rest of the typed vocabulary: permute, slice, pad, concat, take, scatter, rope,
//! convolution, pooling, quantized matmul, custom ops and `Dyn` dims. Each op runs on the
//! CPU against values worked out by hand, and each build-time rule reports its message at
//! the caller's line.

use std::collections::BTreeMap;
use std::sync::Arc;

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CustomInputs, CustomKernel, TensorMut};
use rlx::ir::{AttrValue, Graph};
use rlx::tensor::HostTensor;
use rlx::typed::{
    Axis, BuildErrors, Const, ConvConfig, Dyn, PoolConfig, Quantization, Rope, Tensor, build,
};

rlx::dims!(Batch, Seq);

type C<const N: usize> = Const<N>;

fn run(graph: &Graph, inputs: &[(&str, HostTensor)]) -> Vec<HostTensor> {
    run_on(&CpuBackend::default(), graph, inputs)
}

fn run_on(backend: &CpuBackend, graph: &Graph, inputs: &[(&str, HostTensor)]) -> Vec<HostTensor> {
    let exe = backend.compile(graph).unwrap();
    let views: Vec<_> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
    exe.run(&views, &[]).unwrap()
}

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

fn f32s(t: &HostTensor) -> &[f32] {
    t.as_slice::<f32>().unwrap()
}

/// The one error of a failed build, checked to come from `line` of this file.
fn single_error(err: BuildErrors, line: u32) -> String {
    assert_eq!(err.0.len(), 1, "{err}");
    let e = &err.0[0];
    assert_eq!(e.location().file(), file!());
    assert_eq!(e.location().line(), line, "{e}");
    e.to_string()
}

#[test]
fn permute_slice_pad_and_concat_move_the_right_elements() {
    let graph = build(|g| {
        let x: Tensor<(C<2>, C<3>, C<4>)> = g.input("x");
        let p: Tensor<(C<4>, C<2>, C<3>)> = x.permute::<2, 0, 1>();
        g.output("p", p);
        let odd: Tensor<(C<2>, C<3>, C<2>)> = x.slice(Axis::<2>, 1, None, 2);
        g.output("odd", odd);
        let last: Tensor<(C<2>, C<1>, C<4>)> = x.slice(Axis::<1>, -1, None, 1);
        g.output("last", last);
        let padded: Tensor<(C<2>, C<3>, C<7>)> = x.pad(Axis::<2>, 1, 2, -1.0);
        g.output("padded", padded);
        let joined: Tensor<(C<2>, C<4>, C<4>)> = x.concat(Axis::<1>, last);
        g.output("joined", joined);
    })
    .unwrap();
    let x = HostTensor::from_vec(iota(24), [2, 3, 4]).unwrap();
    let out = run(&graph, &[("x", x)]);
    // p[k, i, j] = x[i, j, k] = 12i + 4j + k
    assert_eq!(out[0].shape(), &[4, 2, 3]);
    assert_eq!(&f32s(&out[0])[..6], &[0.0, 4.0, 8.0, 12.0, 16.0, 20.0]);
    assert_eq!(f32s(&out[0])[6], 1.0);
    assert_eq!(&f32s(&out[1])[..4], &[1.0, 3.0, 5.0, 7.0]);
    assert_eq!(
        f32s(&out[2]),
        &[8.0, 9.0, 10.0, 11.0, 20.0, 21.0, 22.0, 23.0]
    );
    assert_eq!(&f32s(&out[3])[..7], &[-1.0, 0.0, 1.0, 2.0, 3.0, -1.0, -1.0]);
    assert_eq!(
        &f32s(&out[4])[8..16],
        &[8.0, 9.0, 10.0, 11.0, 8.0, 9.0, 10.0, 11.0]
    );
}

#[test]
fn take_and_scatter_add_index_any_axis() {
    let graph = build(|g| {
        let x: Tensor<(C<2>, C<5>)> = g.input("x");
        let cols: Tensor<(C<3>,), i64> = g.input("cols");
        g.output("picked", x.take(Axis::<1>, cols));
        let rows: Tensor<(C<3>,), i32> = g.input("rows");
        let updates: Tensor<(C<3>, C<5>)> = g.input("updates");
        let zeros: Tensor<(C<2>, C<5>)> = g.full(0.0);
        g.output("sums", zeros.scatter_add(Axis::<0>, rows, updates));
    })
    .unwrap();
    let out = run(
        &graph,
        &[
            ("x", HostTensor::from_vec(iota(10), [2, 5]).unwrap()),
            ("cols", HostTensor::from_vec(vec![4i64, 0, 4], [3]).unwrap()),
            ("rows", HostTensor::from_vec(vec![1i32, 0, 1], [3]).unwrap()),
            ("updates", HostTensor::from_vec(iota(15), [3, 5]).unwrap()),
        ],
    );
    assert_eq!(f32s(&out[0]), &[4.0, 0.0, 4.0, 9.0, 5.0, 9.0]);
    // Row 0 gets update 1; row 1 gets updates 0 and 2.
    assert_eq!(
        f32s(&out[1]),
        &[5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 14.0, 16.0, 18.0]
    );
}

#[test]
fn rope_rotates_by_position_and_offset() {
    let graph = build(|g| {
        let x: Tensor<(Seq, C<2>)> = g.input("x");
        let offset: Tensor<(), i64> = g.input("offset");
        let rope = Rope::new(2, 10_000.0);
        g.output("from_zero", x.rope(rope.clone()));
        g.output("from_offset", x.rope_from(rope, offset));
    })
    .unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 0.0, 1.0, 0.0], [2, 2]).unwrap();
    let offset = HostTensor::from_vec(vec![1i64], []).unwrap();
    let out = run(&graph, &[("x", x), ("offset", offset)]);
    // One pair, frequency 1: position p rotates (1, 0) to (cos p, sin p).
    let (c1, s1, c2, s2) = (1f32.cos(), 1f32.sin(), 2f32.cos(), 2f32.sin());
    for (got, want) in f32s(&out[0]).iter().zip([1.0, 0.0, c1, s1]) {
        approx::assert_abs_diff_eq!(*got, want, epsilon = 1e-6);
    }
    for (got, want) in f32s(&out[1]).iter().zip([c1, s1, c2, s2]) {
        approx::assert_abs_diff_eq!(*got, want, epsilon = 1e-6);
    }
}

#[test]
fn conv_and_pool_produce_the_declared_dims() {
    let graph = build(|g| {
        let image: Tensor<(Batch, C<1>, C<4>, C<4>)> = g.input("image");
        let w: Tensor<(C<2>, C<1>, C<3>, C<3>)> = g.param("w");
        let b: Tensor<(C<2>,)> = g.param("b");
        let same = ConvConfig::default().padding(1);
        let y: Tensor<(Batch, C<2>, C<4>, C<4>)> = image.conv2d(w, Some(b), same);
        let pooled: Tensor<(Batch, C<2>, C<2>, C<2>)> = y.max_pool2d(PoolConfig::new([2, 2]));
        g.output("pooled", pooled);
        let mean: Tensor<(Batch, C<1>, C<1>, C<1>)> = image.avg_pool2d(PoolConfig::new([4, 4]));
        g.output("mean", mean);
        let signal: Tensor<(Batch, C<2>, C<5>)> = g.input("signal");
        let taps: Tensor<(C<1>, C<2>, C<2>)> = g.param("taps");
        let filtered: Tensor<(Batch, C<1>, C<4>)> =
            signal.conv1d(taps, None, ConvConfig::default());
        g.output("filtered", filtered);
        let depthwise: Tensor<(C<2>, C<1>, C<1>)> = g.param("depthwise");
        let scaled: Tensor<(Batch, C<2>, C<5>)> =
            signal.conv1d_grouped(depthwise, None, 2, ConvConfig::default());
        let halves: Tensor<(Batch, C<2>, C<2>)> = scaled.avg_pool1d(PoolConfig::new([2]).stride(2));
        g.output("halves", halves.max_pool1d::<C<1>>(PoolConfig::new([2])));
    })
    .unwrap();
    let exe = CpuBackend::default().compile(&graph).unwrap();
    // Output channel 0 sums the 3x3 window, channel 1 copies the centre; biases 0 and 100.
    let mut w = vec![1.0f32; 9];
    w.extend([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    let weights = [
        ("w", HostTensor::from_vec(w, [2, 1, 3, 3]).unwrap()),
        ("b", HostTensor::from_vec(vec![0.0f32, 100.0], [2]).unwrap()),
        (
            "taps",
            HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 10.0], [1, 2, 2]).unwrap(),
        ),
        (
            "depthwise",
            HostTensor::from_vec(vec![2.0f32, -1.0], [2, 1, 1]).unwrap(),
        ),
    ];
    for (name, t) in &weights {
        exe.set_weight(name, t.view()).unwrap();
    }
    let image = HostTensor::from_vec(iota(16), [1, 1, 4, 4]).unwrap();
    let signal = HostTensor::from_vec(iota(10), [1, 2, 5]).unwrap();
    let out = exe
        .run(&[("image", image.view()), ("signal", signal.view())], &[])
        .unwrap();
    // Window sums at the top-left 2x2 block: max is the (1,1) sum 0+1+2+4+5+6+8+9+10 = 45.
    assert_eq!(out[0].shape(), &[1, 2, 2, 2]);
    assert_eq!(f32s(&out[0])[0], 45.0);
    // Channel 1 is the image plus 100, pooled 2x2: maxima 105, 107, 113, 115.
    assert_eq!(&f32s(&out[0])[4..], &[105.0, 107.0, 113.0, 115.0]);
    assert_eq!(f32s(&out[1]), &[7.5]);
    // signal[0, t] + 10 * signal[1, t + 1]
    assert_eq!(f32s(&out[2]), &[60.0, 71.0, 82.0, 93.0]);
    // Channel 0 doubled: [0,2,4,6,8] -> means [1,5] -> max 5; channel 1 negated:
    // [-5..-9] -> means [-5.5,-7.5] -> max -5.5.
    assert_eq!(f32s(&out[3]), &[5.0, -5.5]);
}

#[test]
fn quantized_matmul_dequantizes_per_group() {
    let graph = build(|g| {
        let x: Tensor<(Batch, C<32>)> = g.input("x");
        let w: Tensor<(C<2>, C<32>), u8> = g.param("w");
        let scales: Tensor<(C<2>, C<1>)> = g.param("scales");
        let biases: Tensor<(C<2>, C<1>)> = g.param("biases");
        let q = Quantization {
            bits: 8,
            group_size: 32,
        };
        g.output("y", x.quantized_matmul(w, scales, biases, q));
    })
    .unwrap();
    let exe = CpuBackend::default().compile(&graph).unwrap();
    // Row 0: q = 1 everywhere, w = 0.5 * 1 + 0 = 0.5. Row 1: q = i, w = 1 * i - 1.
    let mut q = vec![1u8; 32];
    q.extend(0..32u8);
    exe.set_weight("w", HostTensor::from_vec(q, [2, 32]).unwrap().view())
        .unwrap();
    exe.set_weight(
        "scales",
        HostTensor::from_vec(vec![0.5f32, 1.0], [2, 1])
            .unwrap()
            .view(),
    )
    .unwrap();
    exe.set_weight(
        "biases",
        HostTensor::from_vec(vec![0.0f32, -1.0], [2, 1])
            .unwrap()
            .view(),
    )
    .unwrap();
    let x = HostTensor::from_vec(vec![1.0f32; 32], [1, 32]).unwrap();
    let out = exe.run(&[("x", x.view())], &[]).unwrap();
    // 32 * 0.5 and sum(i - 1) for i in 0..32 = 496 - 32.
    assert_eq!(f32s(&out[0]), &[16.0, 464.0]);
}

/// `y = x * attrs["factor"]` for f32.
struct Scale;

impl CustomKernel for Scale {
    fn compute(
        &self,
        attrs: &BTreeMap<String, AttrValue>,
        inputs: &CustomInputs<'_>,
        out: TensorMut<'_>,
    ) -> Result<(), String> {
        let Some(AttrValue::Float(factor)) = attrs.get("factor") else {
            return Err("missing attribute `factor`".into());
        };
        let x = inputs.get(0).ok_or("needs an operand")?;
        for (o, i) in out.bytes.chunks_exact_mut(4).zip(x.bytes.chunks_exact(4)) {
            let v = f32::from_le_bytes(i.try_into().map_err(|_| "bad bytes")?) * *factor as f32;
            o.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

#[test]
fn custom_ops_take_erased_operands_and_a_typed_result() {
    let graph = build(|g| {
        let x: Tensor<(Batch, C<2>)> = g.input("x");
        let y: Tensor<(Batch, C<2>)> = g.custom(
            "scale",
            &[("factor", AttrValue::Float(3.0))],
            &[x.operand()],
        );
        g.output("y", y + x);
    })
    .unwrap();
    let backend = CpuBackend::default().with_custom_op("scale", Arc::new(Scale));
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
    let out = run_on(&backend, &graph, &[("x", x)]);
    assert_eq!(f32s(&out[0]), &[4.0, 8.0, 12.0, 16.0]);
}

#[test]
fn dyn_dims_are_fresh_symbols_and_reshape_infers_one() {
    let graph = build(|g| {
        let x: Tensor<(Dyn, C<4>)> = g.input("x");
        let flat: Tensor<(Dyn,)> = x.reshape();
        g.output("flat", flat);
        let pairs: Tensor<(Dyn, C<2>)> = x.reshape();
        g.output("pairs", pairs.sum::<1>());
    })
    .unwrap();
    let text = graph.to_string();
    assert!(text.contains("f32[x.0,4] = input \"x\""), "{text}");
    let out = run(
        &graph,
        &[("x", HostTensor::from_vec(iota(12), [3, 4]).unwrap())],
    );
    assert_eq!(out[0].shape(), &[12]);
    assert_eq!(out[1].shape(), &[6]);
    assert_eq!(f32s(&out[1])[5], 21.0);
}

#[test]
fn dyn_misuse_is_a_build_error_at_the_call() {
    let mut lines = Vec::new();
    let err = build(|g| {
        let x: Tensor<(Batch, C<6>)> = g.input("x");
        lines.push(line!() + 1);
        let _: Tensor<(Dyn, Dyn)> = x.reshape();
        lines.push(line!() + 1);
        let _: Tensor<(Batch, C<4>, Dyn)> = x.reshape();
        lines.push(line!() + 1);
        let _: Tensor<(C<3>, Dyn)> = g.param("w");
        lines.push(line!() + 1);
        let _: Tensor<(Batch, Dyn)> = x.broadcast();
        g.output("x", x);
    })
    .unwrap_err();
    assert_eq!(err.0.len(), 4, "{err}");
    for (e, line) in err.0.iter().zip(&lines) {
        assert_eq!(e.location().line(), *line, "{e}");
    }
    let messages: Vec<String> = err.0.iter().map(|e| e.to_string()).collect();
    assert!(
        messages[0].ends_with("a reshape can infer one `Dyn` dim, not 2"),
        "{}",
        messages[0]
    );
    assert!(
        messages[1]
            .ends_with("no `Dyn` size reshapes [batch,6] (6*batch elements) to (Batch, 4, Dyn)"),
        "{}",
        messages[1]
    );
    for m in &messages[2..] {
        assert!(m.contains("a `Dyn` dim has no size to give here"), "{m}");
    }
}

#[test]
fn declared_result_dims_are_checked_at_build() {
    let mut lines = Vec::new();
    let err = build(|g| {
        let x: Tensor<(Batch, C<3>)> = g.input("x");
        lines.push(line!() + 1);
        let _: Tensor<(Batch, C<7>)> = x.concat(Axis::<1>, x);
        lines.push(line!() + 1);
        let _: Tensor<(Batch, C<4>)> = x.pad(Axis::<1>, 1, 1, 0.0);
        lines.push(line!() + 1);
        let _: Tensor<(Seq, C<3>)> = x.slice(Axis::<0>, 0, Some(2), 1);
        let image: Tensor<(Batch, C<1>, C<8>, C<8>)> = g.input("image");
        let w: Tensor<(C<4>, C<1>, C<3>, C<3>)> = g.param("w");
        lines.push(line!() + 1);
        let _: Tensor<(Batch, C<4>, C<8>, C<8>)> = image.conv2d(w, None, ConvConfig::default());
        lines.push(line!() + 1);
        let _: Tensor<(Batch, C<1>, C<3>, C<4>)> = image.max_pool2d(PoolConfig::new([2, 2]));
        let ok: Tensor<(Batch, Dyn)> = x.concat(Axis::<1>, x);
        g.output("ok", ok);
    })
    .unwrap_err();
    assert_eq!(err.0.len(), 5, "{err}");
    let expected = [
        "`concat` on (f32[batch,3]): the result is [batch,6] but its type says (Batch, 7)",
        "`pad` on (f32[batch,3]): the result is [batch,5] but its type says (Batch, 4)",
        "`slice` on (f32[batch,3]): the result is [2,3] but its type says (Seq, 3)",
        "`conv2d` on (f32[batch,1,8,8]): the result is [batch,4,6,6] but its type says (Batch, 4, 8, 8)",
        "`max_pool2d` on (f32[batch,1,8,8]): the result is [batch,1,4,4] but its type says (Batch, 1, 3, 4)",
    ];
    for ((e, line), want) in err.0.iter().zip(&lines).zip(expected) {
        assert_eq!(e.location().line(), *line, "{e}");
        assert!(e.to_string().ends_with(want), "{e}\nwant: {want}");
    }
}

#[test]
fn arithmetic_rules_of_the_new_ops_are_build_errors() {
    let mut lines = Vec::new();
    let err = build(|g| {
        let x: Tensor<(Batch, C<64>)> = g.input("x");
        let w: Tensor<(C<8>, C<16>), u8> = g.param("w");
        let s: Tensor<(C<8>, C<2>)> = g.param("s");
        let q = Quantization {
            bits: 4,
            group_size: 32,
        };
        lines.push(line!() + 1);
        let _ = x.quantized_matmul(w, s, s, q);
        let seq: Tensor<(Seq, C<6>)> = g.input("seq");
        lines.push(line!() + 1);
        let _ = seq.rope(Rope::new(8, 10_000.0));
        let signal: Tensor<(Batch, C<3>, C<9>)> = g.input("signal");
        let taps: Tensor<(C<4>, C<1>, C<3>)> = g.param("taps");
        lines.push(line!() + 2);
        let _: Tensor<(Batch, C<4>, C<7>)> =
            signal.conv1d_grouped(taps, None, 2, ConvConfig::default());
        let _: Tensor<(Batch, C<1>)> = g.custom("op", &[], &[x.operand()]);
        lines.push(line!() + 1);
        let _: Tensor<(Dyn,)> = g.custom("op", &[], &[x.operand()]);
        g.output("x", x);
    })
    .unwrap_err();
    assert_eq!(err.0.len(), 4, "{err}");
    for (e, line) in err.0.iter().zip(&lines) {
        assert_eq!(e.location().line(), *line, "{e}");
    }
    let text = err.to_string();
    for want in [
        "packed weight bytes per row and input features 16 and 32 differ",
        "rotary dims must be even, positive and at most the feature size 6, got 8",
        "input channels and weight channels x groups 3 and 2 differ",
        "`dim`: a `Dyn` dim has no size to give here",
    ] {
        assert!(text.contains(want), "{text}\nwant: {want}");
    }
}

#[test]
fn slice_bounds_are_checked_at_build() {
    let line = line!() + 3;
    let err = build(|g| {
        let x: Tensor<(Batch, C<3>)> = g.input("x");
        let _: Tensor<(Batch, C<3>)> = x.slice(Axis::<1>, 0, Some(5), 1);
        g.output("x", x);
    })
    .unwrap_err();
    let message = single_error(err, line);
    assert!(message.contains("out of range"), "{message}");
}

#[test]
fn the_rest_of_the_vocabulary_runs() {
    let graph = build(|g| {
        let x: Tensor<(C<2>, C<3>)> = g.input("x");
        let y: Tensor<(C<3>,)> = g.input("y");
        g.output("unary", (x.abs().sign() + x.recip().floor()).relu());
        g.output("binary", x.maximum(y) - x.minimum(y) + x.pow(y) % 5.0);
        g.output("reduced", x.min::<1>() + x.prod::<1>());
        g.output("argmin", x.argmin::<1>());
        g.output("keep", x.max_keepdim::<1>() - x.mean_keepdim::<1>());
        g.output("log_softmax", x.log_softmax::<1>().exp().sum::<1>());
        g.output("compare", x.ne(x.round()).select(x, x.ceil()));
        g.output(
            "le_ge",
            x.le(x).select(x.ge(x.sin() + x.cos()).cast::<f32>(), x),
        );
        g.output("erf_softplus", x.erf() + x.softplus());
        g.output("top", x.topk::<1, C<2>>());
        g.output("top_ids", x.topk_indices::<1, C<2>>());
        g.output("sorted", x.sort::<1>(false));
        g.output("order", x.argsort::<1>(true));
        let a: Tensor<(C<2>, C<2>), f64> = g.input("a");
        let b: Tensor<(C<2>, C<1>), f64> = g.input("b");
        g.output("solved", a.solve(b));
    })
    .unwrap();
    let x = vec![0.5f32, -2.0, 3.0, 4.0, 1.5, -0.25];
    let out = run(
        &graph,
        &[
            ("x", HostTensor::from_vec(x.clone(), [2, 3]).unwrap()),
            (
                "y",
                HostTensor::from_vec(vec![1.0f32, 2.0, 1.0], [3]).unwrap(),
            ),
            (
                "a",
                HostTensor::from_vec(vec![2.0f64, 1.0, 1.0, 3.0], [2, 2]).unwrap(),
            ),
            (
                "b",
                HostTensor::from_vec(vec![3.0f64, 5.0], [2, 1]).unwrap(),
            ),
        ],
    );
    let close = |got: &[f32], want: &[f32]| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            approx::assert_abs_diff_eq!(*g, *w, epsilon = 1e-5);
        }
    };
    // sign(|x|) = 1; floor(1/x) = 2, -1, 0, 0, 0, -4.
    close(f32s(&out[0]), &[3.0, 0.0, 1.0, 1.0, 1.0, 0.0]);
    // max - min = |x - y|; `%` is the floored remainder.
    let want: Vec<f32> = x
        .iter()
        .zip([1.0f32, 2.0, 1.0].iter().cycle())
        .map(|(a, b)| (a - b).abs() + a.powf(*b).rem_euclid(5.0))
        .collect();
    close(f32s(&out[1]), &want);
    close(f32s(&out[2]), &[-2.0 + -3.0, -0.25 + -1.5]);
    assert_eq!(out[3].as_slice::<i64>().unwrap(), &[1, 2]);
    close(f32s(&out[4]), &[3.0 - 0.5, 4.0 - 1.75]);
    close(f32s(&out[5]), &[1.0, 1.0]);
    close(f32s(&out[6]), &[0.5, -2.0, 3.0, 4.0, 1.5, -0.25]);
    // x >= sin x + cos x
    close(f32s(&out[7]), &[0.0, 0.0, 1.0, 1.0, 1.0, 0.0]);
    let erf_softplus: Vec<f32> = x
        .iter()
        .map(|v| libm_erf(*v) + (1.0 + v.exp()).ln())
        .collect();
    close(f32s(&out[8]), &erf_softplus);
    close(f32s(&out[9]), &[3.0, 0.5, 4.0, 1.5]);
    assert_eq!(out[10].as_slice::<i64>().unwrap(), &[2, 0, 0, 1]);
    close(f32s(&out[11]), &[-2.0, 0.5, 3.0, -0.25, 1.5, 4.0]);
    assert_eq!(out[12].as_slice::<i64>().unwrap(), &[2, 0, 1, 0, 1, 2]);
    // 2a + b = 3, a + 3b = 5 -> a = 0.8, b = 1.4
    let solved = out[13].as_slice::<f64>().unwrap();
    approx::assert_abs_diff_eq!(solved[0], 0.8, epsilon = 1e-12);
    approx::assert_abs_diff_eq!(solved[1], 1.4, epsilon = 1e-12);
}

/// erf by its Abramowitz–Stegun 7.1.26 approximation (|error| < 1.5e-7).
fn libm_erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs() as f64);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - poly * (-(x as f64) * (x as f64)).exp();
    (y.copysign(x as f64)) as f32
}
