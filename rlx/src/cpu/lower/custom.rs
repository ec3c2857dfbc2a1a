//! The thunk of a user op: a registered [`CustomKernel`] and its operands.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Lower, LowerInput, boxed};
use crate::backend::RunError;
use crate::cpu::custom::{CustomInputs, CustomKernel, TensorMut};
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, AttrValue, DType};
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

/// The kernel the backend's registry holds for the op's name.
impl Lower for ir::Custom {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Custom {
            name: self.name.clone(),
            kernel: n.custom.clone().expect("compile checks the registry"),
            attrs: self.attrs.clone(),
            inputs: n
                .views
                .iter()
                .zip(&n.dtypes)
                .zip(&n.shapes)
                .map(|((v, d), s)| (*v, *d, s.to_vec()))
                .collect(),
            out: n.out,
            out_dtype: n.dtype(),
            out_shape: n.out_shape.to_vec(),
        })]
    }
}
