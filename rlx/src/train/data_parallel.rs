//! Data-parallel training: every rank of a [`Group`] computes gradients on its shard of the
//! batch, the gradients are averaged across ranks, and every rank applies the same update.

use std::path::Path;

use super::{
    Differentiated, StepScalars, TrainConfig, TrainError, append_update, differentiate,
    hyper_dtype, is_state, load_state, save_state, scalar_value,
};
use crate::backend::{Backend, Context, Executable, Value};
use crate::builder::GraphBuilder;
use crate::distributed::Group;
use crate::ir::{DType, Graph, NodeId, Op, Shape, Slice};
use crate::tensor::{HostTensor, TensorRef};

/// The default size of a gradient bucket: PyTorch DDP's 25 MiB.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// A training loop over the ranks of a [`Group`], on either backend.
///
/// Each step runs two compiled graphs over one [`Context`] that holds the weights and the
/// optimizer state (the states of both graphs). The first computes the gradients of this
/// rank's shard, scaled by the rank's share of the batch and packed into buckets
/// (consecutive weights of one dtype in one flat tensor of at most
/// [`DataParallelTrainer::with_bucket_bytes`] bytes, so a model's hundreds of weights take a
/// handful of collectives). The buckets are summed across ranks. The second graph unpacks
/// them, clips the averaged gradients and updates the weights and optimizer state in
/// place, the same on every rank, so weights that start equal
/// ([`DataParallelTrainer::broadcast_weights`]) stay equal
/// ([`DataParallelTrainer::check_in_sync`]).
///
/// With shards weighted by their sample counts and a loss that is a mean over samples,
/// a step equals one [`super::Trainer`] step on the whole batch, up to float rounding.
///
/// Both backends take the same path: the graphs pass [`Value`]s, which stay where the
/// backend computes. On MLX the gradients, weights and optimizer state never leave the
/// device (only the shard, the per-step scalars and the loss cross host memory); on the
/// CPU the buckets are host tensors that the collectives read in place.
///
/// ```no_run
/// use rlx::cpu::CpuBackend;
/// use rlx::distributed::{Group, GroupOptions};
/// use rlx::prelude::*;
/// use rlx::tensor::HostTensor;
/// use rlx::train::{DataParallelTrainer, Optimizer, TrainConfig};
///
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("batch")])?;
/// let w = b.param("w", DType::F32, Shape::scalar())?;
/// let err = b.mul(x, w)?;
/// let sq = b.mul(err, err)?;
/// let loss = b.reduce(ReduceOp::Mean, sq, &[0], false)?;
/// b.output("loss", loss)?;
///
/// let group = Group::init(&GroupOptions::default())?; // one process per rank
/// let config = TrainConfig::new(Optimizer::sgd(0.1));
/// let mut trainer = DataParallelTrainer::new(&CpuBackend::default(), &b.finish()?, "loss", config, group)?;
/// trainer.set_weight("w", HostTensor::scalar(1.0f32).view())?;
/// trainer.broadcast_weights()?; // rank 0's values everywhere
/// let shard = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?; // this rank's part of the batch
/// let loss = trainer.step_weighted(&[("x", shard.view())], 2.0)?; // the mean over all ranks
/// trainer.check_in_sync()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DataParallelTrainer {
    group: Group,
    config: TrainConfig,
    /// Per trained weight: its dtype and dims.
    shapes: Vec<(DType, Vec<usize>)>,
    /// Indices into `model.weights`: the gradients summed as one flat tensor.
    buckets: Vec<Vec<usize>>,
    /// The gradients of a shard, scaled and packed into buckets; the scaled loss.
    gradients: Box<dyn Executable>,
    /// The summed buckets in; the weights and optimizer state updated in the context.
    update: Box<dyn Executable>,
    /// The states of both graphs.
    context: Context,
    scalar_dtype: DType,
    steps: u64,
    scalars: StepScalars,
}

/// The gradient graph's input holding this rank's share of the step.
const SHARE_INPUT: &str = "data_parallel.share";
/// The gradient graph's output holding the loss times the share (f32).
const LOSS_OUTPUT: &str = "data_parallel.loss";

impl DataParallelTrainer {
    /// Compiles the two graphs of a step of `graph` (minimizing its scalar output `loss`)
    /// on `backend` and zeroes the optimizer state, with gradient buckets of
    /// [`DEFAULT_BUCKET_BYTES`]. Every rank must call this with the same graph and settings.
    pub fn new<B: Backend>(
        backend: &B,
        graph: &Graph,
        loss: &str,
        config: TrainConfig,
        group: Group,
    ) -> Result<DataParallelTrainer, TrainError>
    where
        B::Executable: 'static,
    {
        Self::with_bucket_bytes(backend, graph, loss, config, group, DEFAULT_BUCKET_BYTES)
    }

    /// [`DataParallelTrainer::new`] with gradient buckets of at most `bucket_bytes` bytes
    /// (at least one weight per bucket).
    ///
    /// ```
    /// use rlx::cpu::CpuBackend;
    /// use rlx::distributed::Group;
    /// use rlx::prelude::*;
    /// use rlx::tensor::HostTensor;
    /// use rlx::train::{DataParallelTrainer, Optimizer, TrainConfig};
    ///
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [Dim::sym("batch")])?;
    /// let w = b.param("w", DType::F32, Shape::scalar())?;
    /// let wx = b.mul(x, w)?;
    /// let sq = b.mul(wx, wx)?;
    /// let loss = b.reduce(ReduceOp::Mean, sq, &[0], false)?;
    /// b.output("loss", loss)?;
    /// let config = TrainConfig::new(Optimizer::sgd(0.1));
    /// let group = Group::single(); // one process: the collectives return their input
    /// let backend = CpuBackend::default();
    /// let mut trainer =
    ///     DataParallelTrainer::with_bucket_bytes(&backend, &b.finish()?, "loss", config, group, 1 << 20)?;
    /// trainer.set_weight("w", HostTensor::scalar(1.0f32).view())?;
    /// let x = HostTensor::from_vec(vec![1.0f32, -1.0], [2])?;
    /// let loss = trainer.step(&[("x", x.view())])?;
    /// assert_eq!(loss, 1.0);
    /// // d/dw mean((x·w)²) = 2w·mean(x²) = 2, so w = 1 − 0.1·2.
    /// assert_eq!(trainer.weight("w")?.as_slice::<f32>()?, &[0.8]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_bucket_bytes<B: Backend>(
        backend: &B,
        graph: &Graph,
        loss: &str,
        config: TrainConfig,
        group: Group,
        bucket_bytes: usize,
    ) -> Result<DataParallelTrainer, TrainError>
    where
        B::Executable: 'static,
    {
        let model = differentiate(graph, loss, &config)?;
        let shapes = model
            .weights
            .iter()
            .map(|(id, name)| {
                let ty = &model.nodes[id.index()].ty;
                let dims = ty.shape.static_dims().ok_or_else(|| {
                    TrainError::Config(format!("weight {name:?} has symbolic dims {}", ty.shape))
                })?;
                Ok((ty.dtype, dims))
            })
            .collect::<Result<Vec<_>, TrainError>>()?;
        let buckets = buckets(
            shapes.len(),
            |i| shapes[i].0,
            |i| numel(&shapes[i].1) * shapes[i].0.size_bytes(),
            bucket_bytes,
        );
        let scalar_dtype = hyper_dtype(graph);
        let update = update_graph(&model, &shapes, &buckets, &config, scalar_dtype)?;
        let gradients = gradient_graph(&model, &shapes, &buckets, &update, scalar_dtype)?;
        let gradients: Box<dyn Executable> = Box::new(backend.compile(&gradients)?);
        let update: Box<dyn Executable> = Box::new(backend.compile(&update)?);
        let context = update.new_context()?;
        Ok(DataParallelTrainer {
            group,
            config,
            shapes,
            buckets,
            gradients,
            update,
            context,
            scalar_dtype,
            steps: 0,
            scalars: StepScalars::new(scalar_dtype),
        })
    }

    /// The group the trainer runs over.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Sets the weight (or optimizer state, or untrained param) `name` on this rank.
    pub fn set_weight(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), TrainError> {
        if is_state(&self.context, name) {
            Ok(self.context.set(name, value)?)
        } else {
            // Params the model does not train: only the gradient graph reads them.
            Ok(self.gradients.set_weight(name, value)?)
        }
    }

    /// A copy of the weight (or optimizer state, or untrained param) `name`.
    pub fn weight(&self, name: &str) -> Result<HostTensor, TrainError> {
        if is_state(&self.context, name) {
            Ok(self.context.get(name)?)
        } else {
            Ok(self.gradients.weight(name)?)
        }
    }

    /// Makes every rank's weights and optimizer state rank 0's, bit for bit.
    pub fn broadcast_weights(&mut self) -> Result<(), TrainError> {
        let names: Vec<String> = self
            .context
            .states()
            .iter()
            .map(|s| s.name.clone())
            .collect();
        for name in names {
            let mine = self.context.get(&name)?;
            let root = self.group.broadcast_tensor(mine.view(), 0)?;
            self.context.set(&name, root.view())?;
        }
        Ok(())
    }

    /// Checks that every rank holds the same weights and optimizer state, bit for bit
    /// (a 64-bit fingerprint of each rank's values, gathered).
    pub fn check_in_sync(&self) -> Result<(), TrainError> {
        let mut hash = Fingerprint::new();
        for spec in self.context.states() {
            hash.add(spec.name.as_bytes());
            hash.add(self.context.get(&spec.name)?.data().bytes());
        }
        let value = hash.finish();
        let words =
            HostTensor::from_vec(vec![value as u32 as i32, (value >> 32) as u32 as i32], [2])
                .map_err(tensor_error)?;
        let all = self.group.all_gather_tensor(words.view())?;
        let all = all.as_slice::<i32>().map_err(tensor_error)?;
        let differing: Vec<usize> = all
            .chunks(2)
            .enumerate()
            .filter(|(_, w)| *w != &all[..2])
            .map(|(rank, _)| rank)
            .collect();
        if differing.is_empty() {
            Ok(())
        } else {
            Err(TrainError::OutOfSync { ranks: differing })
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The learning rate the next step uses.
    pub fn lr(&self) -> f64 {
        self.config.lr_at(self.steps)
    }

    /// One step with this rank's shard counted as much as every other rank's (the
    /// gradients' plain mean across ranks); see [`DataParallelTrainer::step_weighted`].
    /// Returns the mean of the ranks' losses.
    pub fn step(&mut self, shard: &[(&str, TensorRef<'_>)]) -> Result<f64, TrainError> {
        let share = 1.0 / self.group.size() as f64;
        self.step_with(shard, share, true)
    }

    /// One step: gradients of this rank's `shard`, averaged across ranks with each rank's
    /// `weight` (its sample count, for a loss that is a mean over samples, makes the step
    /// that of the whole batch; a rank with an empty shard passes 0), then the update.
    /// Returns the loss averaged the same way, the same on every rank. Costs one more
    /// (tiny) collective than [`DataParallelTrainer::step`], for the sum of the weights.
    pub fn step_weighted(
        &mut self,
        shard: &[(&str, TensorRef<'_>)],
        weight: f64,
    ) -> Result<f64, TrainError> {
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(TrainError::Config(format!(
                "a shard's weight must be finite and non-negative, got {weight}"
            )));
        }
        // In f32, which every transport sums (NCCL has no f64 on a GPU); sample counts are
        // exact in f32 up to 2^24.
        let mine = HostTensor::from_vec(vec![weight as f32], [1]).map_err(tensor_error)?;
        let total = self.group.all_sum_tensor(mine.view())?;
        let total = f64::from(total.as_slice::<f32>().map_err(tensor_error)?[0]);
        if total <= 0.0 {
            return Err(TrainError::Config(
                "every rank passed a weight of 0: the step has no samples".into(),
            ));
        }
        self.step_with(shard, weight / total, weight != 0.0)
    }

    /// The step: this rank's gradients times `share` (zeros without samples), summed
    /// across ranks with the loss, then the update. Each rank's gradients are scaled before
    /// the sum, so a group of one (share 1) and power-of-two shares round nothing.
    fn step_with(
        &mut self,
        shard: &[(&str, TensorRef<'_>)],
        share: f64,
        has_samples: bool,
    ) -> Result<f64, TrainError> {
        let mut parts = if has_samples {
            let share = Value::from(scalar_of(self.scalar_dtype, share));
            // Host copies of the shard, which MLX uploads and the CPU reads in place.
            let values: Vec<Value> = shard.iter().map(|(_, t)| Value::from(*t)).collect();
            let mut inputs: Vec<(&str, &Value)> = vec![(SHARE_INPUT, &share)];
            inputs.extend(shard.iter().zip(&values).map(|((name, _), v)| (*name, v)));
            let mut outputs = self
                .gradients
                .run_values_in(&mut self.context, &inputs, &[])?;
            outputs.remove(0); // the unscaled loss
            outputs
        } else {
            self.zeros()
        };
        parts = self.group.all_sum_values(parts)?;
        let loss = parts.pop().expect("the loss is summed last");
        let loss = scalar_value(&loss.into_host()?);
        let used = self.scalars.fill(&self.config, self.steps);
        let scalars: Vec<(&str, Value)> = self.scalars.inputs()[..used]
            .iter()
            .map(|(name, t)| (*name, Value::from(*t)))
            .collect();
        let names: Vec<String> = (0..parts.len()).map(bucket_name).collect();
        let mut inputs: Vec<(&str, &Value)> =
            names.iter().map(String::as_str).zip(&parts).collect();
        inputs.extend(scalars.iter().map(|(name, v)| (*name, v)));
        self.update.run_values_in(&mut self.context, &inputs, &[])?;
        self.steps += 1;
        Ok(loss)
    }

    /// What a rank without samples sums: zero buckets and a zero loss.
    fn zeros(&self) -> Vec<Value> {
        let mut zeros: Vec<Value> = self
            .buckets
            .iter()
            .map(|bucket| {
                let dtype = self.shapes[bucket[0]].0;
                let len = bucket
                    .iter()
                    .map(|&i| self.shapes[i].1.iter().product::<usize>())
                    .sum::<usize>();
                Value::from(HostTensor::zeros(dtype, [len]))
            })
            .collect();
        zeros.push(Value::from(HostTensor::zeros(DType::F32, [1])));
        zeros
    }

    /// Saves every weight, the optimizer state and the step count, in the format of
    /// [`super::Trainer::save`] (either trainer resumes from the other's file).
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        save_state(&self.context, self.steps, path)
    }

    /// Loads what [`DataParallelTrainer::save`] or [`super::Trainer::save`] wrote.
    pub fn load(&mut self, path: &Path) -> Result<(), TrainError> {
        self.steps = load_state(&mut self.context, path)?;
        Ok(())
    }
}

/// The name of bucket `k`'s tensor between the two graphs.
fn bucket_name(k: usize) -> String {
    format!("data_parallel.bucket{k}")
}

/// The summed buckets in (and the per-step scalars); each weight's gradient unpacked,
/// clipped and applied to the weights and optimizer state, which are written. Declares the
/// model's states first, in its order, then the optimizer's.
fn update_graph(
    model: &Differentiated,
    shapes: &[(DType, Vec<usize>)],
    buckets: &[Vec<usize>],
    config: &TrainConfig,
    scalar_dtype: DType,
) -> Result<Graph, TrainError> {
    let mut b = GraphBuilder::new();
    let mut weights = Vec::with_capacity(model.weights.len());
    for node in model.nodes.iter().filter(|n| n.op == Op::State) {
        let name = node.name.clone().unwrap_or_default();
        let id = b.state(&name, node.ty.dtype, node.ty.shape.clone())?;
        if model.weights.iter().any(|(_, w)| *w == name) {
            weights.push((id, name));
        }
    }
    let mut grads = vec![NodeId::new(0); weights.len()];
    for (k, bucket) in buckets.iter().enumerate() {
        let len: usize = bucket.iter().map(|&i| numel(&shapes[i].1)).sum();
        let flat = b.input(&bucket_name(k), shapes[bucket[0]].0, [len])?;
        let mut at = 0;
        for &i in bucket {
            let n = numel(&shapes[i].1);
            let slice = Slice {
                axis: 0,
                start: at as i64,
                stop: Some((at + n) as i64),
                step: 1,
            };
            let part = b.op(Op::Slice(slice), &[flat])?;
            grads[i] = b.reshape(part, shapes[i].1.as_slice())?;
            at += n;
        }
    }
    append_update(&mut b, &weights, grads, config, scalar_dtype)?;
    Ok(b.finish()?)
}

/// The model's loss, then its gradients times the input share, packed into the buckets,
/// then the loss times the share (f32, `[1]`). Declares the states of `update` too, so that
/// one context serves both graphs.
fn gradient_graph(
    model: &Differentiated,
    shapes: &[(DType, Vec<usize>)],
    buckets: &[Vec<usize>],
    update: &Graph,
    scalar_dtype: DType,
) -> Result<Graph, TrainError> {
    // The model's loss is the first output (a graph must return something before the
    // buckets are added); the step reads the scaled loss after the buckets instead.
    let loss = vec![model.outputs[model.loss].clone()];
    let base = Graph::assemble(model.nodes.clone(), loss, model.writes.clone())
        .map_err(|e| TrainError::Config(format!("the gradient graph does not verify: {e}")))?;
    let mut b = GraphBuilder::from_graph(base);
    for (_, node) in update.states() {
        let name = node.name.as_deref().unwrap_or_default();
        if !model
            .nodes
            .iter()
            .any(|n| n.op == Op::State && n.name.as_deref() == Some(name))
        {
            b.state(name, node.ty.dtype, node.ty.shape.clone())?;
        }
    }
    let share = b.input(SHARE_INPUT, scalar_dtype, Shape::scalar())?;
    let cast = |b: &mut GraphBuilder, x: NodeId, to: DType| {
        if b.ty(x).map(|t| t.dtype) == Some(to) {
            Ok(x)
        } else {
            b.cast(x, to)
        }
    };
    for (k, bucket) in buckets.iter().enumerate() {
        let scale = cast(&mut b, share, shapes[bucket[0]].0)?;
        let mut parts = Vec::with_capacity(bucket.len());
        for &i in bucket {
            let flat = b.reshape(model.grads[i], [numel(&shapes[i].1)])?;
            parts.push(b.mul(flat, scale)?);
        }
        let packed = match parts.as_slice() {
            [one] => *one,
            _ => b.concat(&parts, 0)?,
        };
        b.output(&bucket_name(k), packed)?;
    }
    let loss = cast(&mut b, model.outputs[model.loss].node, DType::F32)?;
    let scale = cast(&mut b, share, DType::F32)?;
    let scaled = b.mul(loss, scale)?;
    let scaled = b.reshape(scaled, [1])?;
    b.output(LOSS_OUTPUT, scaled)?;
    Ok(b.finish()?)
}

fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// A scalar `value` of the float `dtype` (the per-step scalars' dtype: f32 or f64).
fn scalar_of(dtype: DType, value: f64) -> HostTensor {
    match dtype {
        DType::F64 => HostTensor::scalar(value),
        _ => HostTensor::scalar(value as f32),
    }
}

fn tensor_error(e: crate::tensor::TensorError) -> TrainError {
    TrainError::Config(e.to_string())
}

/// Groups consecutive weights of one dtype into buckets of at most `limit` bytes (a weight
/// larger than `limit` gets a bucket of its own). Returns the weights' indices per bucket:
/// every index once, in order.
fn buckets(
    count: usize,
    dtype: impl Fn(usize) -> DType,
    bytes: impl Fn(usize) -> usize,
    limit: usize,
) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut filled = 0;
    for i in 0..count {
        let fits = out
            .last()
            .is_some_and(|b: &Vec<usize>| dtype(b[0]) == dtype(i) && filled + bytes(i) <= limit);
        if fits {
            out.last_mut().expect("checked").push(i);
            filled += bytes(i);
        } else {
            out.push(vec![i]);
            filled = bytes(i);
        }
    }
    out
}

/// FNV-1a, 64 bits: a fingerprint of bytes (not a cryptographic hash).
struct Fingerprint(u64);

impl Fingerprint {
    fn new() -> Fingerprint {
        Fingerprint(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_group_consecutive_weights_of_one_dtype_up_to_the_limit() {
        let dtypes = [
            DType::F32,
            DType::F32,
            DType::F32,
            DType::F16,
            DType::F16,
            DType::F32,
        ];
        let bytes = [40, 40, 100, 10, 10, 8];
        let grouped = buckets(6, |i| dtypes[i], |i| bytes[i], 90);
        // 40+40 fit; 100 is over the limit alone; the f16 pair; the last f32 after them.
        assert_eq!(grouped, vec![vec![0, 1], vec![2], vec![3, 4], vec![5]]);
        // A hundred small weights of one dtype take two collectives, not a hundred.
        let many = buckets(100, |_| DType::F32, |_| 1000, 60_000);
        assert_eq!(many.len(), 2);
        assert_eq!(many.iter().map(Vec::len).sum::<usize>(), 100);
    }
}
