//! Raw bindings to RLX's C ABI shim over Apple's MLX (`cpp/rlx_mlx.h`).
//!
//! The contract, which the safe wrapper in `rlx::mlx` relies on:
//! - arrays are opaque handles; every call that makes one writes a fresh handle the caller
//!   owns and frees with [`rlx_mlx_array_free`] (freeing null is fine);
//! - every fallible call returns 0 on success; on failure the C++ exception's message is
//!   kept in a thread-local string that [`rlx_mlx_last_error`] returns;
//! - data crosses as raw little-endian bytes in the array's own dtype;
//! - every enum crossing the ABI is a `typedef enum` of the header; its Rust type and
//!   constants are generated from the header, so the two cannot disagree.
//!
//! The build script finds MLX (`MLX_DIR`, the pinned wheel in `vendor/mlx`, or an installed
//! Python `mlx`), compiles the shim and links `libmlx`. It publishes the library directory
//! as `DEP_MLX_LIBDIR` for packages that need an rpath.
//!
//! ```
//! use std::ffi::CStr;
//! // SAFETY: the version string is static and NUL-terminated.
//! let version = unsafe { CStr::from_ptr(rlx_mlx_sys::rlx_mlx_version()) };
//! assert!(!version.to_bytes().is_empty());
//! ```

#![allow(missing_docs, non_camel_case_types)] // one-to-one with the documented C header

use std::ffi::{c_char, c_int, c_void};

/// An MLX array behind a handle.
#[repr(C)]
pub struct rlx_mlx_array {
    _private: [u8; 0],
}

/// A compiled function behind a handle.
#[repr(C)]
pub struct rlx_mlx_function {
    _private: [u8; 0],
}

/// A distributed group behind a handle.
#[repr(C)]
pub struct rlx_mlx_group {
    _private: [u8; 0],
}

/// Two groups of heads packed along the last axis of an array, and how they are rotated
/// (`rlx_mlx_head_groups` of `cpp/rlx_mlx.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rlx_mlx_head_groups {
    pub q_col: i64,
    pub q_heads: i32,
    pub k_col: i64,
    pub k_heads: i32,
    pub head_dim: i32,
    pub dims: i32,
    pub base: f64,
    pub scale: f64,
    pub traditional: bool,
}

// The ABI's enums and their codes, generated from `cpp/rlx_mlx.h` by the build script.
include!(concat!(env!("OUT_DIR"), "/codes.rs"));

/// The lowering callback of [`rlx_mlx_compile`].
pub type rlx_mlx_lower_fn = unsafe extern "C" fn(
    userdata: *mut c_void,
    inputs: *const *mut rlx_mlx_array,
    n_inputs: usize,
    outputs: *mut *mut rlx_mlx_array,
    n_outputs: usize,
) -> c_int;

type Array = rlx_mlx_array;

unsafe extern "C" {
    pub fn rlx_mlx_last_error() -> *const c_char;
    pub fn rlx_mlx_set_last_error(message: *const c_char);
    pub fn rlx_mlx_version() -> *const c_char;
    pub fn rlx_mlx_device_name(buf: *mut c_char, len: usize) -> c_int;
    pub fn rlx_mlx_device_count(kind: rlx_mlx_device_kind, count: *mut i32) -> c_int;
    pub fn rlx_mlx_set_default_device(kind: rlx_mlx_device_kind) -> c_int;
    pub fn rlx_mlx_default_device(kind: *mut rlx_mlx_device_kind) -> c_int;
    pub fn rlx_mlx_tf32() -> bool;
    pub fn rlx_mlx_cuda_graphs() -> bool;
    pub fn rlx_mlx_set_cuda_graphs(enabled: bool) -> bool;
    pub fn rlx_mlx_set_exact_halves(exact: bool) -> bool;
    pub fn rlx_mlx_set_fusion(enabled: bool) -> c_int;
    pub fn rlx_mlx_live_arrays() -> i64;
    pub fn rlx_mlx_memory(counter: rlx_mlx_memory_counter, out: *mut usize) -> c_int;
    pub fn rlx_mlx_blas() -> *const c_char;

    pub fn rlx_mlx_array_free(a: *mut Array);
    pub fn rlx_mlx_array_clone(a: *const Array, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_array_from_bytes(
        data: *const c_void,
        nbytes: usize,
        shape: *const i64,
        ndim: usize,
        dtype: rlx_mlx_dtype,
        device: rlx_mlx_device_kind,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_array_info(
        a: *const Array,
        dtype: *mut rlx_mlx_dtype,
        ndim: *mut usize,
        dims: *mut i64,
        cap: usize,
    ) -> c_int;
    pub fn rlx_mlx_array_read(a: *const Array, dst: *mut c_void, nbytes: usize) -> c_int;
    pub fn rlx_mlx_k_major(x: *const Array, out: *mut *mut Array) -> c_int;

    pub fn rlx_mlx_eval(arrays: *const *mut Array, n: usize) -> c_int;
    pub fn rlx_mlx_async_eval(arrays: *const *mut Array, n: usize) -> c_int;
    pub fn rlx_mlx_synchronize() -> c_int;
    pub fn rlx_mlx_eval_within(arrays: *const *mut Array, n: usize, timeout_ms: i64) -> c_int;
    pub fn rlx_mlx_transport_available(transport: rlx_mlx_transport) -> bool;
    pub fn rlx_mlx_group_init(transport: rlx_mlx_transport, out: *mut *mut rlx_mlx_group) -> c_int;
    pub fn rlx_mlx_group_free(g: *mut rlx_mlx_group);
    pub fn rlx_mlx_group_rank(g: *const rlx_mlx_group, rank: *mut i32, size: *mut i32) -> c_int;
    pub fn rlx_mlx_all_sum(g: *const rlx_mlx_group, x: *const Array, out: *mut *mut Array)
    -> c_int;
    pub fn rlx_mlx_all_gather(
        g: *const rlx_mlx_group,
        x: *const Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_send(
        g: *const rlx_mlx_group,
        x: *const Array,
        dst: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_recv(
        g: *const rlx_mlx_group,
        shape: *const i64,
        ndim: usize,
        dtype: rlx_mlx_dtype,
        src: i32,
        out: *mut *mut Array,
    ) -> c_int;

    pub fn rlx_mlx_compile(
        lower: rlx_mlx_lower_fn,
        userdata: *mut c_void,
        drop: Option<unsafe extern "C" fn(*mut c_void)>,
        n_outputs: usize,
        shapeless: bool,
        out: *mut *mut rlx_mlx_function,
    ) -> c_int;
    pub fn rlx_mlx_function_call(
        f: *mut rlx_mlx_function,
        inputs: *const *mut Array,
        n_inputs: usize,
        outputs: *mut *mut Array,
        n_outputs: usize,
    ) -> c_int;
    pub fn rlx_mlx_function_free(f: *mut rlx_mlx_function);

    pub fn rlx_mlx_unary(kind: rlx_mlx_unary_op, x: *const Array, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_binary(
        kind: rlx_mlx_binary_op,
        a: *const Array,
        b: *const Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_compare(
        kind: rlx_mlx_compare_op,
        a: *const Array,
        b: *const Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_where(
        cond: *const Array,
        a: *const Array,
        b: *const Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_cast(x: *const Array, dtype: rlx_mlx_dtype, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_matmul(
        a: *const Array,
        b: *const Array,
        transpose_a: bool,
        transpose_b: bool,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_matmul_bias(
        a: *const Array,
        b: *const Array,
        bias: *const Array,
        transpose_a: bool,
        transpose_b: bool,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_reduce(
        kind: rlx_mlx_reduce_op,
        x: *const Array,
        axes: *const i32,
        n_axes: usize,
        keep_dims: bool,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_arg_reduce(
        kind: rlx_mlx_arg_reduce_op,
        x: *const Array,
        axis: i32,
        keep_dims: bool,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_cumsum(
        x: *const Array,
        axis: i32,
        exclusive: bool,
        reverse: bool,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_softmax(x: *const Array, axis: i32, log: bool, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_layer_norm(
        x: *const Array,
        weight: *const Array,
        bias: *const Array,
        eps: f64,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_rms_norm(
        x: *const Array,
        weight: *const Array,
        eps: f64,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_add_rms_norm(
        a: *const Array,
        b: *const Array,
        weight: *const Array,
        eps: f64,
        sum: *mut *mut Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_reshape(
        x: *const Array,
        shape: *const i64,
        ndim: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_permute(
        x: *const Array,
        perm: *const i32,
        ndim: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_slice(
        x: *const Array,
        start: *const i64,
        stop: *const i64,
        step: *const i64,
        ndim: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_concat(
        xs: *const *mut Array,
        n: usize,
        axis: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_broadcast(
        x: *const Array,
        shape: *const i64,
        ndim: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_pad(
        x: *const Array,
        low: *const i64,
        high: *const i64,
        ndim: usize,
        value: *const Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_gather(
        data: *const Array,
        indices: *const Array,
        axis: i32,
        out: *mut *mut Array,
        bad: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_gather_matmul(
        x: *const Array,
        w: *const Array,
        indices: *const Array,
        transpose_b: bool,
        out: *mut *mut Array,
        bad: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_scatter_matmul(
        x: *const Array,
        g: *const Array,
        indices: *const Array,
        groups: i32,
        transpose: bool,
        out: *mut *mut Array,
        bad: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_scatter_add(
        data: *const Array,
        indices: *const Array,
        updates: *const Array,
        axis: i32,
        out: *mut *mut Array,
        bad: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_window_start(
        offsets: *const Array,
        shape: *const i64,
        window: *const i64,
        ndim: usize,
        axes: *const i32,
        n_axes: usize,
        start: *mut *mut Array,
        bad: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_dynamic_slice_at(
        x: *const Array,
        start: *const Array,
        axes: *const i32,
        n_axes: usize,
        sizes: *const i64,
        ndim: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_slice_update_at(
        x: *const Array,
        update: *const Array,
        start: *const Array,
        axes: *const i32,
        n_axes: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_attention(
        q: *const Array,
        k: *const Array,
        v: *const Array,
        scale: f64,
        mask_kind: rlx_mlx_mask_kind,
        window: i64,
        mask: *const Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_attention_prefix(
        q: *const Array,
        k: *const Array,
        v: *const Array,
        scale: f64,
        length: *const Array,
        mask_kind: rlx_mlx_mask_kind,
        window: i64,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_rope(
        x: *const Array,
        dims: i32,
        base: f64,
        scale: f64,
        traditional: bool,
        offset: *const Array,
        periods: *const Array,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_rope_heads(
        x: *const Array,
        groups: *const rlx_mlx_head_groups,
        offset: *const Array,
        periods: *const Array,
        q_out: *mut *mut Array,
        k_out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_conv(
        x: *const Array,
        w: *const Array,
        bias: *const Array,
        stride: *const i32,
        pad_low: *const i32,
        pad_high: *const i32,
        dilation: *const i32,
        spatial: usize,
        groups: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_conv_transpose(
        x: *const Array,
        w: *const Array,
        bias: *const Array,
        stride: *const i32,
        crop_low: *const i32,
        crop_high: *const i32,
        output_padding: *const i32,
        dilation: *const i32,
        spatial: usize,
        groups: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_pool(
        kind: rlx_mlx_pool_kind,
        x: *const Array,
        kernel: *const i32,
        stride: *const i32,
        pad_low: *const i32,
        pad_high: *const i32,
        spatial: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_sort(
        x: *const Array,
        axis: i32,
        descending: bool,
        output: rlx_mlx_sort_output,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_topk(
        x: *const Array,
        k: i32,
        axis: i32,
        output: rlx_mlx_sort_output,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_solve(a: *const Array, b: *const Array, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_delta_rule(xs: *const *mut Array, n: usize, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_delta_rule_grad(xs: *const *mut Array, n: usize, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_quantized_matmul(
        x: *const Array,
        w: *const Array,
        scales: *const Array,
        biases: *const Array,
        bits: i32,
        group_size: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_block_matmul(
        x: *const Array,
        w: *const Array,
        format: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_block_prepared_parts(format: i32, count: *mut usize) -> c_int;
    pub fn rlx_mlx_block_prepare(
        w: *const Array,
        format: i32,
        out: *mut *mut Array,
        count: *mut usize,
    ) -> c_int;
    pub fn rlx_mlx_block_matmul_prepared(
        x: *const Array,
        parts: *const *mut Array,
        count: usize,
        format: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_gated_product(
        x: *const Array,
        parts: *const *mut Array,
        count: usize,
        format: i32,
        gate_col: i64,
        up_col: i64,
        width: i64,
        act: i32,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_rotated_product(
        x: *const Array,
        parts: *const *mut Array,
        count: usize,
        format: i32,
        groups: *const rlx_mlx_head_groups,
        v_col: i64,
        offset: *const Array,
        periods: *const Array,
        q_out: *mut *mut Array,
        k_out: *mut *mut Array,
        v_out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_block_dequantize(w: *const Array, format: i32, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_random_uniform(
        seed: *const Array,
        stream: u32,
        shape: *const i64,
        ndim: usize,
        out: *mut *mut Array,
    ) -> c_int;
    pub fn rlx_mlx_after(x: *const Array, token: *const Array, out: *mut *mut Array) -> c_int;
    pub fn rlx_mlx_dequantize(
        w: *const Array,
        scales: *const Array,
        biases: *const Array,
        bits: i32,
        group_size: i32,
        out: *mut *mut Array,
    ) -> c_int;
}
