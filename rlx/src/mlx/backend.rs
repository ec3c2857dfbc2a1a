//! [`MlxBackend`]: its settings (mode, device, precision, plan cache, custom ops), the
//! checks a graph passes before it compiles for a device, and `compile`.

use std::sync::Arc;

use super::*;

/// The MLX backend. See the [module docs](crate::mlx).
#[derive(Clone)]
pub struct MlxBackend {
    mode: MlxMode,
    device: Device,
    precision: Precision,
    plan_cache: usize,
    custom: CustomOps<dyn MlxCustomOp>,
}

impl Default for MlxBackend {
    fn default() -> MlxBackend {
        MlxBackend::new(MlxMode::default())
    }
}

impl std::fmt::Debug for MlxBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlxBackend")
            .field("mode", &self.mode)
            .field("device", &self.device)
            .field("precision", &self.precision)
            .field("plan_cache", &self.plan_cache)
            .field("custom_ops", &self.custom)
            .finish()
    }
}

impl MlxBackend {
    /// A backend evaluating in `mode` on [`Device::preferred`] (the GPU when there is one)
    /// in full float32 ([`Precision::F32`]).
    pub fn new(mode: MlxMode) -> MlxBackend {
        MlxBackend {
            mode,
            device: Device::preferred(),
            precision: Precision::default(),
            plan_cache: crate::backend::DEFAULT_PLAN_CACHE,
            custom: CustomOps::default(),
        }
    }

    /// The same backend computing on `device`. Compiling fails with
    /// [`CompileError::DeviceUnavailable`] when the device is not there, and on a GPU with
    /// [`CompileError::DeviceDType`] for a graph with float64 nodes (MLX has no float64
    /// GPU kernels): float64 graphs compile for [`Device::Cpu`].
    ///
    /// ```
    /// use rlx::mlx::{Device, MlxBackend, MlxMode};
    /// let cpu = MlxBackend::new(MlxMode::Lazy).with_device(Device::Cpu);
    /// assert_eq!(cpu.device(), Device::Cpu);
    /// ```
    pub fn with_device(mut self, device: Device) -> MlxBackend {
        self.device = device;
        self
    }

    /// The same backend computing float32 graphs in `precision`. See [`Precision`].
    pub fn with_precision(mut self, precision: Precision) -> MlxBackend {
        self.precision = precision;
        self
    }

    /// The same backend with executables keeping at most `plans` per-binding plans (lowered
    /// graphs, and in compiled mode traced functions), at least one; past it the least
    /// recently used is dropped. Defaults to
    /// [`DEFAULT_PLAN_CACHE`](crate::backend::DEFAULT_PLAN_CACHE).
    ///
    /// ```
    /// use rlx::mlx::{MlxBackend, MlxMode};
    /// let backend = MlxBackend::new(MlxMode::Compiled).with_plan_cache(4);
    /// assert_eq!(backend.plan_cache(), 4);
    /// ```
    pub fn with_plan_cache(mut self, plans: usize) -> MlxBackend {
        self.plan_cache = plans.max(1);
        self
    }

    /// The most per-binding plans an executable keeps.
    pub fn plan_cache(&self) -> usize {
        self.plan_cache
    }

    /// The evaluation mode.
    pub fn mode(&self) -> MlxMode {
        self.mode
    }

    /// The device executables compute on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The float precision of executables.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Checks the device is there and can run `g` in the chosen precision.
    fn check_device(&self, g: &Graph) -> Result<(), CompileError> {
        if !self.device.is_available() {
            return Err(CompileError::DeviceUnavailable {
                backend: NAME,
                device: self.device.name(),
            });
        }
        if self.device != Device::Gpu {
            return Ok(());
        }
        let f64_node = g.iter().find(|(_, n)| {
            n.ty.dtype == DType::F64 || n.inputs.iter().any(|i| g[*i].ty.dtype == DType::F64)
        });
        if let Some((id, node)) = f64_node {
            return Err(CompileError::DeviceDType {
                backend: NAME,
                device: self.device.name(),
                node: NodeSite::of(id, node),
                dtype: DType::F64,
            });
        }
        let tf32 = tf32_enabled();
        let process = if tf32 { "tf32" } else { "f32" };
        let fix = match (self.precision, tf32) {
            (Precision::F32, true) => {
                "this process runs float32 matrix products in TF32 \
                 (MLX_ENABLE_TF32=1 at start); start it without that variable, or ask for \
                 Precision::Tf32"
            }
            (Precision::Tf32, false) => {
                "MLX fixes TF32 per process, and this one runs full \
                 float32; start it with MLX_ENABLE_TF32=1, or ask for Precision::F32"
            }
            _ => return Ok(()),
        };
        Err(CompileError::Precision {
            backend: NAME,
            asked: precision_name(self.precision),
            reason: format!("{fix} (process: {process})"),
        })
    }

    /// Registers the MLX kernel of the custom op `name`.
    pub fn with_custom_op(mut self, name: &str, kernel: Arc<dyn MlxCustomOp>) -> MlxBackend {
        self.custom.insert(name, kernel);
        self
    }
}

/// The name of a precision in messages.
fn precision_name(precision: Precision) -> &'static str {
    match precision {
        Precision::F32 => "f32",
        Precision::Tf32 => "tf32",
        Precision::F16 => "f16",
        Precision::BF16 => "bf16",
    }
}

impl Backend for MlxBackend {
    type Executable = MlxExecutable;

    fn name(&self) -> &'static str {
        NAME
    }

    fn supports(&self, op: &Op) -> bool {
        self.custom.supports(op)
    }

    fn compile(&self, graph: &Graph) -> Result<MlxExecutable, CompileError> {
        check_compilable(self, graph)?;
        // Composites without an MLX call become their decompositions.
        let g = passes::pass(
            "decompose",
            passes::decompose(graph, &super::lower::has_kernel),
        )?;
        let g = passes::standard(&g)?;
        self.check_device(&g)?;
        let narrow = match self.precision {
            Precision::F16 => Some(DType::F16),
            Precision::BF16 => Some(DType::BF16),
            Precision::F32 | Precision::Tf32 => None,
        };
        let (g, declared) = match narrow {
            None => (g, None),
            Some(dtype) => (
                passes::pass("compute_in", passes::compute_in(&g, dtype))?,
                Some(g),
            ),
        };

        let signature = Signature::of(&g);
        let mut params = ParamTable::of(&g);
        // Half precisions narrow float32 params: they are still offered as declared and
        // cast once when bound.
        let param_casts: Vec<Option<DType>> = params
            .specs
            .iter_mut()
            .map(|spec| {
                let declared = declared.as_ref()?;
                let was = declared[declared.param(&spec.name)?].ty.dtype;
                (was != spec.dtype).then(|| std::mem::replace(&mut spec.dtype, was))
            })
            .collect();
        let constants = upload_constants(&g, self.device).map_err(|e| CompileError::Backend {
            backend: NAME,
            message: e.message,
        })?;
        let custom = self.custom.per_node(&g);
        let k_major = match self.device {
            Device::Gpu => k_major_params(&g, &params),
            Device::Cpu => vec![false; params.specs.len()],
        };
        let mut leaves: Vec<NodeId> = params.specs.iter().map(|p| p.node).collect();
        leaves.extend(signature.inputs.iter().map(|i| i.node));
        leaves.extend(g.states().map(|(id, _)| id));
        let backend_error = |e: MlxError| CompileError::Backend {
            backend: NAME,
            message: e.message,
        };
        let mut block_formats = block_weight_params(&g, &params);
        let bias_adds = BiasAdds::of(&g);
        let residual_norms = ResidualNorms::of(&g, &bias_adds);
        let groups = product_groups(&g, &params, &block_formats, bias_adds.folded());
        // A grouped weight's forms (a block format's, the view for rows) are its group's:
        // none of its own.
        let mut grouped = vec![false; params.specs.len()];
        for group in &groups {
            for (_, i, _) in &group.members {
                block_formats[*i] = None;
                grouped[*i] = true;
            }
        }
        let row_operands = row_operand_params(&g, &params, &grouped);
        let prepared = prepared_slots(&g, &params, &block_formats, &row_operands, leaves.len())
            .map_err(backend_error)?;
        let prepared_count = prepared.iter().flatten().map(|p| p.count).sum::<usize>();
        let fused =
            fused_slots(&g, &groups, leaves.len() + prepared_count).map_err(backend_error)?;
        let head_ropes = HeadRopes::of(&g, &fused);
        let gated_products = GatedProducts::of(&g, &fused);
        let states: Arc<[StateSpec]> = StateSpec::of(&g).into();
        let written = g
            .writes()
            .iter()
            .map(|w| {
                states
                    .iter()
                    .position(|s| s.name == w.name)
                    .expect("writes name states")
            })
            .collect();
        Ok(MlxExecutable {
            states,
            written,
            weights: RwLock::new(BoundWeights {
                values: vec![None; params.specs.len()],
                params,
                joined: groups.iter().map(|_| Joined::default()).collect(),
            }),
            binding_weights: Mutex::new(()),
            signature,
            leaves,
            constants: Arc::new(constants),
            custom: Arc::new(custom),
            bias_adds: Arc::new(bias_adds),
            residual_norms: Arc::new(residual_norms),
            head_ropes: Arc::new(head_ropes),
            gated_products: Arc::new(gated_products),
            graph: Arc::new(g),
            mode: self.mode,
            device: self.device,
            exact_halves: narrow.is_none(),
            param_casts,
            k_major,
            block_formats,
            row_operands,
            prepared: Arc::new(prepared),
            groups,
            fused: Arc::new(fused),
            bindings: PlanCache::new(self.plan_cache),
            scratch: ScratchPool::default(),
        })
    }
}
