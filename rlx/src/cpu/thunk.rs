//! Thunks: pre-resolved kernel calls, and the memory they address.
//!
//! A thunk is plain data chosen when a plan is made: the kernel, element counts, layouts and
//! byte offsets. Running one is a `match` and a call, with no lookup, allocation or shape
//! arithmetic.

use half::{bf16, f16};

use super::custom::{CustomInputs, CustomKernel, TensorMut};
use super::kernels::cast::{BoolByte, CastFrom};
use super::kernels::copy::{self, Word};
use super::kernels::elementwise as ew;
use super::kernels::gemm::{self, GemmAcc, GemmPlan};
use super::kernels::layout::Strided;
use super::kernels::linalg::{self, QuantDims};
use super::kernels::nn::{self, AttentionDims, MaskValues, RopeDims, Window};
use super::kernels::numeric::{FloatStore, Int};
use super::kernels::reduce::{self, Axis3};
use super::kernels::sort;
use crate::backend::RunError;
use rayon::prelude::*;

use crate::ir::{BinaryOp, CompareOp, DType, ReduceOp, UnaryOp};
use crate::tensor::TensorRef;

/// Which memory a view points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Region {
    /// The per-run arena: inputs, intermediates, outputs, scratch.
    Arena,
    /// Params and constants, written at compile/bind time and read-only while running.
    Static,
}

/// `len` elements at byte `offset` of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct View {
    pub region: Region,
    pub offset: usize,
    pub len: usize,
}

impl View {
    pub(crate) fn bytes(&self, elem: usize) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len * elem
    }
}

/// One kernel call.
#[derive(Clone, Debug)]
pub(crate) enum Thunk {
    Unary {
        kind: UnaryOp,
        dtype: DType,
        x: View,
        out: View,
    },
    Binary {
        kind: BinaryOp,
        dtype: DType,
        layout: Strided<2>,
        a: View,
        b: View,
        out: View,
    },
    Compare {
        kind: CompareOp,
        dtype: DType,
        layout: Strided<2>,
        a: View,
        b: View,
        out: View,
    },
    Select {
        dtype: DType,
        layout: Strided<3>,
        cond: View,
        a: View,
        b: View,
        out: View,
    },
    Cast {
        from: DType,
        to: DType,
        x: View,
        out: View,
    },
    MatMul(Box<MatMulThunk>),
    Reduce {
        op: ReduceOp,
        dtype: DType,
        shape: Axis3,
        x: View,
        out: View,
    },
    ArgReduce {
        min: bool,
        dtype: DType,
        shape: Axis3,
        x: View,
        out: View,
    },
    Cumsum {
        dtype: DType,
        shape: Axis3,
        exclusive: bool,
        reverse: bool,
        x: View,
        out: View,
    },
    Softmax {
        log: bool,
        dtype: DType,
        shape: Axis3,
        x: View,
        out: View,
    },
    Norm {
        rms: bool,
        eps: f64,
        dtype: DType,
        features: usize,
        x: View,
        weight: Option<View>,
        bias: Option<View>,
        out: View,
    },
    Copy {
        dtype: DType,
        layout: Strided<2>,
        dst_at: usize,
        src_at: usize,
        src: View,
        dst: View,
    },
    Fill {
        dtype: DType,
        pattern: u64,
        dst: View,
    },
    Gather {
        dtype: DType,
        index: DType,
        outer: usize,
        axis_len: usize,
        inner: usize,
        data: View,
        indices: View,
        out: View,
        op: String,
    },
    /// Adds `updates` into `out` (already a copy of the data) at `indices`.
    ScatterAdd {
        dtype: DType,
        index: DType,
        outer: usize,
        axis_len: usize,
        inner: usize,
        indices: View,
        updates: View,
        out: View,
        op: String,
    },
    /// Sort, argsort or top-k: the first `keep` positions of each line in sorted order.
    Sort {
        dtype: DType,
        shape: Axis3,
        descending: bool,
        keep: usize,
        indices: bool,
        x: View,
        out: View,
        order: View,
    },
    Rope {
        dtype: DType,
        dims: RopeDims,
        offset: Option<(View, DType)>,
        x: View,
        out: View,
    },
    Attention(Box<AttentionThunk>),
    Pool {
        dtype: DType,
        window: Window,
        max: bool,
        x: View,
        out: View,
    },
    Conv(Box<ConvThunk>),
    Solve {
        dtype: DType,
        batch: usize,
        n: usize,
        k: usize,
        a: View,
        b: View,
        out: View,
        work: View,
        op: String,
    },
    QuantizedMatMul {
        dtype: DType,
        dims: QuantDims,
        x: View,
        w: View,
        scales: View,
        biases: View,
        out: View,
    },
    Custom(Box<CustomThunk>),
}

/// Scaled dot-product attention over planned views.
#[derive(Clone, Debug)]
pub(crate) struct AttentionThunk {
    pub dtype: DType,
    pub dims: AttentionDims,
    pub q: View,
    pub k: View,
    pub v: View,
    pub mask: Option<(View, DType)>,
    pub out: View,
    /// One row of scores per worker, in the accumulator type.
    pub scores: View,
}

/// Convolution as im2col + GEMM per image and channel group.
#[derive(Clone, Debug)]
pub(crate) struct ConvThunk {
    pub dtype: DType,
    pub window: Window,
    pub groups: usize,
    pub out_channels: usize,
    pub gemm: GemmPlan,
    pub x: View,
    pub w: View,
    pub bias: Option<View>,
    pub out: View,
    pub col: View,
    pub scratch: View,
    pub wide_out: Option<View>,
}

/// A registered user kernel and its operands.
#[derive(Clone)]
pub(crate) struct CustomThunk {
    pub name: String,
    pub kernel: std::sync::Arc<dyn CustomKernel>,
    pub attrs: std::collections::BTreeMap<String, crate::ir::AttrValue>,
    pub inputs: Vec<(View, DType, Vec<usize>)>,
    pub out: View,
    pub out_dtype: DType,
    pub out_shape: Vec<usize>,
}

impl std::fmt::Debug for CustomThunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CustomThunk({:?})", self.name)
    }
}

/// A batched matrix product; boxed because it is much larger than other thunks.
#[derive(Clone, Debug)]
pub(crate) struct MatMulThunk {
    pub dtype: DType,
    pub plan: GemmPlan,
    /// Element offsets into `a` and `b` of each batch entry, in output order.
    pub batches: Vec<(usize, usize)>,
    pub a: View,
    pub b: View,
    pub out: View,
    /// Packing scratch, in the accumulator type: one slot per batch worker.
    pub scratch: View,
    /// For f16/bf16: the f32 result of one batch entry before it is narrowed, per worker.
    pub wide_out: Option<View>,
    /// Batch entries run in parallel on this many workers, each a single-threaded product
    /// (set when the products are too small to split themselves); 1 otherwise.
    pub batch_workers: usize,
    /// `b` already packed (a weight, packed when it was bound), in the accumulator type.
    pub packed_b: Option<View>,
}

/// A view with the size of its elements in bytes.
pub(crate) type Access = (View, usize);

impl Thunk {
    /// The views this thunk writes and the views it reads, each with its element size.
    pub(crate) fn accesses(&self) -> (Vec<Access>, Vec<Access>) {
        let sz = |d: &DType| d.size_bytes();
        match self {
            Thunk::Unary { dtype, x, out, .. }
            | Thunk::Reduce { dtype, x, out, .. }
            | Thunk::Cumsum { dtype, x, out, .. }
            | Thunk::Softmax { dtype, x, out, .. }
            | Thunk::Pool { dtype, x, out, .. } => (vec![(*out, sz(dtype))], vec![(*x, sz(dtype))]),
            Thunk::Cast { from, to, x, out } => (vec![(*out, sz(to))], vec![(*x, sz(from))]),
            Thunk::ArgReduce { dtype, x, out, .. } => (vec![(*out, 8)], vec![(*x, sz(dtype))]),
            Thunk::Binary {
                dtype, a, b, out, ..
            } => (
                vec![(*out, sz(dtype))],
                vec![(*a, sz(dtype)), (*b, sz(dtype))],
            ),
            Thunk::Compare {
                dtype, a, b, out, ..
            } => (vec![(*out, 1)], vec![(*a, sz(dtype)), (*b, sz(dtype))]),
            Thunk::Select {
                dtype,
                cond,
                a,
                b,
                out,
                ..
            } => (
                vec![(*out, sz(dtype))],
                vec![(*cond, 1), (*a, sz(dtype)), (*b, sz(dtype))],
            ),
            Thunk::MatMul(m) => {
                let acc = if m.dtype == DType::F64 { 8 } else { 4 };
                let mut w = vec![(m.out, sz(&m.dtype)), (m.scratch, acc)];
                w.extend(m.wide_out.map(|v| (v, 4)));
                let mut r = vec![(m.a, sz(&m.dtype)), (m.b, sz(&m.dtype))];
                r.extend(m.packed_b.map(|v| (v, acc)));
                (w, r)
            }
            Thunk::Norm {
                dtype,
                x,
                weight,
                bias,
                out,
                ..
            } => {
                let reads = std::iter::once(*x)
                    .chain(*weight)
                    .chain(*bias)
                    .map(|v| (v, sz(dtype)))
                    .collect();
                (vec![(*out, sz(dtype))], reads)
            }
            Thunk::Copy {
                dtype, src, dst, ..
            } => (vec![(*dst, sz(dtype))], vec![(*src, sz(dtype))]),
            Thunk::Fill { dtype, dst, .. } => (vec![(*dst, sz(dtype))], vec![]),
            Thunk::Gather {
                dtype,
                index,
                data,
                indices,
                out,
                ..
            } => (
                vec![(*out, sz(dtype))],
                vec![(*data, sz(dtype)), (*indices, sz(index))],
            ),
            Thunk::ScatterAdd {
                dtype,
                index,
                indices,
                updates,
                out,
                ..
            } => (
                vec![(*out, sz(dtype))],
                vec![(*indices, sz(index)), (*updates, sz(dtype))],
            ),
            Thunk::Sort {
                dtype,
                indices,
                x,
                out,
                order,
                ..
            } => {
                let out_size = if *indices { 8 } else { sz(dtype) };
                (vec![(*out, out_size), (*order, 4)], vec![(*x, sz(dtype))])
            }
            Thunk::Rope {
                dtype,
                offset,
                x,
                out,
                ..
            } => {
                let mut reads = vec![(*x, sz(dtype))];
                reads.extend(offset.map(|(v, d)| (v, sz(&d))));
                (vec![(*out, sz(dtype))], reads)
            }
            Thunk::Attention(a) => {
                let acc = if a.dtype == DType::F64 { 8 } else { 4 };
                let mut reads = vec![
                    (a.q, sz(&a.dtype)),
                    (a.k, sz(&a.dtype)),
                    (a.v, sz(&a.dtype)),
                ];
                reads.extend(a.mask.map(|(v, d)| (v, sz(&d))));
                (vec![(a.out, sz(&a.dtype)), (a.scores, acc)], reads)
            }
            Thunk::Conv(c) => {
                let acc = if c.dtype == DType::F64 { 8 } else { 4 };
                let s = sz(&c.dtype);
                let mut writes = vec![(c.out, s), (c.col, s), (c.scratch, acc)];
                writes.extend(c.wide_out.map(|v| (v, 4)));
                let mut reads = vec![(c.x, s), (c.w, s)];
                reads.extend(c.bias.map(|v| (v, s)));
                (writes, reads)
            }
            Thunk::Solve {
                dtype,
                a,
                b,
                out,
                work,
                ..
            } => (
                vec![(*out, sz(dtype)), (*work, 8)],
                vec![(*a, sz(dtype)), (*b, sz(dtype))],
            ),
            Thunk::QuantizedMatMul {
                dtype,
                x,
                w,
                scales,
                biases,
                out,
                ..
            } => (
                vec![(*out, sz(dtype))],
                vec![
                    (*x, sz(dtype)),
                    (*w, 1),
                    (*scales, sz(dtype)),
                    (*biases, sz(dtype)),
                ],
            ),
            Thunk::Custom(c) => (
                vec![(c.out, sz(&c.out_dtype))],
                c.inputs.iter().map(|(v, d, _)| (*v, sz(d))).collect(),
            ),
        }
    }
}

/// The arena and static region during one run.
pub(crate) struct Memory<'a> {
    arena: *mut u8,
    arena_len: usize,
    statics: &'a [u8],
}

// SAFETY: `Memory` is a base pointer plus the static slice, borrowed for one run. Sending it
// to a pool thread is sound because the thread that made it blocks in `install` until the
// run ends, and every access goes through views checked disjoint by `Plan::check`.
unsafe impl Send for Memory<'_> {}
// SAFETY: as above; shared use only hands out the per-thunk views.
unsafe impl Sync for Memory<'_> {}

impl<'a> Memory<'a> {
    pub(crate) fn new(arena: &'a mut [u8], statics: &'a [u8]) -> Memory<'a> {
        Memory {
            arena: arena.as_mut_ptr(),
            arena_len: arena.len(),
            statics,
        }
    }

    /// Elements read by a thunk.
    fn src<T: bytemuck::Pod>(&self, v: View) -> &[T] {
        let range = v.bytes(size_of::<T>());
        match v.region {
            Region::Static => bytemuck::cast_slice(&self.statics[range]),
            Region::Arena => {
                assert!(range.end <= self.arena_len, "view outside the arena");
                // SAFETY: in bounds (checked above); offsets are multiples of 64 and of the
                // element size, so the pointer is aligned for T (arena blocks are 64-byte
                // aligned); `Plan::check` proved that no view a thunk writes overlaps one it
                // reads, so this shared slice aliases no live mutable one.
                unsafe { std::slice::from_raw_parts(self.arena.add(v.offset).cast::<T>(), v.len) }
            }
        }
    }

    /// Elements written by a thunk.
    #[allow(clippy::mut_from_ref)] // disjointness is proven per plan, see SAFETY
    fn dst<T: bytemuck::Pod>(&self, v: View) -> &mut [T] {
        let range = v.bytes(size_of::<T>());
        assert!(
            v.region == Region::Arena && range.end <= self.arena_len,
            "bad output view"
        );
        // SAFETY: in bounds and aligned as in `src`; `Plan::check` proved that the views a
        // thunk writes are pairwise disjoint and disjoint from every view it reads, and each
        // thunk takes each written view once, so this is the only live reference to it.
        unsafe { std::slice::from_raw_parts_mut(self.arena.add(v.offset).cast::<T>(), v.len) }
    }
}

/// Calls `$body` with `$t` the storage type of a float dtype.
macro_rules! with_float {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::F16 => {
                type $t = f16;
                $body
            }
            DType::BF16 => {
                type $t = bf16;
                $body
            }
            other => unreachable!("{other} is not a float dtype (inference admits floats only)"),
        }
    };
}

/// Calls `$body` with `$t` an integer type.
macro_rules! with_int {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::I8 => {
                type $t = i8;
                $body
            }
            DType::U8 => {
                type $t = u8;
                $body
            }
            other => unreachable!("{other} is not an integer dtype"),
        }
    };
}

/// Calls `$body` with `$t` an opaque word of the dtype's size.
macro_rules! with_word {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype.size_bytes() {
            1 => {
                type $t = u8;
                $body
            }
            2 => {
                type $t = u16;
                $body
            }
            4 => {
                type $t = u32;
                $body
            }
            _ => {
                type $t = u64;
                $body
            }
        }
    };
}

/// Calls `$body` with `$t` the cast type of any dtype.
macro_rules! with_cast {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::Bool => {
                type $t = BoolByte;
                $body
            }
            d if d.is_float() => with_float!(d, $t => $body),
            d => with_int!(d, $t => $body),
        }
    };
}

// SAFETY: `BoolByte` is a transparent wrapper of `u8`: no padding, any bit pattern.
unsafe impl bytemuck::Zeroable for BoolByte {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for BoolByte {}

fn cast<A: CastFrom + bytemuck::Pod, B: CastFrom + bytemuck::Pod>(
    mem: &Memory,
    x: View,
    out: View,
) {
    ew::convert(mem.src::<A>(x), mem.dst::<B>(out), |v| B::narrow(v.widen()));
}

fn matmul<S: FloatStore>(mem: &Memory, m: &MatMulThunk)
where
    S::Acc: GemmAcc,
{
    let (a, b) = (mem.src::<S>(m.a), mem.src::<S>(m.b));
    let kernel = S::Acc::micro_kernel();
    let tile = m.plan.dims.m * m.plan.dims.n;
    let out = mem.dst::<S>(m.out);
    let scratch = mem.dst::<S::Acc>(m.scratch);
    let wide = m.wide_out.map(|v| mem.dst::<S::Acc>(v));
    let packed = m.packed_b.map(|v| mem.src::<S::Acc>(v));
    // One worker's share: consecutive batch entries from `first`, with its own scratch.
    let run =
        |first: usize, out: &mut [S], scratch: &mut [S::Acc], mut wide: Option<&mut [S::Acc]>| {
            for (i, dst) in out.chunks_mut(tile).enumerate() {
                let (ao, bo) = m.batches[first + i];
                match wide.as_deref_mut() {
                    None => {
                        // Storage and accumulator are the same type here (f32 or f64).
                        let dst: &mut [S::Acc] = bytemuck::cast_slice_mut(dst);
                        gemm::gemm(&m.plan, kernel, &a[ao..], &b[bo..], dst, scratch, packed);
                    }
                    Some(w) => {
                        gemm::gemm(&m.plan, kernel, &a[ao..], &b[bo..], w, scratch, packed);
                        for (d, v) in dst.iter_mut().zip(w.iter()) {
                            *d = S::store(*v);
                        }
                    }
                }
            }
        };
    if m.batch_workers <= 1 || tile == 0 {
        run(0, out, scratch, wide);
        return;
    }
    let per_worker = m.batches.len().div_ceil(m.batch_workers);
    let slot = scratch.len() / m.batch_workers;
    let work = |(w, (out, scratch)): (usize, (&mut [S], &mut [S::Acc])),
                wide: Option<&mut [S::Acc]>| {
        run(w * per_worker, out, scratch, wide)
    };
    let shares = out
        .par_chunks_mut(per_worker * tile)
        .zip(scratch.par_chunks_mut(slot))
        .enumerate();
    match wide {
        None => shares.for_each(|share| work(share, None)),
        Some(wide) => shares
            .zip(wide.par_chunks_mut(tile))
            .for_each(|(share, w)| work(share, Some(w))),
    }
}

fn float_key<T: FloatStore>(v: T) -> T::Acc {
    v.load()
}

/// Runs one thunk.
pub(crate) fn execute(t: &Thunk, mem: &Memory) -> Result<(), RunError> {
    match t {
        Thunk::Unary {
            kind,
            dtype,
            x,
            out,
        } => {
            if dtype.is_float() {
                with_float!(dtype, T => ew::unary_float::<T>(*kind, mem.src(*x), mem.dst(*out)))
            } else {
                with_int!(dtype, T => ew::unary_int::<T>(*kind, mem.src(*x), mem.dst(*out)))
            }
        }
        Thunk::Binary {
            kind,
            dtype,
            layout,
            a,
            b,
            out,
        } => {
            if dtype.is_float() {
                with_float!(dtype, T => ew::binary_float::<T>(*kind, layout, mem.src(*a), mem.src(*b), mem.dst(*out)))
            } else {
                with_int!(dtype, T => ew::binary_int::<T>(*kind, layout, mem.src(*a), mem.src(*b), mem.dst(*out)))
            }
        }
        Thunk::Compare {
            kind,
            dtype,
            layout,
            a,
            b,
            out,
        } => {
            let out = mem.dst::<u8>(*out);
            match dtype {
                DType::Bool => {
                    ew::compare(*kind, layout, mem.src::<u8>(*a), mem.src(*b), out, |v| {
                        v != 0
                    })
                }
                d if d.is_float() => {
                    with_float!(d, T => ew::compare(*kind, layout, mem.src::<T>(*a), mem.src(*b), out, float_key::<T>))
                }
                d => {
                    with_int!(d, T => ew::compare(*kind, layout, mem.src::<T>(*a), mem.src(*b), out, |v: T| v))
                }
            }
        }
        Thunk::Select {
            dtype,
            layout,
            cond,
            a,
            b,
            out,
        } => {
            with_word!(dtype, W => ew::select::<W>(layout, mem.src(*cond), mem.src(*a), mem.src(*b), mem.dst(*out)))
        }
        Thunk::Cast { from, to, x, out } => {
            with_cast!(from, A => with_cast!(to, B => cast::<A, B>(mem, *x, *out)))
        }
        Thunk::MatMul(m) => with_float!(m.dtype, T => matmul::<T>(mem, m)),
        Thunk::Reduce {
            op,
            dtype,
            shape,
            x,
            out,
        } => {
            if dtype.is_float() {
                with_float!(dtype, T => reduce::reduce_float::<T>(*op, *shape, mem.src(*x), mem.dst(*out)))
            } else {
                with_int!(dtype, T => reduce::reduce_int::<T>(*op, *shape, mem.src(*x), mem.dst(*out)))
            }
        }
        Thunk::ArgReduce {
            min,
            dtype,
            shape,
            x,
            out,
        } => {
            let out = mem.dst::<i64>(*out);
            if dtype.is_float() {
                with_float!(dtype, T => {
                    let x = mem.src::<T>(*x);
                    // NaN wins, like numpy; then strictly better values.
                    if *min {
                        reduce::arg_reduce(*shape, x, out, |c: T, b: T| { let (c, b) = (c.load(), b.load()); !b.is_nan() && (c.is_nan() || c < b) })
                    } else {
                        reduce::arg_reduce(*shape, x, out, |c: T, b: T| { let (c, b) = (c.load(), b.load()); !b.is_nan() && (c.is_nan() || c > b) })
                    }
                })
            } else {
                with_int!(dtype, T => {
                    let x = mem.src::<T>(*x);
                    if *min { reduce::arg_reduce(*shape, x, out, |c: T, b: T| c < b) } else { reduce::arg_reduce(*shape, x, out, |c: T, b: T| c > b) }
                })
            }
        }
        Thunk::Cumsum {
            dtype,
            shape,
            exclusive,
            reverse,
            x,
            out,
        } => {
            if dtype.is_float() {
                with_float!(dtype, T => reduce::cumsum::<T>(*shape, *exclusive, *reverse, mem.src(*x), mem.dst(*out)))
            } else {
                with_int!(dtype, T => reduce::cumsum::<T>(*shape, *exclusive, *reverse, mem.src(*x), mem.dst(*out)))
            }
        }
        Thunk::Softmax {
            log,
            dtype,
            shape,
            x,
            out,
        } => {
            with_float!(dtype, T => reduce::softmax::<T>(*log, *shape, mem.src(*x), mem.dst(*out)))
        }
        Thunk::Norm {
            rms,
            eps,
            dtype,
            features,
            x,
            weight,
            bias,
            out,
        } => {
            with_float!(dtype, T => reduce::norm::<T>(*rms, *eps, *features, mem.src(*x), weight.map(|w| mem.src(w)), bias.map(|b| mem.src(b)), mem.dst(*out)))
        }
        Thunk::Copy {
            dtype,
            layout,
            dst_at,
            src_at,
            src,
            dst,
        } => {
            with_word!(dtype, W => copy::strided_copy::<W>(layout, *dst_at, *src_at, mem.src(*src), mem.dst(*dst)))
        }
        Thunk::Fill {
            dtype,
            pattern,
            dst,
        } => {
            with_word!(dtype, W => copy::fill::<W>(word_from_pattern(*pattern), mem.dst(*dst)))
        }
        Thunk::Gather {
            dtype,
            index,
            outer,
            axis_len,
            inner,
            data,
            indices,
            out,
            op,
        } => {
            let n = indices.len;
            let result = with_word!(dtype, W => {
                let (data, out) = (mem.src::<W>(*data), mem.dst::<W>(*out));
                if *index == DType::I32 {
                    let idx = mem.src::<i32>(*indices);
                    copy::gather(*outer, *axis_len, *inner, data, |j| i64::from(idx[j]), n, out)
                } else {
                    let idx = mem.src::<i64>(*indices);
                    copy::gather(*outer, *axis_len, *inner, data, |j| idx[j], n, out)
                }
            });
            result.map_err(|index| RunError::IndexOutOfRange {
                op: op.clone(),
                index,
                size: *axis_len,
            })?;
        }
        Thunk::ScatterAdd {
            dtype,
            index,
            outer,
            axis_len,
            inner,
            indices,
            updates,
            out,
            op,
        } => {
            let n = indices.len;
            let idx32 = (*index == DType::I32).then(|| mem.src::<i32>(*indices));
            let idx64 = (*index == DType::I64).then(|| mem.src::<i64>(*indices));
            let at =
                |j: usize| idx32.map_or_else(|| idx64.map_or(0, |i| i[j]), |i| i64::from(i[j]));
            let result = if dtype.is_float() {
                with_float!(dtype, T => copy::scatter_add(*outer, *axis_len, *inner, at, n, mem.src::<T>(*updates), mem.dst::<T>(*out), |a: T, b: T| T::store(a.load() + b.load())))
            } else {
                with_int!(dtype, T => copy::scatter_add(*outer, *axis_len, *inner, at, n, mem.src::<T>(*updates), mem.dst::<T>(*out), <T as Int>::add))
            };
            result.map_err(|index| RunError::IndexOutOfRange {
                op: op.clone(),
                index,
                size: *axis_len,
            })?;
        }
        Thunk::Sort {
            dtype,
            shape,
            descending,
            keep,
            indices,
            x,
            out,
            order,
        } => {
            let order = mem.dst::<u32>(*order);
            macro_rules! run_sort {
                ($x:expr, $key:expr, $nan:expr) => {{
                    let xs = $x;
                    if *indices {
                        let out = mem.dst::<i64>(*out);
                        sort::sort_lines(*shape, *descending, xs, $key, $nan, order, |o, i, ord| {
                            for (r, k) in ord[..*keep].iter().enumerate() {
                                out[(o * keep + r) * shape.inner + i] = i64::from(*k);
                            }
                        })
                    } else {
                        let out = mem.dst(*out);
                        sort::sort_lines(*shape, *descending, xs, $key, $nan, order, |o, i, ord| {
                            for (r, k) in ord[..*keep].iter().enumerate() {
                                out[(o * keep + r) * shape.inner + i] =
                                    xs[(o * shape.len + *k as usize) * shape.inner + i];
                            }
                        })
                    }
                }};
            }
            if dtype.is_float() {
                with_float!(dtype, T => run_sort!(mem.src::<T>(*x), |v: T| v.load(), |k: &<T as FloatStore>::Acc| k.is_nan()))
            } else {
                with_int!(dtype, T => run_sort!(mem.src::<T>(*x), |v: T| v, |_: &T| false))
            }
        }
        Thunk::Rope {
            dtype,
            dims,
            offset,
            x,
            out,
        } => {
            let offset = match offset {
                None => 0,
                Some((v, DType::I32)) => i64::from(mem.src::<i32>(*v)[0]),
                Some((v, _)) => mem.src::<i64>(*v)[0],
            };
            with_float!(dtype, T => nn::rope::<T>(dims, offset, mem.src(*x), mem.dst(*out)))
        }
        Thunk::Attention(a) => with_float!(a.dtype, T => {
            let mask = match a.mask {
                None => MaskValues::None,
                Some((v, DType::Bool)) => MaskValues::Bool(mem.src::<u8>(v)),
                Some((v, _)) => MaskValues::Additive(mem.src::<T>(v)),
            };
            nn::attention::<T>(&a.dims, mem.src(a.q), mem.src(a.k), mem.src(a.v), mask, mem.dst(a.out), mem.dst(a.scores))
        }),
        Thunk::Pool {
            dtype,
            window,
            max,
            x,
            out,
        } => {
            with_float!(dtype, T => nn::pool::<T>(window, *max, mem.src(*x), mem.dst(*out)))
        }
        Thunk::Conv(c) => with_float!(c.dtype, T => conv::<T>(mem, c)),
        Thunk::Solve {
            dtype,
            batch,
            n,
            k,
            a,
            b,
            out,
            work,
            op,
        } => {
            let result = with_float!(dtype, T => linalg::solve::<T>(*batch, *n, *k, mem.src(*a), mem.src(*b), mem.dst(*out), mem.dst(*work)));
            result.map_err(|()| RunError::Singular { op: op.clone() })?;
        }
        Thunk::QuantizedMatMul {
            dtype,
            dims,
            x,
            w,
            scales,
            biases,
            out,
        } => {
            with_float!(dtype, T => linalg::quantized_matmul::<T>(dims, mem.src(*x), mem.src(*w), mem.src(*scales), mem.src(*biases), mem.dst(*out)))
        }
        Thunk::Custom(c) => {
            let items = c
                .inputs
                .iter()
                .map(|(v, d, shape)| TensorRef {
                    dtype: *d,
                    shape,
                    bytes: mem.src::<u8>(View {
                        len: v.len * d.size_bytes(),
                        ..*v
                    }),
                })
                .collect();
            let output = TensorMut {
                dtype: c.out_dtype,
                shape: &c.out_shape,
                bytes: mem.dst::<u8>(View {
                    len: c.out.len * c.out_dtype.size_bytes(),
                    ..c.out
                }),
            };
            c.kernel
                .compute(&c.attrs, &CustomInputs { items }, output)
                .map_err(|message| RunError::Custom {
                    name: c.name.clone(),
                    message,
                })?;
        }
    }
    Ok(())
}

/// Convolution: per image and group, patches into `col`, then `out = W · col` by GEMM.
fn conv<S: FloatStore>(mem: &Memory, c: &ConvThunk)
where
    S::Acc: GemmAcc,
{
    let w = &c.window;
    let (x, weights, out) = (mem.src::<S>(c.x), mem.src::<S>(c.w), mem.dst::<S>(c.out));
    let (col, scratch) = (mem.dst::<S>(c.col), mem.dst::<S::Acc>(c.scratch));
    let mut wide = c.wide_out.map(|v| mem.dst::<S::Acc>(v));
    let kernel = S::Acc::micro_kernel();
    let cg = w.channels / c.groups;
    let og = c.out_channels / c.groups;
    let (plane_in, plane_out) = (w.in_hw[0] * w.in_hw[1], w.out_hw[0] * w.out_hw[1]);
    let taps = cg * w.kernel[0] * w.kernel[1];
    for n in 0..w.batch {
        for g in 0..c.groups {
            let image = &x[(n * w.channels + g * cg) * plane_in..][..cg * plane_in];
            nn::im2col(w, image, cg, col);
            let wg = &weights[g * og * taps..][..og * taps];
            let dst = &mut out[(n * c.out_channels + g * og) * plane_out..][..og * plane_out];
            match wide.as_deref_mut() {
                None => gemm::gemm(
                    &c.gemm,
                    kernel,
                    wg,
                    col,
                    bytemuck::cast_slice_mut(dst),
                    scratch,
                    None,
                ),
                Some(wd) => {
                    gemm::gemm(&c.gemm, kernel, wg, col, wd, scratch, None);
                    for (d, v) in dst.iter_mut().zip(wd.iter()) {
                        *d = S::store(*v);
                    }
                }
            }
            if let Some(bias) = c.bias {
                let bias = mem.src::<S>(bias);
                for (o, row) in dst.chunks_mut(plane_out).enumerate() {
                    let b = bias[g * og + o].load();
                    for v in row {
                        *v = S::store(v.load() + b);
                    }
                }
            }
        }
    }
}

/// The low bytes of `pattern` as a word.
fn word_from_pattern<W: Word>(pattern: u64) -> W {
    let bytes = pattern.to_le_bytes();
    bytemuck::pod_read_unaligned(&bytes[..size_of::<W>()])
}
