//! A safe handle over one MLX array, with the ops of the shim as methods.
//!
//! Every method builds a lazy MLX array; nothing is computed until [`Array::eval`] or a
//! read. IR enums cross to the shim as its named codes ([`super::codes`]). Custom ops
//! ([`super::MlxCustomOp`]) compose these methods.

use std::ffi::{CStr, c_int};
use std::ptr::{self, NonNull};

use rlx_mlx_sys as sys;

use super::codes;
use super::device::{self, Device};
use crate::ir::DType;
use crate::tensor::{HostTensor, TensorRef};

/// A failure inside MLX (its exception's message) or at the shim boundary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MLX: {message}")]
pub struct MlxError {
    /// What MLX (or the shim) reported.
    pub message: String,
}

impl MlxError {
    pub(crate) fn new(message: impl Into<String>) -> MlxError {
        MlxError {
            message: message.into(),
        }
    }

    /// The shim's last error on this thread.
    fn last() -> MlxError {
        // SAFETY: the shim returns a NUL-terminated thread-local string, valid until the
        // next shim call on this thread; it is copied out at once.
        let text = unsafe { CStr::from_ptr(sys::rlx_mlx_last_error()) };
        let text = text.to_string_lossy();
        MlxError::new(if text.is_empty() {
            "MLX failed without a message".to_string()
        } else {
            text.into_owned()
        })
    }
}

pub(crate) fn check(status: c_int) -> Result<(), MlxError> {
    if status == 0 {
        Ok(())
    } else {
        Err(MlxError::last())
    }
}

/// Runs a shim call that writes one array handle.
pub(super) fn make(
    call: impl FnOnce(*mut *mut sys::rlx_mlx_array) -> c_int,
) -> Result<Array, MlxError> {
    let mut out = ptr::null_mut();
    check(call(&mut out))?;
    NonNull::new(out)
        .map(Array)
        .ok_or_else(|| MlxError::new("the shim reported success but made no array"))
}

/// Runs a shim call that writes an array where it applies and leaves its slot null
/// elsewhere (a kernel of ours that the caller replaces with MLX's ops).
pub(super) fn make_optional(
    call: impl FnOnce(*mut *mut sys::rlx_mlx_array) -> c_int,
) -> Result<Option<Array>, MlxError> {
    let mut out = ptr::null_mut();
    let status = call(&mut out);
    // Wrapped before the status is checked, so a result is freed either way.
    let made = Array::from_raw(out);
    check(status)?;
    Ok(made)
}

/// Runs a shim call that writes an array and an out-of-range flag.
pub(super) fn make_checked(
    call: impl FnOnce(*mut *mut sys::rlx_mlx_array, *mut *mut sys::rlx_mlx_array) -> c_int,
) -> Result<(Array, Array), MlxError> {
    let mut out = ptr::null_mut();
    let mut bad = ptr::null_mut();
    let status = call(&mut out, &mut bad);
    // Wrap before checking so a partial result is freed either way.
    let out = NonNull::new(out).map(Array);
    let bad = NonNull::new(bad).map(Array);
    check(status)?;
    match (out, bad) {
        (Some(o), Some(b)) => Ok((o, b)),
        _ => Err(MlxError::new("the shim reported success but made no array")),
    }
}

pub(super) fn dims_i64(dims: &[usize]) -> Vec<i64> {
    dims.iter().map(|&d| d as i64).collect()
}

pub(super) fn ints(values: &[usize]) -> Vec<i32> {
    values.iter().map(|&v| v as i32).collect()
}

/// One MLX array. Cloning shares the array (a reference-count bump).
///
/// ```no_run
/// use rlx::mlx::Array;
/// use rlx::tensor::HostTensor;
/// use rlx::ir::UnaryOp;
///
/// let x = Array::from_tensor(HostTensor::from_vec(vec![-1.0f32, 2.0], [2])?.view())?;
/// let y = x.unary(UnaryOp::Relu)?;
/// assert_eq!(y.to_host()?.as_slice::<f32>()?, &[0.0, 2.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Array(NonNull<sys::rlx_mlx_array>);

// SAFETY: an MLX array is a reference-counted descriptor (`std::shared_ptr` inside); moving
// the handle to another thread moves only that reference, and MLX synchronizes its
// scheduler and allocator internally.
unsafe impl Send for Array {}

impl Drop for Array {
    fn drop(&mut self) {
        // SAFETY: the handle came from the shim and is freed exactly once, here.
        unsafe { sys::rlx_mlx_array_free(self.0.as_ptr()) }
    }
}

impl Clone for Array {
    fn clone(&self) -> Array {
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_array_clone(self.ptr(), out) })
            .expect("cloning an MLX array only bumps a reference count")
    }
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.dtype(), self.shape()) {
            (Ok(d), Ok(s)) => write!(f, "mlx::Array({d}{s:?})"),
            _ => f.write_str("mlx::Array(?)"),
        }
    }
}

impl Array {
    pub(crate) fn ptr(&self) -> *mut sys::rlx_mlx_array {
        self.0.as_ptr()
    }

    /// A new handle to the array behind a borrowed raw handle.
    pub(crate) fn clone_raw(raw: *mut sys::rlx_mlx_array) -> Result<Array, MlxError> {
        // SAFETY: the caller lends a live handle for the call; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_array_clone(raw, out) })
    }

    /// The shim's last error on this thread.
    pub(crate) fn last_error() -> MlxError {
        MlxError::last()
    }

    /// Takes ownership of a handle the shim made; `None` for null.
    pub(crate) fn from_raw(raw: *mut sys::rlx_mlx_array) -> Option<Array> {
        NonNull::new(raw).map(Array)
    }

    /// Hands the handle over to the shim (which then owns it).
    pub(crate) fn into_raw(self) -> *mut sys::rlx_mlx_array {
        let raw = self.ptr();
        std::mem::forget(self);
        raw
    }

    /// A copy of host data, for MLX's preferred device ([`Device::preferred`]): on a CUDA
    /// GPU it is copied to device memory, where the GPU's kernels read it fastest.
    pub fn from_tensor(t: TensorRef<'_>) -> Result<Array, MlxError> {
        Array::from_tensor_on(t, Device::preferred())
    }

    /// A copy of host data for `device`.
    pub(crate) fn from_tensor_on(t: TensorRef<'_>, device: Device) -> Result<Array, MlxError> {
        let shape = dims_i64(t.shape);
        // SAFETY: `bytes` and `shape` are live slices with the lengths passed.
        make(|out| unsafe {
            sys::rlx_mlx_array_from_bytes(
                t.bytes.as_ptr().cast(),
                t.bytes.len(),
                shape.as_ptr(),
                shape.len(),
                codes::dtype(t.dtype),
                device::code(device),
                out,
            )
        })
    }

    /// The element type.
    pub fn dtype(&self) -> Result<DType, MlxError> {
        let mut code: sys::rlx_mlx_dtype = 0;
        // SAFETY: the handle is live; the out-pointers are valid or null.
        check(unsafe {
            sys::rlx_mlx_array_info(self.ptr(), &mut code, ptr::null_mut(), ptr::null_mut(), 0)
        })?;
        codes::dtype_of(code)
            .ok_or_else(|| MlxError::new(format!("MLX dtype {code} has no RLX dtype")))
    }

    /// The dims.
    pub fn shape(&self) -> Result<Vec<usize>, MlxError> {
        let mut ndim = 0usize;
        // SAFETY: as in `dtype`.
        check(unsafe {
            sys::rlx_mlx_array_info(self.ptr(), ptr::null_mut(), &mut ndim, ptr::null_mut(), 0)
        })?;
        let mut dims = vec![0i64; ndim];
        // SAFETY: `dims` has room for `ndim` values.
        check(unsafe {
            sys::rlx_mlx_array_info(
                self.ptr(),
                ptr::null_mut(),
                &mut ndim,
                dims.as_mut_ptr(),
                dims.len(),
            )
        })?;
        Ok(dims.into_iter().map(|d| d as usize).collect())
    }

    /// Evaluates arrays together (one graph walk).
    pub fn eval(arrays: &[&Array]) -> Result<(), MlxError> {
        let raw: Vec<*mut sys::rlx_mlx_array> = arrays.iter().map(|a| a.ptr()).collect();
        // SAFETY: every handle is live for the call.
        check(unsafe { sys::rlx_mlx_eval(raw.as_ptr(), raw.len()) })
    }

    /// Evaluates and copies the values into `out`, reusing its storage when it fits.
    pub fn read_into(&self, out: &mut HostTensor, scratch: &mut Vec<u8>) -> Result<(), MlxError> {
        let dtype = self.dtype()?;
        let shape = self.shape()?;
        let n = shape.iter().product::<usize>() * dtype.size_bytes();
        out.reshape_for(dtype, &shape);
        // Straight into the tensor where its bytes may hold anything; bools go through
        // `scratch`, since MLX's bool bytes are only trusted after a check.
        if let Some(bytes) = out.data_mut().bytes_mut() {
            // SAFETY: `bytes` has exactly `n` writable bytes; the shim checks the count.
            return check(unsafe {
                sys::rlx_mlx_array_read(self.ptr(), bytes.as_mut_ptr().cast(), n)
            });
        }
        scratch.resize(n, 0);
        // SAFETY: `scratch` has exactly `n` writable bytes; the shim checks the count.
        check(unsafe { sys::rlx_mlx_array_read(self.ptr(), scratch.as_mut_ptr().cast(), n) })?;
        out.data_mut().copy_from_bytes(scratch);
        Ok(())
    }

    /// Evaluates and copies the values to the host.
    pub fn to_host(&self) -> Result<HostTensor, MlxError> {
        let mut out = HostTensor::zeros(DType::F32, [0]);
        self.read_into(&mut out, &mut Vec::new())?;
        Ok(out)
    }
}

/// Array handles alive in this process (every [`Array`] and the shim's own). Tests use it
/// to prove nothing leaks.
pub fn live_arrays() -> i64 {
    // SAFETY: reads an atomic counter.
    unsafe { sys::rlx_mlx_live_arrays() }
}

/// Waits for every queued kernel of the default stream and for the bookkeeping after them
/// (on CUDA, the release of the arrays a kernel kept alive while it ran).
pub(crate) fn synchronize() -> Result<(), MlxError> {
    // SAFETY: no arguments; the shim catches MLX's exceptions.
    check(unsafe { sys::rlx_mlx_synchronize() })
}

/// One of MLX's allocator counters.
fn memory_counter(counter: sys::rlx_mlx_memory_counter) -> Result<usize, MlxError> {
    let mut out = 0usize;
    // SAFETY: `out` is a valid slot for the count.
    check(unsafe { sys::rlx_mlx_memory(counter, &mut out) })?;
    Ok(out)
}

/// Bytes MLX's allocator holds for live arrays now (on a GPU, device memory), over the
/// whole process.
///
/// ```no_run
/// let bytes = rlx::mlx::active_memory()?;
/// # Ok::<(), rlx::mlx::MlxError>(())
/// ```
pub fn active_memory() -> Result<usize, MlxError> {
    memory_counter(sys::RLX_MLX_MEMORY_ACTIVE)
}

/// The most bytes MLX's allocator held at once since the last [`reset_peak_memory`].
pub fn peak_memory() -> Result<usize, MlxError> {
    memory_counter(sys::RLX_MLX_MEMORY_PEAK)
}

/// Starts [`peak_memory`] again from what is held now.
pub fn reset_peak_memory() -> Result<(), MlxError> {
    memory_counter(sys::RLX_MLX_MEMORY_RESET_PEAK).map(|_| ())
}

/// Whether [`MlxMode::Compiled`](super::MlxMode::Compiled) fuses kernels (the default). This
/// is process-wide MLX state. With fusion off, compiled functions are still traced and
/// simplified once per binding but run MLX's stock kernels; on Linux CPU that avoids
/// running `g++` at run time, and costs no speed there (MLX's CPU fusion measured no gain).
pub fn set_kernel_fusion(enabled: bool) -> Result<(), MlxError> {
    // SAFETY: sets a global mode inside MLX; no pointers involved.
    check(unsafe { sys::rlx_mlx_set_fusion(enabled) })
}

/// The MLX version RLX was built against, e.g. `0.32.4`.
pub fn version() -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(sys::rlx_mlx_version()) }
        .to_string_lossy()
        .into_owned()
}

/// The default MLX device: `cpu` or `gpu`.
pub fn device_name() -> Result<String, MlxError> {
    let mut buf = [0u8; 16];
    // SAFETY: `buf` has the length passed; the shim NUL-terminates.
    check(unsafe { sys::rlx_mlx_device_name(buf.as_mut_ptr().cast(), buf.len()) })?;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Which BLAS MLX's matmuls call on this build.
pub fn blas() -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(sys::rlx_mlx_blas()) }
        .to_string_lossy()
        .into_owned()
}
