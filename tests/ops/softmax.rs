//! Softmax and log-softmax: values and gradients.

use rlx::ir::{Op, Softmax};

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, indices, random, to_tensor};

#[test]
fn softmax_and_log_softmax() {
    let mut rng = Rng(25);
    for dtype in FLOATS {
        for axis in 0..3 {
            for log in [false, true] {
                let x = random(&mut rng, dtype, &[3, 4, 5], -4.0, 4.0);
                let g = graph_of(
                    &[("x", dtype, declared(&[3, 4, 5], &[(0, "b")]))],
                    |b, i| b.op(Op::Softmax(Softmax { axis, log }), &[i[0]]).unwrap(),
                );
                let nd = Nd::of(&x);
                let data = indices(&nd.shape)
                    .iter()
                    .map(|idx| {
                        let row: Vec<f64> = (0..nd.shape[axis])
                            .map(|k| {
                                let mut j = idx.clone();
                                j[axis] = k;
                                nd.at(&j)
                            })
                            .collect();
                        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
                        let v = nd.at(idx) - max;
                        if log { v - sum.ln() } else { v.exp() / sum }
                    })
                    .collect();
                let expected = to_tensor(&Nd::new(&nd.shape, data), dtype);
                check(&g, &[("x", &x)], &[], &[expected], 4.0);
            }
        }
    }
}

#[test]
fn gradient_softmax_and_log_softmax() {
    for log in [false, true] {
        let x = Input::float("x", &[3, 5])
            .range(-2.0, 2.0)
            .symbolic(0, "batch");
        grad_check(&format!("softmax log={log}"), 700, &[x], &|g, i| {
            op(g, Op::Softmax(Softmax { axis: 1, log }), &[i[0]])
        });
    }
}
