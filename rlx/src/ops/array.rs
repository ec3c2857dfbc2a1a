//! The values the float64 reference computes on: any dtype held as `f64`, row-major.
//!
//! Floats are kept unrounded (the reference is exact up to float64), integers are wrapped
//! into their dtype's range after each op as the kernels wrap them, and `bool` is 0 or 1.
//! Integers beyond 2^53 lose precision; the tolerance leaves such values unjudged.

use crate::ir::DType;
use crate::tensor::{HostTensor, TensorData};

/// A tensor of `dtype` whose elements are held as float64.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Array {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

/// The dtype and dims an op's result has.
#[derive(Clone, Debug)]
pub(crate) struct Out {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl Out {
    /// The result whose element at each multi-index is `f(index)`, stored in the dtype.
    pub fn fill(&self, mut f: impl FnMut(&[usize]) -> f64) -> Array {
        let mut data = Vec::with_capacity(self.shape.iter().product());
        for_each_index(&self.shape, |idx| data.push(store(self.dtype, f(idx))));
        Array {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data,
        }
    }

    /// The result holding `data` (row-major), each value stored in the dtype.
    pub fn holding(&self, data: Vec<f64>) -> Array {
        Array {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data: data.into_iter().map(|v| store(self.dtype, v)).collect(),
        }
    }
}

impl Array {
    /// The values of `t`, widened.
    pub fn of(t: &HostTensor) -> Array {
        Array {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            data: t.to_f64_vec(),
        }
    }

    /// A host tensor of the values: floats as float64, other dtypes as themselves.
    pub fn into_tensor(self) -> HostTensor {
        let d = self.data;
        let data = match self.dtype {
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => TensorData::F64(d),
            DType::I32 => TensorData::I32(d.iter().map(|v| *v as i32).collect()),
            DType::I64 => TensorData::I64(d.iter().map(|v| *v as i64).collect()),
            DType::I8 => TensorData::I8(d.iter().map(|v| *v as i8).collect()),
            DType::U8 => TensorData::U8(d.iter().map(|v| *v as u8).collect()),
            DType::Bool => TensorData::Bool(d.iter().map(|v| *v != 0.0).collect()),
        };
        HostTensor::from_data(data, self.shape).expect("the data fills the shape")
    }

    /// Row-major strides of the shape.
    pub fn strides(&self) -> Vec<usize> {
        strides(&self.shape)
    }

    /// The element at a multi-index of the shape.
    pub fn at(&self, idx: &[usize]) -> f64 {
        let mut flat = 0;
        for (i, d) in idx.iter().zip(&self.shape) {
            flat = flat * d + i;
        }
        self.data[flat]
    }

    /// The element a broadcast result reads at its index `out` (numpy rules: leading axes
    /// missing, size-1 axes stretched).
    pub fn at_broadcast(&self, out: &[usize]) -> f64 {
        let lead = out.len() - self.shape.len();
        let mut flat = 0;
        for (a, d) in self.shape.iter().enumerate() {
            let i = if *d == 1 { 0 } else { out[lead + a] };
            flat = flat * d + i;
        }
        self.data[flat]
    }

    /// The values along `axis` at the other axes of `idx` (its entry on `axis` ignored).
    pub fn line(&self, idx: &[usize], axis: usize) -> Vec<f64> {
        let mut at = idx.to_vec();
        (0..self.shape[axis])
            .map(|k| {
                at[axis] = k;
                self.at(&at)
            })
            .collect()
    }
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Calls `f` with every multi-index of `shape` in row-major order (none when a dim is 0,
/// one empty index for a scalar).
pub(crate) fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0; shape.len()];
    loop {
        f(&idx);
        let mut a = shape.len();
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// `v` as a value of `dtype` holds it: floats unchanged, integers wrapped into range as
/// two's-complement arithmetic wraps (from an integral `v`), `bool` as 0 or 1.
pub(crate) fn store(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => v,
        DType::Bool => f64::from(u8::from(v != 0.0)),
        DType::I64 => wrap_i64(v) as f64,
        DType::I32 => f64::from(wrap_i64(v) as i32),
        DType::I8 => f64::from(wrap_i64(v) as i8),
        DType::U8 => f64::from(wrap_i64(v) as u8),
    }
}

/// An integral `v` wrapped into `i64` as two's-complement arithmetic would.
fn wrap_i64(v: f64) -> i64 {
    // 2^63 itself is where a saturating cast to `i64` lands (`i64::MAX` has no float64 of
    // its own), so it saturates; only what lies beyond wraps.
    if v.abs() <= 9_223_372_036_854_775_808.0 {
        v as i64
    } else {
        // Only the low 64 bits survive a wrapping op; float64 holds too few of them here
        // to say which, and the tolerance leaves such values unjudged.
        (v.rem_euclid(18_446_744_073_709_551_616.0)) as u64 as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_run_row_major_and_skip_empty_shapes() {
        let mut seen = Vec::new();
        for_each_index(&[2, 3], |i| seen.push(i.to_vec()));
        assert_eq!(seen.len(), 6);
        assert_eq!(seen[4], vec![1, 1]);
        let mut scalar = 0;
        for_each_index(&[], |_| scalar += 1);
        assert_eq!(scalar, 1);
        let mut empty = 0;
        for_each_index(&[3, 0], |_| empty += 1);
        assert_eq!(empty, 0);
    }

    #[test]
    fn integers_wrap_into_their_dtype() {
        assert_eq!(store(DType::I8, 130.0), -126.0);
        assert_eq!(store(DType::U8, -1.0), 255.0);
        assert_eq!(store(DType::I32, 2_147_483_648.0), -2_147_483_648.0);
        assert_eq!(store(DType::Bool, -3.0), 1.0);
        assert_eq!(store(DType::F32, 0.1), 0.1);
        assert_eq!(store(DType::I64, i64::MAX as f64) as i64, i64::MAX);
    }
}
