//! Data-parallel training: every rank of a [`Group`] computes gradients on its shard of the
//! batch, the gradients are averaged across ranks, and every rank applies the same update.

use std::any::Any;
use std::path::Path;

use half::{bf16, f16};

use super::{
    StepScalars, TrainConfig, TrainError, append_update, hyper_dtype, load_state, save_state,
    scalar_value,
};
use crate::autodiff::{Wrt, gradients};
use crate::backend::{Backend, Executable};
use crate::builder::GraphBuilder;
use crate::distributed::{DistributedError, Group};
use crate::ir::BinaryOp;
use crate::ir::{DType, Graph, NodeId};
use crate::mlx::{Array, MlxExecutable};
use crate::tensor::{HostTensor, TensorData, TensorRef};

/// The default size of a gradient bucket: PyTorch DDP's 25 MiB.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// A training loop over the ranks of a [`Group`], on either backend.
///
/// Each step runs two compiled graphs. The first computes the loss and the gradients of
/// this rank's shard. The gradients are then summed across ranks in buckets (consecutive
/// weights of one dtype packed into one flat tensor of at most
/// [`DataParallelTrainer::set_bucket_bytes`] bytes, so a model's hundreds of weights take a
/// handful of collectives), each weighted by its rank's share of the batch. The second
/// graph clips the averaged gradients and applies the optimizer's update, the same on
/// every rank, so weights that start equal ([`DataParallelTrainer::broadcast_weights`])
/// stay equal ([`DataParallelTrainer::check_in_sync`]).
///
/// With shards weighted by their sample counts and a loss that is a mean over samples,
/// a step equals one [`super::Trainer`] step on the whole batch, up to float rounding.
///
/// On the CPU backend the gradients cross host memory (where the collectives read them);
/// on MLX they, the weights and the optimizer state stay on the device: only the shard,
/// the per-step scalars and the loss cross.
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
    /// The model and the gradients of its float params.
    gradients: Box<dyn Executable>,
    /// The averaged gradients in, the updated weights and optimizer state out.
    update: Box<dyn Executable>,
    /// Per float param, in order: its name, and its gradient's output index.
    weights: Vec<(String, usize)>,
    /// `(output index, param name)` of the update graph's results.
    updates: Vec<(usize, String)>,
    /// Per entry of `updates`: whether it is a weight (which the gradient graph has too)
    /// rather than optimizer state.
    updates_weight: Vec<bool>,
    loss: usize,
    /// Indices into `weights`: the gradients summed as one flat tensor.
    buckets: Vec<Vec<usize>>,
    /// Both graphs run on MLX: gradients and weights stay on the device between them.
    on_device: bool,
    steps: u64,
    outputs: Vec<HostTensor>,
    updated: Vec<HostTensor>,
    /// The averaged gradients, the update graph's inputs `grad/<name>`.
    averaged: Vec<(String, HostTensor)>,
    scalars: StepScalars,
}

impl DataParallelTrainer {
    /// Compiles the two graphs of a step of `graph` (minimizing its scalar output `loss`)
    /// on `backend` and zeroes the optimizer state. Every rank must call this with the same
    /// graph and settings.
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
        let with_grads = gradients(graph, loss, &Wrt::Params)?;
        let find = |name: &str| with_grads.outputs().iter().position(|o| o.name == name);
        let loss_index = find(loss).ok_or_else(|| {
            TrainError::Config(format!("the gradient graph lost the output {loss:?}"))
        })?;
        let mut weights = Vec::new();
        let mut b = GraphBuilder::new();
        let mut update_weights: Vec<(NodeId, String)> = Vec::new();
        let mut grads = Vec::new();
        let mut averaged = Vec::new();
        for (_, node) in graph.params().filter(|(_, n)| n.ty.dtype.is_float()) {
            let name = node.name.clone().unwrap_or_default();
            let grad_name = format!("grad/{name}");
            let index = find(&grad_name).ok_or_else(|| {
                TrainError::Config(format!("the gradient graph has no output {grad_name:?}"))
            })?;
            let dims = node.ty.shape.static_dims().ok_or_else(|| {
                TrainError::Config(format!(
                    "weight {name:?} has symbolic dims {}",
                    node.ty.shape
                ))
            })?;
            weights.push((name.clone(), index));
            update_weights.push((b.param(&name, node.ty.dtype, node.ty.shape.clone())?, name));
            grads.push(b.input(&grad_name, node.ty.dtype, node.ty.shape.clone())?);
            averaged.push((grad_name, HostTensor::zeros(node.ty.dtype, dims)));
        }
        let (updates, state) = append_update(
            &mut b,
            &update_weights,
            grads,
            &config,
            hyper_dtype(graph),
            0,
        )?;
        let update_graph = b.finish()?;
        let gradients: Box<dyn Executable> = Box::new(backend.compile(&with_grads)?);
        let update: Box<dyn Executable> = Box::new(backend.compile(&update_graph)?);
        let is_mlx = |e: &dyn Executable| (e as &dyn Any).is::<MlxExecutable>();
        let on_device = is_mlx(&*gradients) && is_mlx(&*update);
        for (name, dtype, dims) in &state {
            update.set_weight(name, HostTensor::zeros(*dtype, dims.clone()).view())?;
        }
        let updates_weight = updates
            .iter()
            .map(|(_, u)| weights.iter().any(|(w, _)| w == u))
            .collect();
        let mut trainer = DataParallelTrainer {
            group,
            config,
            gradients,
            update,
            weights,
            updates,
            updates_weight,
            loss: loss_index,
            buckets: Vec::new(),
            on_device,
            steps: 0,
            outputs: Vec::new(),
            updated: Vec::new(),
            averaged,
            scalars: StepScalars::new(hyper_dtype(graph)),
        };
        trainer.set_bucket_bytes(DEFAULT_BUCKET_BYTES);
        Ok(trainer)
    }

    /// The group the trainer runs over.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Sets the most bytes one gradient bucket holds (at least one weight per bucket).
    pub fn set_bucket_bytes(&mut self, bytes: usize) {
        let gradients = &self.averaged;
        self.buckets = buckets(
            gradients.len(),
            |i| gradients[i].1.dtype(),
            |i| gradients[i].1.data().bytes().len(),
            bytes,
        );
    }

    /// Binds the weight (or optimizer state) `name` on this rank.
    pub fn set_weight(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), TrainError> {
        if self.weights.iter().any(|(w, _)| w == name) {
            self.gradients.set_weight(name, value)?;
            self.update.set_weight(name, value)?;
        } else if self.updates.iter().any(|(_, u)| u == name) {
            self.update.set_weight(name, value)?;
        } else {
            // Non-float params of the model: only the gradient graph has them.
            self.gradients.set_weight(name, value)?;
        }
        Ok(())
    }

    /// A copy of the weight (or optimizer state) `name`.
    pub fn weight(&self, name: &str) -> Result<HostTensor, TrainError> {
        if self.updates.iter().any(|(_, u)| u == name) {
            Ok(self.update.weight(name)?)
        } else {
            Ok(self.gradients.weight(name)?)
        }
    }

    /// Makes every rank's weights and optimizer state rank 0's, bit for bit.
    pub fn broadcast_weights(&mut self) -> Result<(), TrainError> {
        let names: Vec<String> = self.updates.iter().map(|(_, n)| n.clone()).collect();
        for name in names {
            let mine = self.weight(&name)?;
            let root = self.group.broadcast_tensor(mine.view(), 0)?;
            self.set_weight(&name, root.view())?;
        }
        Ok(())
    }

    /// Checks that every rank holds the same weights and optimizer state, bit for bit
    /// (a 64-bit fingerprint of each rank's values, gathered).
    pub fn check_in_sync(&self) -> Result<(), TrainError> {
        let mut hash = Fingerprint::new();
        for (_, name) in &self.updates {
            hash.add(name.as_bytes());
            hash.add(self.weight(name)?.data().bytes());
        }
        let value = hash.finish();
        let words =
            HostTensor::from_vec(vec![value as u32 as i32, (value >> 32) as u32 as i32], [2])
                .map_err(|e| TrainError::Config(e.to_string()))?;
        let all = self.group.all_gather_tensor(words.view())?;
        let all = all
            .as_slice::<i32>()
            .map_err(|e| TrainError::Config(e.to_string()))?;
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
        self.step_with(shard, None)
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
        self.step_with(shard, Some(weight))
    }

    fn step_with(
        &mut self,
        shard: &[(&str, TensorRef<'_>)],
        weight: Option<f64>,
    ) -> Result<f64, TrainError> {
        if self.on_device {
            return self.step_on_device(shard, weight);
        }
        let local_loss = if weight != Some(0.0) {
            self.gradients.run_into(shard, &[], &mut self.outputs)?;
            scalar_value(&self.outputs[self.loss])
        } else {
            self.outputs.clear();
            0.0
        };
        let (share, extra, loss) = self.shares(weight, local_loss)?;
        let total = self.average_gradients(share, extra)?.unwrap_or(loss);
        let used = self.scalars.fill(&self.config, self.steps);
        let scalars = self.scalars.inputs();
        let mut inputs: Vec<(&str, TensorRef<'_>)> = self
            .averaged
            .iter()
            .map(|(name, t)| (name.as_str(), t.view()))
            .collect();
        inputs.extend_from_slice(&scalars[..used]);
        self.update.run_into(&inputs, &[], &mut self.updated)?;
        let all: Vec<(&str, TensorRef<'_>)> = self
            .updates
            .iter()
            .map(|(index, name)| (name.as_str(), self.updated[*index].view()))
            .collect();
        self.update.set_weights(&all)?;
        self.gradients.set_weights(&self.weights_of(&all))?;
        self.steps += 1;
        Ok(total)
    }

    /// This rank's share of the step, the value to sum for the mean loss (when the shares
    /// are equal), and the mean loss (when they are not, summed here with the weights).
    /// Each rank's gradients are scaled by its share before the sum, so a group of one
    /// (share 1) and power-of-two shares round nothing.
    fn shares(
        &self,
        weight: Option<f64>,
        local_loss: f64,
    ) -> Result<(f64, Option<f64>, f64), TrainError> {
        match weight {
            None => {
                let size = self.group.size() as f64;
                Ok((1.0 / size, Some(local_loss / size), 0.0))
            }
            Some(w) => {
                // In f32, which every transport sums (NCCL has no f64 on a GPU); sample
                // counts are exact in f32 up to 2^24.
                let mine = HostTensor::from_vec(vec![w as f32, (w * local_loss) as f32], [2])
                    .map_err(tensor_error)?;
                let sums = self.group.all_sum_tensor(mine.view())?;
                let sums = sums.as_slice::<f32>().map_err(tensor_error)?;
                let (weights, losses) = (f64::from(sums[0]), f64::from(sums[1]));
                if weights <= 0.0 {
                    return Err(TrainError::Config(
                        "every rank passed a weight of 0: the step has no samples".into(),
                    ));
                }
                Ok((w / weights, None, losses / weights))
            }
        }
    }

    /// A step on MLX with gradients, weights and optimizer state kept on the device: the
    /// gradient run returns arrays, the buckets are built and split by MLX ops, and the
    /// updated values are bound as arrays. Only the shard, the per-step scalars and the
    /// loss cross host memory.
    fn step_on_device(
        &mut self,
        shard: &[(&str, TensorRef<'_>)],
        weight: Option<f64>,
    ) -> Result<f64, TrainError> {
        let array = |t: TensorRef<'_>| Array::from_tensor(t).map_err(DistributedError::from);
        let gradients = as_mlx(&*self.gradients);
        let outputs = if weight != Some(0.0) {
            let uploaded = shard
                .iter()
                .map(|(name, t)| Ok((*name, array(*t)?)))
                .collect::<Result<Vec<_>, TrainError>>()?;
            let inputs: Vec<(&str, &Array)> = uploaded.iter().map(|(n, a)| (*n, a)).collect();
            Some(gradients.run_arrays(&inputs, &[])?)
        } else {
            None
        };
        let local_loss = match &outputs {
            Some(o) => scalar_value(&o[self.loss].to_host().map_err(DistributedError::from)?),
            None => 0.0,
        };
        let (share, extra, loss) = self.shares(weight, local_loss)?;
        let mut flats = Vec::with_capacity(self.buckets.len() + 1);
        for bucket in &self.buckets {
            let dtype = self.averaged[bucket[0]].1.dtype();
            let scale = array(scalar_of(dtype, share).view())?;
            let mut parts = Vec::with_capacity(bucket.len());
            for &i in bucket {
                let like = &self.averaged[i].1;
                let grad = match &outputs {
                    Some(o) => o[self.weights[i].1].clone(),
                    // No samples here: this rank contributes zeros.
                    None => array(HostTensor::zeros(dtype, like.shape()).view())?,
                };
                let flat = grad
                    .reshape(&[like.len()])
                    .map_err(DistributedError::from)?;
                parts.push(if share == 1.0 {
                    flat
                } else {
                    flat.binary(BinaryOp::Mul, &scale)
                        .map_err(DistributedError::from)?
                });
            }
            let parts: Vec<&Array> = parts.iter().collect();
            flats.push(Array::concat(&parts, 0).map_err(DistributedError::from)?);
        }
        if let Some(x) = extra {
            flats.push(array(HostTensor::scalar(x as f32).view())?);
        }
        let mut sums = self.group.all_sum_many(&flats)?;
        let total = match extra {
            Some(_) => {
                let x = sums.pop().expect("the extra value was summed");
                f64::from(
                    x.to_host()
                        .map_err(DistributedError::from)?
                        .as_slice::<f32>()
                        .map_err(tensor_error)?[0],
                )
            }
            None => loss,
        };
        // Buckets hold consecutive weights in order, so their parts come out in weight order.
        let mut averaged = Vec::with_capacity(self.averaged.len());
        for (bucket, sum) in self.buckets.iter().zip(&sums) {
            let mut at = 0;
            for &i in bucket {
                let like = &self.averaged[i].1;
                let part = sum
                    .slice(&[at], &[at + like.len()], &[1])
                    .and_then(|p| p.reshape(like.shape()))
                    .map_err(DistributedError::from)?;
                averaged.push(part);
                at += like.len();
            }
        }
        let used = self.scalars.fill(&self.config, self.steps);
        let scalars = self
            .scalars
            .inputs()
            .iter()
            .take(used)
            .map(|(name, t)| Ok((*name, array(*t)?)))
            .collect::<Result<Vec<_>, TrainError>>()?;
        let mut inputs: Vec<(&str, &Array)> = self
            .averaged
            .iter()
            .zip(&averaged)
            .map(|((name, _), a)| (name.as_str(), a))
            .collect();
        inputs.extend(scalars.iter().map(|(n, a)| (*n, a)));
        let update = as_mlx(&*self.update);
        let updated = update.run_arrays(&inputs, &[])?;
        let all: Vec<(&str, &Array)> = self
            .updates
            .iter()
            .map(|(index, name)| (name.as_str(), &updated[*index]))
            .collect();
        update.set_weight_arrays(&all)?;
        as_mlx(&*self.gradients).set_weight_arrays(&self.weights_of(&all))?;
        self.steps += 1;
        Ok(total)
    }

    /// Sums `share × gradient` across ranks into `averaged`, in buckets, together with
    /// `extra` (summed in f32) when given; returns the sum of `extra`.
    fn average_gradients(
        &mut self,
        share: f64,
        extra: Option<f64>,
    ) -> Result<Option<f64>, TrainError> {
        let mut arrays = Vec::with_capacity(self.buckets.len() + 1);
        for bucket in &self.buckets {
            let dtype = self.averaged[bucket[0]].1.dtype();
            let len: usize = bucket.iter().map(|&i| self.averaged[i].1.len()).sum();
            let mut flat = TensorData::zeros(dtype, len);
            let mut at = 0;
            for &i in bucket {
                // No outputs: this rank had no samples and contributes zeros.
                if let Some(g) = self.outputs.get(self.weights[i].1) {
                    scaled_copy(&mut flat, at, g.data(), share)?;
                }
                at += self.averaged[i].1.len();
            }
            let flat = HostTensor::from_data(flat, [len]).map_err(tensor_error)?;
            arrays.push(Array::from_tensor(flat.view()).map_err(DistributedError::from)?);
        }
        if let Some(x) = extra {
            let x = HostTensor::from_vec(vec![x as f32], [1]).map_err(tensor_error)?;
            arrays.push(Array::from_tensor(x.view()).map_err(DistributedError::from)?);
        }
        let mut sums = self.group.all_sum_many(&arrays)?;
        let extra = match extra {
            Some(_) => {
                let x = sums.pop().expect("the extra value was summed");
                let x = x.to_host().map_err(DistributedError::from)?;
                Some(f64::from(x.as_slice::<f32>().map_err(tensor_error)?[0]))
            }
            None => None,
        };
        for (bucket, sum) in self.buckets.iter().zip(sums) {
            let sum = sum.to_host().map_err(DistributedError::from)?;
            let mut at = 0; // in bytes
            for &i in bucket {
                let target = &mut self.averaged[i].1;
                let size = target.dtype().size_bytes();
                let n = target.len() * size;
                target
                    .data_mut()
                    .copy_from_bytes(&sum.data().bytes()[at..at + n]);
                at += n;
            }
        }
        Ok(extra)
    }

    /// The weights among `values` (one per entry of `updates`, in order).
    fn weights_of<T: Copy>(&self, values: &[T]) -> Vec<T> {
        values
            .iter()
            .zip(&self.updates_weight)
            .filter(|(_, weight)| **weight)
            .map(|(v, _)| *v)
            .collect()
    }

    /// Saves every weight, the optimizer state and the step count, in the format of
    /// [`super::Trainer::save`] (either trainer resumes from the other's file).
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        save_state(&*self.update, &self.updates, self.steps, path)
    }

    /// Loads what [`DataParallelTrainer::save`] or [`super::Trainer::save`] wrote.
    pub fn load(&mut self, path: &Path) -> Result<(), TrainError> {
        let (gradients, update, weights) = (&self.gradients, &self.update, &self.weights);
        self.steps = load_state(&self.updates, path, &mut |name, value| {
            update.set_weight(name, value)?;
            if weights.iter().any(|(w, _)| w == name) {
                gradients.set_weight(name, value)?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// The MLX executable behind `exe` (checked at construction: `on_device`).
fn as_mlx(exe: &dyn Executable) -> &MlxExecutable {
    (exe as &dyn Any)
        .downcast_ref::<MlxExecutable>()
        .expect("on_device is set only for MLX executables")
}

/// A scalar `value` of the float `dtype`.
fn scalar_of(dtype: DType, value: f64) -> HostTensor {
    match dtype {
        DType::F64 => HostTensor::scalar(value),
        DType::F16 => HostTensor::scalar(f16::from_f64(value)),
        DType::BF16 => HostTensor::scalar(bf16::from_f64(value)),
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

/// `dst[at..at + src.len()] = src × scale`, in `dst`'s float dtype (one rounding, and
/// none when `scale` is 1 or a power of two).
fn scaled_copy(
    dst: &mut TensorData,
    at: usize,
    src: &TensorData,
    scale: f64,
) -> Result<(), TrainError> {
    let mismatch = || TrainError::Config("a gradient's dtype differs from its weight's".into());
    match (dst, src) {
        (TensorData::F32(d), TensorData::F32(s)) => {
            for (d, s) in d[at..at + s.len()].iter_mut().zip(s) {
                *d = (f64::from(*s) * scale) as f32;
            }
        }
        (TensorData::F64(d), TensorData::F64(s)) => {
            for (d, s) in d[at..at + s.len()].iter_mut().zip(s) {
                *d = s * scale;
            }
        }
        (TensorData::F16(d), TensorData::F16(s)) => {
            for (d, s) in d[at..at + s.len()].iter_mut().zip(s) {
                *d = f16::from_f64(s.to_f64() * scale);
            }
        }
        (TensorData::BF16(d), TensorData::BF16(s)) => {
            for (d, s) in d[at..at + s.len()].iter_mut().zip(s) {
                *d = bf16::from_f64(s.to_f64() * scale);
            }
        }
        _ => return Err(mismatch()),
    }
    Ok(())
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

    #[test]
    fn scaling_rounds_once_and_not_at_all_by_powers_of_two() {
        let src = TensorData::F32(vec![0.1, -3.0, 7.25]);
        let mut dst = TensorData::zeros(DType::F32, 5);
        scaled_copy(&mut dst, 1, &src, 0.25).unwrap();
        assert!(dst == TensorData::F32(vec![0.0, 0.025, -0.75, 1.8125, 0.0]));
        let mut one = TensorData::zeros(DType::F32, 3);
        scaled_copy(&mut one, 0, &src, 1.0).unwrap();
        assert!(one == src);
        let third = (0.1f64 * (1.0 / 3.0)) as f32;
        let mut dst = TensorData::zeros(DType::F32, 1);
        scaled_copy(&mut dst, 0, &TensorData::F32(vec![0.1]), 1.0 / 3.0).unwrap();
        assert!(dst == TensorData::F32(vec![third]));
        let mut mismatch = TensorData::zeros(DType::F64, 3);
        assert!(scaled_copy(&mut mismatch, 0, &src, 1.0).is_err());
    }
}
