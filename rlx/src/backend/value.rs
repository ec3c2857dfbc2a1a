//! Values: tensors kept where a backend computes, so that one run's outputs feed the next
//! run without a trip through host memory.

use std::any::Any;
use std::borrow::Cow;

use super::RunError;
use crate::ir::DType;
use crate::tensor::{HostTensor, TensorRef};

/// A tensor where a backend keeps it: host memory for the CPU, a device array for MLX.
///
/// [`Executable::run_values`](super::Executable::run_values) takes values and returns
/// them, so the outputs of one run are the inputs of the next without a copy: on the CPU a
/// value is a host tensor, read in place; on MLX it is an array that stays in device
/// memory. Any backend takes any value (a host tensor is uploaded, a device array of
/// another backend is read back first), and [`Value::to_host`] reads one.
///
/// ```
/// use rlx::prelude::*;
/// use rlx::backend::{Backend, Executable, Value};
/// use rlx::cpu::CpuBackend;
/// use rlx::tensor::HostTensor;
///
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [2])?;
/// let y = b.add(x, x)?;
/// b.output("y", y)?;
/// let exe = CpuBackend::default().compile(&b.finish()?)?;
/// let mut x = Value::from(HostTensor::from_vec(vec![1.0f32, -2.0], [2])?);
/// for _ in 0..3 {
///     x = exe.run_values(&[("x", &x)], &[])?.remove(0); // doubled, and fed back
/// }
/// assert_eq!(x.to_host()?.as_slice::<f32>()?, &[8.0, -16.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Value {
    dtype: DType,
    shape: Vec<usize>,
    repr: Repr,
}

// Only a backend with memory of its own (MLX) makes device values; a build without one
// keeps the type so that `Value` means the same in every build.
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
enum Repr {
    Host(HostTensor),
    Device(Box<dyn DeviceValue>),
}

/// What a backend stores in a [`Value`] of its own.
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(crate) trait DeviceValue: Any + Send {
    /// A copy of the value in host memory.
    fn to_host(&self) -> Result<HostTensor, RunError>;
    /// Another handle to the same value (a reference count, not a copy of the data).
    fn share(&self) -> Box<dyn DeviceValue>;
    /// For the backend that made it, to reach its own type.
    fn as_any(&self) -> &dyn Any;
}

#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
impl Value {
    /// A value a backend keeps itself, of `dtype` and `shape`.
    pub(crate) fn on_device(dtype: DType, shape: Vec<usize>, value: impl DeviceValue) -> Value {
        Value {
            dtype,
            shape,
            repr: Repr::Device(Box::new(value)),
        }
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Its dims.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// True if it lives in host memory (what the CPU backend returns).
    pub fn is_host(&self) -> bool {
        matches!(self.repr, Repr::Host(_))
    }

    /// A copy in host memory.
    pub fn to_host(&self) -> Result<HostTensor, RunError> {
        match &self.repr {
            Repr::Host(t) => Ok(t.clone()),
            Repr::Device(d) => d.to_host(),
        }
    }

    /// The value in host memory: without a copy when it is there already.
    pub fn into_host(self) -> Result<HostTensor, RunError> {
        match self.repr {
            Repr::Host(t) => Ok(t),
            Repr::Device(d) => d.to_host(),
        }
    }

    /// The host tensor, if the value is one.
    pub fn as_host(&self) -> Option<&HostTensor> {
        match &self.repr {
            Repr::Host(t) => Some(t),
            Repr::Device(_) => None,
        }
    }

    /// The backend's own value of type `T`, if it holds one.
    pub(crate) fn device<T: 'static>(&self) -> Option<&T> {
        match &self.repr {
            Repr::Device(d) => d.as_any().downcast_ref::<T>(),
            Repr::Host(_) => None,
        }
    }

    /// A view of it in host memory: borrowed when it is there, else read into `copy`.
    pub(crate) fn host_view<'a>(&'a self) -> Result<Cow<'a, HostTensor>, RunError> {
        match &self.repr {
            Repr::Host(t) => Ok(Cow::Borrowed(t)),
            Repr::Device(d) => Ok(Cow::Owned(d.to_host()?)),
        }
    }
}

impl Clone for Value {
    /// Host values are copied; device values share their data.
    fn clone(&self) -> Value {
        Value {
            dtype: self.dtype,
            shape: self.shape.clone(),
            repr: match &self.repr {
                Repr::Host(t) => Repr::Host(t.clone()),
                Repr::Device(d) => Repr::Device(d.share()),
            },
        }
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = if self.is_host() { "host" } else { "device" };
        write!(f, "Value({place} {}{:?})", self.dtype, self.shape)
    }
}

impl From<HostTensor> for Value {
    fn from(t: HostTensor) -> Value {
        Value {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            repr: Repr::Host(t),
        }
    }
}

impl From<TensorRef<'_>> for Value {
    /// A copy of `t` in host memory.
    fn from(t: TensorRef<'_>) -> Value {
        Value::from(t.to_host())
    }
}

/// A run of a backend that computes on host tensors, on values: `run` gets `inputs` in host
/// memory (host values borrowed, device values read back) and its outputs become values.
pub(crate) fn run_on_host(
    inputs: &[(&str, &Value)],
    run: impl FnOnce(&[(&str, TensorRef<'_>)]) -> Result<Vec<HostTensor>, RunError>,
) -> Result<Vec<Value>, RunError> {
    let hosts = inputs
        .iter()
        .map(|(name, v)| Ok((*name, v.host_view()?)))
        .collect::<Result<Vec<_>, RunError>>()?;
    let views: Vec<(&str, TensorRef<'_>)> =
        hosts.iter().map(|(name, t)| (*name, t.view())).collect();
    Ok(run(&views)?.into_iter().map(Value::from).collect())
}
