//! Declaring params: names, arrays, and the build-time errors of impossible layouts.

use rlx::params::{ParamPath, Split};
use rlx::typed::{Const, Sizes, Tensor, build, build_model, build_with};

use super::models::{Hidden, Layers};

#[derive(rlx::Params)]
struct Pair<'g> {
    #[param(rename = "self")]
    self_: Tensor<'g, (Const<2>, Const<3>)>,
    #[param(skip)]
    note: &'static str,
}

#[derive(rlx::Params)]
struct Stack<'g> {
    blocks: [Pair<'g>; 2],
}

#[derive(rlx::Params)]
struct Gated<'g> {
    weight: Tensor<'g, (Const<3>,)>,
    #[param(rename = "weight_extra", when = "extra")]
    extra: Option<Pair<'g>>,
}

#[test]
fn optional_params_follow_their_config_flag() {
    for on in [false, true] {
        let (_, manifest) = build_model(&Sizes::new().with_flag("extra", on), |g| {
            let p: Gated = g.params();
            assert_eq!(p.extra.is_some(), on);
            g.output("y", p.weight.relu());
        })
        .unwrap();
        let names: Vec<&str> = manifest.params.iter().map(|p| p.name.as_str()).collect();
        let expected: &[&str] = if on {
            &["weight", "weight_extra.self"]
        } else {
            &["weight"]
        };
        assert_eq!(names, expected);
    }
    // A flag the config does not set is a build error naming it.
    let err = build(|g| {
        let p: Gated = g.params();
        g.output("y", p.weight.relu());
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("the config flag `extra` is not set"),
        "{err}"
    );
}

#[test]
fn arrays_and_renames_name_params_by_path() {
    let (graph, manifest) = build_model(&Sizes::new(), |g| {
        let s: Stack = g.params();
        assert_eq!(s.blocks[0].note, "");
        let y = s.blocks[0].self_ + s.blocks[1].self_;
        g.output("y", y);
    })
    .unwrap();
    let names: Vec<&str> = manifest.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["blocks.0.self", "blocks.1.self"]);
    assert_eq!(graph.params().count(), 2);
}

#[test]
fn a_config_dim_without_a_size_is_a_build_error_at_the_callers_line() {
    let line = line!() + 2;
    let err = build(|g| {
        let x: Tensor<(Hidden,)> = g.input("x");
        g.output("y", x.relu());
    })
    .unwrap_err();
    assert_eq!(err.0.len(), 1, "{err}");
    assert_eq!(err.0[0].location().line(), line);
    assert!(
        err.0[0].to_string().contains(
            "the config dim `Hidden` has no size: give it with `Sizes::with::<Hidden>(..)`"
        ),
        "{err}"
    );
    // `size` of a runtime dim is an error too; of a config dim, its value.
    let err = build_with(&Sizes::new().with::<Layers>(3), |g| {
        assert_eq!(g.size::<Layers>(), 3);
        assert_eq!(g.size::<Const<7>>(), 7);
        let _ = g.size::<super::models::Batch>();
    })
    .unwrap_err();
    assert!(
        err.to_string().contains("`Batch` is a runtime dim"),
        "{err}"
    );
}

#[test]
fn impossible_checkpoint_layouts_are_build_errors() {
    let split = |index| Split {
        axis: 0,
        index,
        parts: 2,
    };
    let err = build(|g| {
        let at = ParamPath::root().field("v");
        // a rank-1 weight cannot be stored transposed
        let _: Tensor<(Const<4>,)> = g.param_at(&at.transposed());
        // two splits of one tensor
        let _: Tensor<(Const<4>,)> = g.param_at(&at.field("a").split(split(0)).split(split(1)));
        // a split axis past the rank
        let far = Split {
            axis: 3,
            index: 0,
            parts: 2,
        };
        let _: Tensor<(Const<4>,)> = g.param_at(&at.field("b").split(far));
        // the same part twice, and two halves with different shapes
        let _: Tensor<(Const<4>,)> = g.param_at(&at.field("c").split(split(0)));
        let _: Tensor<(Const<4>,)> = g.param_at(&at.field("c").split(split(0)));
        let _: Tensor<(Const<5>,)> = g.param_at(&at.field("c").split(split(1)));
    })
    .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.0.len(), 5, "{text}");
    for needle in [
        "`v` is transposed but has fewer than 2 dims",
        "`v.a` is split twice",
        "`v.b`: the split axis is out of range",
        "`v.c` part 0 is declared twice",
        "`v.c` is read by two params that do not split it the same way",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}
