//! MLX settings that hold for a whole process and are fixed at its first GPU run: CUDA
//! graphs. A binary of its own with one test, since the setting writes the process
//! environment (no other test thread may read it meanwhile) and a GPU run fixes it.
#![cfg(feature = "mlx")]

use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::ir::{DType, Op, UnaryOp};
use rlx::mlx::{Device, MlxBackend, MlxMode, cuda_graphs, set_cuda_graphs};
use rlx::tensor::HostTensor;

/// The child's environment, as the parent test started it: `default` (no
/// `MLX_USE_CUDA_GRAPHS`) or `user-on` (`MLX_USE_CUDA_GRAPHS=1`).
const CHILD: &str = "RLX_TEST_CUDA_GRAPHS_CHILD";

/// Runs [`check_cuda_graphs`] in a child process of this test binary for each starting
/// environment: the shim changes the variable when the library loads, so only a fresh
/// process shows what the user's environment was.
#[test]
fn cuda_graphs_are_chosen_before_the_first_gpu_run() {
    if let Some(case) = std::env::var_os(CHILD) {
        check_cuda_graphs(case == "user-on");
        return;
    }
    let me = std::env::current_exe().unwrap();
    for case in ["default", "user-on"] {
        let mut child = std::process::Command::new(&me);
        child
            .args(["--exact", "cuda_graphs_are_chosen_before_the_first_gpu_run"])
            .env(CHILD, case)
            .env_remove("MLX_USE_CUDA_GRAPHS");
        if case == "user-on" {
            child.env("MLX_USE_CUDA_GRAPHS", "1");
        }
        let out = child.output().unwrap();
        assert!(
            out.status.success(),
            "{case}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The child ran the test (a filter matching nothing would pass too).
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
    }
}

fn check_cuda_graphs(user_on: bool) {
    // RLX's default is off unless the environment chose.
    assert_eq!(cuda_graphs(), user_on);

    // Before any GPU run the process may choose either way, as often as it likes; the
    // environment's own choice wins.
    for wanted in [true, false, true] {
        let expected = user_on || wanted;
        assert_eq!(
            set_cuda_graphs(wanted).unwrap(),
            expected,
            "asked for {wanted}"
        );
        assert_eq!(cuda_graphs(), expected);
    }

    if !Device::Gpu.is_available() {
        return;
    }
    // A run on the GPU fixes the choice: asking for the same is fine, the other an error.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, [4]).unwrap();
    let y = g.op(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    g.output("y", y).unwrap();
    let graph = g.finish().unwrap();
    let exe = MlxBackend::new(MlxMode::Lazy)
        .with_device(Device::Gpu)
        .compile(&graph)
        .unwrap();
    let x = HostTensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], [4]).unwrap();
    let got = exe.run(&[("x", x.view())], &[]).unwrap()[0].to_f64_vec();
    assert!((got[1] - std::f64::consts::E).abs() < 1e-5);
    let fixed = cuda_graphs();
    assert_eq!(set_cuda_graphs(fixed).unwrap(), fixed);
    let err = set_cuda_graphs(!fixed).unwrap_err();
    assert!(err.to_string().contains("first GPU run"), "{err}");
    assert_eq!(cuda_graphs(), fixed);
}
