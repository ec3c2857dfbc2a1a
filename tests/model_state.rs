//! `#[rlx::model]` with states (issue 32): a `State` argument is a state named after it,
//! written by the fn, and the generated `run_in` runs the model in a context.

use rlx::backend::RunError;
use rlx::cpu::CpuBackend;
use rlx::tensor::HostTensor;
use rlx::typed::{Axis, Const, State, Tensor};

/// Appends `row` to a cache of 6 rows at `pos` and returns the sum of the rows so far.
#[rlx::model(outputs(total))]
fn append<'g>(
    cache: State<'g, (Const<6>, Const<3>)>,
    row: Tensor<'g, (Const<1>, Const<3>)>,
    pos: Tensor<'g, (), i64>,
) -> Tensor<'g, (Const<3>,)> {
    let filled = cache.read().slice_update(Axis::<0>, row, pos);
    cache.write(filled);
    filled.sum::<0>()
}

#[test]
fn a_model_with_a_state_runs_in_a_context() {
    assert_eq!(Append::STATES, ["cache"]);
    let model = Append::compile(&CpuBackend::default()).unwrap();
    let mut ctx = model.new_context().unwrap();
    for t in 0..6i64 {
        let row = HostTensor::from_vec(vec![1.0f32, t as f32, -1.0], [1, 3]).unwrap();
        let pos = HostTensor::from_vec(vec![t], []).unwrap();
        let total = model.run_in(&mut ctx, &row, &pos).unwrap();
        let n = (t + 1) as f32;
        let expected = [n, (0..=t).sum::<i64>() as f32, -n];
        assert_eq!(total.as_slice::<f32>().unwrap(), &expected);
    }
    let row = HostTensor::from_vec(vec![0.0f32; 3], [1, 3]).unwrap();
    let pos = HostTensor::from_vec(vec![6i64], []).unwrap();
    let err = model.run_in(&mut ctx, &row, &pos).unwrap_err();
    assert!(matches!(err, RunError::WindowOutOfRange { .. }), "{err}");
    // Outside a context the model says what it needs.
    let err = model.run_named(&[("row", row.view()), ("pos", pos.view())]);
    assert!(matches!(err, Err(RunError::NeedsContext { .. })));
}

#[test]
fn a_state_written_twice_is_a_build_error_at_its_line() {
    use rlx::typed::build;
    let errors = build(|g| {
        let count: State<(Const<1>,)> = g.state("count");
        let one: Tensor<(Const<1>,)> = g.input("one");
        count.write(count.read() + one);
        count.write(one);
    })
    .unwrap_err();
    let text = errors.to_string();
    assert!(
        text.contains("tests/model_state.rs:") && text.contains("state \"count\" is written twice"),
        "{text}"
    );
}
