//! The typed layer: build-time errors (collected, with op, shapes and the caller's line),
//! poisoning, and typed graphs running on the CPU backend.

use rlx::backend::{Backend, Executable};
use rlx::cpu::CpuBackend;
use rlx::tensor::HostTensor;
use rlx::typed::{Const, Tensor, build};

rlx::dims!(Batch, Seq);

#[test]
fn named_dims_become_symbols_and_shapes_flow_through() {
    let graph = build(|g| {
        let x: Tensor<(Batch, Seq, Const<8>)> = g.input("x");
        let w: Tensor<(Const<8>, Const<4>)> = g.param("w");
        let y = x.matmul_shared(w).softmax::<2>();
        let pooled = y.mean::<1>();
        g.output("pooled", pooled);
    })
    .unwrap();
    let text = graph.to_string();
    assert!(
        text.contains("%2:f32[batch,seq,4] = matmul %0, %1"),
        "{text}"
    );
    assert!(text.contains("f32[batch,4] = mean[axes=[1]]"), "{text}");
}

#[test]
fn build_time_errors_are_collected_with_their_lines() {
    let mut lines = Vec::new();
    let err = build(|g| {
        let x: Tensor<(Batch, Const<6>)> = g.input("x");
        lines.push(line!() + 1);
        let bad = x.reshape::<(Batch, Const<4>)>();
        // Ops on a rejected handle add no errors of their own.
        let _more = bad.relu().sum::<1>();
        lines.push(line!() + 1);
        let _also = x.reshape::<(Const<5>, Seq)>();
        let fine = x.reshape::<(Batch, Const<2>, Const<3>)>();
        g.output("y", fine);
    })
    .unwrap_err();
    assert_eq!(err.0.len(), 2, "{err}");
    for (e, line) in err.0.iter().zip(&lines) {
        assert_eq!(e.location().file(), file!());
        assert_eq!(e.location().line(), *line);
        assert!(e.op().starts_with("reshape"), "{e}");
    }
    assert!(
        err.0[0].to_string().ends_with(
            "cannot reshape [batch,6] (6*batch elements) to [batch,4] (4*batch elements)"
        ),
        "{}",
        err.0[0]
    );
    let text = err.to_string();
    assert!(text.starts_with("2 errors building the graph:\n"), "{text}");
}

#[test]
fn duplicate_names_and_missing_outputs_are_errors() {
    // With op errors, the final verification is skipped: its complaints would only echo
    // them (outputs of rejected ops are missing).
    let err = build(|g| {
        let a: Tensor<(Const<2>,)> = g.input("a");
        let _b: Tensor<(Const<2>,)> = g.input("a");
        g.output("a", a);
    })
    .unwrap_err();
    assert_eq!(err.0.len(), 1, "{err}");
    assert!(
        err.0[0]
            .to_string()
            .ends_with("an input named \"a\" already exists")
    );
    let err = build(|g| {
        let _a: Tensor<(Const<2>,)> = g.input("a");
    })
    .unwrap_err();
    assert!(
        err.0[0].to_string().ends_with("the graph has no outputs"),
        "{err}"
    );
}

#[test]
fn typed_graphs_run_on_the_cpu() {
    let graph = build(|g| {
        let x: Tensor<(Batch, Const<3>)> = g.input("x");
        let w: Tensor<(Const<2>, Const<3>)> = g.param("w");
        let b: Tensor<(Const<2>,)> = g.param("b");
        let y = (x.matmul_t(w) + b) * 2.0f32 - 1.0f32;
        g.output("y", -y);
        g.output("best", y.argmax::<1>());
    })
    .unwrap();
    let exe = CpuBackend::default().compile(&graph).unwrap();
    exe.set_weight(
        "w",
        HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 0.0, 1.0, 1.0], [2, 3])
            .unwrap()
            .view(),
    )
    .unwrap();
    exe.set_weight(
        "b",
        HostTensor::from_vec(vec![0.5f32, -0.5], [2])
            .unwrap()
            .view(),
    )
    .unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, -1.0, 0.0, 0.0], [2, 3]).unwrap();
    let out = exe.run(&[("x", x.view())], &[]).unwrap();
    // y = 2 * (x @ wᵀ + b) - 1: rows [1*1+.5, 2+3-.5] = [1.5, 4.5] -> [2, 8]; [-0.5, -0.5] -> [-2, -2]
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[-2.0, -8.0, 2.0, 2.0]);
    assert_eq!(out[1].as_slice::<i64>().unwrap(), &[1, 0]);
}

#[test]
fn norms_embeddings_masks_and_axes_run() {
    rlx::dims!(Vocab);
    let graph = build(|g| {
        let ids: Tensor<(Batch, Seq), i64> = g.input("ids");
        let table: Tensor<(Const<10>, Const<4>)> = g.param("table");
        let gamma: Tensor<(Const<4>,)> = g.param("gamma");
        let beta: Tensor<(Const<4>,)> = g.param("beta");
        let h = table.embed(ids).layer_norm(gamma, beta, 1e-5); // (Batch, Seq, 4)
        let r = h.rms_norm(gamma, 1e-6);
        let t = r.swap_axes::<1, 2>(); // (Batch, 4, Seq)
        let first = t.narrow::<1, Const<2>>(1); // features 1..3
        let zero = first * 0.0f32;
        let kept = first.gt(zero).select(first, zero);
        g.output("kept", kept);
    })
    .unwrap();
    let exe = CpuBackend::default().compile(&graph).unwrap();
    let table: Vec<f32> = (0..40).map(|i| (i as f32 * 0.37).sin()).collect();
    exe.set_weight(
        "table",
        HostTensor::from_vec(table, [10, 4]).unwrap().view(),
    )
    .unwrap();
    for name in ["gamma", "beta"] {
        exe.set_weight(
            name,
            HostTensor::from_vec(vec![1.0f32, 0.5, 2.0, 1.0], [4])
                .unwrap()
                .view(),
        )
        .unwrap();
    }
    let ids = HostTensor::from_vec(vec![1i64, 2, 3, 9, 0, 4], [2, 3]).unwrap();
    let out = exe.run(&[("ids", ids.view())], &[]).unwrap();
    assert_eq!(out[0].shape(), &[2, 2, 3]);
    assert!(out[0].as_slice::<f32>().unwrap().iter().all(|v| *v >= 0.0));
}

#[test]
fn narrow_errors_name_the_problem() {
    let mut lines = Vec::new();
    let err = build(|g| {
        let x: Tensor<(Batch, Const<6>)> = g.input("x");
        lines.push(line!() + 1);
        let _ = x.narrow::<1, Seq>(0);
        lines.push(line!() + 1);
        let _ = x.narrow::<1, Const<4>>(3);
        g.output("x", x);
    })
    .unwrap_err();
    assert_eq!(err.0.len(), 2, "{err}");
    assert_eq!(err.0[0].location().line(), lines[0]);
    assert!(
        err.0[0].to_string().ends_with(
            "`narrow` on (f32[batch,6]): narrow needs a static length, but `Seq` is a runtime dim"
        ),
        "{}",
        err.0[0]
    );
    assert_eq!(err.0[1].location().line(), lines[1]);
    assert!(
        err.0[1]
            .to_string()
            .ends_with("slice stop 7 is out of range for an axis of size 6"),
        "{}",
        err.0[1]
    );
}
