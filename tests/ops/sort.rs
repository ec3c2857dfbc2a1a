//! Sort, argsort and top-k: values and gradients.

use rlx::ir::{DType, Op, Sort, SortOutput, TopK};

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, INTS, Nd, Rng, indices, random, to_tensor};

/// Positions of one line sorted stably by value (NaN largest).
fn sorted_positions(line: &[f64], descending: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..line.len()).collect();
    order.sort_by(|&a, &b| {
        let ord = line[a].total_cmp(&line[b]);
        if descending { ord.reverse() } else { ord }
    });
    order
}

#[test]
fn sort_argsort_and_topk() {
    let mut rng = Rng(42);
    for dtype in FLOATS.into_iter().chain(INTS) {
        for axis in 0..2 {
            let x = random(&mut rng, dtype, &[4, 6], 0.0, 5.0); // ties
            let nx = Nd::of(&x);
            let line = |o: &[usize]| -> Vec<f64> {
                (0..nx.shape[axis])
                    .map(|k| {
                        let mut at = o.to_vec();
                        at[axis] = k;
                        nx.at(&at)
                    })
                    .collect()
            };
            for (op, keep, descending) in [
                (
                    Op::Sort(Sort {
                        axis,
                        descending: false,
                        output: SortOutput::Values,
                    }),
                    None,
                    false,
                ),
                (
                    Op::Sort(Sort {
                        axis,
                        descending: true,
                        output: SortOutput::Indices,
                    }),
                    None,
                    true,
                ),
                (
                    Op::TopK(TopK {
                        k: 3,
                        axis,
                        output: SortOutput::Values,
                    }),
                    Some(3),
                    true,
                ),
                (
                    Op::TopK(TopK {
                        k: 2,
                        axis,
                        output: SortOutput::Indices,
                    }),
                    Some(2),
                    true,
                ),
            ] {
                let want_indices = matches!(
                    op,
                    Op::Sort(Sort {
                        output: SortOutput::Indices,
                        ..
                    }) | Op::TopK(TopK {
                        output: SortOutput::Indices,
                        ..
                    })
                );
                let g = graph_of(&[("x", dtype, declared(&[4, 6], &[]))], |b, i| {
                    b.op(op.clone(), &[i[0]]).unwrap()
                });
                let mut out_shape = vec![4, 6];
                out_shape[axis] = keep.unwrap_or(out_shape[axis]);
                let data = indices(&out_shape)
                    .iter()
                    .map(|o| {
                        let order = sorted_positions(&line(o), descending);
                        let k = order[o[axis]];
                        if want_indices { k as f64 } else { line(o)[k] }
                    })
                    .collect();
                let out_dtype = if want_indices { DType::I64 } else { dtype };
                check(
                    &g,
                    &[("x", &x)],
                    &[],
                    &[to_tensor(&Nd::new(&out_shape, data), out_dtype)],
                    1.0,
                );
            }
        }
    }
}

#[test]
fn gradient_sorted_and_top_k_values() {
    use rlx::ir::SortOutput;
    let x = Input::float("x", &[3, 6, 2]);
    grad_check("topk values", 1500, &[x], &|g, i| {
        let t = Op::TopK(TopK {
            k: 3,
            axis: 1,
            output: SortOutput::Values,
        });
        op(g, t, &[i[0]])
    });
    for (seed, (axis, descending)) in [(0, true), (2, false)].into_iter().enumerate() {
        let x = Input::float("x", &[4, 3, 5]);
        grad_check(
            &format!("sort axis {axis}"),
            1510 + seed as u64,
            &[x],
            &|g, i| {
                let s = Op::Sort(Sort {
                    axis,
                    descending,
                    output: SortOutput::Values,
                });
                op(g, s, &[i[0]])
            },
        );
    }
}
