//! A block's queries, keys and values from its rows (q/k/v products, heads split and
//! viewed heads-first, queries and keys rotated) on the default device, which the MLX
//! lowering builds as one kernel of ours on an NVIDIA GPU for up to 8 rows unless
//! `RLX_MLX_ROTATED_ROWS=0` (decision 048; `scripts/gpu-check.sh` runs this test with it
//! off too).

use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::ir::{DType, Graph, Op, Permute, Rope};
use rlx::mlx::MlxBackend;
use rlx::tensor::HostTensor;

use super::{MODES, WEIGHT_LAYOUTS, Weights, diff_and_scale, product, values, weight};

const QUERY_HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 16;
const FEATURES: usize = 64;

/// One case: `batch` rows of `seq` positions, at one position or one per batch row.
struct Case {
    batch: usize,
    seq: usize,
    positions: Vec<i64>,
    rope: Rope,
}

/// The block's rotated queries and keys and its values' heads, from `x` (`[batch, seq,
/// FEATURES]`) and the position input `pos`.
fn block_graph(c: &Case, weights: Weights) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [c.batch, c.seq, FEATURES])
        .unwrap();
    let pos = if c.positions.len() == 1 {
        b.input("pos", DType::I64, [0usize; 0]).unwrap()
    } else {
        b.input("pos", DType::I64, [c.batch]).unwrap()
    };
    let heads = |b: &mut GraphBuilder, name: &str, count: usize| {
        let columns = product(b, x, name, weights, FEATURES, count * HEAD_DIM);
        let split = b
            .reshape(columns, [c.batch, c.seq, count, HEAD_DIM])
            .unwrap();
        let perm = Permute {
            perm: vec![0, 2, 1, 3],
        };
        b.op(Op::Permute(perm), &[split]).unwrap()
    };
    let q = heads(&mut b, "q", QUERY_HEADS);
    let k = heads(&mut b, "k", KV_HEADS);
    let v = heads(&mut b, "v", KV_HEADS);
    let q = b.op(Op::Rope(c.rope.clone()), &[q, pos]).unwrap();
    let k = b.op(Op::Rope(c.rope.clone()), &[k, pos]).unwrap();
    b.output("q", q).unwrap();
    b.output("k", k).unwrap();
    b.output("v", v).unwrap();
    b.finish().unwrap()
}

fn rope(dims: usize, traditional: bool, freqs: Option<Vec<f64>>) -> Rope {
    Rope {
        dims,
        base: 10_000.0,
        scale: 1.0,
        traditional,
        freqs: freqs.map(Into::into),
    }
}

/// The rotated queries and keys and the values on the default device against the CPU
/// backend in every mode: 1 to 8 rows (one kernel on an NVIDIA GPU where enabled, for float32 weights in
/// either layout and blocks of 4 and 8 bits; one position or one per batch row; pairs of
/// halves or adjacent; part of the features rotated, frequencies given) and 9 (the product
/// and the rotations' own kernel).
#[test]
fn a_blocks_rotated_heads_on_the_default_device_match_the_cpu_backend() {
    let cases = [
        Case {
            batch: 1,
            seq: 1,
            positions: vec![37],
            rope: rope(HEAD_DIM, false, None),
        },
        Case {
            batch: 3,
            seq: 1,
            positions: vec![0, 5, 300],
            rope: rope(HEAD_DIM, true, None),
        },
        Case {
            batch: 2,
            seq: 4,
            positions: vec![3, 100],
            rope: rope(8, false, Some(vec![1.0, 0.3, 0.01, 0.002])),
        },
        Case {
            batch: 1,
            seq: 9,
            positions: vec![2],
            rope: rope(HEAD_DIM, false, None),
        },
    ];
    for (case, &weights) in WEIGHT_LAYOUTS.iter().enumerate() {
        let bound = [
            (
                "q",
                weight(weights, QUERY_HEADS * HEAD_DIM, FEATURES, 3 + case),
            ),
            (
                "k",
                weight(weights, KV_HEADS * HEAD_DIM, FEATURES, 5 + case),
            ),
            (
                "v",
                weight(weights, KV_HEADS * HEAD_DIM, FEATURES, 7 + case),
            ),
        ];
        for c in &cases {
            let graph = block_graph(c, weights);
            let rows = c.batch * c.seq;
            let x = HostTensor::from_vec(values(rows * FEATURES, 9), [c.batch, c.seq, FEATURES])
                .unwrap();
            let pos = if c.positions.len() == 1 {
                HostTensor::from_vec(c.positions.clone(), [0usize; 0]).unwrap()
            } else {
                HostTensor::from_vec(c.positions.clone(), [c.batch]).unwrap()
            };
            let inputs = [("x", x.view()), ("pos", pos.view())];
            let cpu = rlx::cpu::CpuBackend::default().compile(&graph).unwrap();
            for (name, w) in &bound {
                cpu.set_weight(name, w.view()).unwrap();
            }
            let want = cpu.run(&inputs, &[]).unwrap();
            for mode in MODES {
                let exe = MlxBackend::new(mode).compile(&graph).unwrap();
                for (name, w) in &bound {
                    exe.set_weight(name, w.view()).unwrap();
                }
                let got = exe.run(&inputs, &[]).unwrap();
                for ((name, heads), (got, want)) in
                    [("q", QUERY_HEADS), ("k", KV_HEADS), ("v", KV_HEADS)]
                        .iter()
                        .zip(got.iter().zip(&want))
                {
                    assert_eq!(got.shape(), [c.batch, *heads, c.seq, HEAD_DIM]);
                    let (diff, scale) = diff_and_scale(got, want);
                    assert!(
                        diff <= 1e-5 * scale as f64,
                        "{weights:?}, {name} of {rows} rows at {:?} in {mode:?}: {diff:e}",
                        c.positions
                    );
                }
            }
        }
    }
}
