//! Positions read at run time: one for every row of a batch, or one per row of axis 0 (a
//! batch of sequences, each at its own position).

/// A run-time position (an offset or a length) for each row of axis 0.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RowPositions<'a> {
    /// The same for every row.
    One(i64),
    /// Row `r`'s is element `r`.
    I32(&'a [i32]),
    /// Row `r`'s is element `r`.
    I64(&'a [i64]),
}

impl RowPositions<'_> {
    /// Rows with positions of their own (1 for [`RowPositions::One`]).
    pub(crate) fn rows(&self) -> usize {
        match self {
            RowPositions::One(_) => 1,
            RowPositions::I32(p) => p.len(),
            RowPositions::I64(p) => p.len(),
        }
    }

    /// Row `r`'s position (`r` below [`rows`](Self::rows), or any row for `One`).
    pub(crate) fn get(&self, r: usize) -> i64 {
        match self {
            RowPositions::One(p) => *p,
            RowPositions::I32(p) => i64::from(p[r]),
            RowPositions::I64(p) => p[r],
        }
    }

    /// Every row's position, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.rows()).map(|r| self.get(r))
    }
}
