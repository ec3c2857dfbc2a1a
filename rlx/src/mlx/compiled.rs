//! Compiled mode: the lowering traced once by `mlx::compile`, then called per run.
//!
//! MLX calls back into Rust while it traces. The callback catches panics and keeps typed
//! errors aside, so neither a panic nor a Rust error crosses the C++ frames as anything but
//! a status code.

use std::ffi::{CString, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

use rlx_mlx_sys as sys;

use super::array::{Array, MlxError};
use super::lower::{IndexCheck, Lowered, Lowering};
use crate::backend::RunError;
use crate::ir::NodeId;

/// What the callback reads, owned by the compiled function.
struct Context {
    lowering: Arc<Lowering>,
    /// A typed error the last trace failed with.
    error: Mutex<Option<RunError>>,
}

/// A traced graph: call it with the leaves, get the outputs and index checks.
pub(crate) struct Function {
    raw: NonNull<sys::rlx_mlx_function>,
    context: *const Context,
    n_outputs: usize,
    /// The gathers and scatters, whose index checks follow the outputs.
    checks: Vec<NodeId>,
    /// Held through each call: a failed trace leaves its typed error in `context` for the
    /// call that made it to take.
    calls: Mutex<()>,
}

// SAFETY: the function handle is a heap object of the shim that MLX may call from any
// thread (MLX keeps a trace cache per thread; the shim records each one under its own
// lock); `context` points into a `Box` the function owns, only read through `&` (its
// mutable part is behind a `Mutex`). Calls are serialized by `calls`.
unsafe impl Send for Function {}
// SAFETY: as above: `call` is the only method that takes `&self`, and it holds `calls`.
unsafe impl Sync for Function {}

impl Drop for Function {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rlx_mlx_compile` and is freed once; the shim then
        // calls `drop_context` on the boxed context.
        unsafe { sys::rlx_mlx_function_free(self.raw.as_ptr()) }
    }
}

/// # Safety
/// `userdata` must be the `Context` leaked by `Function::new`.
unsafe extern "C" fn drop_context(userdata: *mut c_void) {
    // SAFETY: per the contract, this is the box `Function::new` leaked, dropped once.
    drop(unsafe { Box::from_raw(userdata.cast::<Context>()) });
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `text` is NUL-terminated and lives for the call; the shim copies it.
    unsafe { sys::rlx_mlx_set_last_error(text.as_ptr()) }
}

/// # Safety
/// Called by the shim with the `Context` of `Function::new`, `n_inputs` live borrowed
/// handles, and room for `n_outputs` handles.
unsafe extern "C" fn lower_callback(
    userdata: *mut c_void,
    inputs: *const *mut sys::rlx_mlx_array,
    n_inputs: usize,
    outputs: *mut *mut sys::rlx_mlx_array,
    n_outputs: usize,
) -> c_int {
    // SAFETY: per the contract `userdata` is a live `Context`.
    let context = unsafe { &*userdata.cast::<Context>() };
    // SAFETY: per the contract `inputs` holds `n_inputs` handles.
    let borrowed = unsafe { std::slice::from_raw_parts(inputs, n_inputs) };
    let traced = catch_unwind(AssertUnwindSafe(|| -> Result<Vec<Array>, RunError> {
        let mut leaves = Vec::with_capacity(borrowed.len());
        for &raw in borrowed {
            leaves.push(Array::clone_raw(raw).map_err(|e| RunError::Backend {
                backend: super::NAME,
                message: e.message,
            })?);
        }
        let lowered = context.lowering.lower(&leaves)?;
        let mut arrays = lowered.outputs;
        for check in lowered.checks {
            arrays.push(check.bad);
            arrays.push(check.indices);
        }
        arrays.extend(lowered.any_bad);
        Ok(arrays)
    }));
    let message = match traced {
        Ok(Ok(arrays)) if arrays.len() == n_outputs => {
            // SAFETY: per the contract `outputs` has room for `n_outputs` handles; the
            // shim takes ownership of each.
            let slots = unsafe { std::slice::from_raw_parts_mut(outputs, n_outputs) };
            for (slot, array) in slots.iter_mut().zip(arrays) {
                *slot = array.into_raw();
            }
            return 0;
        }
        Ok(Ok(arrays)) => format!(
            "the lowering made {} arrays, the compiled function has {n_outputs}",
            arrays.len()
        ),
        Ok(Err(e)) => {
            let text = e.to_string();
            if let Ok(mut slot) = context.error.lock() {
                *slot = Some(e);
            }
            text
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_string());
            format!("the lowering callback panicked: {what}")
        }
    };
    set_last_error(&message);
    1
}

/// The traced function's results: the graph's outputs and writes, each index check's flag and
/// indices, and with any check the run's combined flag.
fn traced_outputs(outputs: usize, checks: usize) -> usize {
    outputs + 2 * checks + usize::from(checks > 0)
}

impl Function {
    pub(crate) fn new(lowering: Arc<Lowering>) -> Result<Function, MlxError> {
        let checks = lowering.index_nodes();
        let n_outputs = lowering.graph.outputs().len() + lowering.graph.writes().len();
        let total = traced_outputs(n_outputs, checks.len());
        let context = Box::into_raw(Box::new(Context {
            lowering,
            error: Mutex::new(None),
        }));
        let mut raw = ptr::null_mut();
        // SAFETY: `context` is a leaked box the shim hands back to `lower_callback` and,
        // once compiled, frees through `drop_context`; `raw` is a valid slot.
        let status = unsafe {
            sys::rlx_mlx_compile(
                lower_callback,
                context.cast(),
                Some(drop_context),
                total,
                false,
                &mut raw,
            )
        };
        if status != 0 {
            // SAFETY: on failure the shim made no function, so the box is still ours.
            drop(unsafe { Box::from_raw(context) });
            return Err(Array::last_error());
        }
        let raw = NonNull::new(raw).ok_or_else(|| MlxError::new("compile made no function"))?;
        Ok(Function {
            raw,
            context,
            n_outputs,
            checks,
            calls: Mutex::new(()),
        })
    }

    /// Runs the traced graph (tracing it on the first call).
    pub(crate) fn call(&self, leaves: &[Array]) -> Result<Lowered, RunError> {
        let _one_at_a_time = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let inputs: Vec<*mut sys::rlx_mlx_array> = leaves.iter().map(Array::ptr).collect();
        let total = traced_outputs(self.n_outputs, self.checks.len());
        let mut raw = vec![ptr::null_mut(); total];
        // SAFETY: the function and every input handle are live; `raw` has room for
        // `total` handles, which the shim fills only on success.
        let status = unsafe {
            sys::rlx_mlx_function_call(
                self.raw.as_ptr(),
                inputs.as_ptr(),
                inputs.len(),
                raw.as_mut_ptr(),
                total,
            )
        };
        let arrays: Vec<Option<Array>> = raw.into_iter().map(Array::from_raw).collect();
        if status != 0 {
            // SAFETY: `context` lives as long as the function.
            let context = unsafe { &*self.context };
            let typed = context.error.lock().ok().and_then(|mut e| e.take());
            return Err(typed.unwrap_or_else(|| RunError::Backend {
                backend: super::NAME,
                message: Array::last_error().message,
            }));
        }
        let mut arrays = arrays.into_iter().map(|a| {
            a.ok_or_else(|| RunError::Backend {
                backend: super::NAME,
                message: "the compiled function left an output unset".into(),
            })
        });
        let outputs = arrays
            .by_ref()
            .take(self.n_outputs)
            .collect::<Result<Vec<_>, _>>()?;
        let mut checks = Vec::with_capacity(self.checks.len());
        for &node in &self.checks {
            let bad = arrays.next().expect("sized above")?;
            let indices = arrays.next().expect("sized above")?;
            checks.push(IndexCheck { node, bad, indices });
        }
        let any_bad = arrays.next().transpose()?;
        Ok(Lowered {
            outputs,
            checks,
            any_bad,
        })
    }
}
