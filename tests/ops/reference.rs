//! Naive N-d arrays of f64 for reference results, and random inputs.

use rlx::ir::DType;
use rlx::tensor::{HostTensor, TensorData};

pub use rlx_testkit::rng::Rng;

/// A row-major array of f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Nd {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Every multi-index of `shape`, in row-major order.
pub fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut flat| {
            let mut idx = vec![0; shape.len()];
            for a in (0..shape.len()).rev() {
                idx[a] = flat % shape[a];
                flat /= shape[a];
            }
            idx
        })
        .collect()
}

impl Nd {
    pub fn new(shape: &[usize], data: Vec<f64>) -> Nd {
        assert_eq!(shape.iter().product::<usize>(), data.len());
        Nd {
            shape: shape.to_vec(),
            data,
        }
    }

    pub fn of(t: &HostTensor) -> Nd {
        Nd::new(t.shape(), t.to_f64_vec())
    }

    pub fn at(&self, idx: &[usize]) -> f64 {
        let s = strides(&self.shape);
        self.data[idx.iter().zip(&s).map(|(i, s)| i * s).sum::<usize>()]
    }

    /// The element a broadcast output index reads (numpy rules).
    pub fn at_broadcast(&self, out_idx: &[usize]) -> f64 {
        let offset = out_idx.len() - self.shape.len();
        let idx: Vec<usize> = self
            .shape
            .iter()
            .enumerate()
            .map(|(i, d)| if *d == 1 { 0 } else { out_idx[offset + i] })
            .collect();
        self.at(&idx)
    }

    pub fn map(&self, f: impl Fn(f64) -> f64) -> Nd {
        Nd::new(&self.shape, self.data.iter().map(|v| f(*v)).collect())
    }
}

/// Numpy broadcast of shapes.
pub fn broadcast_shape(shapes: &[&[usize]]) -> Vec<usize> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..rank)
        .map(|i| {
            shapes
                .iter()
                .filter_map(|s| (i + s.len()).checked_sub(rank).map(|j| s[j]))
                .max()
                .unwrap_or(1)
        })
        .collect()
}

/// `f` applied elementwise over broadcast operands.
pub fn zip_nd(operands: &[&Nd], f: impl Fn(&[f64]) -> f64) -> Nd {
    let shapes: Vec<&[usize]> = operands.iter().map(|o| o.shape.as_slice()).collect();
    let shape = broadcast_shape(&shapes);
    let data = indices(&shape)
        .iter()
        .map(|idx| {
            let vals: Vec<f64> = operands.iter().map(|o| o.at_broadcast(idx)).collect();
            f(&vals)
        })
        .collect();
    Nd::new(&shape, data)
}

/// Random values of `dtype` in `[lo, hi]` (floats rounded to the dtype; ints integral).
pub fn random(rng: &mut Rng, dtype: DType, shape: &[usize], lo: f64, hi: f64) -> HostTensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|_| {
            if dtype.is_float() {
                rng.uniform(lo, hi)
            } else {
                rng.int(lo.ceil() as i64, hi.floor() as i64) as f64
            }
        })
        .collect();
    to_tensor(&Nd::new(shape, vals), dtype)
}

/// Converts reference values to `dtype`: floats round, integers wrap like the kernels.
pub fn to_tensor(nd: &Nd, dtype: DType) -> HostTensor {
    let d = &nd.data;
    let data = match dtype {
        DType::F32 => TensorData::F32(d.iter().map(|v| *v as f32).collect()),
        DType::F64 => TensorData::F64(d.clone()),
        DType::F16 => TensorData::F16(d.iter().map(|v| half::f16::from_f64(*v)).collect()),
        DType::BF16 => TensorData::BF16(d.iter().map(|v| half::bf16::from_f64(*v)).collect()),
        DType::I32 => TensorData::I32(d.iter().map(|v| *v as i64 as i32).collect()),
        DType::I64 => TensorData::I64(d.iter().map(|v| *v as i64).collect()),
        DType::I8 => TensorData::I8(d.iter().map(|v| *v as i64 as i8).collect()),
        DType::U8 => TensorData::U8(d.iter().map(|v| *v as i64 as u8).collect()),
        DType::Bool => TensorData::Bool(d.iter().map(|v| *v != 0.0).collect()),
    };
    HostTensor::from_data(data, nd.shape.clone()).unwrap()
}

pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
pub const INTS: [DType; 4] = [DType::I32, DType::I64, DType::I8, DType::U8];
