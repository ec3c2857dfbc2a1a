//! The decoding steps: one sequence (`llama_step`) or a batch of slots
//! (`llama_batch_step`) appending its new tokens to key/value caches held as states, and the
//! caches themselves (float32 or int8 rows with their scales).

use super::{
    Attend, Capacity, HeadDim, Heads, Heads4, Hidden, KvCacheFormat, KvHeads, LlamaConfig,
    LlamaParams, Seq, Slots, Vocab, blocks, embed, logits,
};
use crate::typed::{Axis, Const, Dim, Positions, Rope, Scope, Sizes, State, Tensor};

/// A [`LlamaConfig`] with the capacity of its key/value caches: the most positions (prompt
/// and generated tokens) a sequence can reach.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaCacheConfig {
    /// The model.
    pub model: LlamaConfig,
    /// Positions each cache holds.
    pub capacity: usize,
}

impl crate::model::Config for LlamaCacheConfig {
    fn sizes(&self) -> Sizes {
        self.model.sizes().with::<Capacity>(self.capacity)
    }
}

/// One block's key or value cache: every position of one sequence so far, per key/value
/// head. Named `blk.N.k_cache` and `blk.N.v_cache`.
pub type Cache<'g> = State<'g, (Const<1>, KvHeads, Capacity, HeadDim)>;

/// A key or value cache in int8 ([`KvCacheFormat::Int8`]): the rows (`blk.N.k_cache`,
/// `i8`) and a float32 scale per row (`blk.N.k_scale`), for `B` sequences.
struct Int8Cache<'g, B: Dim> {
    rows: State<'g, (B, KvHeads, Capacity, HeadDim), i8>,
    scales: State<'g, (B, KvHeads, Capacity, Const<1>)>,
}

/// One block's key or value cache of `B` sequences in the config's format.
enum KvCache<'g, B: Dim> {
    F32(State<'g, (B, KvHeads, Capacity, HeadDim)>),
    Int8(Int8Cache<'g, B>),
}

impl<'g, B: Dim> KvCache<'g, B> {
    /// The cache named `{prefix}k` or `{prefix}v` (`what`), as `format` keeps it.
    fn new(g: &'g Scope<'g>, format: KvCacheFormat, prefix: &str, what: &str) -> KvCache<'g, B> {
        match format {
            KvCacheFormat::F32 => KvCache::F32(g.state(&format!("{prefix}{what}_cache"))),
            KvCacheFormat::Int8 => KvCache::Int8(Int8Cache {
                rows: g.state(&format!("{prefix}{what}_cache")),
                scales: g.state(&format!("{prefix}{what}_scale")),
            }),
        }
    }

    /// Writes `rows` at `pos` (in place; one position for every sequence, or one each) and
    /// returns the whole cache as attention reads it: in int8, each row rounded to the
    /// nearest of 255 steps of its largest magnitude, then scaled back.
    fn append<P: Positions<'g, B> + Copy>(
        &self,
        rows: Heads4<'g, B, KvHeads>,
        pos: P,
    ) -> Tensor<'g, (B, KvHeads, Capacity, HeadDim)> {
        match self {
            KvCache::F32(cache) => {
                let all = cache.read().slice_update(Axis::<2>, rows, pos);
                cache.write(all);
                all
            }
            KvCache::Int8(cache) => {
                // A row of zeros keeps a tiny positive scale: its integers are all 0.
                let scale = (rows.abs().max_keepdim::<3>() * (1.0 / 127.0)).clamp_min(1e-30);
                let ints = (rows / scale.broadcast::<(B, KvHeads, Seq, HeadDim)>())
                    .round()
                    .cast::<i8>();
                let all_rows = cache.rows.read().slice_update(Axis::<2>, ints, pos);
                let all_scales = cache.scales.read().slice_update(Axis::<2>, scale, pos);
                cache.rows.write(all_rows);
                cache.scales.write(all_scales);
                all_rows.cast::<f32>() * all_scales.broadcast::<(B, KvHeads, Capacity, HeadDim)>()
            }
        }
    }
}

/// Attention of new tokens over the caches of `B` sequences: each block appends its keys
/// and values at `pos` and attends over the `filled` positions, in place. `P` is a scalar
/// position for one sequence, or a vector of one position per sequence of a batch.
struct Cached<'g, P> {
    g: &'g Scope<'g>,
    /// The first new token's position.
    pos: P,
    /// The positions the caches hold once the new tokens are in.
    filled: P,
    scale: f64,
    format: KvCacheFormat,
}

impl<'g, B: Dim, P: Positions<'g, B> + Copy> Attend<'g, B> for Cached<'g, P> {
    /// The queries and keys rotated from `pos`, the keys and values written at `pos` (in
    /// place), and the queries attending over the `filled` positions: for a batch, every
    /// sequence at its own position in one op each.
    fn attend(
        &mut self,
        layer: usize,
        rope: Rope,
        q: Heads4<'g, B, Heads>,
        k: Heads4<'g, B, KvHeads>,
        v: Heads4<'g, B, KvHeads>,
        window: Option<usize>,
    ) -> Heads4<'g, B, Heads> {
        let prefix = format!("blk.{layer}.");
        let keys = KvCache::new(self.g, self.format, &prefix, "k");
        let values = KvCache::new(self.g, self.format, &prefix, "v");
        let (q, k) = (
            q.rope_from(rope.clone(), self.pos),
            k.rope_from(rope, self.pos),
        );
        let k = keys.append(k, self.pos);
        let v = values.append(v, self.pos);
        match window {
            Some(w) => q.attention_windowed_grouped_upto(k, v, self.filled, w, self.scale),
            None => q.attention_causal_grouped_upto(k, v, self.filled, self.scale),
        }
    }
}

/// One step of generation for one sequence: the `Seq` new tokens `input_ids` (the prompt,
/// or one sampled token) at positions `pos..pos + Seq` are appended to every block's
/// caches, attend to everything cached before them and to each other causally, and the
/// logits of the token after position `pos + last` (`last` = `Seq - 1`: the last new
/// token; tokens after `last` are padding, written to the caches and overwritten by the
/// next step before any token reads them) come out. The caches are states: the step runs in a
/// [`Context`](crate::backend::Context) that holds them between steps, so one compiled
/// step serves every position, and a context per sequence serves many sequences.
#[crate::model(outputs(logits), states)]
pub fn llama_step<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &LlamaCacheConfig,
    p: &LlamaParams<'g>,
    input_ids: Tensor<'g, (Const<1>, Seq), i64>,
    pos: Tensor<'g, (), i64>,
    last: Tensor<'g, (), i64>,
) -> Tensor<'g, (Const<1>, Const<1>, Vocab)> {
    let model = &cfg.model;
    // Every new token is in the cache after this step, padding included: the queries are
    // the last `Seq` of the `filled` positions, and causality keeps padding after `last`
    // out of sight of the real tokens.
    let filled = pos + g.full::<(Seq,), i64>(1).sum::<0>();
    let x = embed(model, p, input_ids);
    let mut attend = Cached {
        g,
        pos,
        filled,
        scale: model.attention_scale,
        format: model.kv_cache,
    };
    let x = blocks(model, p, x, &mut attend, &mut Vec::new());
    let x: Tensor<'g, (Const<1>, Const<1>, Hidden)> = x.dynamic_slice(Axis::<1>, last);
    logits(model, p, x)
}

/// A [`LlamaConfig`] with the caches of `slots` sequences, `capacity` positions each.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaBatchConfig {
    /// The model.
    pub model: LlamaConfig,
    /// Positions each sequence's caches hold.
    pub capacity: usize,
    /// Sequences a step holds (at least 1).
    pub slots: usize,
}

impl crate::model::Config for LlamaBatchConfig {
    fn sizes(&self) -> Sizes {
        self.model
            .sizes()
            .with::<Capacity>(self.capacity)
            .with::<Slots>(self.slots)
    }
}

/// One step of generation for a batch of sequences, each at its own position: row `b`'s
/// `Seq` new tokens `input_ids[b]` go to positions `pos[b]..pos[b] + Seq` of slot `b` (row
/// `b` of every block's caches, `blk.N.k_cache` of `[Slots, KvHeads, Capacity, HeadDim]`),
/// attend to what that slot holds before them and to each other causally, and the
/// logits of the token after position `pos[b] + last[b]` come out as row `b` (tokens after
/// `last[b]` are padding, as in [`llama_step`]: rows with fewer new tokens than `Seq` are
/// padded to it). Every row's `pos[b] + Seq` must fit the capacity. A row whose slot is
/// idle may repeat any token at any position: its slot is overwritten when a sequence
/// starts there (from position 0). Each slot's logits equal [`llama_step`]'s for that
/// sequence alone; the weights are read once per step for every row, which is what makes
/// decoding a batch faster than decoding its sequences one by one, and each block rotates,
/// writes and attends every row in one op each (positions are a vector, not a loop).
#[crate::model(outputs(logits), states)]
pub fn llama_batch_step<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &LlamaBatchConfig,
    p: &LlamaParams<'g>,
    input_ids: Tensor<'g, (Slots, Seq), i64>,
    pos: Tensor<'g, (Slots,), i64>,
    last: Tensor<'g, (Slots,), i64>,
) -> Tensor<'g, (Slots, Const<1>, Vocab)> {
    let model = &cfg.model;
    let new = g.full::<(Seq,), i64>(1).sum::<0>();
    let filled = pos + new.broadcast::<(Slots,)>();
    let x = embed(model, p, input_ids);
    let mut attend = Cached {
        g,
        pos,
        filled,
        scale: model.attention_scale,
        format: model.kv_cache,
    };
    let x = blocks(model, p, x, &mut attend, &mut Vec::new());
    let x: Tensor<'g, (Slots, Const<1>, Hidden)> = x.dynamic_slice(Axis::<1>, last);
    logits(model, p, x)
}
