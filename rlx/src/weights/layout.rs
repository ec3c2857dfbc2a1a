//! Moving checkpoint tensors between the file's layout and the model's: transposing the last
//! two dims, cutting a part out along an axis and joining parts back. Byte-level, so one
//! implementation serves every dtype.

/// Swaps the last two dims of a row-major tensor of `elem`-byte elements.
pub(crate) fn transpose_last2(bytes: &[u8], shape: &[usize], elem: usize) -> Vec<u8> {
    let n = shape.len();
    let (rows, cols) = (shape[n - 2], shape[n - 1]);
    let matrix = rows * cols * elem;
    let mut out = vec![0u8; bytes.len()];
    if matrix == 0 {
        return out;
    }
    for (src, dst) in bytes.chunks_exact(matrix).zip(out.chunks_exact_mut(matrix)) {
        for r in 0..rows {
            for c in 0..cols {
                let from = (r * cols + c) * elem;
                let to = (c * rows + r) * elem;
                dst[to..to + elem].copy_from_slice(&src[from..from + elem]);
            }
        }
    }
    out
}

/// `(outer, axis, inner)` sizes around `axis`, `inner` in bytes.
fn around(shape: &[usize], axis: usize, elem: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product::<usize>() * elem;
    (outer, shape[axis], inner)
}

/// Part `index` of `parts` equal pieces along `axis`.
pub(crate) fn split_part(
    bytes: &[u8],
    shape: &[usize],
    elem: usize,
    axis: usize,
    index: usize,
    parts: usize,
) -> Vec<u8> {
    let (outer, len, inner) = around(shape, axis, elem);
    let piece = len / parts;
    let mut out = Vec::with_capacity(outer * piece * inner);
    for o in 0..outer {
        let start = (o * len + index * piece) * inner;
        out.extend_from_slice(&bytes[start..start + piece * inner]);
    }
    out
}

/// Joins equal `parts` (each of dims `part_shape`) along `axis`.
pub(crate) fn join_parts(
    parts: &[Vec<u8>],
    part_shape: &[usize],
    elem: usize,
    axis: usize,
) -> Vec<u8> {
    let (outer, piece, inner) = around(part_shape, axis, elem);
    let mut out = Vec::with_capacity(parts.len() * outer * piece * inner);
    for o in 0..outer {
        for part in parts {
            let start = o * piece * inner;
            out.extend_from_slice(&part[start..start + piece * inner]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[u16]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn transpose_batched() {
        // two 2x3 matrices
        let t = transpose_last2(
            &bytes(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
            &[2, 2, 3],
            2,
        );
        assert_eq!(t, bytes(&[0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]));
    }

    #[test]
    fn split_then_join_round_trips() {
        let src = bytes(&(0..24).collect::<Vec<_>>());
        for axis in 0..3 {
            let shape = [2, 6, 2];
            let mut part_shape = shape;
            let parts = if axis == 1 { 3 } else { 2 };
            part_shape[axis] /= parts;
            let pieces: Vec<_> = (0..parts)
                .map(|i| split_part(&src, &shape, 2, axis, i, parts))
                .collect();
            assert_eq!(
                join_parts(&pieces, &part_shape, 2, axis),
                src,
                "axis {axis}"
            );
        }
        // rows 2..4 of a [6, 2] matrix
        let m = bytes(&(0..12).collect::<Vec<_>>());
        assert_eq!(split_part(&m, &[6, 2], 2, 0, 1, 3), bytes(&[4, 5, 6, 7]));
    }
}
