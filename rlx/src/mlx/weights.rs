//! Weights bound to an MLX executable: each param's array as runs read it (cast, K-major),
//! the MLX form of GGUF block weights, a float weight's view for products of a block of rows
//! ([`layout::RowOperand`](super::layout::RowOperand)), and the joined weight of each product
//! group ([`layout::product_groups`](super::layout::product_groups)), all made and evaluated
//! when bound, so runs only read them.

use super::*;

/// A bound weight's array.
#[derive(Clone)]
pub(super) struct Weight {
    pub(super) array: Array,
    /// Made when it was bound: for the weight of block products, its MLX form
    /// ([`layout::block_weight_params`]); for a float weight that multiplies a block of
    /// rows, its view at the rows' rank ([`layout::row_operand_params`]).
    pub(super) prepared: Vec<Array>,
}

// SAFETY: a weight's arrays (its value and its prepared form) are evaluated when it is bound
// (`store_weights`) and never changed afterwards; other threads only clone the handles (an
// atomic reference count) and build ops that read them, which MLX allows from any thread.
unsafe impl Sync for Weight {}

/// The params of an executable, and the value bound to each (indexed alike).
pub(super) struct BoundWeights {
    pub(super) params: ParamTable,
    pub(super) values: Vec<Option<Weight>>,
    /// Per product group: its joined weight (empty until every member is bound).
    pub(super) joined: Vec<Joined>,
}

/// A product group's joined weight: the float weight (and its view at the rows' rank when
/// the group multiplies a block of rows), or a block format's MLX form.
#[derive(Default)]
pub(super) struct Joined(pub(super) Vec<Array>);

// SAFETY: as for `Weight`: evaluated when bound (`store_weights`), never changed afterwards;
// other threads only clone the handles and build ops that read them.
unsafe impl Sync for Joined {}

impl MlxExecutable {
    /// Binds weights to MLX arrays, all or none, like [`Executable::set_weights`] but
    /// without a trip through host memory: an array another run returned (an updated
    /// weight) stays on the device. Each is evaluated before it is bound.
    ///
    /// ```no_run
    /// use rlx::prelude::*;
    /// use rlx::backend::{Backend, Executable};
    /// use rlx::mlx::{Array, MlxBackend, MlxMode};
    /// use rlx::tensor::HostTensor;
    ///
    /// let mut b = GraphBuilder::new();
    /// let w = b.param("w", DType::F32, [2])?;
    /// let twice = b.add(w, w)?;
    /// b.output("twice", twice)?;
    /// let exe = MlxBackend::new(MlxMode::Lazy).compile(&b.finish()?)?;
    /// let w = Array::from_tensor(HostTensor::from_vec(vec![1.0f32, 2.0], [2])?.view())?;
    /// exe.set_weight_arrays(&[("w", &w)])?;
    /// let out = exe.run_values(&[], &[])?;
    /// let doubled = out[0].mlx_array().expect("MLX returns arrays");
    /// exe.set_weight_arrays(&[("w", doubled)])?; // the result, bound as it is
    /// assert_eq!(exe.weight("w")?.as_slice::<f32>()?, &[2.0, 4.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_weight_arrays(&self, weights: &[(&str, &Array)]) -> Result<(), RunError> {
        let _one_at_a_time = lock(&self.binding_weights);
        let _gpu = device::gpu_turn(self.device);
        let mut made = Vec::with_capacity(weights.len());
        {
            let bound = read(&self.weights);
            for (name, value) in weights {
                let dtype = value.dtype().map_err(backend_error)?;
                let dims = value.shape().map_err(backend_error)?;
                let i = bound.params.check_type(name, dtype, &dims)?;
                made.push((i, self.as_stored(i, (*value).clone())?));
            }
        }
        self.store_weights(made)
    }

    /// Param `i`'s value as runs read it: in the dtype it computes in (a half-precision
    /// copy of an f32 weight under [`Precision::F16`] or [`Precision::BF16`]) and, where
    /// [`layout`] says so, K-major.
    pub(super) fn as_stored(&self, i: usize, array: Array) -> Result<Array, RunError> {
        let (cast, k_major) = (self.param_casts[i], self.k_major[i]);
        if cast.is_none() && !k_major {
            return Ok(array);
        }
        device::on_device(self.device, true, || {
            let array = match cast {
                Some(dtype) => array.cast(dtype)?,
                None => array,
            };
            if k_major { array.k_major() } else { Ok(array) }
        })
        .and_then(|stored| stored)
        .map_err(backend_error)
    }

    /// Evaluates the new values (and the MLX form of block weights) and binds them, all at
    /// once.
    pub(super) fn store_weights(&self, made: Vec<(usize, Array)>) -> Result<(), RunError> {
        let mut weights = made
            .into_iter()
            .map(|(i, array)| {
                let prepared = match (self.block_formats[i], self.row_operands[i]) {
                    (Some(format), _) => {
                        device::on_device(self.device, true, || array.block_prepare(format.id()))
                            .and_then(|parts| parts)
                            .map_err(backend_error)?
                    }
                    (None, Some(rows)) => {
                        let view = device::on_device(self.device, true, || row_view(&array, rows))
                            .and_then(|view| view)
                            .map_err(backend_error)?;
                        vec![view]
                    }
                    (None, None) => Vec::new(),
                };
                Ok((i, Weight { array, prepared }))
            })
            .collect::<Result<Vec<_>, RunError>>()?;
        let joined = self.join_groups(&mut weights)?;
        // Materialized now, so the caller's bytes may go away and runs do not pay for it.
        let all: Vec<&Array> = weights
            .iter()
            .flat_map(|(_, w)| std::iter::once(&w.array).chain(&w.prepared))
            .chain(joined.iter().flat_map(|(_, parts)| parts))
            .collect();
        Array::eval(&all).map_err(backend_error)?;
        let mut bound = write(&self.weights);
        for (i, weight) in weights {
            bound.values[i] = Some(weight);
            bound.params.mark_bound(i);
        }
        for (g, parts) in joined {
            bound.joined[g] = Joined(parts);
        }
        Ok(())
    }

    /// The joined weights of the product groups that `weights` (about to be bound) touch
    /// and whose members are then all bound; a float group's members become views of
    /// theirs (appended to `weights` for members bound before), so the weights are held
    /// once.
    fn join_groups(
        &self,
        weights: &mut Vec<(usize, Weight)>,
    ) -> Result<Vec<(usize, Vec<Array>)>, RunError> {
        let mut joined = Vec::new();
        let bound = read(&self.weights);
        for (g, group) in self.groups.iter().enumerate() {
            let new =
                |weights: &[(usize, Weight)], i: &usize| weights.iter().position(|(j, _)| j == i);
            if !group
                .members
                .iter()
                .any(|(_, i, _)| new(weights, i).is_some())
            {
                continue;
            }
            let arrays: Option<Vec<Array>> = group
                .members
                .iter()
                .map(|(_, i, _)| match new(weights, i) {
                    Some(at) => Some(weights[at].1.array.clone()),
                    None => bound.values[*i].as_ref().map(|w| w.array.clone()),
                })
                .collect();
            // Joined when the group's last member is bound.
            let Some(arrays) = arrays else { continue };
            let (parts, views) = device::on_device(self.device, true, || self.join(group, &arrays))
                .and_then(|made| made)
                .map_err(backend_error)?;
            for ((_, i, _), view) in group.members.iter().zip(views) {
                match new(weights, i) {
                    Some(at) => weights[at].1.array = view,
                    None => weights.push((
                        *i,
                        Weight {
                            array: view,
                            prepared: Vec::new(),
                        },
                    )),
                }
            }
            joined.push((g, parts));
        }
        Ok(joined)
    }

    /// `group`'s joined weight from its members' `arrays` (as stored), and each member's
    /// view of it for a float group (none for block weights, which join their MLX forms and
    /// keep their bytes).
    fn join(
        &self,
        group: &ProductGroup,
        arrays: &[Array],
    ) -> Result<(Vec<Array>, Vec<Array>), MlxError> {
        if let Some(format) = group.format {
            let forms = arrays
                .iter()
                .map(|a| a.block_prepare(format.id()))
                .collect::<Result<Vec<_>, _>>()?;
            let parts = (0..forms[0].len())
                .map(|p| Array::concat(&forms.iter().map(|f| &f[p]).collect::<Vec<_>>(), 0))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok((parts, Vec::new()));
        }
        let axis = if group.transposed { 0 } else { 1 };
        let mut whole = Array::concat(&arrays.iter().collect::<Vec<_>>(), axis)?;
        if self.k_major[group.members[0].1] {
            whole = whole.k_major()?;
        }
        let dims = whole.shape()?;
        let views = group
            .members
            .iter()
            .map(|(_, _, columns)| {
                let (mut start, mut stop) = (vec![0; dims.len()], dims.clone());
                start[axis] = columns.start;
                stop[axis] = columns.end;
                whole.slice(&start, &stop, &vec![1; dims.len()])
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The product reads the joined weight as its right operand, `[in, out]`: a group of
        // `[out, in]` weights hands it the transposed view, made once here rather than as a
        // graph node of every run (`grouped_product` multiplies it untransposed).
        let operand = if group.transposed {
            whole.permute(&[1, 0])?
        } else {
            whole
        };
        let parts = match group.row_rank {
            Some(rank) => {
                let rows = row_view(
                    &operand,
                    RowOperand {
                        rank,
                        transposed: false,
                    },
                )?;
                vec![operand, rows]
            }
            None => vec![operand],
        };
        Ok((parts, views))
    }
}

/// `weight` as [`RowOperand`] `rows` describes: a view (MLX reshapes a transposed matrix
/// into more leading dims of 1 without copying it).
fn row_view(weight: &Array, rows: RowOperand) -> Result<Array, MlxError> {
    let operand = if rows.transposed {
        weight.permute(&[1, 0])?
    } else {
        weight.clone()
    };
    let mut dims = vec![1; rows.rank - 2];
    dims.extend(operand.shape()?);
    operand.reshape(&dims)
}
