use rlx::typed::{Axis, Const, State, Tensor, build};

fn main() {
    let _ = build(|g| {
        let cache: State<(Const<16>, Const<8>)> = g.state("cache");
        let row: Tensor<(Const<1>, Const<4>)> = g.input("row");
        let pos: Tensor<(), i32> = g.input("pos");
        cache.write(cache.read().slice_update(Axis::<0>, row, pos));
    });
}
