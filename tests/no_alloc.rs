//! After the first run with a binding, `run_into` performs no heap allocation, nor does a
//! training step (`rlx::train::Trainer::step`) or a decode step over a cache in a context
//! (`run_in_into`): proven with a
//! counting global allocator. (One test in this binary, so nothing else allocates meanwhile.)

use rlx::ir::{ArgReduce, Cumsum, Gather, LayerNorm, MatMul, Pad, Slice};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{ArgReduceOp, CompareOp, Dim, Op, ReduceOp, Scalar};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

struct Counting;

/// Allocations on any thread (rayon workers included).
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Allocations on this thread only, unaffected by other threads starting up.
    static MINE: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    MINE.with(|m| m.set(m.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Touches every kernel family: matmul (transposed), bias add, gelu, layer norm, softmax,
/// reductions over split axes, argmax, gather, slice, concat, pad, permute, compare, where,
/// cast, cumsum.
fn graph(hidden: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let seq = Dim::sym("seq");
    let ids = b.input("ids", DType::I64, [seq.clone()]).unwrap();
    let table = b.param("table", DType::F32, [50, hidden]).unwrap();
    let w = b.param("w", DType::F32, [hidden, hidden]).unwrap();
    let gamma = b.param("gamma", DType::F32, [hidden]).unwrap();
    let x = b.op(Op::Gather(Gather { axis: 0 }), &[table, ids]).unwrap();
    let h = b
        .op(
            Op::MatMul(MatMul {
                transpose_a: false,
                transpose_b: true,
            }),
            &[x, w],
        )
        .unwrap();
    let h = b.add(h, gamma).unwrap();
    let h = b.unary(UnaryOp::Gelu, h).unwrap();
    let h = b
        .op(
            Op::LayerNorm(LayerNorm {
                eps: 1e-5,
                has_weight: true,
                has_bias: false,
            }),
            &[h, gamma],
        )
        .unwrap();
    let p = b.softmax(h, 1).unwrap();
    let t = b.permute(p, &[1, 0]).unwrap();
    let c = b.concat(&[t, t], 1).unwrap();
    let s = b
        .op(
            Op::Slice(Slice {
                axis: 1,
                start: 1,
                stop: None,
                step: 1,
            }),
            &[c],
        )
        .unwrap();
    let s = b
        .op(
            Op::Pad(Pad {
                pads: vec![(0, 0), (0, 1)],
                value: Scalar::Float(0.0),
            }),
            &[s],
        )
        .unwrap();
    let r = b
        .reshape(s, [Dim::from(hidden), seq.clone(), Dim::from(2)])
        .unwrap();
    let total = b.reduce(ReduceOp::Sum, r, &[0, 2], false).unwrap();
    let best = b
        .op(
            Op::ArgReduce(ArgReduce {
                op: ArgReduceOp::ArgMax,
                axis: 1,
                keep_dims: false,
            }),
            &[p],
        )
        .unwrap();
    let half = b.scalar(0.5, DType::F32);
    let mask = b.compare(CompareOp::Gt, total, half).unwrap();
    let zero = b.scalar(0.0, DType::F32);
    let kept = b.select(mask, total, zero).unwrap();
    let kept = b
        .op(
            Op::Cumsum(Cumsum {
                axis: 0,
                exclusive: false,
                reverse: false,
            }),
            &[kept],
        )
        .unwrap();
    let kept = b.cast(kept, DType::F16).unwrap();
    b.output("kept", kept).unwrap();
    b.output("best", best).unwrap();
    b.finish().unwrap()
}

/// Allocations `(on this thread, on all threads)` in 20 runs after the first.
fn allocations_per_run(options: CpuOptions, hidden: usize, seq: usize) -> (usize, usize) {
    let exe = CpuBackend::new(options).compile(&graph(hidden)).unwrap();
    let table: Vec<f32> = (0..50 * hidden).map(|i| (i % 7) as f32 * 0.1).collect();
    let w: Vec<f32> = (0..hidden * hidden)
        .map(|i| (i % 5) as f32 * 0.01)
        .collect();
    exe.set_weight(
        "table",
        HostTensor::from_vec(table, [50, hidden]).unwrap().view(),
    )
    .unwrap();
    exe.set_weight(
        "w",
        HostTensor::from_vec(w, [hidden, hidden]).unwrap().view(),
    )
    .unwrap();
    exe.set_weight(
        "gamma",
        HostTensor::from_vec(vec![1.0f32; hidden], [hidden])
            .unwrap()
            .view(),
    )
    .unwrap();
    let ids =
        HostTensor::from_vec((0..seq as i64).map(|i| i % 50).collect::<Vec<_>>(), [seq]).unwrap();
    let inputs = [("ids", ids.view())];
    let mut outputs = Vec::new();
    for _ in 0..3 {
        exe.run_into(&inputs, &[], &mut outputs).unwrap(); // plans, sizes outputs, warms pools
    }
    let (mine, all) = (MINE.with(Cell::get), ALLOCATIONS.load(Ordering::Relaxed));
    for _ in 0..20 {
        exe.run_into(&inputs, &[], &mut outputs).unwrap();
    }
    assert_eq!(outputs[0].shape(), &[seq]);
    (
        MINE.with(Cell::get) - mine,
        ALLOCATIONS.load(Ordering::Relaxed) - all,
    )
}

#[test]
fn runs_do_not_allocate() {
    // Small shapes: every kernel runs on the calling thread.
    assert_eq!(allocations_per_run(CpuOptions::default(), 16, 8).0, 0);
    // Large shapes on one thread: blocked GEMM with its packing buffers in the arena.
    let one = CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    };
    assert_eq!(allocations_per_run(one, 256, 300).0, 0);
    // Large shapes on every thread. Rayon's job queues grow in blocks as jobs pass through
    // them, so a parallel run may rarely allocate on some thread; never once per run.
    let (mine, all) = allocations_per_run(CpuOptions::default(), 256, 300);
    eprintln!("20 parallel runs: {mine} allocations on the caller, {all} on all threads");
    assert!(all < 20, "{all} allocations in 20 parallel runs");
    // A training step (forward, backward and AdamW, moving the updates into the weights)
    // allocates nothing either.
    assert_eq!(allocations_per_training_step(), 0);
    // A decode step appending to a cache held in a context and attending its filled part.
    assert_eq!(allocations_per_decode_step(), 0);
    // Block products of one input joined into one kernel (q/k/v of a decoding step), with
    // int8 activations, on one thread and on every thread.
    let one = CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    };
    assert_eq!(allocations_per_joined_products(one), 0);
    assert_eq!(allocations_per_joined_products(CpuOptions::default()), 0);
}

/// Allocations on this thread in 20 runs, after the first three, of three Q4_1 products of
/// one row (which the CPU joins into one kernel).
fn allocations_per_joined_products(options: CpuOptions) -> usize {
    use rlx::gguf::GgmlType;
    use rlx::ir::{ActivationPrecision, BlockMatMul};
    let (k, widths) = (512, [96usize, 32, 32]);
    let format = GgmlType::Q4_1;
    let row_bytes = k / format.block_values() * format.block_bytes();
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [1, k]).unwrap();
    let op = Op::BlockMatMul(BlockMatMul {
        format,
        activations: ActivationPrecision::Int8,
    });
    for (i, n) in widths.iter().enumerate() {
        let w = b
            .param(&format!("w{i}"), DType::U8, [*n, row_bytes])
            .unwrap();
        let y = b.op(op.clone(), &[x, w]).unwrap();
        b.output(&format!("y{i}"), y).unwrap();
    }
    let exe = CpuBackend::new(options)
        .compile(&b.finish().unwrap())
        .unwrap();
    let mut seed = 3u64;
    for (i, n) in widths.iter().enumerate() {
        let blocks = rlx::gguf::random_blocks(format, n * k / format.block_values(), || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        });
        let w = HostTensor::from_vec(blocks, [*n, row_bytes]).unwrap();
        exe.set_weight(&format!("w{i}"), w.view()).unwrap();
    }
    assert!(exe.lowered().to_string().contains("joined_block_matmul"));
    let x = HostTensor::from_vec(vec![0.5f32; k], [1, k]).unwrap();
    let inputs = [("x", x.view())];
    let mut outputs = Vec::new();
    for _ in 0..3 {
        exe.run_into(&inputs, &[], &mut outputs).unwrap();
    }
    let mine = MINE.with(Cell::get);
    for _ in 0..20 {
        exe.run_into(&inputs, &[], &mut outputs).unwrap();
    }
    MINE.with(Cell::get) - mine
}

/// Allocations on this thread in 20 decode steps after the first three.
fn allocations_per_decode_step() -> usize {
    let one = CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    };
    let graph = rlx_testkit::testing::decode_step(64, 2, 8);
    let exe = CpuBackend::new(one).compile(&graph).unwrap();
    let mut ctx = exe.new_context().unwrap();
    let row = HostTensor::from_vec(vec![0.25f32; 16], [1, 2, 1, 8]).unwrap();
    let mut pos = HostTensor::from_vec(vec![0i32], []).unwrap();
    let mut outputs = Vec::new();
    let mut step = |pos: &HostTensor, outputs: &mut Vec<HostTensor>| {
        let inputs = [
            ("q", row.view()),
            ("k_row", row.view()),
            ("v_row", row.view()),
            ("pos", pos.view()),
        ];
        exe.run_in_into(&mut ctx, &inputs, &[], outputs).unwrap();
    };
    for t in 0..3 {
        pos.as_mut_slice::<i32>().unwrap()[0] = t;
        step(&pos, &mut outputs);
    }
    let mine = MINE.with(Cell::get);
    for t in 3..23 {
        pos.as_mut_slice::<i32>().unwrap()[0] = t;
        step(&pos, &mut outputs);
    }
    MINE.with(Cell::get) - mine
}

/// Allocations on this thread in 20 training steps of a small classifier after the first.
fn allocations_per_training_step() -> usize {
    use rlx::train::{Optimizer, TrainConfig, Trainer};
    use rlx::typed::{Const, Tensor, build};
    rlx::dims!(Batch);
    let graph = build(|g| {
        let x: Tensor<(Batch, Const<8>)> = g.input("x");
        let labels: Tensor<(Batch,), i64> = g.input("labels");
        let w: Tensor<(Const<4>, Const<8>)> = g.param("w");
        let b: Tensor<(Const<4>,)> = g.param("b");
        g.output("loss", (x.matmul_t(w) + b).gelu().cross_entropy(labels));
    })
    .unwrap();
    let one = CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    };
    let config = TrainConfig::new(Optimizer::adamw(0.01)).clip_grad_norm(1.0);
    let mut trainer = Trainer::new(&CpuBackend::new(one), &graph, "loss", config).unwrap();
    let w: Vec<f32> = (0..32).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect();
    trainer
        .set_weight("w", HostTensor::from_vec(w, [4, 8]).unwrap().view())
        .unwrap();
    trainer
        .set_weight(
            "b",
            HostTensor::from_vec(vec![0.0f32; 4], [4]).unwrap().view(),
        )
        .unwrap();
    let x = HostTensor::from_vec((0..48).map(|i| (i % 7) as f32 * 0.1).collect(), [6, 8]).unwrap();
    let labels = HostTensor::from_vec(vec![0i64, 1, 2, 3, 0, 1], [6]).unwrap();
    let batch = [("x", x.view()), ("labels", labels.view())];
    for _ in 0..3 {
        trainer.step(&batch).unwrap();
    }
    let mine = MINE.with(Cell::get);
    for _ in 0..20 {
        trainer.step(&batch).unwrap();
    }
    MINE.with(Cell::get) - mine
}
