//! Single-op layers: linear maps, embeddings and norms.

use crate::Params;
use crate::ir::BlockMatMul;
use crate::nn::Lora;
use crate::params::ParamPath;
use crate::typed::AppendDim;
use crate::typed::{Dim, Element, Float, Index, LastDim, Shape, Tensor};
use crate::typed::{Dyn, Scope};

/// `y = x · W + b` along the last dim. The checkpoint stores `weight` as PyTorch does,
/// `[out, in]`; it is transposed once when loaded, so the graph holds `[in, out]`.
#[derive(Params)]
pub struct Linear<'g, I: Dim, O: Dim, E: Float = f32> {
    /// `[in, out]` in the graph, `[out, in]` in the checkpoint.
    #[param(transpose)]
    pub weight: Tensor<'g, (I, O), E>,
    /// `[out]`.
    pub bias: Tensor<'g, (O,), E>,
}

impl<'g, I: Dim, O: Dim, E: Float> Linear<'g, I, O, E> {
    /// Applies the layer to the last dim of `x`.
    #[track_caller]
    pub fn forward<S: LastDim<I>>(&self, x: Tensor<'g, S, E>) -> Tensor<'g, S::WithLast<O>, E> {
        x.project(self.weight).add_bias(self.bias)
    }
}

/// `R` rows of GGUF blocks, as a checkpoint stores them.
type BlockRows<'g, R> = Tensor<'g, (R, Dyn), u8>;

/// The weight at `at` (`R` rows of `C` values) as its checkpoint's rows of blocks and the
/// product that multiplies them, when the config keeps it in a block format and `C` is
/// known when the graph is built.
#[track_caller]
fn kept_blocks<'g, R: Dim, C: Dim>(
    g: &'g Scope<'g>,
    at: &ParamPath,
) -> Option<(BlockRows<'g, R>, BlockMatMul)> {
    let format = g.block_format(at.key())?;
    let values = g.dim_value::<C>()?;
    let product = BlockMatMul::exact(format).with_activations(g.block_activations());
    Some((g.block_param_at::<R>(at, values, format), product))
}

/// `y = x · W` along the last dim, without a bias (the projections of Llama-family
/// decoders). The checkpoint stores `weight` `[out, in]`: it is transposed once when
/// loaded, or, when the config keeps it in a GGUF block format
/// ([`Sizes::with_block_format`](crate::typed::Sizes::with_block_format)), its blocks are
/// kept as the file stores them and multiplied in place ([`Tensor::block_matmul`]).
///
/// When the config gives the weight a low-rank adapter
/// ([`Sizes::with_adapter`](crate::typed::Sizes::with_adapter)), the projection declares
/// its factors beside the weight (`lora_a`, `lora_b`: a [`Lora`]) and adds its update:
/// `x·W + scale·x·Aᵀ·Bᵀ`, whatever format `W` is kept in; while the scope drops adapters'
/// inputs ([`Scope::drop_adapter_inputs`](crate::typed::Scope::drop_adapter_inputs)), the
/// update takes `dropout(x)` instead of `x`.
pub struct Projection<'g, I: Dim, O: Dim, E: Float = f32> {
    weight: ProjectionWeight<'g, I, O, E>,
    adapter: Option<Adapter<'g, I, O, E>>,
}

/// A projection's adapter: its factors, scale, and the stream its dropout draws from.
struct Adapter<'g, I: Dim, O: Dim, E: Float> {
    lora: Lora<'g, I, O, E>,
    scale: f64,
    stream: u32,
}

/// A stream of random draws per checkpoint key (FNV-1a): the same every build.
fn stream_of(key: &str) -> u32 {
    key.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

enum ProjectionWeight<'g, I: Dim, O: Dim, E: Float> {
    /// `[in, out]` in the graph, `[out, in]` in the checkpoint.
    Dense(Tensor<'g, (I, O), E>),
    /// `[out, blocks]`: the checkpoint's rows of blocks.
    Blocks(Tensor<'g, (O, Dyn), u8>, BlockMatMul),
}

impl<'g, I: Dim, O: Dim, E: Float> Params<'g> for Projection<'g, I, O, E> {
    #[track_caller]
    fn declare(g: &'g Scope<'g>, at: &ParamPath) -> Self {
        let base = at;
        let at = at.field("weight");
        let weight = match kept_blocks::<O, I>(g, &at) {
            Some((w, product)) => ProjectionWeight::Blocks(w, product),
            None => ProjectionWeight::Dense(g.param_at(&at.transposed())),
        };
        let adapter = g.adapter(at.key()).map(|scale| Adapter {
            lora: Lora::declare(g, base),
            scale,
            stream: stream_of(at.key()),
        });
        Projection { weight, adapter }
    }
}

impl<'g, I: Dim, O: Dim, E: Float> Projection<'g, I, O, E> {
    /// Applies the map to the last dim of `x`.
    #[track_caller]
    pub fn forward<S: LastDim<I>>(&self, x: Tensor<'g, S, E>) -> Tensor<'g, S::WithLast<O>, E> {
        let y = match &self.weight {
            ProjectionWeight::Dense(w) => x.project(*w),
            ProjectionWeight::Blocks(w, product) => x.block_matmul::<I, O>(*w, *product),
        };
        let Some(adapter) = &self.adapter else {
            return y;
        };
        let input = match x.scope().adapter_dropout() {
            Some((p, seed)) => x.dropout(p, seed, adapter.stream),
            None => x,
        };
        y + adapter.lora.forward(input, adapter.scale)
    }

    /// The weight `[in, out]`, unless it is kept in blocks.
    pub fn dense_weight(&self) -> Option<Tensor<'g, (I, O), E>> {
        match &self.weight {
            ProjectionWeight::Dense(w) => Some(*w),
            ProjectionWeight::Blocks(..) => None,
        }
    }
}

/// A learned shift along the last dim: the bias of a [`Projection`] that the checkpoint
/// stores beside its weight (`attn_q.bias` next to `attn_q.weight`), present only in the
/// variants of a model family that have one.
#[derive(Params)]
pub struct Bias<'g, N: Dim, E: Float = f32> {
    /// `[N]`.
    pub bias: Tensor<'g, (N,), E>,
}

impl<'g, N: Dim, E: Float> Bias<'g, N, E> {
    /// Adds the bias to the last dim of `x`.
    #[track_caller]
    pub fn forward<S: LastDim<N>>(&self, x: Tensor<'g, S, E>) -> Tensor<'g, S, E> {
        x.add_bias(self.bias)
    }

    /// `x` with `bias` added when the variant has one.
    #[track_caller]
    pub(crate) fn forward_optional<S: LastDim<N>>(
        x: Tensor<'g, S, E>,
        bias: &Option<Self>,
    ) -> Tensor<'g, S, E> {
        match bias {
            Some(b) => b.forward(x),
            None => x,
        }
    }
}

/// A lookup table of `V` vectors of size `D`.
#[derive(Params)]
pub struct Embedding<'g, V: Dim, D: Dim, E: Element = f32> {
    /// `[vocab, dim]`.
    pub weight: Tensor<'g, (V, D), E>,
}

impl<'g, V: Dim, D: Dim, E: Element> Embedding<'g, V, D, E> {
    /// The rows at `ids`; an id outside `0..V` is a run-time error.
    #[track_caller]
    pub fn forward<S: Shape + AppendDim<D>, I: Index>(
        &self,
        ids: Tensor<'g, S, I>,
    ) -> Tensor<'g, <S as AppendDim<D>>::Out, E> {
        self.weight.embed(ids)
    }
}

/// A decoder's token table `[V, D]`: looked up by token id, and, in models that tie them,
/// the output projection too (`x · tableᵀ`). When the config keeps the checkpoint's table
/// in a GGUF block format ([`Sizes::with_block_format`](crate::typed::Sizes::with_block_format)),
/// its rows stay in their blocks: a lookup gathers the rows' bytes and dequantizes them
/// ([`Tensor::block_dequantize`]), and the output projection multiplies the blocks in
/// place ([`Tensor::block_matmul`]), so a decode step reads a quarter of the table's f32
/// bytes (`Q8_0`) for the logits.
pub struct TokenEmbedding<'g, V: Dim, D: Dim> {
    table: TokenTable<'g, V, D>,
}

enum TokenTable<'g, V: Dim, D: Dim> {
    Dense(Tensor<'g, (V, D)>),
    /// `[V, blocks]`: the checkpoint's rows of blocks, and the product the output
    /// projection uses.
    Blocks(Tensor<'g, (V, Dyn), u8>, BlockMatMul),
}

impl<'g, V: Dim, D: Dim> Params<'g> for TokenEmbedding<'g, V, D> {
    #[track_caller]
    fn declare(g: &'g Scope<'g>, at: &ParamPath) -> Self {
        let at = at.field("weight");
        let table = match kept_blocks::<V, D>(g, &at) {
            Some((w, product)) => TokenTable::Blocks(w, product),
            None => TokenTable::Dense(g.param_at(&at)),
        };
        TokenEmbedding { table }
    }
}

impl<'g, V: Dim, D: Dim> TokenEmbedding<'g, V, D> {
    /// The vectors of `ids`; an id outside `0..V` is a run-time error.
    #[track_caller]
    pub fn forward<S: Shape + AppendDim<D> + AppendDim<Dyn>, I: Index>(
        &self,
        ids: Tensor<'g, S, I>,
    ) -> Tensor<'g, <S as AppendDim<D>>::Out, f32> {
        match &self.table {
            TokenTable::Dense(table) => table.embed(ids),
            TokenTable::Blocks(table, product) => {
                let rows: Tensor<'g, <S as AppendDim<Dyn>>::Out, u8> = table.embed(ids);
                rows.block_dequantize(product.format)
            }
        }
    }

    /// `x · tableᵀ`: the logits of a model whose output projection is its token table.
    #[track_caller]
    pub fn project_out<S: LastDim<D>>(
        &self,
        x: Tensor<'g, S, f32>,
    ) -> Tensor<'g, S::WithLast<V>, f32> {
        match &self.table {
            TokenTable::Dense(table) => x.project_t(*table),
            TokenTable::Blocks(table, product) => x.block_matmul::<D, V>(*table, *product),
        }
    }

    /// The table `[V, D]`, unless it is kept in blocks.
    pub fn dense_table(&self) -> Option<Tensor<'g, (V, D)>> {
        match &self.table {
            TokenTable::Dense(table) => Some(*table),
            TokenTable::Blocks(..) => None,
        }
    }
}

/// Layer normalization over the last dim, with a learned scale and shift.
#[derive(Params)]
pub struct LayerNorm<'g, N: Dim, E: Float = f32> {
    /// Scale, `[N]`.
    pub weight: Tensor<'g, (N,), E>,
    /// Shift, `[N]`.
    pub bias: Tensor<'g, (N,), E>,
}

impl<'g, N: Dim, E: Float> LayerNorm<'g, N, E> {
    /// Normalizes the last dim of `x`; `eps` is added to the variance.
    #[track_caller]
    pub fn forward<S: LastDim<N>>(&self, x: Tensor<'g, S, E>, eps: f64) -> Tensor<'g, S, E> {
        x.layer_norm(self.weight, self.bias, eps)
    }
}

/// RMS normalization over the last dim, with a learned scale.
#[derive(Params)]
pub struct RmsNorm<'g, N: Dim, E: Float = f32> {
    /// Scale, `[N]`.
    pub weight: Tensor<'g, (N,), E>,
}

impl<'g, N: Dim, E: Float> RmsNorm<'g, N, E> {
    /// Normalizes the last dim of `x`; `eps` is added to the mean square.
    #[track_caller]
    pub fn forward<S: LastDim<N>>(&self, x: Tensor<'g, S, E>, eps: f64) -> Tensor<'g, S, E> {
        x.rms_norm(self.weight, eps)
    }
}
