"""The task of examples/10_finetune_lora.rs, for its Python counterparts: reverse a list of 3
to 5 distinct words, the lists drawn by SplitMix64 (as rlx_testkit::rng::Rng) from the same
words in the same order, so every script sees the tutorial's held-out and training lists.
"""

WORDS = [
    "apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "candle", "garden",
    "window", "silver", "forest", "rocket", "pepper", "castle", "button", "mirror", "planet",
    "orange", "bridge", "dragon", "pencil", "rabbit", "summer", "winter", "yellow", "purple",
    "coffee", "bottle", "island", "jacket", "ladder", "magnet", "needle", "pillow", "rubber",
    "saddle", "tunnel", "violin", "wallet", "zebra", "anchor", "basket", "cactus", "desert",
    "engine", "falcon", "guitar",
]
MASK = (1 << 64) - 1


class Rng:
    """SplitMix64, as rlx_testkit::rng::Rng."""

    def __init__(self, seed):
        self.state = seed

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.next_u64() % n


def example(rng):
    n = 3 + rng.below(3)
    words = []
    while len(words) < n:
        w = WORDS[rng.below(len(WORDS))]
        if w not in words:
            words.append(w)
    question = "Reverse the order of these words: " + " ".join(words)
    return question, " ".join(reversed(words))


def held_out(rng, n):
    """The first `n` distinct lists the sequence draws: the held-out set."""
    held = []
    while len(held) < n:
        e = example(rng)
        if all(h[0] != e[0] for h in held):
            held.append(e)
    return held


def training_batch(rng, held, size):
    """The next `size` lists that are not held out."""
    rows = []
    while len(rows) < size:
        e = example(rng)
        if all(h[0] != e[0] for h in held):
            rows.append(e)
    return rows
