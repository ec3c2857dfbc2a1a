//! What every backend keeps the same way: its custom-op registry, its table of params and
//! its cache of per-binding plans.

use crate::ir::Custom;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::signature::check_weight;
#[cfg(feature = "mlx")]
use super::signature::check_weight_type;
use super::{RunError, TensorRole};
use crate::ir::{DType, Graph, NodeId, Op};
use crate::tensor::TensorRef;

/// Kernels of custom ops registered by name; `K` is the backend's kernel trait.
pub(crate) struct CustomOps<K: ?Sized> {
    kernels: BTreeMap<String, Arc<K>>,
}

impl<K: ?Sized> Clone for CustomOps<K> {
    fn clone(&self) -> Self {
        CustomOps {
            kernels: self.kernels.clone(),
        }
    }
}

impl<K: ?Sized> Default for CustomOps<K> {
    fn default() -> Self {
        CustomOps {
            kernels: BTreeMap::new(),
        }
    }
}

impl<K: ?Sized> std::fmt::Debug for CustomOps<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kernels.keys()).finish()
    }
}

impl<K: ?Sized> CustomOps<K> {
    pub(crate) fn insert(&mut self, name: &str, kernel: Arc<K>) {
        self.kernels.insert(name.to_string(), kernel);
    }

    /// Whether the backend can run `op`: every built-in op, and custom ops registered here.
    pub(crate) fn supports(&self, op: &Op) -> bool {
        match op {
            Op::Custom(Custom { name, .. }) => self.kernels.contains_key(name),
            _ => true,
        }
    }

    /// The kernel of each node of `graph` that is a custom op.
    pub(crate) fn per_node(&self, graph: &Graph) -> Vec<Option<Arc<K>>> {
        graph
            .nodes()
            .iter()
            .map(|n| match &n.op {
                Op::Custom(Custom { name, .. }) => self.kernels.get(name).cloned(),
                _ => None,
            })
            .collect()
    }
}

/// One param of a compiled graph.
#[derive(Clone, Debug)]
pub(crate) struct ParamSpec {
    /// The param's node (MLX passes params to its compiled functions in this order).
    #[cfg_attr(not(feature = "mlx"), allow(dead_code))]
    pub node: NodeId,
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// The params of a compiled graph in graph order, which of them are bound, and the checks
/// of `set_weight` and `weight` against them. Backends keep the values, indexed alike.
#[derive(Clone, Debug)]
pub(crate) struct ParamTable {
    pub specs: Vec<ParamSpec>,
    bound: Vec<bool>,
}

impl ParamTable {
    pub(crate) fn of(graph: &Graph) -> ParamTable {
        let specs: Vec<ParamSpec> = graph
            .params()
            .map(|(node, n)| ParamSpec {
                node,
                name: n.name.clone().unwrap_or_default(),
                dtype: n.ty.dtype,
                shape: n.ty.shape.static_dims().unwrap_or_default(),
            })
            .collect();
        ParamTable {
            bound: vec![false; specs.len()],
            specs,
        }
    }

    /// Each param's index by its node.
    #[cfg(feature = "mlx")]
    pub(crate) fn by_node(&self) -> std::collections::HashMap<NodeId, usize> {
        self.specs
            .iter()
            .enumerate()
            .map(|(i, spec)| (spec.node, i))
            .collect()
    }

    /// The index of the param `name`.
    pub(crate) fn find(&self, name: &str) -> Result<usize, RunError> {
        self.specs
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| RunError::UnknownWeight {
                name: name.to_string(),
            })
    }

    /// The index of the param `name` after checking `value` against it; the caller stores
    /// the value and then calls [`ParamTable::mark_bound`].
    pub(crate) fn check(&self, name: &str, value: &TensorRef<'_>) -> Result<usize, RunError> {
        let i = self.find(name)?;
        let spec = &self.specs[i];
        check_weight(TensorRole::Weight, name, spec.dtype, &spec.shape, value)?;
        Ok(i)
    }

    /// [`ParamTable::check`] for a value known by its dtype and dims (a device array).
    #[cfg(feature = "mlx")]
    pub(crate) fn check_type(
        &self,
        name: &str,
        dtype: DType,
        dims: &[usize],
    ) -> Result<usize, RunError> {
        let i = self.find(name)?;
        let spec = &self.specs[i];
        check_weight_type(
            TensorRole::Weight,
            name,
            spec.dtype,
            &spec.shape,
            dtype,
            dims,
        )?;
        Ok(i)
    }

    pub(crate) fn mark_bound(&mut self, i: usize) {
        self.bound[i] = true;
    }

    /// The index of the bound param `name`.
    pub(crate) fn find_bound(&self, name: &str) -> Result<usize, RunError> {
        let i = self.find(name)?;
        if self.bound[i] {
            Ok(i)
        } else {
            Err(RunError::MissingWeight {
                name: name.to_string(),
            })
        }
    }

    /// Every param is bound, or the first that is not is named.
    pub(crate) fn all_bound(&self) -> Result<(), RunError> {
        match self.bound.iter().position(|b| !b) {
            None => Ok(()),
            Some(i) => Err(RunError::MissingWeight {
                name: self.specs[i].name.clone(),
            }),
        }
    }
}

/// How many per-binding plans an executable keeps when its backend is not told otherwise.
///
/// A plan holds the concrete shapes, the memory plan and the lowered kernels of one binding
/// of the runtime dims (a few kilobytes to a few hundred for a large model), not the working
/// memory itself, so a count bounds it well. A workload whose lengths vary run to run (text
/// generation, a server's mixed batches) stays within it, paying a replan only when a
/// binding returns after 32 others have been used since.
pub const DEFAULT_PLAN_CACHE: usize = 32;

/// Plans made per binding of the runtime dims, shared by concurrent runs and bounded: when
/// a new binding would exceed `capacity`, the least recently used plan is dropped (runs still
/// holding it keep their `Arc`). Few bindings are live at once, so a list compared by value
/// beats hashing; a run finds its plan under a read lock (recording the use in an atomic
/// stamp, written only when it changes) and keeps an `Arc` of it, so a thread making a new
/// plan blocks no one.
pub(crate) struct PlanCache<P> {
    entries: RwLock<Vec<CachedPlan<P>>>,
    capacity: usize,
    /// Advanced by each insert; its value stamps each use.
    clock: AtomicU64,
}

struct CachedPlan<P> {
    key: Vec<usize>,
    plan: Arc<P>,
    /// The clock's value at the last use: the smallest is the least recently used (ties,
    /// plans used since the same insert, go either way).
    used: AtomicU64,
}

impl<P> PlanCache<P> {
    /// An empty cache keeping at most `capacity` plans (at least one).
    pub(crate) fn new(capacity: usize) -> PlanCache<P> {
        PlanCache {
            entries: RwLock::new(Vec::new()),
            capacity: capacity.max(1),
            clock: AtomicU64::new(0),
        }
    }

    /// The plan for `values`, made by `make` if there is none yet. `make` runs outside the
    /// lock: two threads may both make a plan for a new binding, and the first one stored
    /// is the one every later run uses.
    pub(crate) fn get_or_make<E>(
        &self,
        values: &[usize],
        make: impl FnOnce() -> Result<P, E>,
    ) -> Result<Arc<P>, E> {
        // A hit stamps the entry with the clock's current value (newer than every plan
        // inserted before it) and writes only when that changes the stamp, so runs of one
        // binding from many threads share a read-only entry: two relaxed loads per run.
        let find = |entries: &[CachedPlan<P>]| {
            entries.iter().find(|e| e.key == values).map(|e| {
                let now = self.clock.load(Ordering::Relaxed);
                if e.used.load(Ordering::Relaxed) != now {
                    e.used.store(now, Ordering::Relaxed);
                }
                Arc::clone(&e.plan)
            })
        };
        if let Some(plan) = find(&read(&self.entries)) {
            return Ok(plan);
        }
        let plan = Arc::new(make()?);
        let mut entries = write(&self.entries);
        if let Some(first) = find(&entries) {
            return Ok(first);
        }
        if entries.len() >= self.capacity {
            let oldest = entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used.load(Ordering::Relaxed))
                .map(|(i, _)| i);
            if let Some(i) = oldest {
                entries.swap_remove(i);
            }
        }
        // Inserts advance the clock, so later hits stamp newer than this plan.
        let stamp = self.clock.fetch_add(1, Ordering::Relaxed);
        entries.push(CachedPlan {
            key: values.to_vec(),
            plan: Arc::clone(&plan),
            used: AtomicU64::new(stamp),
        });
        Ok(plan)
    }

    /// Plans held now (at most the capacity).
    pub(crate) fn len(&self) -> usize {
        read(&self.entries).len()
    }
}

/// Per-call working state (a CPU arena, a binder's buffers) kept for reuse: a call takes one
/// (made when none is idle, so the pool grows to the number of calls in flight) and gives
/// it back when the [`Pooled`] guard drops. After the first calls nothing is allocated.
pub(crate) struct ScratchPool<S> {
    idle: Mutex<Vec<S>>,
}

impl<S> Default for ScratchPool<S> {
    fn default() -> Self {
        ScratchPool {
            idle: Mutex::new(Vec::new()),
        }
    }
}

impl<S> ScratchPool<S> {
    /// An idle scratch, or a new one from `make`.
    pub(crate) fn take(&self, make: impl FnOnce() -> S) -> Pooled<'_, S> {
        let idle = lock(&self.idle).pop();
        Pooled {
            pool: self,
            item: Some(idle.unwrap_or_else(make)),
        }
    }
}

/// A scratch taken from a [`ScratchPool`], returned to it on drop.
pub(crate) struct Pooled<'a, S> {
    pool: &'a ScratchPool<S>,
    item: Option<S>,
}

impl<S> std::ops::Deref for Pooled<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        self.item.as_ref().expect("held until drop")
    }
}

impl<S> std::ops::DerefMut for Pooled<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        self.item.as_mut().expect("held until drop")
    }
}

impl<S> Drop for Pooled<'_, S> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            lock(&self.pool.idle).push(item);
        }
    }
}

// A panic while a lock is held can only come from a bug in our own code (kernels return
// errors); the state behind these locks is valid between statements, so later calls go on
// rather than turning one failure into a panic in every thread.

/// Locks `mutex`, ignoring poisoning (see above).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `lock`, ignoring poisoning (see above).
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `lock`, ignoring poisoning (see above).
pub(crate) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::PlanCache;

    /// Looks `key` up, counting the plans made.
    fn get(cache: &PlanCache<usize>, key: usize, made: &mut usize) -> usize {
        let plan = cache.get_or_make::<()>(&[key], || {
            *made += 1;
            Ok(key * 10)
        });
        *plan.unwrap()
    }

    #[test]
    fn the_least_recently_used_plan_goes_first() {
        let cache = PlanCache::new(2);
        let mut made = 0;
        assert_eq!(get(&cache, 1, &mut made), 10);
        assert_eq!(get(&cache, 2, &mut made), 20);
        assert_eq!(get(&cache, 1, &mut made), 10); // 1 is now the more recent
        assert_eq!(made, 2);
        assert_eq!(get(&cache, 3, &mut made), 30); // evicts 2
        assert_eq!((cache.len(), made), (2, 3));
        assert_eq!(get(&cache, 1, &mut made), 10);
        assert_eq!(made, 3, "1 was kept");
        assert_eq!(get(&cache, 2, &mut made), 20);
        assert_eq!(made, 4, "2 was made again");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_failed_make_stores_nothing_and_capacity_is_at_least_one() {
        let cache = PlanCache::<usize>::new(0);
        assert!(cache.get_or_make(&[1], || Err("no")).is_err());
        assert_eq!(cache.len(), 0);
        let mut made = 0;
        get(&cache, 1, &mut made);
        get(&cache, 2, &mut made);
        assert_eq!((cache.len(), made), (1, 2));
    }
}
