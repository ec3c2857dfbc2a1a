//! Seeded uniform draws: the same values from the reference and every backend for a seed
//! and stream (bit for bit), new values for another seed or stream, uniform in `[0, 1)`;
//! and dropout built on them, with its gradient.

use rlx::backend::{Backend, Executable};
use rlx::ir::{DType, Op, RandomUniform};
use rlx::tensor::HostTensor;
use rlx::typed::{Const, Dyn, Tensor, build};

use crate::harness::{check, declared, graph_of};

fn draw_graph(stream: u32) -> rlx::ir::Graph {
    graph_of(&[("seed", DType::I64, declared(&[], &[]))], |b, i| {
        let op = Op::RandomUniform(RandomUniform {
            shape: [rlx::ir::Dim::sym("n"), rlx::ir::Dim::from(3)].into(),
            stream,
        });
        b.op(op, i).unwrap()
    })
}

/// Every backend draws what the reference draws, exactly; the values look uniform.
#[test]
fn random_uniform_is_a_function_of_seed_and_stream() {
    let n = 20_000;
    let seed = HostTensor::from_vec(vec![1234i64], [0usize; 0]).unwrap();
    let graph = draw_graph(9);
    let values = rlx::ir::evaluate_reference(&graph, &[("seed", &seed)], &[], &[("n", n)]).unwrap()
        [0]
    .to_f64_vec();
    let want = values.iter().map(|v| *v as f32).collect::<Vec<_>>();
    let want = HostTensor::from_vec(want, [n, 3]).unwrap();
    check(&graph, &[("seed", &seed)], &[("n", n)], &[want], 1.0);

    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let below_tenth = values.iter().filter(|v| **v < 0.1).count() as f64 / values.len() as f64;
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    assert!(
        (below_tenth - 0.1).abs() < 0.01,
        "share below 0.1: {below_tenth}"
    );
    assert!(values.iter().all(|v| (0.0..1.0).contains(v)));

    let draw = |graph: &rlx::ir::Graph, seed: i64| {
        let seed = HostTensor::from_vec(vec![seed], [0usize; 0]).unwrap();
        rlx::ir::evaluate_reference(graph, &[("seed", &seed)], &[], &[("n", 64)]).unwrap()[0]
            .to_f64_vec()
    };
    let base = draw(&graph, 1234);
    assert_eq!(base, draw(&graph, 1234));
    for other in [
        draw(&graph, 1235),
        draw(&draw_graph(10), 1234),
        draw(&graph, -1234),
    ] {
        let same = base.iter().zip(&other).filter(|(a, b)| a == b).count();
        assert!(same < 3, "{same} equal values of {}", base.len());
    }
}

/// Dropout zeroes about `p` of the values and scales the rest by `1 / (1 − p)`, the same
/// mask on every backend for a seed; its gradient is the mask times the scale.
#[test]
fn dropout_masks_scales_and_differentiates() {
    let p = 0.25;
    let graph = build(|g| {
        let x: Tensor<(Dyn, Const<64>)> = g.input("x");
        let seed: Tensor<(), i64> = g.input("seed");
        let y = x.dropout(p, seed, 3);
        g.output("y", y);
        g.output("loss", y.sum::<0>().sum::<0>());
    })
    .unwrap();
    let training =
        rlx::autodiff::gradients(&graph, "loss", &rlx::autodiff::Wrt::Named(vec!["x".into()]))
            .unwrap();
    let rows = 50;
    let x: Vec<f32> = (0..rows * 64).map(|i| 1.0 + (i % 7) as f32).collect();
    let x = HostTensor::from_vec(x, [rows, 64]).unwrap();
    let seed = HostTensor::from_vec(vec![77i64], [0usize; 0]).unwrap();
    let mut first: Option<Vec<f64>> = None;
    crate::on_every_backend!(label, backend => {
        let exe = backend.compile(&training).unwrap();
        let out = exe.run(&[("x", x.view()), ("seed", seed.view())], &[]).unwrap();
        let (y, dx) = (out[0].to_f64_vec(), out[2].to_f64_vec());
        let dropped = y.iter().filter(|v| **v == 0.0).count() as f64 / y.len() as f64;
        assert!((dropped - p).abs() < 0.03, "{label}: dropped {dropped}");
        for ((y, x), dx) in y.iter().zip(x.to_f64_vec()).zip(&dx) {
            if *y == 0.0 {
                assert_eq!(*dx, 0.0, "{label}");
            } else {
                assert!((y - x / (1.0 - p)).abs() <= 1e-6 * y.abs(), "{label}: {y} from {x}");
                assert!((dx - 1.0 / (1.0 - p)).abs() <= 1e-6, "{label}: gradient {dx}");
            }
        }
        match &first {
            None => first = Some(y),
            Some(mask) => assert_eq!(mask, &y, "{label}: another mask"),
        }
    });

    let bad = build(|g| {
        let x: Tensor<(Const<4>,)> = g.input("x");
        let seed: Tensor<(), i64> = g.input("seed");
        g.output("y", x.dropout(1.0, seed, 0));
    });
    assert!(bad.unwrap_err().to_string().contains("[0, 1)"));
}
