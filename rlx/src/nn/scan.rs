//! State-space layers on the linear scan ([`Tensor::linear_scan`]).

use crate::typed::{Const, Dim, Tensor};

/// Mamba's selective scan over `L` steps of `B` sequences: per inner channel `i` and state
/// feature `n`, the state runs `h_t = exp(Δ_t·A)·h_{t−1} + Δ_t·B_t·u_t` from `start`
/// (zeros when `None`), and the output is `y_t = Σ_n C_t·h_t`. `u` is the input stream,
/// `dt` the (positive) step sizes `Δ`, `a` the decay rates `A` (negative for a stable
/// scan), `b` and `c` the token-dependent input and output projections of the state.
/// Returns `y` and every step's state (the last one carries into the next chunk). The
/// skip term `D·u` and the gate are the caller's.
///
/// The states take `B·L·I·N` values; the recurrence runs as one
/// [`linear_scan`](Tensor::linear_scan) along `L`, from the carried state.
///
/// ```
/// use rlx::nn::selective_scan;
/// use rlx::typed::{Const, Tensor, build};
/// type Stream = (Const<1>, Const<12>, Const<8>);
/// type Proj = (Const<1>, Const<12>, Const<4>);
/// let graph = build(|g| {
///     let u: Tensor<Stream> = g.input("u");
///     let dt: Tensor<Stream> = g.input("dt");
///     let a: Tensor<(Const<8>, Const<4>)> = g.input("a");
///     let (b, c): (Tensor<Proj>, Tensor<Proj>) = (g.input("b"), g.input("c"));
///     let (y, states) = selective_scan(u, dt.softplus(), -a.exp(), b, c, None);
///     g.output("y", y);
///     g.output("states", states);
/// })?;
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[allow(clippy::type_complexity)]
#[track_caller]
pub fn selective_scan<'g, B: Dim, L: Dim, I: Dim, N: Dim>(
    u: Tensor<'g, (B, L, I)>,
    dt: Tensor<'g, (B, L, I)>,
    a: Tensor<'g, (I, N)>,
    b: Tensor<'g, (B, L, N)>,
    c: Tensor<'g, (B, L, N)>,
    start: Option<Tensor<'g, (B, I, N)>>,
) -> (Tensor<'g, (B, L, I)>, Tensor<'g, (B, L, I, N)>) {
    let per_channel: Tensor<'g, (B, L, I, Const<1>)> = dt.reshape();
    let decay = (per_channel.broadcast::<(B, L, I, N)>() * a.broadcast::<(B, L, I, N)>()).exp();
    // Δ·u times B: an outer product per token, a product with an inner dim of 1.
    let scaled: Tensor<'g, (B, L, I, Const<1>)> = (dt * u).reshape();
    let b: Tensor<'g, (B, L, Const<1>, N)> = b.reshape();
    let input = scaled.matmul(b);
    let states = match start {
        None => decay.linear_scan::<1>(input),
        Some(start) => decay.linear_scan_from::<1>(input, start.reshape()),
    };
    // Σ_n h·C per token: a matrix-vector product.
    let c: Tensor<'g, (B, L, N, Const<1>)> = c.reshape();
    let y: Tensor<'g, (B, L, I, Const<1>)> = states.matmul(c);
    (y.reshape(), states)
}
