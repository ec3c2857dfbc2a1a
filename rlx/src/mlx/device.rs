//! Where MLX computes: its devices, and the float precision of matrix products on a GPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use rlx_mlx_sys as sys;

use super::array::{MlxError, check};

/// A kind of MLX device.
///
/// ```
/// use rlx::mlx::Device;
/// // The CPU is always there; a GPU when MLX was built for one and the machine has it.
/// assert!(Device::Cpu.is_available());
/// let default = Device::preferred();
/// assert!(default == Device::Gpu || !Device::Gpu.is_available());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// MLX's CPU backend.
    Cpu,
    /// The first GPU (Metal on macOS, CUDA with the `mlx-cuda` build on Linux).
    Gpu,
}

impl Device {
    /// How many devices of this kind MLX can use here: 0 GPUs with a CPU-only MLX, or
    /// without a GPU or its driver.
    pub fn count(self) -> usize {
        let mut count = 0i32;
        // SAFETY: writes one i32 through a valid pointer.
        match check(unsafe { sys::rlx_mlx_device_count(code(self), &mut count) }) {
            Ok(()) => usize::try_from(count).unwrap_or(0),
            Err(_) => 0,
        }
    }

    /// Whether MLX can compute on this device here.
    pub fn is_available(self) -> bool {
        self.count() > 0
    }

    /// The GPU when there is one, else the CPU: what [`MlxBackend`](super::MlxBackend)
    /// uses unless told otherwise.
    pub fn preferred() -> Device {
        // The devices a process has do not change: asked once (arrays made from host data
        // ask on every call).
        static PREFERRED: OnceLock<Device> = OnceLock::new();
        *PREFERRED.get_or_init(|| {
            if Device::Gpu.is_available() {
                Device::Gpu
            } else {
                Device::Cpu
            }
        })
    }

    /// `"cpu"` or `"gpu"`.
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub(crate) fn code(device: Device) -> sys::rlx_mlx_device_kind {
    match device {
        Device::Cpu => sys::RLX_MLX_DEVICE_CPU,
        Device::Gpu => sys::RLX_MLX_DEVICE_GPU,
    }
}

fn from_code(code: sys::rlx_mlx_device_kind) -> Device {
    match code {
        sys::RLX_MLX_DEVICE_GPU => Device::Gpu,
        _ => Device::Cpu,
    }
}

/// How an executable computes float32 graphs.
///
/// ```
/// use rlx::mlx::{MlxBackend, MlxMode, Precision};
/// let exact = MlxBackend::new(MlxMode::Lazy); // Precision::F32: the numbers of the CPU backend
/// let fast = MlxBackend::new(MlxMode::Lazy).with_precision(Precision::BF16);
/// assert_eq!(exact.precision(), Precision::F32);
/// assert_eq!(fast.precision(), Precision::BF16);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Full float32 everywhere (the default). On an NVIDIA GPU this needs the process to
    /// run with TF32 off, which RLX arranges unless `MLX_ENABLE_TF32=1` is set.
    #[default]
    F32,
    /// Float32 data, but matrix products, convolutions and attention on an NVIDIA GPU
    /// round their inputs to TF32 (10 mantissa bits), as cuBLAS's fast mode does: several
    /// times faster, relative errors around 1e-3. MLX decides this once per process, so
    /// the process must start with `MLX_ENABLE_TF32=1`. Elsewhere it is plain float32.
    Tf32,
    /// float32 graphs computed in float16: weights are cast once when bound, inputs on
    /// each run, outputs cast back to float32. Relative errors around 1e-3.
    F16,
    /// As [`Precision::F16`] in bfloat16 (float32's range, 8 mantissa bits): relative
    /// errors around 1e-2.
    BF16,
}

/// Whether this process runs float32 matrix products on an NVIDIA GPU in TF32: fixed at
/// start from `MLX_ENABLE_TF32` (RLX's default, when it is unset, is off).
pub fn tf32_enabled() -> bool {
    // SAFETY: reads the environment; no pointers involved.
    unsafe { sys::rlx_mlx_tf32() }
}

/// Whether this process records its MLX kernels on an NVIDIA GPU into CUDA graphs: MLX
/// reads `MLX_USE_CUDA_GRAPHS` once, at the process's first GPU kernel. RLX's default is
/// off (encoders run faster launching kernels one by one) unless the environment sets the
/// variable; [`set_cuda_graphs`] changes it before the first GPU run.
///
/// ```
/// // Off unless the environment or set_cuda_graphs said otherwise.
/// let graphs = rlx::mlx::cuda_graphs();
/// # let _ = graphs;
/// ```
pub fn cuda_graphs() -> bool {
    // SAFETY: reads the environment; no pointers involved.
    unsafe { sys::rlx_mlx_cuda_graphs() }
}

/// Chooses whether this process records its MLX kernels on an NVIDIA GPU into CUDA graphs
/// (decision 040): on pays when a run is hundreds of kernels of a few microseconds, as a
/// decoding step is (a median 1.26x tokens/s at batch 1 on an H200), and costs encoders
/// up to a quarter. MLX fixes the choice at the process's first GPU kernel, so call this
/// at the start of `main`, before other threads run (it writes the process environment).
/// An `MLX_USE_CUDA_GRAPHS` set in the environment before the process started wins: the
/// call changes nothing then. No effect on other devices. Returns the setting now in
/// force.
///
/// # Errors
/// When an RLX executable or value has already used the GPU in this process: the choice is
/// made then.
///
/// ```
/// // A binary that decodes turns graphs on before building anything.
/// let graphs = rlx::mlx::set_cuda_graphs(true)?;
/// assert_eq!(graphs, rlx::mlx::cuda_graphs());
/// # Ok::<(), rlx::mlx::MlxError>(())
/// ```
pub fn set_cuda_graphs(enabled: bool) -> Result<bool, MlxError> {
    let _held = GPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if GPU_USED.load(Ordering::Acquire) {
        if cuda_graphs() == enabled {
            return Ok(enabled);
        }
        return Err(MlxError::new(
            "CUDA graphs are chosen before the process's first GPU run, and the GPU has run",
        ));
    }
    // SAFETY: writes the environment with the GPU lock held, so no RLX call is building or
    // evaluating on the GPU (the only place MLX reads this variable); the caller's contract
    // (start of main) covers the rest of the process.
    unsafe { sys::rlx_mlx_set_cuda_graphs(enabled) };
    Ok(cuda_graphs())
}

/// Held through every call that builds or evaluates on a GPU (see [`gpu_turn`]).
static GPU_LOCK: Mutex<()> = Mutex::new(());

/// Set by the first [`gpu_turn`] on a GPU: from then on MLX may have fixed its per-process
/// settings.
static GPU_USED: AtomicBool = AtomicBool::new(false);

/// On a GPU, one call at a time: the calls of this process that build or evaluate MLX
/// arrays on the GPU take turns. MLX 0.32's CUDA backend captures CUDA graphs per stream,
/// and runs from several threads at once aborted the process ("cudaStreamEndCapture ...
/// operation failed due to a previous error during capture", inside MLX, on an H100); the
/// GPU is the parallel resource there anyway. On the CPU device runs stay parallel.
pub(crate) fn gpu_turn(device: Device) -> Option<std::sync::MutexGuard<'static, ()>> {
    (device == Device::Gpu).then(|| {
        let held = GPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        GPU_USED.store(true, Ordering::Release);
        held
    })
}

/// MLX builds ops on one process-wide default device. Executables on different devices
/// may lower concurrently, so each lowering holds this lock while the default is its own.
static DEVICE_LOCK: Mutex<()> = Mutex::new(());

/// Runs `f` (which builds MLX ops) with `device` as MLX's default device, then restores the
/// previous default. Ops keep the device they were built on, so evaluation needs no lock.
/// With `exact_halves` off, ops on half-precision arrays run MLX's half kernels instead of
/// computing in float32 (see [`Precision::F16`]).
pub(crate) fn on_device<R>(
    device: Device,
    exact_halves: bool,
    f: impl FnOnce() -> R,
) -> Result<R, MlxError> {
    /// Puts the previous settings back, also when `f` panics.
    struct Restore {
        device: Option<Device>,
        exact_halves: bool,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(device) = self.device {
                // SAFETY: sets MLX's default device to one it had chosen before.
                unsafe { sys::rlx_mlx_set_default_device(code(device)) };
            }
            // SAFETY: sets a thread-local flag of the shim.
            unsafe { sys::rlx_mlx_set_exact_halves(self.exact_halves) };
        }
    }
    let _held = DEVICE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut previous = sys::RLX_MLX_DEVICE_CPU;
    // SAFETY: writes one code through a valid pointer.
    check(unsafe { sys::rlx_mlx_default_device(&mut previous) })?;
    let previous = from_code(previous);
    if previous != device {
        // SAFETY: sets MLX's default device; no pointers involved.
        check(unsafe { sys::rlx_mlx_set_default_device(code(device)) })?;
    }
    let _restore = Restore {
        device: (previous != device).then_some(previous),
        // SAFETY: sets a thread-local flag of the shim.
        exact_halves: unsafe { sys::rlx_mlx_set_exact_halves(exact_halves) },
    };
    Ok(f())
}
