//! Gated feed-forwards (`act(x · gate) * (x · up)`) on the default device, which the MLX
//! lowering builds as one kernel of ours on an NVIDIA GPU (decision 047).

use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::ir::{DType, Graph, UnaryOp};
use rlx::mlx::MlxBackend;
use rlx::tensor::HostTensor;

use super::{MODES, WEIGHT_LAYOUTS, Weights, diff_and_scale, product, values, weight};

/// `act(x · gate) * (x · up)` over `rows` rows of `k` features, `width` hidden values, the
/// activation on the left of the product or on its right.
fn gated_graph(
    rows: usize,
    k: usize,
    width: usize,
    act: UnaryOp,
    weights: Weights,
    act_left: bool,
) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [1, rows, k]).unwrap();
    let product = |b: &mut GraphBuilder, name: &str| product(b, x, name, weights, k, width);
    let gate = product(&mut b, "gate");
    let up = product(&mut b, "up");
    let activated = b.unary(act, gate).unwrap();
    let hidden = if act_left {
        b.mul(activated, up).unwrap()
    } else {
        b.mul(up, activated).unwrap()
    };
    b.output("hidden", hidden).unwrap();
    b.finish().unwrap()
}

/// A gated feed-forward's hidden values on the default device against the CPU backend in
/// every mode: 1 to 8 rows (one kernel on an NVIDIA GPU, for float32 weights in either
/// layout and for blocks of 4 and 8 bits) and 9 (MLX's ops), SiLU and tanh GELU.
#[test]
fn gated_products_on_the_default_device_match_the_cpu_backend() {
    let (k, width) = (96, 40);
    for (case, &weights) in WEIGHT_LAYOUTS.iter().enumerate() {
        for (rows, act, act_left) in [
            (1, UnaryOp::Silu, true),
            (3, UnaryOp::GeluTanh, false),
            (8, UnaryOp::Silu, false),
            (9, UnaryOp::Silu, true),
        ] {
            let graph = gated_graph(rows, k, width, act, weights, act_left);
            let weight = |seed: usize| weight(weights, width, k, seed);
            let (gate, up) = (weight(3 + case), weight(5 + case));
            let x = HostTensor::from_vec(values(rows * k, 7), [1, rows, k]).unwrap();
            let cpu = rlx::cpu::CpuBackend::default().compile(&graph).unwrap();
            cpu.set_weight("gate", gate.view()).unwrap();
            cpu.set_weight("up", up.view()).unwrap();
            let want = cpu.run(&[("x", x.view())], &[]).unwrap().remove(0);
            for mode in MODES {
                let exe = MlxBackend::new(mode).compile(&graph).unwrap();
                exe.set_weight("gate", gate.view()).unwrap();
                exe.set_weight("up", up.view()).unwrap();
                let got = exe.run(&[("x", x.view())], &[]).unwrap().remove(0);
                assert_eq!(got.shape(), [1, rows, width]);
                let (diff, scale) = diff_and_scale(&got, &want);
                assert!(
                    diff <= 1e-5 * scale as f64,
                    "{weights:?}, {rows} rows, {act:?} in {mode:?}: {diff:e} (largest {scale})"
                );
            }
        }
    }
}
