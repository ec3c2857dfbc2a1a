//! Views into the arena and the static region, and the one raw-pointer access to them.

/// Which memory a view points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Region {
    /// The per-run arena: inputs, intermediates, outputs, scratch.
    Arena,
    /// Params and constants, written at compile/bind time and read-only while running.
    Static,
    /// The states of the context a run reads and writes.
    State,
}

/// `len` elements at byte `offset` of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct View {
    pub region: Region,
    pub offset: usize,
    pub len: usize,
}

impl View {
    pub(crate) fn bytes(&self, elem: usize) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len * elem
    }

    /// The same memory seen as bytes.
    pub(crate) fn as_bytes(self, elem: usize) -> View {
        View {
            len: self.len * elem,
            ..self
        }
    }
}

/// The arena, the static region and the context's states during one run.
pub(crate) struct Memory<'a> {
    arena: *mut u8,
    arena_len: usize,
    state: *mut u8,
    state_len: usize,
    statics: &'a [u8],
}

// SAFETY: `Memory` is two base pointers plus the static slice, borrowed for one run. Sending it
// to a pool thread is sound because the thread that made it blocks in `install` until the
// run ends, and every access goes through views checked disjoint by `Plan::check`.
unsafe impl Send for Memory<'_> {}
// SAFETY: as above; shared use only hands out the per-thunk views.
unsafe impl Sync for Memory<'_> {}

impl<'a> Memory<'a> {
    pub(crate) fn new(arena: &'a mut [u8], state: &'a mut [u8], statics: &'a [u8]) -> Memory<'a> {
        Memory {
            arena: arena.as_mut_ptr(),
            arena_len: arena.len(),
            state: state.as_mut_ptr(),
            state_len: state.len(),
            statics,
        }
    }

    /// The base and length of a writable region.
    fn region(&self, region: Region) -> (*mut u8, usize) {
        match region {
            Region::Arena => (self.arena, self.arena_len),
            Region::State => (self.state, self.state_len),
            Region::Static => unreachable!("the static region is read-only while running"),
        }
    }

    /// Elements read by a thunk: a view among its [`Kernel::accesses`](super::Kernel)
    /// reads.
    pub(super) fn src<T: bytemuck::Pod>(&self, v: View) -> &[T] {
        let range = v.bytes(size_of::<T>());
        match v.region {
            Region::Static => bytemuck::cast_slice(&self.statics[range]),
            Region::Arena | Region::State => {
                let (base, len) = self.region(v.region);
                assert!(range.end <= len, "view outside its region");
                // SAFETY: in bounds (checked above); offsets are multiples of the element
                // size within 64-byte-aligned regions (arena and context blocks), so the
                // pointer is aligned for T; `Plan::check` proved that no view a thunk writes
                // overlaps one it reads, so this shared slice aliases no live mutable one.
                unsafe { std::slice::from_raw_parts(base.add(v.offset).cast::<T>(), v.len) }
            }
        }
    }

    /// Elements written by a thunk: a view among its [`Kernel::accesses`](super::Kernel)
    /// writes, taken once per call.
    #[allow(clippy::mut_from_ref)] // disjointness is proven per plan, see SAFETY
    pub(super) fn dst<T: bytemuck::Pod>(&self, v: View) -> &mut [T] {
        let range = v.bytes(size_of::<T>());
        assert!(v.region != Region::Static, "a write to the static region");
        let (base, len) = self.region(v.region);
        assert!(range.end <= len, "bad output view");
        // SAFETY: in bounds and aligned as in `src`; `Plan::check` proved that the views a
        // thunk writes are pairwise disjoint and disjoint from every view it reads, and each
        // thunk takes each written view once, so this is the only live reference to it.
        unsafe { std::slice::from_raw_parts_mut(base.add(v.offset).cast::<T>(), v.len) }
    }
}
