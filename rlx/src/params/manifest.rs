//! The manifest: every weight a model declares, and the checkpoint tensors they come from.

use std::fmt;

use crate::gguf::GgmlType;
use crate::ir::{DType, Shape, TensorType};

/// One part of a checkpoint tensor cut into equal pieces along an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// The axis of the checkpoint tensor; negative counts from the end.
    pub axis: isize,
    /// Which piece, from 0.
    pub index: usize,
    /// How many pieces.
    pub parts: usize,
}

/// One declared weight.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// The graph param's name (the checkpoint key, with `[i/n]` appended for a split part).
    pub name: String,
    /// The checkpoint key the weight is read from.
    pub key: String,
    /// Declared element type.
    pub dtype: DType,
    /// Declared shape, in the model's layout.
    pub shape: Shape,
    /// The checkpoint stores the last two dims swapped.
    pub transpose: bool,
    /// The weight is one piece of the checkpoint tensor.
    pub split: Option<Split>,
    /// The weight is kept in this GGUF block format: a `u8` param `[rows, row bytes]`
    /// holding the file tensor's blocks as they are (the file's dims are `[rows, values]`).
    pub format: Option<GgmlType>,
}

impl ParamSpec {
    /// The graph name of a param read from `key` with `split`.
    pub fn name_for(key: &str, split: Option<Split>) -> String {
        match split {
            Some(s) => format!("{key}[{}/{}]", s.index, s.parts),
            None => key.to_string(),
        }
    }

    /// The declared dims, if all are static.
    pub fn static_shape(&self) -> Option<Vec<usize>> {
        self.shape.static_dims()
    }

    /// The dims the checkpoint tensor must have, if the declared shape is static.
    pub fn file_shape(&self) -> Option<Vec<usize>> {
        let mut dims = self.static_shape()?;
        if let Some(format) = self.format {
            let [rows, bytes] = dims[..] else {
                return None;
            };
            return Some(vec![
                rows,
                bytes / format.block_bytes() * format.block_values(),
            ]);
        }
        if self.transpose {
            let n = dims.len();
            if n < 2 {
                return None;
            }
            dims.swap(n - 2, n - 1);
        }
        if let Some(split) = self.split {
            let axis = resolve_axis(split.axis, dims.len())?;
            dims[axis] *= split.parts;
        }
        Some(dims)
    }
}

/// `axis` (negative from the end) as an index into `rank` dims.
pub(crate) fn resolve_axis(axis: isize, rank: usize) -> Option<usize> {
    let rank = rank as isize;
    let a = if axis < 0 { axis + rank } else { axis };
    (0..rank).contains(&a).then_some(a as usize)
}

/// A checkpoint tensor the model reads: its key, dtype and dims, and the params cut from it.
#[derive(Clone, Debug, PartialEq)]
pub struct FileTensor {
    /// The checkpoint key.
    pub key: String,
    /// Expected element type.
    pub dtype: DType,
    /// Expected dims.
    pub shape: Vec<usize>,
    /// The GGUF block format it is kept in, for a param of blocks.
    pub format: Option<GgmlType>,
    /// Indices into [`Manifest::params`] of the params read from it.
    pub params: Vec<usize>,
}

/// Every weight of a model: names, shapes, dtypes and their checkpoint layout.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    /// The declared weights, in declaration order.
    pub params: Vec<ParamSpec>,
}

impl Manifest {
    /// The param named `name`.
    pub fn get(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The checkpoint tensors the params are read from, in declaration order. Params of one
    /// key must agree on its dtype and dims (the builder enforces it when they are declared).
    pub fn file_tensors(&self) -> Vec<FileTensor> {
        let mut files: Vec<FileTensor> = Vec::new();
        for (i, p) in self.params.iter().enumerate() {
            if let Some(f) = files.iter_mut().find(|f| f.key == p.key) {
                f.params.push(i);
                continue;
            }
            files.push(FileTensor {
                key: p.key.clone(),
                dtype: p.dtype,
                shape: p.file_shape().unwrap_or_default(),
                format: p.format,
                params: vec![i],
            });
        }
        files
    }

    /// Total number of weight elements.
    pub fn element_count(&self) -> usize {
        self.params
            .iter()
            .filter_map(|p| p.static_shape())
            .map(|s| s.iter().product::<usize>())
            .sum()
    }
}

impl fmt::Display for Manifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.params {
            write!(f, "{}: {}{}", p.name, p.dtype, p.shape)?;
            if p.transpose || p.split.is_some() {
                let dims = p.file_shape().unwrap_or_default();
                let file = TensorType::new(p.dtype, dims.as_slice());
                write!(f, " (checkpoint {} is {file}", p.key)?;
                if let Some(s) = p.split {
                    write!(f, ", part {} of {} along axis {}", s.index, s.parts, s.axis)?;
                }
                if p.transpose {
                    f.write_str(", transposed")?;
                }
                f.write_str(")")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
