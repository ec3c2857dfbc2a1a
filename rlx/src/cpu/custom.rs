//! User-defined ops on the CPU: kernels registered by name.

use std::collections::BTreeMap;

use crate::ir::{AttrValue, DType};
use crate::tensor::TensorRef;

/// A tensor a custom kernel writes: dtype, dims and its row-major little-endian bytes.
#[derive(Debug)]
pub struct TensorMut<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dims.
    pub shape: &'a [usize],
    /// The bytes to fill.
    pub bytes: &'a mut [u8],
}

/// The operands of one custom-op call.
pub struct CustomInputs<'a> {
    pub(crate) items: Vec<TensorRef<'a>>,
}

impl<'a> CustomInputs<'a> {
    /// Number of operands.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True if the op has no operands.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Operand `i`.
    pub fn get(&self, i: usize) -> Option<TensorRef<'a>> {
        self.items.get(i).copied()
    }
}

/// The CPU implementation of a [`Op::Custom`](crate::ir::Op::Custom) op.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::Arc;
/// use rlx::backend::{Backend, Executable};
/// use rlx::cpu::{CpuBackend, CustomInputs, CustomKernel, TensorMut};
/// use rlx::ir::{AttrValue, TensorType};
/// use rlx::prelude::*;
/// use rlx::tensor::HostTensor;
///
/// /// `y = x * factor` for f32.
/// struct Scale;
/// impl CustomKernel for Scale {
///     fn compute(&self, attrs: &BTreeMap<String, AttrValue>, inputs: &CustomInputs<'_>, out: TensorMut<'_>) -> Result<(), String> {
///         let Some(AttrValue::Float(f)) = attrs.get("factor") else { return Err("needs `factor`".into()) };
///         let x = inputs.get(0).ok_or("needs one operand")?;
///         for (o, i) in out.bytes.chunks_exact_mut(4).zip(x.bytes.chunks_exact(4)) {
///             let v = f32::from_le_bytes(i.try_into().unwrap()) * *f as f32;
///             o.copy_from_slice(&v.to_le_bytes());
///         }
///         Ok(())
///     }
/// }
///
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [3])?;
/// let attrs = BTreeMap::from([("factor".to_string(), AttrValue::Float(2.0))]);
/// let y = b.op(Op::Custom(rlx::ir::Custom { name: "scale".into(), attrs, output: TensorType::new(DType::F32, [3]) }), &[x])?;
/// b.output("y", y)?;
/// let backend = CpuBackend::default().with_custom_op("scale", Arc::new(Scale));
/// let exe = backend.compile(&b.finish()?)?;
/// let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
/// assert_eq!(exe.run(&[("x", x.view())], &[])?[0].as_slice::<f32>()?, &[2.0, 4.0, 6.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait CustomKernel: Send + Sync {
    /// Fills `output` from `inputs`. An `Err` becomes [`RunError::Custom`](crate::backend::RunError::Custom).
    fn compute(
        &self,
        attrs: &BTreeMap<String, AttrValue>,
        inputs: &CustomInputs<'_>,
        output: TensorMut<'_>,
    ) -> Result<(), String>;
}
