//! The direct loops of a decode step: a block of one or two query rows against its keys,
//! scores as one dot product per key and values as one weighted pass over the value rows
//! (GEMM would pack the keys and values for a single pass over them).
//!
//! f32 rows on x86 run through explicit AVX2/FMA code (the autovectorized generic loops
//! computed the sixteen lanes of a dot product two at a time). Each score and each output
//! is a fixed function of its query row and key/value rows, whatever block, thread or
//! position they come in, so a decode step equals the same attention recomputed from
//! scratch to the bit.

#[cfg(target_arch = "x86_64")]
use std::any::TypeId;

use super::attention_rows::sum_lanes;
use super::numeric::{FloatStore, Real};
use super::simd::VectorKernel;
#[cfg(target_arch = "x86_64")]
use super::simd::{Isa, isa};

/// `Σ a_i b_i` in the accumulator type, in 16 lanes (lane `l` sums features `l`, `l + 16`,
/// .. in order), the lanes summed pairwise, then the features past the last 16.
#[inline(always)]
fn dot<T: FloatStore>(a: &[T], b: &[T]) -> T::Acc {
    let mut lanes = [<T::Acc as Real>::ZERO; 16];
    let (ca, ra) = a.as_chunks::<16>();
    let (cb, rb) = b.as_chunks::<16>();
    for (x, y) in ca.iter().zip(cb) {
        for ((l, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *l += x.load() * y.load();
        }
    }
    let mut tail = <T::Acc as Real>::ZERO;
    for (x, y) in ra.iter().zip(rb) {
        tail += x.load() * y.load();
    }
    sum_lanes(lanes) + tail
}

/// `values` as f32, when `T` is f32.
#[cfg(target_arch = "x86_64")]
fn as_f32<T: 'static>(values: &[T]) -> Option<&[f32]> {
    // SAFETY: `T` is `f32` (same type id), so this is the same slice.
    (TypeId::of::<T>() == TypeId::of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), values.len()) })
}

/// `values` as f32, when `T` is f32.
#[cfg(target_arch = "x86_64")]
fn as_f32_mut<T: 'static>(values: &mut [T]) -> Option<&mut [f32]> {
    if TypeId::of::<T>() != TypeId::of::<f32>() {
        return None;
    }
    // SAFETY: `T` is `f32` (same type id), so this is the same slice, borrowed mutably once.
    Some(unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), values.len()) })
}

/// Whether the explicit x86 kernels below may run.
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    isa() >= Isa::Avx2
}

/// A block's scores `q · kᵀ` as direct dot products, one per key (a struct, so that the
/// loops are compiled inside each instruction set's copy).
pub(super) struct DirectScores<'a, T: FloatStore> {
    pub probs: &'a mut [T::Acc],
    pub keys: usize,
    pub q_block: &'a [T],
    pub k_block: &'a [T],
    pub strides: [usize; 3],
    pub head_dim: usize,
}

impl<T: FloatStore> VectorKernel for DirectScores<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        #[cfg(target_arch = "x86_64")]
        if has_avx2()
            && let (Some(q), Some(k)) = (as_f32(self.q_block), as_f32(self.k_block))
            && let Some(probs) = as_f32_mut(&mut *self.probs)
        {
            let [q_stride, k_stride, _] = self.strides;
            for (r, p) in probs.chunks_exact_mut(self.keys).enumerate() {
                let q_row = &q[r * q_stride..][..self.head_dim];
                // SAFETY: AVX2 and FMA are present (`has_avx2`).
                unsafe { x86::scores(q_row, k, k_stride, p) };
            }
            return;
        }
        for (r, p) in self.probs.chunks_exact_mut(self.keys).enumerate() {
            let q_row = &self.q_block[r * self.strides[0]..][..self.head_dim];
            for (j, s) in p.iter_mut().enumerate() {
                *s = dot(q_row, &self.k_block[j * self.strides[1]..][..self.head_dim]);
            }
        }
    }
}

/// A block's `P · V` added to the running outputs, key by key.
pub(super) struct DirectValues<'a, T: FloatStore> {
    pub acc: &'a mut [T::Acc],
    pub probs: &'a [T::Acc],
    pub keys: usize,
    pub v_block: &'a [T],
    pub v_stride: usize,
    pub value_dim: usize,
}

impl<T: FloatStore> VectorKernel for DirectValues<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let dv = self.value_dim;
        let (v, stride) = (self.v_block, self.v_stride);
        #[cfg(target_arch = "x86_64")]
        if has_avx2()
            && let (Some(v), Some(probs)) = (as_f32(v), as_f32(self.probs))
            && let Some(acc) = as_f32_mut(&mut *self.acc)
        {
            for (p, o) in probs.chunks_exact(self.keys).zip(acc.chunks_exact_mut(dv)) {
                // SAFETY: AVX2 and FMA are present (`has_avx2`).
                unsafe { x86::add_values(o, p, v, stride) };
            }
            return;
        }
        // Sixty-four outputs at a time stay in registers through every key (the same sums,
        // in the same order, as adding row by row into memory), so each value row is read
        // in one pass; then sixteen, then one.
        for (p, o) in self
            .probs
            .chunks_exact(self.keys)
            .zip(self.acc.chunks_exact_mut(dv))
        {
            let (wide, rest) = o.as_chunks_mut::<64>();
            for (c, out) in wide.iter_mut().enumerate() {
                add_weighted_rows::<T, 64>(out, p, v, stride, c * 64);
            }
            let at = wide.len() * 64;
            let (narrow, tail) = rest.as_chunks_mut::<16>();
            for (c, out) in narrow.iter_mut().enumerate() {
                add_weighted_rows::<T, 16>(out, p, v, stride, at + c * 16);
            }
            let at = at + narrow.len() * 16;
            if tail.is_empty() {
                continue;
            }
            for (j, pj) in p.iter().enumerate() {
                let row = &v[j * stride + at..][..tail.len()];
                for (a, x) in tail.iter_mut().zip(row) {
                    *a += *pj * x.load();
                }
            }
        }
    }
}

/// `out += Σ_j probs[j] · v[j · stride + at ..][..N]`, key by key, the `N` sums held in
/// registers.
#[inline(always)]
fn add_weighted_rows<T: FloatStore, const N: usize>(
    out: &mut [T::Acc; N],
    probs: &[T::Acc],
    v: &[T],
    stride: usize,
    at: usize,
) {
    let mut lanes = *out;
    for (j, pj) in probs.iter().enumerate() {
        let row: &[T; N] = v[j * stride + at..][..N].try_into().expect("N values");
        for (a, x) in lanes.iter_mut().zip(row) {
            *a += *pj * x.load();
        }
    }
    *out = lanes;
}

/// The f32 loops with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `out[j] = q · k[j · stride ..][..q.len()]` for every `j < out.len()`: lane `l` of 16
    /// accumulates features `l`, `l + 16`, .. with fused multiply-adds, the lanes are summed
    /// pairwise (as `sum_lanes`), then the features past the last 16 are added.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scores(q: &[f32], k: &[f32], stride: usize, out: &mut [f32]) {
        let d = q.len();
        let chunks = d / 16;
        for (j, s) in out.iter_mut().enumerate() {
            let row = &k[j * stride..][..d];
            let (mut low, mut high) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for c in 0..chunks {
                // SAFETY: features 16c..16c+16 lie inside `q` and `row` (c < d / 16).
                unsafe {
                    let (q, k) = (q.as_ptr().add(16 * c), row.as_ptr().add(16 * c));
                    low = _mm256_fmadd_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k), low);
                    high =
                        _mm256_fmadd_ps(_mm256_loadu_ps(q.add(8)), _mm256_loadu_ps(k.add(8)), high);
                }
            }
            // Lanes l + l+8, then + l+4, + l+2, + l+1.
            let eight = _mm256_add_ps(low, high);
            let four = _mm_add_ps(
                _mm256_castps256_ps128(eight),
                _mm256_extractf128_ps::<1>(eight),
            );
            let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
            let one = _mm_add_ss(two, _mm_movehdup_ps(two));
            let mut tail = 0f32;
            for (x, y) in q[chunks * 16..].iter().zip(&row[chunks * 16..]) {
                tail = x.mul_add(*y, tail);
            }
            *s = _mm_cvtss_f32(one) + tail;
        }
    }

    /// `out += Σ_j probs[j] · v[j · stride ..][..out.len()]`, key by key, with fused
    /// multiply-adds: 64 outputs at a time held in registers (each value row read once),
    /// then 8, then one.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn add_values(out: &mut [f32], probs: &[f32], v: &[f32], stride: usize) {
        let dv = out.len();
        if probs.is_empty() {
            return;
        }
        assert!(
            v.len() >= (probs.len() - 1) * stride + dv,
            "value rows too short"
        );
        let mut at = 0;
        while dv - at >= 64 {
            // SAFETY: outputs at..at+64 lie inside `out`, and each row j's values
            // j*stride+at..+64 inside `v` (checked above: its last row holds dv values).
            unsafe { add_block::<8>(out.as_mut_ptr().add(at), probs, v.as_ptr().add(at), stride) };
            at += 64;
        }
        while dv - at >= 8 {
            // SAFETY: as above, for 8 outputs.
            unsafe { add_block::<1>(out.as_mut_ptr().add(at), probs, v.as_ptr().add(at), stride) };
            at += 8;
        }
        for (i, o) in out.iter_mut().enumerate().skip(at) {
            for (j, p) in probs.iter().enumerate() {
                *o = p.mul_add(v[j * stride + i], *o);
            }
        }
    }

    /// `8 · VECTORS` outputs at `out` plus the probabilities' rows of values at `v`.
    ///
    /// # Safety
    /// AVX2 and FMA; `out` holds `8 · VECTORS` values, and `v + j · stride` as many for
    /// every `j < probs.len()`.
    #[inline(always)]
    unsafe fn add_block<const VECTORS: usize>(
        out: *mut f32,
        probs: &[f32],
        v: *const f32,
        stride: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); VECTORS];
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(out.add(8 * i));
            }
            for (j, p) in probs.iter().enumerate() {
                let p = _mm256_set1_ps(*p);
                let row = v.add(j * stride);
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(p, _mm256_loadu_ps(row.add(8 * i)), *a);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.add(8 * i), *a);
            }
        }
    }
}
