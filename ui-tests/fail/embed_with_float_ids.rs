use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let table: Tensor<(Const<10>, Const<4>)> = g.param("table");
        let ids: Tensor<(Batch,)> = g.input("ids");
        g.output("y", table.embed(ids));
    });
}
