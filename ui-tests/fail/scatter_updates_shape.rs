use rlx::typed::{Axis, Const, Tensor, build};

fn main() {
    let _ = build(|g| {
        let totals: Tensor<(Const<5>, Const<2>)> = g.input("totals");
        let rows: Tensor<(Const<3>,), i32> = g.input("rows");
        let values: Tensor<(Const<4>, Const<2>)> = g.input("values");
        g.output("sums", totals.scatter_add(Axis::<0>, rows, values));
    });
}
