use rlx::typed::{Axis, Const, Tensor, build};

fn main() {
    let _ = build(|g| {
        // Two sequences' caches, but three positions: one per row of axis 0 is required.
        let cache: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("cache");
        let rows: Tensor<(Const<2>, Const<1>, Const<8>)> = g.input("rows");
        let pos: Tensor<(Const<3>,), i64> = g.input("pos");
        g.output("cache", cache.slice_update(Axis::<1>, rows, pos));
    });
}
