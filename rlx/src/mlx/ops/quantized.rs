//! Products by and values of quantized weights: RLX's group-affine layout and GGUF blocks,
//! whose MLX form a bound weight makes once (`block_prepare`).

use std::ptr;

use rlx_mlx_sys as sys;

use crate::ir::UnaryOp;
use crate::mlx::array::{Array, MlxError, check, make, make_optional};
use crate::mlx::ops::HeadGroups;

impl Array {
    /// `self · dequant(w)ᵀ` with RLX's quantized layout (see the IR op).
    pub fn quantized_matmul(
        &self,
        w: &Array,
        scales: &Array,
        biases: &Array,
        bits: u8,
        group_size: usize,
    ) -> Result<Array, MlxError> {
        // SAFETY: the handles are live; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_quantized_matmul(
                self.ptr(),
                w.ptr(),
                scales.ptr(),
                biases.ptr(),
                bits as i32,
                group_size as i32,
                out,
            )
        })
    }

    /// `self · dequant(w)ᵀ` with `w` in the GGUF block format of GGML type id `format`
    /// (see the IR op).
    pub fn block_matmul(&self, w: &Array, format: u32) -> Result<Array, MlxError> {
        // SAFETY: the handles are live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_block_matmul(self.ptr(), w.ptr(), format as i32, out) })
    }

    /// This GGUF block weight (format `format`) in the form [`Array::block_matmul_prepared`]
    /// multiplies by: MLX's affine groups of 32 (words, scales, biases) for the formats that
    /// are exactly that (Q8_0, Q4_0, Q4_1, Q4_K), the float32 values for the others. Made
    /// once for a bound weight, so runs do not convert it again.
    pub(crate) fn block_prepare(&self, format: u32) -> Result<Vec<Array>, MlxError> {
        let mut out = [ptr::null_mut(); 3];
        let mut count = 0usize;
        // SAFETY: the handle is live; `out` has room for the 3 handles the shim may write,
        // `count` is a valid slot.
        let status = unsafe {
            sys::rlx_mlx_block_prepare(self.ptr(), format as i32, out.as_mut_ptr(), &mut count)
        };
        // Wrap before checking so a partial result is freed either way.
        let parts: Vec<Array> = out.into_iter().filter_map(Array::from_raw).collect();
        check(status)?;
        if parts.len() != count {
            return Err(MlxError::new("the shim wrote a different number of arrays"));
        }
        Ok(parts)
    }

    /// [`Array::block_matmul`] by a weight in its prepared form ([`Array::block_prepare`]).
    pub(crate) fn block_matmul_prepared(
        &self,
        parts: &[Array],
        format: u32,
    ) -> Result<Array, MlxError> {
        let raw: Vec<*mut sys::rlx_mlx_array> = parts.iter().map(Array::ptr).collect();
        // SAFETY: every handle is live; `raw` holds the count passed; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_block_matmul_prepared(
                self.ptr(),
                raw.as_ptr(),
                raw.len(),
                format as i32,
                out,
            )
        })
    }

    /// `act(self · W[:, gate]) * (self · W[:, up])` (`act` SiLU or tanh GELU), a gated
    /// feed-forward's hidden values from the joined weight `W` of its gate and up products
    /// (`width` columns each, from `columns`' two): `parts` as a float group's product reads
    /// it (`format` `None`) or a block weight's prepared form. One kernel on an NVIDIA GPU
    /// for 1 to 8 float32 rows; `None` elsewhere, where the caller composes the product,
    /// slices and activation.
    pub(crate) fn gated_product(
        &self,
        parts: &[Array],
        format: Option<u32>,
        columns: [usize; 2],
        width: usize,
        activation: UnaryOp,
    ) -> Result<Option<Array>, MlxError> {
        let raw: Vec<*mut sys::rlx_mlx_array> = parts.iter().map(Array::ptr).collect();
        let format = format.map_or(-1, |f| f as i32);
        let act = match activation {
            UnaryOp::Silu => 0,
            UnaryOp::GeluTanh => 1,
            _ => return Ok(None),
        };
        // SAFETY: every handle is live; `raw` holds the count passed; `out` is a valid slot
        // the shim fills or leaves null.
        make_optional(|out| unsafe {
            sys::rlx_mlx_gated_product(
                self.ptr(),
                raw.as_ptr(),
                raw.len(),
                format,
                columns[0] as i64,
                columns[1] as i64,
                width as i64,
                act,
                out,
            )
        })
    }

    /// A decoder block's queries, keys and values from its rows (`self`, `[B, S, K]`
    /// float32) and the joined weight `W` of its q/k/v products (`parts` and `format` as
    /// [`Array::gated_product`] takes them): the query and key heads of `self · W` rotated
    /// as [`Array::rope_heads`] rotates them, and the key heads' count of value heads from
    /// column `v_col`, each `[B, heads, S, head_dim]`. One kernel on an NVIDIA GPU for 1 to
    /// 8 rows unless the environment sets `RLX_MLX_ROTATED_ROWS=0` (decision 048); `None`
    /// elsewhere, where the caller makes the product and rotates it.
    pub(crate) fn rotated_product(
        &self,
        parts: &[Array],
        format: Option<u32>,
        groups: &HeadGroups,
        v_col: usize,
        offset: &Array,
        periods: Option<&Array>,
    ) -> Result<Option<(Array, Array, Array)>, MlxError> {
        let raw: Vec<*mut sys::rlx_mlx_array> = parts.iter().map(Array::ptr).collect();
        let format = format.map_or(-1, |f| f as i32);
        let groups = groups.raw()?;
        let v_col =
            i64::try_from(v_col).map_err(|_| MlxError::new("rotated_product: too large"))?;
        let p = periods.map_or(ptr::null_mut(), Array::ptr);
        let (mut q, mut k, mut v) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: every handle is live or null (allowed for `periods`); `raw` holds the
        // count passed; `groups` outlives the call; the outputs are valid slots the shim
        // fills or leaves null.
        let status = unsafe {
            sys::rlx_mlx_rotated_product(
                self.ptr(),
                raw.as_ptr(),
                raw.len(),
                format,
                &groups,
                v_col,
                offset.ptr(),
                p,
                &mut q,
                &mut k,
                &mut v,
            )
        };
        // Wrapped before the status is checked, so a result is freed either way.
        let made = (Array::from_raw(q), Array::from_raw(k), Array::from_raw(v));
        check(status)?;
        match made {
            (Some(q), Some(k), Some(v)) => Ok(Some((q, k, v))),
            (None, None, None) => Ok(None),
            _ => Err(MlxError::new("rotated_product left an output unset")),
        }
    }

    /// The values of group-affine packed rows (`self`) with their scales and biases.
    pub fn dequantize(
        &self,
        scales: &Array,
        biases: &Array,
        bits: u8,
        group_size: usize,
    ) -> Result<Array, MlxError> {
        // SAFETY: the handles are live; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_dequantize(
                self.ptr(),
                scales.ptr(),
                biases.ptr(),
                bits as i32,
                group_size as i32,
                out,
            )
        })
    }

    /// The float32 values of `self`'s rows of blocks in the GGUF format of GGML type id
    /// `format` (see the IR op).
    pub fn block_dequantize(&self, format: u32) -> Result<Array, MlxError> {
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_block_dequantize(self.ptr(), format as i32, out) })
    }
}

/// How many arrays [`Array::block_prepare`] makes of a weight in GGUF `format` (3 for MLX's
/// affine groups, 1 for float values), known before any weight is bound.
pub(crate) fn block_prepared_parts(format: u32) -> Result<usize, MlxError> {
    let mut count = 0usize;
    // SAFETY: `count` is a valid slot; the shim only reads `format`.
    check(unsafe { sys::rlx_mlx_block_prepared_parts(format as i32, &mut count) })?;
    Ok(count)
}
