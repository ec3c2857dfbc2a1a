//! The raw shim: data round trips, MLX errors come back as messages, handles are counted.

use std::ffi::CStr;
use std::ptr;

use rlx_mlx_sys::*;

fn last_error() -> String {
    // SAFETY: the shim returns a NUL-terminated thread-local string that lives until the
    // next shim call on this thread; it is copied out at once.
    unsafe { CStr::from_ptr(rlx_mlx_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn matrix(values: &[f32], rows: i64, cols: i64) -> *mut rlx_mlx_array {
    matrix_for(values, rows, cols, RLX_MLX_DEVICE_CPU)
}

/// A matrix made from host bytes for `device`.
fn matrix_for(
    values: &[f32],
    rows: i64,
    cols: i64,
    device: rlx_mlx_device_kind,
) -> *mut rlx_mlx_array {
    let mut out = ptr::null_mut();
    let shape = [rows, cols];
    // SAFETY: `values` holds rows*cols f32s; `shape` has 2 dims; `out` is a valid slot.
    let status = unsafe {
        rlx_mlx_array_from_bytes(
            values.as_ptr().cast(),
            std::mem::size_of_val(values),
            shape.as_ptr(),
            2,
            RLX_MLX_F32,
            device,
            &mut out,
        )
    };
    assert_eq!(status, 0, "{}", last_error());
    out
}

// One test, so the live-handle counts are not disturbed by tests running in parallel.
#[test]
fn shim_round_trips_catches_mlx_errors_and_frees_every_handle() {
    // SAFETY: every handle passed below was made by the shim and is freed exactly once;
    // the buffers given for reading have the byte counts passed with them.
    unsafe {
        let before = rlx_mlx_live_arrays();
        let version = CStr::from_ptr(rlx_mlx_version()).to_string_lossy();
        assert!(version.starts_with("0."), "{version}");

        let a = matrix(&[1.0, 2.0, 3.0, 4.0], 2, 2);
        let b = matrix(&[5.0, 6.0, 7.0, 8.0], 2, 2);
        let mut c = ptr::null_mut();
        assert_eq!(
            rlx_mlx_matmul(a, b, false, false, &mut c),
            0,
            "{}",
            last_error()
        );
        let mut got = [0f32; 4];
        assert_eq!(rlx_mlx_array_read(c, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [19.0, 22.0, 43.0, 50.0]);
        // A transposed operand is a strided view; reading makes it contiguous.
        let mut t = ptr::null_mut();
        assert_eq!(rlx_mlx_permute(a, [1, 0].as_ptr(), 2, &mut t), 0);
        assert_eq!(rlx_mlx_array_read(t, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [1.0, 3.0, 2.0, 4.0]);
        assert_eq!(rlx_mlx_live_arrays(), before + 4);

        // MLX throws when the op is built: the shim reports it with MLX's message.
        let wide = matrix(&[1.0; 6], 2, 3);
        let mut bad = ptr::null_mut();
        assert_ne!(rlx_mlx_matmul(wide, a, false, false, &mut bad), 0);
        assert!(bad.is_null());
        let message = last_error();
        assert!(
            message.contains("(2,3)") && message.contains("(2,2)"),
            "{message}"
        );
        // Reading with the wrong byte count is an error too, not an overrun.
        assert_ne!(rlx_mlx_array_read(c, got.as_mut_ptr().cast(), 8), 0);
        assert!(last_error().contains("bytes"), "{}", last_error());
        // A success clears the error.
        let mut copy = ptr::null_mut();
        assert_eq!(rlx_mlx_array_clone(c, &mut copy), 0);
        assert_eq!(last_error(), "");

        // A product with a bias row: [19, 22; 43, 50] + [0.5, -1].
        let bias = {
            let mut out = ptr::null_mut();
            let values = [0.5f32, -1.0];
            let shape = [2i64];
            assert_eq!(
                rlx_mlx_array_from_bytes(
                    values.as_ptr().cast(),
                    8,
                    shape.as_ptr(),
                    1,
                    RLX_MLX_F32,
                    RLX_MLX_DEVICE_CPU,
                    &mut out
                ),
                0
            );
            out
        };
        let mut biased = ptr::null_mut();
        assert_eq!(
            rlx_mlx_matmul_bias(a, b, bias, false, false, &mut biased),
            0,
            "{}",
            last_error()
        );
        assert_eq!(rlx_mlx_array_read(biased, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [19.5, 21.0, 43.5, 49.0]);
        let mut no_bias = ptr::null_mut();
        assert_ne!(
            rlx_mlx_matmul_bias(a, b, ptr::null(), false, false, &mut no_bias),
            0
        );
        assert!(no_bias.is_null() && last_error().contains("NULL"));

        // K-major storage: the same values (a transposed view of a transposed copy), and
        // products read it as they read the original.
        let mut b_k = ptr::null_mut();
        assert_eq!(rlx_mlx_k_major(b, &mut b_k), 0, "{}", last_error());
        assert_eq!(rlx_mlx_array_read(b_k, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [5.0, 6.0, 7.0, 8.0]);
        let mut c_k = ptr::null_mut();
        assert_eq!(rlx_mlx_matmul(a, b_k, false, false, &mut c_k), 0);
        assert_eq!(rlx_mlx_array_read(c_k, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [19.0, 22.0, 43.0, 50.0]);
        let mut biased_k = ptr::null_mut();
        assert_eq!(
            rlx_mlx_matmul_bias(a, b_k, bias, false, false, &mut biased_k),
            0
        );
        assert_eq!(rlx_mlx_array_read(biased_k, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [19.5, 21.0, 43.5, 49.0]);
        let mut vector_k = ptr::null_mut();
        assert_ne!(rlx_mlx_k_major(bias, &mut vector_k), 0);
        assert!(vector_k.is_null() && last_error().contains("rank"));

        // Host bytes made for the GPU (device memory on a CUDA GPU; MLX's memory where
        // there is none) hold the same values and compute the same products; an unknown
        // device code is an error.
        let a_gpu = matrix_for(&[1.0, 2.0, 3.0, 4.0], 2, 2, RLX_MLX_DEVICE_GPU);
        assert_eq!(rlx_mlx_array_read(a_gpu, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [1.0, 2.0, 3.0, 4.0]);
        let mut c_gpu = ptr::null_mut();
        assert_eq!(rlx_mlx_matmul(a_gpu, b, false, false, &mut c_gpu), 0);
        assert_eq!(rlx_mlx_array_read(c_gpu, got.as_mut_ptr().cast(), 16), 0);
        assert_eq!(got, [19.0, 22.0, 43.0, 50.0]);
        let mut bad_device = ptr::null_mut();
        let one = [1.0f32];
        let shape = [1i64];
        assert_ne!(
            rlx_mlx_array_from_bytes(
                one.as_ptr().cast(),
                4,
                shape.as_ptr(),
                1,
                RLX_MLX_F32,
                7,
                &mut bad_device
            ),
            0
        );
        assert!(bad_device.is_null());
        rlx_mlx_array_free(a_gpu);
        rlx_mlx_array_free(c_gpu);

        for h in [a, b, c, t, wide, copy, bias, biased, b_k, c_k, biased_k] {
            rlx_mlx_array_free(h);
        }
        rlx_mlx_array_free(ptr::null_mut());
        assert_eq!(rlx_mlx_live_arrays(), before);
    }
}
