//! Where MLX keeps values between runs: device arrays in [`Value`]s, and a context's
//! states.

use super::array::{Array, MlxError};
use super::backend_error;
use super::device::{self, Device};
use crate::backend::{DeviceValue, RunError, StateSpec, StateStore, Value};
use crate::ir::DType;
use crate::tensor::{HostTensor, TensorRef};

/// An MLX array in a [`Value`], with the device of the executable that made it (reading it
/// takes that device's turn).
pub(super) struct MlxValue {
    array: Array,
    device: Device,
}

impl MlxValue {
    /// `array` as a value on `device`, with the dtype and dims the array reports.
    pub(super) fn value(array: Array, device: Device) -> Result<Value, MlxError> {
        let (dtype, shape) = (array.dtype()?, array.shape()?);
        Ok(Value::on_device(dtype, shape, MlxValue { array, device }))
    }
}

impl DeviceValue for MlxValue {
    fn to_host(&self) -> Result<HostTensor, RunError> {
        let _gpu = device::gpu_turn(self.device);
        self.array.to_host().map_err(backend_error)
    }

    fn share(&self) -> Box<dyn DeviceValue> {
        let _gpu = device::gpu_turn(self.device);
        Box::new(MlxValue {
            array: self.array.clone(),
            device: self.device,
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Value {
    /// The MLX array this value holds, if it holds one.
    ///
    /// ```
    /// use rlx::backend::Value;
    /// use rlx::mlx::Array;
    /// use rlx::tensor::HostTensor;
    ///
    /// let t = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?;
    /// let on_device = Value::from(Array::from_tensor(t.view())?);
    /// assert!(on_device.mlx_array().is_some());
    /// assert!(Value::from(t).mlx_array().is_none()); // a host value
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn mlx_array(&self) -> Option<&Array> {
        self.device::<MlxValue>().map(|v| &v.array)
    }

    /// `array` as a value on this MLX value's device (else MLX's preferred one).
    pub(crate) fn with_array(&self, array: Array) -> Result<Value, MlxError> {
        let device = self
            .device::<MlxValue>()
            .map_or_else(Device::preferred, |v| v.device);
        MlxValue::value(array, device)
    }
}

impl From<Array> for Value {
    /// An MLX array as a value, on the device [`Array::from_tensor`] uses
    /// ([`Device::preferred`]), with the dtype and dims the array reports (an array that
    /// cannot report them, which a live handle always can, becomes an empty f32 value).
    fn from(array: Array) -> Value {
        let (dtype, shape) = (array.dtype(), array.shape());
        let device = Device::preferred();
        let (dtype, shape) = (dtype.unwrap_or(DType::F32), shape.unwrap_or_default());
        Value::on_device(dtype, shape, MlxValue { array, device })
    }
}

/// A context's states on MLX: one evaluated array each, on the executable's device
/// (`None`, read as zeros, after a failed run that was to write it).
pub(super) struct MlxState {
    pub(super) arrays: Vec<Option<Array>>,
    pub(super) device: Device,
}

// SAFETY: the arrays are evaluated, and only the context's owner (`&mut Context`) builds
// ops on them or replaces them; other threads never see them.
unsafe impl Sync for MlxState {}

impl StateStore for MlxState {
    fn read(&self, k: usize, spec: &StateSpec) -> Result<HostTensor, RunError> {
        let _gpu = device::gpu_turn(self.device);
        match &self.arrays[k] {
            Some(array) => array.to_host().map_err(backend_error),
            None => Ok(HostTensor::zeros(spec.dtype, spec.shape.clone())),
        }
    }

    fn write(&mut self, k: usize, value: TensorRef<'_>) -> Result<(), RunError> {
        let _gpu = device::gpu_turn(self.device);
        let array = Array::from_tensor_on(value, self.device).map_err(backend_error)?;
        Array::eval(&[&array]).map_err(backend_error)?;
        self.arrays[k] = Some(array);
        Ok(())
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}
