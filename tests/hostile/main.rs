//! Hostile input: fixed-seed mutation tests holding each entry point (checkpoints,
//! configs, run-time inputs, text) to one contract: a correct result or a typed error,
//! never a panic, an abort or an unbounded allocation. Each prints its counts
//! (`cargo test --test hostile -- --nocapture`).

mod checkpoints;
mod configs;
mod gguf;
mod inputs;
mod text;
mod tokenizer;

/// xorshift64*: a fixed, dependency-free stream of test choices.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A choice in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// One of `items`, which must not be empty.
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
