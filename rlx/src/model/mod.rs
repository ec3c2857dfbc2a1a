//! Compiled models: what `#[rlx::model]` generates, and the weight handling they share.
//!
//! # What the macro writes
//!
//! For
//!
//! ```
//! use rlx::typed::{Const, Tensor};
//! use rlx::nn::Linear;
//! rlx::dims!(Batch);
//!
//! #[derive(rlx::Params)]
//! pub struct MlpParams<'g> {
//!     fc1: Linear<'g, Const<4>, Const<8>>,
//!     fc2: Linear<'g, Const<8>, Const<2>>,
//! }
//!
//! #[rlx::model]
//! pub fn mlp<'g>(p: &MlpParams<'g>, x: Tensor<'g, (Batch, Const<4>)>) -> Tensor<'g, (Batch, Const<2>)> {
//!     p.fc2.forward(p.fc1.forward(x).relu())
//! }
//! # fn main() {}
//! ```
//!
//! the macro keeps `mlp` as written (so other model fns can call it) and adds, in outline:
//!
//! ```text
//! pub struct Mlp { inner: rlx::model::Compiled }            // derefs to `Compiled`
//! impl Mlp {
//!     pub const INPUTS: &[&str] = &["x"];
//!     pub const OUTPUTS: &[&str] = &["output"];
//!     pub const STATES: &[&str] = &[];
//!     pub fn build() -> Result<Graph, BuildErrors>;        // build(config: &C) with a #[config] arg
//!     pub fn manifest() -> Result<Manifest, BuildErrors>;
//!     pub fn build_with_manifest() -> Result<(Graph, Manifest), BuildErrors>;
//!     pub fn compile<B: Backend>(backend: &B) -> Result<Mlp, ModelError>;
//!     pub fn run<'t>(&self, x: impl Into<TensorRef<'t>>) -> Result<HostTensor, RunError>;
//! }
//! ```
//!
//! `build_with_manifest` runs [`build_model`](crate::typed::build_model) with a closure that
//! declares the params struct (`g.params()`), each input (`g.input("x")`) and each
//! `#[param]` argument, calls `mlp` with them and marks the result as the output `output`
//! (`output_0`, `output_1`, .. for a tuple, or the names given with
//! `#[rlx::model(outputs(logits, hidden))]`). `run` takes one tensor per input, in argument
//! order, and returns one [`HostTensor`] per output; runtime dims such as `Batch` are read
//! from the inputs' shapes, and two inputs that disagree on one are a
//! [`RunError::InconsistentSymbol`].
//!
//! Arguments the macro understands: `x: Tensor<..>` (an input named `x`, or
//! `#[input(rename = "input_ids")]`), `p: &P` (a `#[derive(Params)]` struct), `#[param] w:
//! Tensor<..>` (one weight named `w`), `#[config] cfg: &C` (a [`Config`], which gives the
//! sizes of config dims and is passed on to `build` and `compile`), `cache: State<..>` (a
//! state named `cache`, see [`State`](crate::typed::State)), and `g: &'g Scope<'g>`. A model
//! with states has `run_in(&self, context: &mut Context, ..)` in place of `run` (its
//! `STATES` lists them; `new_context` makes a context). A model that makes its states in its
//! body with `g.state(..)` (one cache per layer, their number from the config) says so with
//! `#[rlx::model(states)]` and gets `run_in` too.

use std::path::Path;

use crate::backend::{Backend, CompileError, Executable, RunError};
use crate::ir::Graph;
use crate::params::{Manifest, ParamSpec};
use crate::tensor::{HostTensor, TensorRef};
use crate::typed::{BuildErrors, Element, Scope, Shape, Sizes, Tensor};
use crate::weights::{self, LoadOptions, LoadReport, WeightsError};

/// A model's config: the sizes of its config dims.
///
/// ```
/// use rlx::model::Config;
/// use rlx::typed::Sizes;
/// rlx::config_dims!(Hidden);
///
/// struct Cfg { hidden: usize }
/// impl Config for Cfg {
///     fn sizes(&self) -> Sizes {
///         Sizes::new().with::<Hidden>(self.hidden)
///     }
/// }
/// assert_eq!(Cfg { hidden: 8 }.sizes().get::<Hidden>(), Some(8));
/// ```
pub trait Config {
    /// The value of every config dim the model uses.
    fn sizes(&self) -> Sizes;
}

/// Types a model fn can take as inputs and return as outputs: [`Tensor`] handles (or
/// aliases of them).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor handle",
    label = "model inputs and outputs must be `Tensor`s",
    note = "inputs are `Tensor<'g, Shape, Element>` arguments; weights go in a `&Params` struct or a `#[param]` argument"
)]
pub trait TensorHandle<'g>: Sized {
    /// Declares the graph input `name` of this type.
    fn input(g: &'g Scope<'g>, name: &str) -> Self;
    /// Marks this tensor as the output `name`.
    fn output(self, g: &'g Scope<'g>, name: &str);
}

impl<'g, S: Shape, E: Element> TensorHandle<'g> for Tensor<'g, S, E> {
    #[track_caller]
    fn input(g: &'g Scope<'g>, name: &str) -> Self {
        g.input(name)
    }
    #[track_caller]
    fn output(self, g: &'g Scope<'g>, name: &str) {
        g.output(name, self)
    }
}

/// Declares an input (what the generated `build` calls for each tensor argument).
#[track_caller]
pub fn input<'g, T: TensorHandle<'g>>(g: &'g Scope<'g>, name: &str) -> T {
    T::input(g, name)
}

/// Marks an output (what the generated `build` calls for each returned tensor).
#[track_caller]
pub fn output<'g, T: TensorHandle<'g>>(g: &'g Scope<'g>, name: &str, tensor: T) {
    tensor.output(g, name)
}

/// Why a model could not be built or compiled.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The graph could not be built.
    #[error(transparent)]
    Build(#[from] BuildErrors),
    /// The backend could not compile it.
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// A compiled model: its graph, the manifest of its weights and the backend's executable.
///
/// Everything takes `&self`, and it is `Send + Sync`: share one behind an `Arc` to run it
/// from many threads at once, and bind new weights (a whole checkpoint with
/// [`Compiled::load_safetensors`]) while those runs go on.
pub struct Compiled {
    graph: Graph,
    manifest: Manifest,
    executable: Box<dyn Executable>,
}

impl Compiled {
    /// Compiles `graph` for `backend`; `manifest` describes its params.
    pub fn new<B: Backend>(
        backend: &B,
        graph: Graph,
        manifest: Manifest,
    ) -> Result<Compiled, CompileError>
    where
        B::Executable: 'static,
    {
        let executable = Box::new(backend.compile(&graph)?);
        Ok(Compiled {
            graph,
            manifest,
            executable,
        })
    }

    /// The graph as built (before the backend's passes).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The declared weights.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The backend's executable, for what the typed API does not cover.
    pub fn executable(&self) -> &dyn Executable {
        self.executable.as_ref()
    }

    /// The executable as its backend's own type, for that backend's API (`None` for another
    /// backend's type).
    ///
    /// ```
    /// use rlx::cpu::{CpuBackend, CpuExecutable};
    /// use rlx::model::Compiled;
    /// use rlx::prelude::*;
    ///
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [2])?;
    /// b.output("y", x)?;
    /// let model = Compiled::new(&CpuBackend::default(), b.finish()?, Default::default())?;
    /// assert!(model.executable_as::<CpuExecutable>().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn executable_as<E: Executable>(&self) -> Option<&E> {
        let any: &dyn std::any::Any = self.executable.as_ref();
        any.downcast_ref::<E>()
    }

    /// Binds the weight `name` (a graph param name, see [`ParamSpec::name`]). Runs in
    /// flight on other threads finish with the weights they started with.
    pub fn set_weight(&self, name: &str, value: TensorRef<'_>) -> Result<(), RunError> {
        self.executable.set_weight(name, value)
    }

    /// A copy of the bound weight `name`.
    pub fn weight(&self, name: &str) -> Result<HostTensor, RunError> {
        self.executable.weight(name)
    }

    /// Binds every weight to what `init` makes for it (tests, examples, fresh models).
    pub fn init_weights(
        &self,
        mut init: impl FnMut(&ParamSpec) -> HostTensor,
    ) -> Result<(), RunError> {
        for spec in &self.manifest.params {
            let value = init(spec);
            self.executable.set_weight(&spec.name, value.view())?;
        }
        Ok(())
    }

    /// Loads every weight from a safetensors file, strictly: every checkpoint tensor must
    /// be used and match in dtype and dims. The weights change all at once: a run on
    /// another thread sees the old weights or the new ones, never a mixture.
    pub fn load_safetensors(&self, path: impl AsRef<Path>) -> Result<LoadReport, WeightsError> {
        self.load_safetensors_with(path, &LoadOptions::default())
    }

    /// Loads every weight from a safetensors file with `options`.
    pub fn load_safetensors_with(
        &self,
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<LoadReport, WeightsError> {
        weights::load_safetensors(
            self.executable.as_ref(),
            &self.manifest,
            path.as_ref(),
            options,
        )
    }

    /// Loads every weight from a GGUF file, strictly (every declared tensor present with
    /// its dims, every file tensor declared), quantized tensors dequantized to the model's
    /// `f32`. The weights change all at once.
    pub fn load_gguf(&self, file: &crate::gguf::Gguf) -> Result<LoadReport, WeightsError> {
        weights::load_gguf(self.executable.as_ref(), &self.manifest, file, &[])
    }

    /// Saves the bound weights to a safetensors file in the checkpoint's layout (transposed
    /// and fused back), so that [`Compiled::load_safetensors`] reads them back.
    pub fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<(), WeightsError> {
        weights::save_safetensors(self.executable.as_ref(), &self.manifest, path.as_ref())
    }

    /// Runs with named inputs; outputs come back in the graph's order.
    pub fn run_named(&self, inputs: &[(&str, TensorRef<'_>)]) -> Result<Vec<HostTensor>, RunError> {
        self.executable.run(inputs, &[])
    }

    /// Runs and returns exactly `N` outputs (what the generated `run` calls).
    pub fn run_outputs<const N: usize>(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<[HostTensor; N], RunError> {
        let outputs = self.run_named(inputs)?;
        let got = outputs.len();
        outputs
            .try_into()
            .map_err(|_| RunError::OutputCount { expected: N, got })
    }

    /// A new context holding the model's states, each zero (see
    /// [`Context`](crate::backend::Context)).
    pub fn new_context(&self) -> Result<crate::backend::Context, RunError> {
        self.executable.new_context()
    }

    /// Runs in `context` and returns exactly `N` outputs (what the generated `run_in` of a
    /// model with states calls).
    pub fn run_in_outputs<const N: usize>(
        &self,
        context: &mut crate::backend::Context,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<[HostTensor; N], RunError> {
        let outputs = self.executable.run_in(context, inputs, &[])?;
        let got = outputs.len();
        outputs
            .try_into()
            .map_err(|_| RunError::OutputCount { expected: N, got })
    }
}
