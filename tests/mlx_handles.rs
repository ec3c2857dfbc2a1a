//! No MLX array handle leaks: runs, failed runs and compiled functions all give back every
//! handle they make. Its own test binary, so no other test moves the process-wide count.
#![cfg(feature = "mlx")]

use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::ir::Gather;
use rlx::ir::{BinaryOp, DType, Dim, Op, UnaryOp};
use rlx::mlx::{Array, MlxBackend, MlxMode, live_arrays};
use rlx::tensor::HostTensor;

#[test]
fn every_handle_is_freed() {
    let before = live_arrays();
    let mut b = GraphBuilder::new();
    let table = b.param("table", DType::F32, [4, 3]).unwrap();
    let ids = b.input("ids", DType::I64, [Dim::sym("n")]).unwrap();
    let rows = b.op(Op::Gather(Gather { axis: 0 }), &[table, ids]).unwrap();
    let e = b.unary(UnaryOp::Exp, rows).unwrap();
    let y = b.binary(BinaryOp::Mul, e, rows).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    let weights = HostTensor::from_vec((0..12).map(|i| i as f32 / 10.0).collect(), [4, 3]).unwrap();
    for mode in [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled] {
        let exe = MlxBackend::new(mode).compile(&g).unwrap();
        exe.set_weight("table", weights.view()).unwrap();
        for n in [2usize, 3, 2] {
            let good = HostTensor::from_vec((0..n as i64).collect(), [n]).unwrap();
            let out = exe.run(&[("ids", good.view())], &[]).unwrap();
            assert_eq!(out[0].shape(), [n, 3]);
            // An index error after evaluation frees everything too.
            let bad = HostTensor::from_vec(vec![9i64; n], [n]).unwrap();
            assert!(exe.run(&[("ids", bad.view())], &[]).is_err());
        }
        assert!(
            live_arrays() > before,
            "{mode:?}: the weight and constants are held"
        );
        drop(exe);
        assert_eq!(live_arrays(), before, "{mode:?}: handles leaked");
    }
    // Failed ops make no handle.
    let a = Array::from_tensor(HostTensor::zeros(DType::F32, [2, 3]).view()).unwrap();
    assert!(a.matmul(&a, false, false).is_err());
    assert!(a.reshape(&[7]).is_err());
    drop(a);
    assert_eq!(live_arrays(), before);
}
