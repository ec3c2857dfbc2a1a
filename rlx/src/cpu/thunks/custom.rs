//! The thunk of a user op: a registered [`CustomKernel`] and its operands.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Accesses, Kernel, Memory, View};
use crate::backend::RunError;
use crate::cpu::custom::{CustomInputs, CustomKernel, TensorMut};
use crate::ir::{AttrValue, DType};
use crate::tensor::TensorRef;

/// A registered user kernel and its operands.
#[derive(Clone)]
pub(crate) struct Custom {
    pub name: String,
    pub kernel: Arc<dyn CustomKernel>,
    pub attrs: BTreeMap<String, AttrValue>,
    pub inputs: Vec<(View, DType, Vec<usize>)>,
    pub out: View,
    pub out_dtype: DType,
    pub out_shape: Vec<usize>,
}

impl std::fmt::Debug for Custom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Custom({:?})", self.name)
    }
}

impl Kernel for Custom {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, self.out_dtype.size_bytes())],
            reads: self
                .inputs
                .iter()
                .map(|(v, d, _)| (*v, d.size_bytes()))
                .collect(),
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let items = self
            .inputs
            .iter()
            .map(|(v, d, shape)| TensorRef {
                dtype: *d,
                shape,
                bytes: mem.src::<u8>(v.as_bytes(d.size_bytes())),
            })
            .collect();
        let output = TensorMut {
            dtype: self.out_dtype,
            shape: &self.out_shape,
            bytes: mem.dst::<u8>(self.out.as_bytes(self.out_dtype.size_bytes())),
        };
        self.kernel
            .compute(&self.attrs, &CustomInputs { items }, output)
            .map_err(|message| RunError::Custom {
                name: self.name.clone(),
                message,
            })
    }
}
