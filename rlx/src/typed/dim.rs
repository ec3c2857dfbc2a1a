//! Dims at the type level: static sizes, named runtime dims and config-bound dims.

use std::fmt;

/// A dim known to the type system.
///
/// Implemented by [`Const<N>`] and by the types [`dims!`](crate::dims) and
/// [`config_dims!`](crate::config_dims) declare.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a dim",
    label = "expected `Const<N>` or a dim declared with `rlx::dims!` or `rlx::config_dims!`",
    note = "shapes are tuples of dims, e.g. `(Batch, Const<384>)`"
)]
pub trait Dim: Copy + Default + Send + Sync + 'static {
    /// What kind of dim this is, and its size or name.
    const KIND: DimKind;
}

/// How a typed dim gets its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimKind {
    /// Known to the type: `Const<N>`.
    Static(usize),
    /// Bound each time the graph runs (`Batch`, `Seq`); the type's name.
    Runtime(&'static str),
    /// Fixed when the graph is built, from the model's config (`Hidden`, `Vocab`); the
    /// type's name.
    Config(&'static str),
    /// [`Dyn`]: a size the types do not track.
    Anonymous,
}

impl fmt::Display for DimKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimKind::Static(n) => write!(f, "{n}"),
            DimKind::Runtime(name) | DimKind::Config(name) => f.write_str(name),
            DimKind::Anonymous => f.write_str("Dyn"),
        }
    }
}

/// Typed dims as written: `(Batch, 4, Dyn)`.
pub(crate) fn describe(dims: &[DimKind]) -> String {
    let names: Vec<String> = dims.iter().map(|k| k.to_string()).collect();
    format!("({})", names.join(", "))
}

/// A static dim of size `N`.
///
/// ```
/// use rlx::typed::{Const, Dim, DimKind};
/// assert_eq!(Const::<384>::KIND, DimKind::Static(384));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Const<const N: usize>;

impl<const N: usize> Dim for Const<N> {
    const KIND: DimKind = DimKind::Static(N);
}

/// The escape hatch: a dim whose size the types do not track.
///
/// rustc treats every `Dyn` as equal to every other `Dyn`, so the checks it would have made
/// move to graph build (and, for runtime sizes, to run time). Where `Dyn` may appear:
/// - in an input: each `Dyn` axis becomes its own runtime symbol, named after the input and
///   axis (`x.1`), bound from the tensor given at run time;
/// - in a [`reshape`](super::Tensor::reshape) target, once: the size that keeps the element
///   count (like `-1` in numpy);
/// - in the result type of an op whose result dim the types cannot compute (`concat`, `pad`,
///   `slice`, `conv*`, `*_pool*`): whatever the op produces.
///
/// A weight, a broadcast target or a custom op's result needs real sizes: `Dyn` there is a
/// build error.
///
/// ```
/// use rlx::typed::{Const, Dyn, Tensor, build};
///
/// let graph = build(|g| {
///     let x: Tensor<(Dyn, Const<4>)> = g.input("x");
///     let flat: Tensor<(Dyn,)> = x.reshape();
///     g.output("flat", flat);
/// })?;
/// assert!(graph.to_string().contains("f32[4*x.0] = reshape"));
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dyn;

impl Dim for Dyn {
    const KIND: DimKind = DimKind::Anonymous;
}

/// `HeadDim` → `head_dim`: the symbol name of a named dim in the IR.
pub fn symbol_name(type_name: &str) -> String {
    let mut out = String::with_capacity(type_name.len() + 4);
    for (i, c) in type_name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Sizes of config-bound dims, given to [`build_with`](super::build_with).
///
/// ```
/// rlx::config_dims!(Hidden);
/// let sizes = rlx::typed::Sizes::new().with::<Hidden>(384);
/// assert_eq!(sizes.get::<Hidden>(), Some(384));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    values: Vec<(&'static str, usize)>,
    flags: Vec<(&'static str, bool)>,
    formats: Vec<(String, crate::gguf::GgmlType)>,
    activations: crate::ir::ActivationPrecision,
    /// Weights with a low-rank adapter: checkpoint key and the adapter's scale (its bits,
    /// so that `Sizes` stays `Eq`).
    adapters: Vec<(String, u64)>,
}

impl Sizes {
    /// No sizes.
    pub fn new() -> Sizes {
        Sizes::default()
    }

    /// Sets the size of the config dim `D` (replacing an earlier value). Static and runtime
    /// dims have no build-time value to set; for them this changes nothing.
    pub fn with<D: Dim>(mut self, value: usize) -> Sizes {
        let DimKind::Config(name) = D::KIND else {
            return self;
        };
        self.values.retain(|(n, _)| *n != name);
        self.values.push((name, value));
        self
    }

    /// Sets the config flag `name`: a yes/no of the config that params declared
    /// `#[param(when = "name")]` follow (present only when it is on).
    ///
    /// ```
    /// let sizes = rlx::typed::Sizes::new().with_flag("qkv_bias", true);
    /// assert_eq!(sizes.flag("qkv_bias"), Some(true));
    /// assert_eq!(sizes.flag("qk_norm"), None);
    /// ```
    pub fn with_flag(mut self, name: &'static str, on: bool) -> Sizes {
        self.flags.retain(|(n, _)| *n != name);
        self.flags.push((name, on));
        self
    }

    /// Keeps the weight read from checkpoint key `key` in the GGUF block `format`
    /// (layers that can, such as [`Projection`](crate::nn::Projection), then multiply by
    /// its blocks as they are instead of declaring a float weight).
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// let sizes = rlx::typed::Sizes::new().with_block_format("blk.0.attn_q.weight", GgmlType::Q4_1);
    /// assert_eq!(sizes.block_format("blk.0.attn_q.weight"), Some(GgmlType::Q4_1));
    /// assert_eq!(sizes.block_format("blk.0.attn_k.weight"), None);
    /// ```
    pub fn with_block_format(mut self, key: &str, format: crate::gguf::GgmlType) -> Sizes {
        self.formats.retain(|(k, _)| k != key);
        self.formats.push((key.to_string(), format));
        self
    }

    /// Sets how products with weights kept in blocks take their activations (exact float32
    /// unless set).
    ///
    /// ```
    /// use rlx::ir::ActivationPrecision;
    /// let sizes = rlx::typed::Sizes::new().with_block_activations(ActivationPrecision::Int8);
    /// assert_eq!(sizes.block_activations(), ActivationPrecision::Int8);
    /// ```
    pub fn with_block_activations(mut self, activations: crate::ir::ActivationPrecision) -> Sizes {
        self.activations = activations;
        self
    }

    /// Gives the weight of checkpoint key `key` a low-rank adapter whose product is scaled
    /// by `scale` (LoRA's `alpha / rank`): layers that can, such as
    /// [`Projection`](crate::nn::Projection), then declare the adapter's two factors
    /// ([`Lora`](crate::nn::Lora)) beside the weight, of rank
    /// [`LoraRank`](crate::nn::LoraRank).
    ///
    /// ```
    /// let sizes = rlx::typed::Sizes::new().with_adapter("blk.0.attn_q.weight", 2.0);
    /// assert_eq!(sizes.adapter("blk.0.attn_q.weight"), Some(2.0));
    /// assert_eq!(sizes.adapter("blk.0.attn_k.weight"), None);
    /// ```
    pub fn with_adapter(mut self, key: &str, scale: f64) -> Sizes {
        self.adapters.retain(|(k, _)| k != key);
        self.adapters.push((key.to_string(), scale.to_bits()));
        self
    }

    /// The scale of the adapter of the weight of checkpoint key `key`, if it has one.
    pub fn adapter(&self, key: &str) -> Option<f64> {
        let found = self.adapters.iter().find(|(k, _)| k == key);
        found.map(|(_, bits)| f64::from_bits(*bits))
    }

    /// How products with weights kept in blocks take their activations.
    pub fn block_activations(&self) -> crate::ir::ActivationPrecision {
        self.activations
    }

    /// The GGUF block format the weight of checkpoint key `key` is kept in, if any.
    pub fn block_format(&self, key: &str) -> Option<crate::gguf::GgmlType> {
        self.formats.iter().find(|(k, _)| k == key).map(|f| f.1)
    }

    /// The value of the config flag `name`, if the config set it.
    pub fn flag(&self, name: &str) -> Option<bool> {
        self.flags.iter().find(|(n, _)| *n == name).map(|f| f.1)
    }

    /// The size of `D`: its value if static, its configured value if config-bound.
    pub fn get<D: Dim>(&self) -> Option<usize> {
        self.resolve(D::KIND)
    }

    pub(crate) fn resolve(&self, kind: DimKind) -> Option<usize> {
        match kind {
            DimKind::Static(n) => Some(n),
            DimKind::Config(name) => self.values.iter().find(|(n, _)| *n == name).map(|v| v.1),
            DimKind::Runtime(_) | DimKind::Anonymous => None,
        }
    }
}

/// Declares named runtime dims: unit types whose values are bound when the graph runs.
/// The IR symbol is the snake-case name (`Batch` → `batch`, `HeadDim` → `head_dim`).
///
/// ```
/// rlx::dims!(Batch, SeqLen);
/// use rlx::typed::{Dim, DimKind};
/// assert_eq!(SeqLen::KIND, DimKind::Runtime("SeqLen"));
/// ```
#[macro_export]
macro_rules! dims {
    ($($(#[$meta:meta])* $name:ident),+ $(,)?) => {$(
        $(#[$meta])*
        #[doc = concat!("The runtime dim `", stringify!($name), "`, bound when the graph runs.")]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name;

        impl $crate::typed::Dim for $name {
            const KIND: $crate::typed::DimKind = $crate::typed::DimKind::Runtime(stringify!($name));
        }
    )+};
}

/// Declares config-bound dims: sizes that are fixed when the graph is built (read from a
/// model's config), so the graph and its weights have static shapes, while rustc still
/// checks that the same dim meets the same dim.
///
/// ```
/// use rlx::typed::{Sizes, Tensor, build_with};
/// rlx::config_dims!(Hidden);
///
/// let graph = build_with(&Sizes::new().with::<Hidden>(8), |g| {
///     let x: Tensor<(Hidden,)> = g.input("x");
///     g.output("y", x.relu());
/// })?;
/// assert!(graph.to_string().contains("f32[8]"));
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[macro_export]
macro_rules! config_dims {
    ($($(#[$meta:meta])* $name:ident),+ $(,)?) => {$(
        $(#[$meta])*
        #[doc = concat!("The config dim `", stringify!($name), "`, fixed when the graph is built.")]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name;

        impl $crate::typed::Dim for $name {
            const KIND: $crate::typed::DimKind = $crate::typed::DimKind::Config(stringify!($name));
        }
    )+};
}

#[cfg(test)]
mod tests {
    use super::symbol_name;

    #[test]
    fn snake_case_names() {
        assert_eq!(symbol_name("Batch"), "batch");
        assert_eq!(symbol_name("HeadDim"), "head_dim");
        assert_eq!(symbol_name("Seq"), "seq");
    }
}
