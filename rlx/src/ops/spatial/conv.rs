//! Convolution and transposed convolution (1-D and 2-D, grouped, channels first), which share
//! their operands' rules and their weight and bias gradients.

use super::{Window, back_to_input, spatial_rank, statics, window_len, window_source};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    Dim, InferError, NodeId, Op, Permute, ReduceOp, Shape, Slice, TensorType, attr_err,
};
use crate::ops::array::{Array, Out, for_each_index};
use crate::ops::check::{arity_range, exact_rank, require_float, same_dim, same_dtype};
use crate::ops::sample::{FLOATS, Sampled, Sampler, chance, pick, window_padding};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// 1-D or 2-D convolution, channels first. Operands: `x` `[N, C, *spatial]`,
/// `w` `[O, C/groups, *kernel]`, then `bias` `[O]` when present.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    /// Stride per spatial axis.
    pub stride: Vec<usize>,
    /// `(before, after)` zero padding per spatial axis.
    pub padding: Vec<(usize, usize)>,
    /// Dilation per spatial axis.
    pub dilation: Vec<usize>,
    /// Channel groups; divides `C` and `O`.
    pub groups: usize,
}

/// 1-D or 2-D transposed convolution (the adjoint of [`Op::Conv`]), channels first.
/// Operands: `x` `[N, C, *spatial]`, `w` `[C, O/groups, *kernel]` (PyTorch's layout),
/// then `bias` `[O]` when present. Input position `i` and tap `k` add into output
/// position `i·stride + k·dilation − padding.0`; each output axis has
/// `(in − 1)·stride + dilation·(kernel − 1) + 1 + output_padding − padding.0 − padding.1`
/// positions.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvTranspose {
    /// Stride per spatial axis.
    pub stride: Vec<usize>,
    /// `(before, after)` positions cropped from the full output per spatial axis.
    pub padding: Vec<(usize, usize)>,
    /// Positions added after the end per spatial axis (less than stride or dilation):
    /// picks one of the input sizes a strided conv maps to the same output size.
    pub output_padding: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilation: Vec<usize>,
    /// Channel groups; divides `C` and `O`.
    pub groups: usize,
}

/// The window attributes of a convolution or transposed convolution.
macro_rules! window_of {
    ($($op:ident),+) => {
        $(
            impl $op {
                fn window(&self) -> Window<'_> {
                    Window {
                        stride: &self.stride,
                        padding: &self.padding,
                        dilation: &self.dilation,
                        groups: self.groups,
                    }
                }
            }
        )+
    };
}

window_of!(Conv, ConvTranspose);

impl Primitive for Conv {
    fn name(&self) -> &'static str {
        "conv"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        window_attrs(
            out,
            &self.stride,
            &self.padding,
            &self.dilation,
            self.groups,
        );
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Conv(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        conv_type(
            &self.stride,
            &self.padding,
            &self.dilation,
            self.groups,
            inputs,
        )
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let win = self.window();
        conv_vjp(e, x, &win, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // `C/groups * kernel` products per output.
        let w = x.dims(1);
        conv_bound(x, w.iter().skip(1).product::<usize>().max(1) as f64)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let win = self.window();
        Ok(conv_value(&win, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_conv(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for ConvTranspose {
    fn name(&self) -> &'static str {
        "conv_transpose"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("stride={:?}", self.stride));
        out.push(format!("padding={:?}", self.padding));
        if self.output_padding.iter().any(|p| *p != 0) {
            out.push(format!("output_padding={:?}", self.output_padding));
        }
        if self.dilation.iter().any(|d| *d != 1) {
            out.push(format!("dilation={:?}", self.dilation));
        }
        if self.groups != 1 {
            out.push(format!("groups={}", self.groups));
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ConvTranspose(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        conv_transpose_type(
            &self.stride,
            &self.padding,
            &self.output_padding,
            &self.dilation,
            self.groups,
            inputs,
        )
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let win = self.window();
        conv_transpose_vjp(e, x, &win, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // At most `C/groups * kernel` products per output, as a conv.
        let w = x.dims(1);
        let (first, rest) = w.split_first().map_or((1, &[][..]), |(f, r)| (*f, r));
        let k = rest.iter().product::<usize>().max(1) as f64 * first.max(1) as f64;
        conv_bound(x, k)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let win = self.window();
        Ok(conv_transpose_value(&win, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_conv_transpose(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn conv_type(
    stride: &[usize],
    padding: &[(usize, usize)],
    dilation: &[usize],
    groups: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity_range(inputs, 2..=3, "2 or 3 (x, w, bias)")?;
    let s = spatial_rank(
        &[
            ("stride", stride.len()),
            ("padding", padding.len()),
            ("dilation", dilation.len()),
        ],
        &inputs[0],
        0,
    )?;
    if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
        return Err(attr_err!("stride, dilation and groups must be at least 1"));
    }
    let (x, w) = (&inputs[0].shape, &inputs[1].shape);
    let out_channels = w[0].clone();
    let takes = w[1].mul(&Dim::Static(groups));
    let what = "input channels and weight channels x groups";
    channels_and_bias(inputs, s, groups, (what, &takes), &out_channels)?;
    let mut dims = vec![x[0].clone(), out_channels];
    for axis in 0..s {
        let span = dilation[axis] * (kernel_size(w, axis)? - 1) + 1;
        dims.push(window_len(
            &x[2 + axis],
            padding[axis],
            span,
            stride[axis],
            axis,
        )?);
    }
    Ok(TensorType::new(inputs[0].dtype, dims))
}

fn conv_transpose_type(
    stride: &[usize],
    padding: &[(usize, usize)],
    output_padding: &[usize],
    dilation: &[usize],
    groups: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity_range(inputs, 2..=3, "2 or 3 (x, w, bias)")?;
    let s = spatial_rank(
        &[
            ("stride", stride.len()),
            ("padding", padding.len()),
            ("output_padding", output_padding.len()),
            ("dilation", dilation.len()),
        ],
        &inputs[0],
        0,
    )?;
    if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
        return Err(attr_err!("stride, dilation and groups must be at least 1"));
    }
    for axis in 0..s {
        if output_padding[axis] >= stride[axis].max(dilation[axis]) {
            return Err(attr_err!(
                "output padding {} of spatial axis {axis} must be less than the stride or the \
                 dilation",
                output_padding[axis]
            ));
        }
    }
    let (x, w) = (&inputs[0].shape, &inputs[1].shape);
    let out_channels = w[1].mul(&Dim::Static(groups));
    if groups > 1 && w[0].as_static().is_none_or(|c| !c.is_multiple_of(groups)) {
        return Err(attr_err!(
            "input channels {} are not a multiple of groups {groups}",
            w[0]
        ));
    }
    let what = "input channels and weight input channels";
    channels_and_bias(inputs, s, groups, (what, &w[0]), &out_channels)?;
    let mut dims = vec![x[0].clone(), out_channels];
    for axis in 0..s {
        let (before, after) = padding[axis];
        let full = dilation[axis] * (kernel_size(w, axis)? - 1) + 1 + output_padding[axis];
        // (in - 1)·stride + full - before - after, kept in the form in·stride + c.
        let len = x[2 + axis]
            .mul(&Dim::Static(stride[axis]))
            .checked_add(&Dim::Static(full))
            .and_then(|d| d.checked_sub(&Dim::Static(stride[axis] + before + after)))
            .filter(|d| d.as_static() != Some(0))
            .ok_or_else(|| {
                attr_err!(
                    "padding {before}:{after} of spatial axis {axis} crops the whole output \
                     of input size {}",
                    x[2 + axis]
                )
            })?;
        dims.push(len);
    }
    Ok(TensorType::new(inputs[0].dtype, dims))
}

fn conv_vjp(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    win: &Window<'_>,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x[0]);
    let ws = e.shape(x[1]);
    let dx = back_to_input(e, g, x[1], win, &xs.dims()[2..])?;
    let dw = weight_grad(e, x[0], g, win, &ws.dims()[2..])?;
    let mut grads = vec![Grad::Some(dx), Grad::Some(dw)];
    if x.len() == 3 {
        grads.push(Grad::Some(bias_grad(e, g)?));
    }
    Ok(grads)
}

/// The transpose's input gradient is the conv of `g` (cut to the input's length when an
/// output padding of a stride or more left extra positions); its weight gradient is the
/// conv weight gradient with the roles of input and output swapped.
fn conv_transpose_vjp(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    win: &Window<'_>,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x[0]);
    let ws = e.shape(x[1]);
    let op = Op::Conv(Conv {
        stride: win.stride.to_vec(),
        padding: win.padding.to_vec(),
        dilation: win.dilation.to_vec(),
        groups: win.groups,
    });
    let mut dx = e.op(op, &[g, x[1]])?;
    for a in 0..win.stride.len() {
        let got = e.shape(dx)[2 + a].clone();
        if got != xs[2 + a] {
            let want = statics(e, &[xs[2 + a].clone()])?[0];
            let slice = Op::Slice(Slice {
                axis: 2 + a,
                start: 0,
                stop: Some(want as i64),
                step: 1,
            });
            dx = e.op(slice, &[dx])?;
        }
    }
    let dw = weight_grad(e, g, x[0], win, &ws.dims()[2..])?;
    let mut grads = vec![Grad::Some(dx), Grad::Some(dw)];
    if x.len() == 3 {
        grads.push(Grad::Some(bias_grad(e, g)?));
    }
    Ok(grads)
}

fn conv_value(win: &Window<'_>, x: &[Array], out: &Out) -> Array {
    let (input, w, bias) = (&x[0], &x[1], x.get(2));
    let per_group_in = w.shape[1];
    let per_group_out = w.shape[0] / win.groups.max(1);
    let kernel = &w.shape[2..];
    out.fill(|o| {
        let (n, oc, pos) = (o[0], o[1], &o[2..]);
        let group = oc / per_group_out.max(1);
        let mut sum = bias.map_or(0.0, |b| b.data[oc]);
        for c in 0..per_group_in {
            for_each_index(kernel, |k| {
                let ic = group * per_group_in + c;
                let src = window_source(win, input, n, ic, pos, k);
                if let Some(at) = src {
                    let mut wi = vec![oc, c];
                    wi.extend_from_slice(k);
                    sum += input.at(&at) * w.at(&wi);
                }
            });
        }
        sum
    })
}

/// Input position `i` and tap `k` add `x[n, c, i] · w[c, o, k]` into output position
/// `i·stride + k·dilation − padding.0` (dropped outside the output).
fn conv_transpose_value(win: &Window<'_>, x: &[Array], out: &Out) -> Array {
    let (input, w, bias) = (&x[0], &x[1], x.get(2));
    let per_group_in = input.shape[1] / win.groups.max(1);
    let per_group_out = w.shape[1];
    let kernel = &w.shape[2..];
    let mut result = out.fill(|o| bias.map_or(0.0, |b| b.data[o[1]]));
    let strides = result.strides();
    for_each_index(&input.shape, |xi| {
        let (n, ic) = (xi[0], xi[1]);
        let group = ic / per_group_in.max(1);
        for oc in 0..per_group_out {
            for_each_index(kernel, |k| {
                let mut flat = n * strides[0] + (group * per_group_out + oc) * strides[1];
                for a in 0..k.len() {
                    let p = (xi[2 + a] * win.stride[a] + k[a] * win.dilation[a])
                        .checked_sub(win.padding[a].0)
                        .filter(|p| *p < out.shape[2 + a]);
                    match p {
                        Some(p) => flat += p * strides[2 + a],
                        None => return,
                    }
                }
                let mut wi = vec![ic, oc];
                wi.extend_from_slice(k);
                result.data[flat] += input.at(xi) * w.at(&wi);
            });
        }
    });
    result
}

fn random_conv(s: &mut dyn Sampler) -> Sampled {
    let c = conv_operands(s, false)?;
    let op = Op::Conv(Conv {
        stride: (0..c.spatial).map(|_| 1 + s.below(2)).collect(),
        padding: window_padding(s, &c.kernel),
        dilation: (0..c.spatial).map(|_| 1 + s.below(2)).collect(),
        groups: c.groups,
    });
    Some((op, c.operands))
}

/// Output padding below the stride or the dilation, as the op requires.
fn random_conv_transpose(s: &mut dyn Sampler) -> Sampled {
    let c = conv_operands(s, true)?;
    let stride: Vec<usize> = (0..c.spatial).map(|_| 1 + s.below(3)).collect();
    let dilation: Vec<usize> = (0..c.spatial).map(|_| 1 + s.below(2)).collect();
    let output_padding = stride
        .iter()
        .zip(&dilation)
        .map(|(st, d)| s.below(*st.max(d)))
        .collect();
    let op = Op::ConvTranspose(ConvTranspose {
        stride,
        padding: window_padding(s, &c.kernel),
        output_padding,
        dilation,
        groups: c.groups,
    });
    Some((op, c.operands))
}

/// The checks a convolution and its transpose share: float operands of one dtype, a weight
/// of the input's rank whose channel dim times `groups` is `in_channels`, output channels
/// divisible by `groups`, and a bias of `[out_channels]` when present.
fn channels_and_bias(
    inputs: &[TensorType],
    spatial: usize,
    groups: usize,
    (what, in_channels): (&str, &Dim),
    out_channels: &Dim,
) -> Result<(), InferError> {
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    exact_rank(inputs, 1, spatial + 2)?;
    same_dim(what, &inputs[0].shape[1], in_channels)?;
    if groups > 1
        && out_channels
            .as_static()
            .is_none_or(|o| !o.is_multiple_of(groups))
    {
        return Err(attr_err!(
            "output channels {out_channels} are not a multiple of groups {groups}"
        ));
    }
    if inputs.len() == 3 {
        same_dtype(inputs, 0, 2)?;
        exact_rank(inputs, 2, 1)?;
        same_dim(
            "output channels and bias size",
            out_channels,
            &inputs[2].shape[0],
        )?;
    }
    Ok(())
}

/// The static, positive kernel size of spatial `axis` of a conv weight.
fn kernel_size(w: &Shape, axis: usize) -> Result<usize, InferError> {
    w[2 + axis].as_static().filter(|k| *k > 0).ok_or_else(|| {
        attr_err!(
            "kernel size {} of spatial axis {axis} must be static and positive",
            w[2 + axis]
        )
    })
}

/// The gradient of a conv's weight `[O, C/G, *K]`: the correlation of the input `x`
/// `[N, C, *L]` with the output gradient `g` `[N, O, *Lo]`, as one conv whose batch is the
/// channels of a group and whose channels are (group, image): stride and dilation trade
/// places.
fn weight_grad(
    e: &mut Emitter<'_>,
    x: NodeId,
    g: NodeId,
    win: &Window<'_>,
    kernel: &[Dim],
) -> Result<NodeId, GradError> {
    let xs = e.shape(x);
    let rank = xs.rank();
    let groups = win.groups;
    let channels = xs[1].clone();
    let per_group = channels
        .div_exact(&Dim::Static(groups))
        .ok_or(GradError::NotYet { at: e.site() })?;
    // x: [N, C, *L] -> [N, G, C/G, *L] -> [C/G, G, N, *L] -> [C/G, G·N, *L]
    let mut split = vec![xs[0].clone(), Dim::Static(groups), per_group.clone()];
    split.extend_from_slice(&xs.dims()[2..]);
    let xg = e.reshape(x, Shape::new(split))?;
    let mut perm = vec![2, 1, 0];
    perm.extend(3..rank + 1);
    let xg = e.op(Op::Permute(Permute { perm }), &[xg])?;
    let mut merged = vec![per_group.clone(), Dim::Static(groups).mul(&xs[0])];
    merged.extend_from_slice(&xs.dims()[2..]);
    let xg = e.reshape(xg, Shape::new(merged))?;
    // g: [N, O, *Lo] -> [O, N, *Lo]
    let gt = e.op(Op::Permute(Permute { perm: swap01(rank) }), &[g])?;
    let op = Op::Conv(Conv {
        stride: win.dilation.to_vec(),
        padding: win.padding.to_vec(),
        dilation: win.stride.to_vec(),
        groups,
    });
    let full = e.op(op, &[xg, gt])?;
    // [C/G, O, *K'] with K' >= K: keep the first K taps, then [O, C/G, *K].
    let mut cut = full;
    let fs = e.shape(full);
    for (a, k) in kernel.iter().enumerate() {
        if &fs[2 + a] != k {
            let k = k.as_static().ok_or(GradError::NotYet { at: e.site() })?;
            let slice = Op::Slice(Slice {
                axis: 2 + a,
                start: 0,
                stop: Some(k as i64),
                step: 1,
            });
            cut = e.op(slice, &[cut])?;
        }
    }
    e.op(Op::Permute(Permute { perm: swap01(rank) }), &[cut])
}

/// A bias's gradient: `g` summed over everything but the channels.
fn bias_grad(e: &mut Emitter<'_>, g: NodeId) -> Result<NodeId, GradError> {
    let rank = e.shape(g).rank();
    let axes: Vec<usize> = std::iter::once(0).chain(2..rank).collect();
    e.reduce(ReduceOp::Sum, g, axes, false)
}

/// `[N, C, *L] -> [*axes permuted]` helper: the permutation moving axis 1 first.
fn swap01(rank: usize) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(0, 1);
    perm
}

/// What [`conv_operands`] makes.
struct ConvOperands {
    operands: Vec<NodeId>,
    spatial: usize,
    groups: usize,
    kernel: Vec<usize>,
}

/// A new channels-first input of one or two spatial axes and a weight, with a bias half
/// the time: `[O, C/groups, *kernel]` for a convolution, `[C, O/groups, *kernel]` (inputs
/// from 1 long) for a transposed one.
fn conv_operands(s: &mut dyn Sampler, transposed: bool) -> Option<ConvOperands> {
    let dtype = pick(s, &FLOATS);
    let spatial = 1 + s.below(2);
    let groups = pick(s, &[1, 1, 2]);
    let channels = groups * (1 + s.below(2));
    let out_channels = groups * (1 + s.below(2));
    let kernel: Vec<usize> = (0..spatial).map(|_| 1 + s.below(3)).collect();
    let shortest = if transposed { 1 } else { 3 };
    let mut x_dims = vec![s.dim(), Dim::from(channels)];
    x_dims.extend((0..spatial).map(|_| Dim::from(shortest + s.below(4))));
    let x = s.input(dtype, x_dims)?;
    let mut w_dims = if transposed {
        vec![channels, out_channels / groups]
    } else {
        vec![out_channels, channels / groups]
    };
    w_dims.extend(&kernel);
    let w = s.param(dtype, &w_dims, None)?;
    let mut operands = vec![x, w];
    if chance(s, 0.5) {
        operands.push(s.param(dtype, &[out_channels], None)?);
    }
    Some(ConvOperands {
        operands,
        spatial,
        groups,
        kernel,
    })
}

/// Stride, padding, dilation (when not all 1) and groups (when not 1), as printed.
fn window_attrs(
    out: &mut Vec<String>,
    stride: &[usize],
    padding: &[(usize, usize)],
    dilation: &[usize],
    groups: usize,
) {
    out.push(format!("stride={stride:?}"));
    out.push(format!("padding={padding:?}"));
    if dilation.iter().any(|d| *d != 1) {
        out.push(format!("dilation={dilation:?}"));
    }
    if groups != 1 {
        out.push(format!("groups={groups}"));
    }
}

/// A convolution's output sums `k` products of operands up to `scale`.
fn conv_bound(x: &Operands<'_>, k: f64) -> Bound {
    let s = x.scale;
    Bound::Within {
        rel: 2.0 * x.u,
        abs: 2.0 * x.u * k * (k * s * s + s) + x.tiny,
        growth: k * s * s,
    }
}
