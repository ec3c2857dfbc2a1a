//! Thunks: pre-resolved kernel calls, and the memory they address.
//!
//! A thunk is plain data chosen when a plan is made: the kernel, element counts, layouts and
//! byte offsets. Running one is a `match` and a call, with no lookup, allocation or shape
//! arithmetic.

use half::{bf16, f16};

use super::kernels::cast::{BoolByte, CastFrom};
use super::kernels::copy::{self, Word};
use super::kernels::elementwise as ew;
use super::kernels::gemm::{self, GemmAcc, GemmPlan};
use super::kernels::layout::Strided;
use super::kernels::numeric::FloatStore;
use super::kernels::reduce::{self, Axis3};
use crate::backend::RunError;
use crate::ir::{BinaryOp, CompareOp, DType, ReduceOp, UnaryOp};

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
    /// Packing scratch, in the accumulator type.
    pub scratch: View,
    /// For f16/bf16: the f32 result of one batch entry before it is narrowed.
    pub wide_out: Option<View>,
}

impl Thunk {
    /// The views this thunk writes, then the views it reads.
    pub(crate) fn views(&self) -> (Vec<View>, Vec<View>) {
        match self {
            Thunk::Unary { x, out, .. }
            | Thunk::Cast { x, out, .. }
            | Thunk::Reduce { x, out, .. }
            | Thunk::ArgReduce { x, out, .. }
            | Thunk::Cumsum { x, out, .. }
            | Thunk::Softmax { x, out, .. } => (vec![*out], vec![*x]),
            Thunk::Binary { a, b, out, .. } | Thunk::Compare { a, b, out, .. } => {
                (vec![*out], vec![*a, *b])
            }
            Thunk::Select {
                cond, a, b, out, ..
            } => (vec![*out], vec![*cond, *a, *b]),
            Thunk::MatMul(m) => {
                let mut w = vec![m.out, m.scratch];
                w.extend(m.wide_out);
                (w, vec![m.a, m.b])
            }
            Thunk::Norm {
                x,
                weight,
                bias,
                out,
                ..
            } => {
                let mut r = vec![*x];
                r.extend(weight.iter().chain(bias.iter()).copied());
                (vec![*out], r)
            }
            Thunk::Copy { src, dst, .. } => (vec![*dst], vec![*src]),
            Thunk::Fill { dst, .. } => (vec![*dst], vec![]),
            Thunk::Gather {
                data, indices, out, ..
            } => (vec![*out], vec![*data, *indices]),
        }
    }

    /// The dtype of each view in [`Thunk::views`] order, for byte ranges.
    pub(crate) fn view_dtypes(&self) -> (Vec<DType>, Vec<DType>) {
        let f32s = |n: usize| vec![DType::F32; n];
        match self {
            Thunk::Unary { dtype, .. }
            | Thunk::Reduce { dtype, .. }
            | Thunk::Cumsum { dtype, .. }
            | Thunk::Softmax { dtype, .. } => (vec![*dtype], vec![*dtype]),
            Thunk::Cast { from, to, .. } => (vec![*to], vec![*from]),
            Thunk::ArgReduce { dtype, .. } => (vec![DType::I64], vec![*dtype]),
            Thunk::Binary { dtype, .. } => (vec![*dtype], vec![*dtype; 2]),
            Thunk::Compare { dtype, .. } => (vec![DType::Bool], vec![*dtype; 2]),
            Thunk::Select { dtype, .. } => (vec![*dtype], vec![DType::Bool, *dtype, *dtype]),
            Thunk::MatMul(m) => {
                let acc = if m.dtype == DType::F64 {
                    DType::F64
                } else {
                    DType::F32
                };
                let mut w = vec![m.dtype, acc];
                if m.wide_out.is_some() {
                    w.extend(f32s(1));
                }
                (w, vec![m.dtype; 2])
            }
            Thunk::Norm {
                dtype,
                weight,
                bias,
                ..
            } => {
                let n = 1 + usize::from(weight.is_some()) + usize::from(bias.is_some());
                (vec![*dtype], vec![*dtype; n])
            }
            Thunk::Copy { dtype, .. } => (vec![*dtype], vec![*dtype]),
            Thunk::Fill { dtype, .. } => (vec![*dtype], vec![]),
            Thunk::Gather { dtype, index, .. } => (vec![*dtype], vec![*dtype, *index]),
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
            DType::Bool => {
                type $t = BoolByte;
                $body
            }
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
    let scratch = mem.dst::<S::Acc>(m.scratch);
    let kernel = S::Acc::micro_kernel();
    let tile = m.plan.dims.m * m.plan.dims.n;
    let out = mem.dst::<S>(m.out);
    let mut wide = m.wide_out.map(|v| mem.dst::<S::Acc>(v));
    for (i, &(ao, bo)) in m.batches.iter().enumerate() {
        let dst = &mut out[i * tile..(i + 1) * tile];
        match wide.as_deref_mut() {
            None => {
                // Storage and accumulator are the same type here (f32 or f64).
                let dst: &mut [S::Acc] = bytemuck::cast_slice_mut(dst);
                gemm::gemm(&m.plan, kernel, &a[ao..], &b[bo..], dst, scratch);
            }
            Some(w) => {
                gemm::gemm(&m.plan, kernel, &a[ao..], &b[bo..], w, scratch);
                for (d, v) in dst.iter_mut().zip(w.iter()) {
                    *d = S::store(*v);
                }
            }
        }
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
    }
    Ok(())
}

/// The low bytes of `pattern` as a word.
fn word_from_pattern<W: Word>(pattern: u64) -> W {
    let bytes = pattern.to_le_bytes();
    bytemuck::pod_read_unaligned(&bytes[..size_of::<W>()])
}
