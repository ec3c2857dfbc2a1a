//! How Hugging Face checkpoints store a mixture's experts, mapped onto GGUF's stacked
//! tensors (`blk.N.ffn_gate_exps.weight`, `[experts, out, in]`): one tensor per expert and
//! projection (`mlp.experts.7.gate_proj.weight`, Mixtral's `block_sparse_moe.experts.7.w1`),
//! stacked when the load assembles them, or transformers 5's fused tensors
//! (`mlp.experts.gate_up_proj`, the gates' rows then the ups', and `mlp.experts.down_proj`).

use crate::tensor::{HostTensor, TensorRef};
use crate::weights::Mapped;

/// Marks the part of a stacked tensor one expert's tensor is: `name#expert`.
const PART: char = '#';

/// The stacked tensors (GGUF name and value) a mixture tensor of block `layer` maps to:
/// `module` is its name after `model.layers.N.` and `kind` its last component. `None` for
/// a tensor of no mixture.
pub(super) fn expert_tensors(
    layer: usize,
    module: &str,
    kind: &str,
    value: TensorRef<'_>,
) -> Option<Vec<(String, HostTensor)>> {
    let stacked = |gguf: &str| format!("blk.{layer}.{gguf}.weight");
    match (module, kind) {
        ("mlp.experts", "gate_up_proj") => {
            let (gate, up) = split_rows(value)?;
            return Some(vec![
                (stacked("ffn_gate_exps"), gate),
                (stacked("ffn_up_exps"), up),
            ]);
        }
        ("mlp.experts", "down_proj") => {
            return Some(vec![(stacked("ffn_down_exps"), value.to_host())]);
        }
        _ => {}
    }
    let rest = module
        .strip_prefix("mlp.experts.")
        .or_else(|| module.strip_prefix("block_sparse_moe.experts."))?;
    let (expert, projection) = rest.split_once('.')?;
    let expert: usize = expert.parse().ok()?;
    let gguf = match (projection, kind) {
        ("gate_proj" | "w1", "weight") => "ffn_gate_exps",
        ("up_proj" | "w3", "weight") => "ffn_up_exps",
        ("down_proj" | "w2", "weight") => "ffn_down_exps",
        _ => return None,
    };
    Some(vec![(part_name(&stacked(gguf), expert), value.to_host())])
}

/// The name of expert `expert`'s part of the stacked tensor `stacked`, as
/// [`stack_experts`] reads it.
pub(super) fn part_name(stacked: &str, expert: usize) -> String {
    format!("{stacked}{PART}{expert}")
}

/// `[E, 2R, C]` as its first `R` rows and its last `R` rows of each expert (`None` for
/// another shape).
fn split_rows(value: TensorRef<'_>) -> Option<(HostTensor, HostTensor)> {
    let &[experts, rows, cols] = value.shape else {
        return None;
    };
    if !rows.is_multiple_of(2) {
        return None;
    }
    let half = rows / 2 * cols * value.dtype.size_bytes();
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for e in 0..experts {
        let block = &value.bytes[e * 2 * half..(e + 1) * 2 * half];
        first.extend_from_slice(&block[..half]);
        second.extend_from_slice(&block[half..]);
    }
    let shape = [experts, rows / 2, cols];
    let part = |bytes: &[u8]| {
        TensorRef::new(value.dtype, &shape, bytes)
            .ok()
            .map(|t| t.to_host())
    };
    Some((part(&first)?, part(&second)?))
}

/// The tensors with the per-expert parts [`expert_tensors`] made stacked in expert order;
/// an expert missing, given twice, or of another shape or dtype than the others is an
/// error naming the tensor.
pub(super) fn stack_experts(
    tensors: Vec<(String, HostTensor)>,
) -> Result<Vec<(String, HostTensor)>, String> {
    let mut whole = Vec::new();
    let mut parts: std::collections::BTreeMap<String, Vec<(usize, HostTensor)>> =
        std::collections::BTreeMap::new();
    for (name, value) in tensors {
        match name.split_once(PART).map(|(n, e)| (n, e.parse::<usize>())) {
            Some((stacked, Ok(expert))) => parts
                .entry(stacked.to_string())
                .or_default()
                .push((expert, value)),
            _ => whole.push((name, value)),
        }
    }
    for (name, mut experts) in parts {
        experts.sort_by_key(|(e, _)| *e);
        let first = &experts[0].1;
        let (dtype, shape) = (first.dtype(), first.shape().to_vec());
        let mut bytes = Vec::with_capacity(experts.len() * first.data().bytes().len());
        for (i, (e, value)) in experts.iter().enumerate() {
            if *e != i {
                return Err(format!("{name}: expert {i} is missing or given twice"));
            }
            if value.dtype() != dtype || value.shape() != shape {
                return Err(format!(
                    "{name}: expert {e} is {} {:?}, expert 0 {dtype} {shape:?}",
                    value.dtype(),
                    value.shape()
                ));
            }
            bytes.extend_from_slice(value.data().bytes());
        }
        let mut dims = vec![experts.len()];
        dims.extend(&shape);
        let stacked = TensorRef::new(dtype, &dims, &bytes)
            .map_err(|e| format!("{name}: {e}"))?
            .to_host();
        whole.push((name, stacked));
    }
    Ok(whole)
}

/// [`stack_experts`] over a Hugging Face checkpoint's mapped tensors: the parts (values
/// made by [`expert_tensors`]) stacked, every other tensor as it was mapped.
pub(super) fn stack_mapped_experts(
    tensors: Vec<(String, Mapped<'_>)>,
) -> Result<Vec<(String, Mapped<'_>)>, String> {
    let (parts, mut whole): (Vec<_>, Vec<_>) = tensors
        .into_iter()
        .partition(|(name, _)| name.contains(PART));
    let parts = parts
        .into_iter()
        .map(|(name, value)| match value {
            Mapped::Made(value) => (name, value),
            Mapped::Stored(value) => (name, value.to_host()),
        })
        .collect();
    whole.extend(
        stack_experts(parts)?
            .into_iter()
            .map(|(name, value)| (name, Mapped::Made(value))),
    );
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_gate_up_splits_and_parts_stack() {
        let fused =
            HostTensor::from_vec((0..12).map(|v| v as f32).collect::<Vec<_>>(), [2, 2, 3]).unwrap();
        let parts = expert_tensors(1, "mlp.experts", "gate_up_proj", fused.view()).unwrap();
        assert_eq!(parts[0].0, "blk.1.ffn_gate_exps.weight");
        assert_eq!(
            parts[0].1.as_slice::<f32>().unwrap(),
            [0.0, 1.0, 2.0, 6.0, 7.0, 8.0]
        );
        assert_eq!(
            parts[1].1.as_slice::<f32>().unwrap(),
            [3.0, 4.0, 5.0, 9.0, 10.0, 11.0]
        );
        let one = |v: f32| HostTensor::from_vec(vec![v; 2], [1, 2]).unwrap();
        let mut tensors = Vec::new();
        for e in [1usize, 0] {
            let t = one(e as f32);
            let module = format!("block_sparse_moe.experts.{e}.w2");
            tensors.extend(expert_tensors(0, &module, "weight", t.view()).unwrap());
        }
        let stacked = stack_experts(tensors).unwrap();
        assert_eq!(stacked[0].0, "blk.0.ffn_down_exps.weight");
        assert_eq!(stacked[0].1.shape(), [2, 1, 2]);
        assert_eq!(
            stacked[0].1.as_slice::<f32>().unwrap(),
            [0.0, 0.0, 1.0, 1.0]
        );
        let gap = expert_tensors(0, "mlp.experts.1.up_proj", "weight", one(1.0).view()).unwrap();
        assert!(
            stack_experts(gap)
                .unwrap_err()
                .contains("expert 0 is missing")
        );
    }
}
