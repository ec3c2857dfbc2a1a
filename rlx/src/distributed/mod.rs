//! Process groups and collectives, through MLX's distributed layer (feature `mlx`).
//!
//! A [`Group`] is the set of processes that one launch started, each knowing its rank. MLX
//! moves the bytes: its ring [`Transport`] over TCP (any Linux or macOS hosts, loopback
//! included), MPI, or NCCL between CUDA GPUs. RLX adds what a training loop needs around
//! it: typed errors, bounded waits and a group of one for a single process.
//! [`crate::train::DataParallelTrainer`] builds data-parallel training on it.
//!
//! Every collective is called by every rank, in the same order, with the same shapes and
//! dtypes; each call returns once the result is computed on this rank.
//!
//! **Faults.** Forming a group waits at most [`GroupOptions::join_timeout`] for every rank
//! to join, and each collective at most [`GroupOptions::timeout`]. A rank that exits or is
//! killed closes its sockets, and its ring neighbours fail at once with
//! [`DistributedError::Failed`]. A rank that stalls (or whose host vanishes without closing
//! its connections) is noticed when the timeout runs out
//! ([`DistributedError::Timeout`]). After either, the group is broken: every later call
//! returns [`DistributedError::Broken`], and the process should exit (a transfer that
//! timed out may still be pending inside MLX). A group that never forms
//! ([`DistributedError::JoinTimeout`]) leaves one thread blocked in MLX's `accept` until
//! the process exits.
//!
//! ```no_run
//! use rlx::distributed::{Group, GroupOptions};
//! use rlx::tensor::HostTensor;
//!
//! // Started as rank r of n: MLX_RANK=r MLX_HOSTFILE=hosts.json (see `LocalLaunch`).
//! let group = Group::init(&GroupOptions::default())?;
//! let ones = HostTensor::from_vec(vec![1.0f32; 4], [4])?;
//! let total = group.all_sum_tensor(ones.view())?;
//! assert_eq!(total.as_slice::<f32>()?, &[group.size() as f32; 4]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod launch;

pub use launch::{HOSTFILE_ENV, LocalLaunch, RANK_ENV};

use std::ffi::c_int;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlx_mlx_sys as sys;

use crate::backend::{RunError, Value};
use crate::ir::DType;
use crate::mlx::{Array, Device, MlxError, codes, gpu_turn};
use crate::tensor::{HostTensor, TensorRef};

/// Whether a launcher started this process as one rank of a group: its environment has a
/// rank or names a transport ([`Transport::from_env`]).
pub fn launched() -> bool {
    std::env::var_os(RANK_ENV).is_some() || Transport::from_env().is_some()
}

/// How the processes of a group talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// MLX's ring over TCP: `MLX_RANK` and `MLX_HOSTFILE` (a JSON list with each rank's
    /// `"ip:port"`) in every process. CPU arrays; any hosts, loopback included.
    Ring,
    /// MPI, started by `mpirun` (MLX loads `libmpi` at run time).
    Mpi,
    /// NCCL between CUDA GPUs: `NCCL_HOST_IP` and `NCCL_PORT` (rank 0's address),
    /// `MLX_RANK` and `MLX_WORLD_SIZE`, one GPU per process.
    Nccl,
}

impl Transport {
    /// The name MLX knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Ring => "ring",
            Transport::Mpi => "mpi",
            Transport::Nccl => "nccl",
        }
    }

    /// Whether this MLX build has the transport.
    pub fn is_available(self) -> bool {
        // SAFETY: a pure query with a valid code.
        unsafe { sys::rlx_mlx_transport_available(self.code()) }
    }

    /// The transport the environment of a launched process describes: NCCL when
    /// `NCCL_HOST_IP` is set, the ring when `MLX_HOSTFILE` is, MPI under an MPI launcher.
    pub fn from_env() -> Option<Transport> {
        let set = |name: &str| std::env::var_os(name).is_some();
        if set("NCCL_HOST_IP") {
            Some(Transport::Nccl)
        } else if set(HOSTFILE_ENV) {
            Some(Transport::Ring)
        } else if set("OMPI_COMM_WORLD_SIZE") || set("PMI_SIZE") {
            Some(Transport::Mpi)
        } else {
            None
        }
    }

    fn code(self) -> sys::rlx_mlx_transport {
        match self {
            Transport::Ring => sys::RLX_MLX_TRANSPORT_RING,
            Transport::Mpi => sys::RLX_MLX_TRANSPORT_MPI,
            Transport::Nccl => sys::RLX_MLX_TRANSPORT_NCCL,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How to form a group and how long to wait.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupOptions {
    /// The transport; `None` reads it from the environment ([`Transport::from_env`]).
    pub transport: Option<Transport>,
    /// How long forming the group waits for every rank to join (default 60 s).
    pub join_timeout: Duration,
    /// How long one collective may take before the group counts as broken (default 300 s,
    /// NCCL's own default).
    pub timeout: Duration,
}

impl Default for GroupOptions {
    fn default() -> GroupOptions {
        GroupOptions {
            transport: None,
            join_timeout: Duration::from_secs(60),
            timeout: Duration::from_secs(300),
        }
    }
}

impl GroupOptions {
    /// With `transport` rather than the environment's.
    pub fn transport(mut self, transport: Transport) -> GroupOptions {
        self.transport = Some(transport);
        self
    }

    /// With a bound on joining.
    pub fn join_timeout(mut self, timeout: Duration) -> GroupOptions {
        self.join_timeout = timeout;
        self
    }

    /// With a bound on each collective.
    pub fn timeout(mut self, timeout: Duration) -> GroupOptions {
        self.timeout = timeout;
        self
    }
}

/// Why a group could not form or a collective failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DistributedError {
    /// No group could be formed: no launcher environment, a transport this MLX lacks, a
    /// malformed hostfile, an unreachable peer.
    #[error("no process group: {0}")]
    NoGroup(String),
    /// Some rank did not join within the join timeout.
    #[error("the {transport} group did not form within {after:?}: some rank never joined")]
    JoinTimeout {
        /// The transport tried.
        transport: Transport,
        /// How long it waited.
        after: Duration,
    },
    /// A collective did not finish in time: a peer stalled, or its host went away without
    /// closing its connections.
    #[error("{op} did not finish within {after:?}: a peer stalled or became unreachable")]
    Timeout {
        /// The collective.
        op: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// A collective failed, typically because a peer's connection was lost (it exited or
    /// was killed).
    #[error("{op} failed: {message}")]
    Failed {
        /// The collective.
        op: &'static str,
        /// MLX's message.
        message: String,
    },
    /// An earlier failure broke the group; the processes must start again.
    #[error("the group is broken by an earlier failure: {0}")]
    Broken(String),
    /// A peer rank outside the group, or this rank itself.
    #[error("rank {rank} cannot be a peer of rank {me} in a group of {size}")]
    Peer {
        /// The rank asked for.
        rank: usize,
        /// This process's rank.
        me: usize,
        /// The group's size.
        size: usize,
    },
    /// Building the collective's arrays failed (before any communication).
    #[error(transparent)]
    Mlx(#[from] MlxError),
}

/// The processes of one launch; see the [module docs](self).
///
/// A single process is a [`Group::single`]: every collective then returns its input. Clones
/// share the group; collectives from several threads take turns.
#[derive(Clone)]
pub struct Group {
    rank: usize,
    size: usize,
    transport: Option<Transport>,
    timeout: Duration,
    link: Option<Arc<Link>>,
}

/// An MLX group and what makes it safe to share.
struct Link {
    raw: NonNull<sys::rlx_mlx_group>,
    /// Collectives run one at a time (every rank must issue them in the same order), and
    /// the first failure is kept: the group is unusable afterwards.
    state: Mutex<Option<String>>,
}

// SAFETY: the MLX group is a `shared_ptr` to MLX's group implementation; RLX only reads it
// to build collective ops, always under `state`'s lock, and frees it once on drop.
unsafe impl Send for Link {}
// SAFETY: as above: every use goes through the mutex.
unsafe impl Sync for Link {}

impl Drop for Link {
    fn drop(&mut self) {
        // SAFETY: the handle came from the shim and is freed exactly once, here.
        unsafe { sys::rlx_mlx_group_free(self.raw.as_ptr()) }
    }
}

/// A group handle crossing from the joining thread.
struct RawGroup(*mut sys::rlx_mlx_group);
// SAFETY: the handle is owned by whoever holds this value; MLX's group is thread-safe to
// move (a `shared_ptr`).
unsafe impl Send for RawGroup {}

impl Drop for RawGroup {
    fn drop(&mut self) {
        // SAFETY: a live handle or null; freed once (ownership moves out with `take`).
        unsafe { sys::rlx_mlx_group_free(self.0) }
    }
}

impl RawGroup {
    fn take(mut self) -> *mut sys::rlx_mlx_group {
        std::mem::replace(&mut self.0, ptr::null_mut())
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("transport", &self.transport)
            .finish()
    }
}

impl Group {
    /// A group of one: this process alone. Collectives return their input.
    pub fn single() -> Group {
        Group {
            rank: 0,
            size: 1,
            transport: None,
            timeout: GroupOptions::default().timeout,
            link: None,
        }
    }

    /// Forms the group this process was launched into, waiting at most
    /// `options.join_timeout` for every rank. Fails with a typed error, never a group of
    /// one, when no group can be formed.
    pub fn init(options: &GroupOptions) -> Result<Group, DistributedError> {
        let transport = options
            .transport
            .or_else(Transport::from_env)
            .ok_or_else(|| {
                DistributedError::NoGroup(format!(
                    "no launcher environment found: set {RANK_ENV} and {HOSTFILE_ENV} for the \
                 ring, NCCL_HOST_IP, NCCL_PORT, {RANK_ENV} and MLX_WORLD_SIZE for NCCL, or \
                 start under mpirun"
                ))
            })?;
        if !transport.is_available() {
            return Err(DistributedError::NoGroup(format!(
                "this MLX build has no {transport} transport"
            )));
        }
        // MLX blocks until every peer has connected, with no bound on the accepting side;
        // the join runs on its own thread so this one can give up.
        let (sender, receiver) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("rlx-group-join".into())
            .spawn(move || {
                let mut raw = ptr::null_mut();
                // SAFETY: `raw` is a valid out-slot; the transport code is valid.
                let status = unsafe { sys::rlx_mlx_group_init(transport.code(), &mut raw) };
                let result = if status == 0 {
                    Ok(RawGroup(raw))
                } else {
                    Err(Array::last_error().message)
                };
                // With the receiver gone (timed out) the group is dropped, hence freed.
                let _ = sender.send(result);
            });
        if let Err(e) = spawned {
            return Err(DistributedError::NoGroup(format!(
                "cannot start the joining thread: {e}"
            )));
        }
        let raw = match receiver.recv_timeout(options.join_timeout) {
            Ok(Ok(raw)) => raw.take(),
            Ok(Err(message)) => return Err(DistributedError::NoGroup(message)),
            Err(RecvTimeoutError::Timeout) => {
                return Err(DistributedError::JoinTimeout {
                    transport,
                    after: options.join_timeout,
                });
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(DistributedError::NoGroup(
                    "the joining thread ended without a result".into(),
                ));
            }
        };
        let raw = NonNull::new(raw).ok_or_else(|| {
            DistributedError::NoGroup("the shim reported success but made no group".into())
        })?;
        let link = Arc::new(Link {
            raw,
            state: Mutex::new(None),
        });
        let (mut rank, mut size) = (0i32, 0i32);
        // SAFETY: the handle is live; the out-pointers are valid.
        let status = unsafe { sys::rlx_mlx_group_rank(raw.as_ptr(), &mut rank, &mut size) };
        if status != 0 {
            return Err(DistributedError::NoGroup(Array::last_error().message));
        }
        Ok(Group {
            rank: usize::try_from(rank).unwrap_or(0),
            size: usize::try_from(size).unwrap_or(1).max(1),
            transport: Some(transport),
            timeout: options.timeout,
            link: Some(link),
        })
    }

    /// [`Group::init`] when a launcher started this process as a rank ([`launched`], or
    /// `options` names a transport), else a group of one: the same program runs alone or
    /// as one rank of many.
    pub fn init_if_launched(options: &GroupOptions) -> Result<Group, DistributedError> {
        if options.transport.is_some() || launched() {
            Group::init(options)
        } else {
            Ok(Group::single())
        }
    }

    /// This rank's contiguous share of `len` items (rows of a batch): the ranks' shares
    /// cover `0..len` in rank order and differ in size by at most one.
    ///
    /// ```
    /// let group = rlx::distributed::Group::single();
    /// assert_eq!(group.shard(23), 0..23);
    /// ```
    pub fn shard(&self, len: usize) -> std::ops::Range<usize> {
        let (base, extra) = (len / self.size, len % self.size);
        let start = self.rank * base + self.rank.min(extra);
        start..start + base + usize::from(self.rank < extra)
    }

    /// This process's rank, `0..size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many processes the group has.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The transport, or `None` for a group of one.
    pub fn transport(&self) -> Option<Transport> {
        self.transport
    }

    /// The sum over every rank of `x`.
    pub fn all_sum(&self, x: &Array) -> Result<Array, DistributedError> {
        Ok(self.all_sum_many(std::slice::from_ref(x))?.remove(0))
    }

    /// The sums of several arrays, waited for together (one wait for a model's buckets).
    pub fn all_sum_many(&self, xs: &[Array]) -> Result<Vec<Array>, DistributedError> {
        if self.link.is_none() {
            return Ok(xs.to_vec());
        }
        self.collective("all_sum", xs.len(), |g, i, out| {
            // SAFETY: live handles and a valid out-slot for the call.
            unsafe { sys::rlx_mlx_all_sum(g, xs[i].ptr(), out) }
        })
    }

    /// The sums of several [`Value`]s, as [`Group::all_sum_many`]: a value that is an MLX
    /// array is summed where it is and its sum stays there; a host value (what the CPU
    /// backend returns) is summed through MLX and comes back in host memory.
    ///
    /// ```
    /// use rlx::backend::Value;
    /// use rlx::distributed::Group;
    /// use rlx::tensor::HostTensor;
    ///
    /// let group = Group::single(); // a group of one: the sum is the input
    /// let x = Value::from(HostTensor::from_vec(vec![1.0f32, 2.0], [2])?);
    /// let sums = group.all_sum_values(vec![x])?;
    /// assert_eq!(sums[0].to_host()?.as_slice::<f32>()?, &[1.0, 2.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn all_sum_values(&self, xs: Vec<Value>) -> Result<Vec<Value>, DistributedError> {
        if self.link.is_none() {
            return Ok(xs);
        }
        let read = |e: RunError| DistributedError::Mlx(MlxError::new(e.to_string()));
        let arrays = xs
            .iter()
            .map(|x| match x.mlx_array() {
                Some(a) => Ok(a.clone()),
                None => Ok(Array::from_tensor(x.host_view().map_err(read)?.view())?),
            })
            .collect::<Result<Vec<_>, DistributedError>>()?;
        let sums = self.all_sum_many(&arrays)?;
        xs.iter()
            .zip(sums)
            .map(|(x, sum)| {
                if x.is_host() {
                    Ok(Value::from(sum.to_host()?))
                } else {
                    Ok(x.with_array(sum)?)
                }
            })
            .collect()
    }

    /// Every rank's `x` concatenated along axis 0 in rank order (a scalar counts as `[1]`).
    pub fn all_gather(&self, x: &Array) -> Result<Array, DistributedError> {
        let x = if x.shape()?.is_empty() {
            x.reshape(&[1])?
        } else {
            x.clone()
        };
        if self.link.is_none() {
            return Ok(x);
        }
        let mut outs = self.collective("all_gather", 1, |g, _, out| {
            // SAFETY: live handles and a valid out-slot for the call.
            unsafe { sys::rlx_mlx_all_gather(g, x.ptr(), out) }
        })?;
        Ok(outs.remove(0))
    }

    /// Sends `x` to rank `dst`, which must [`Group::recv`] it. The ring transport reaches
    /// only the two neighbours, `rank ± 1` (mod size); MLX's NCCL transport has no
    /// point-to-point.
    pub fn send(&self, x: &Array, dst: usize) -> Result<(), DistributedError> {
        let dst = self.peer(dst)?;
        self.collective("send", 1, |g, _, out| {
            // SAFETY: live handles and a valid out-slot for the call.
            unsafe { sys::rlx_mlx_send(g, x.ptr(), dst, out) }
        })?;
        Ok(())
    }

    /// Receives an array of `shape` and `dtype` that rank `src` [`Group::send`]s.
    pub fn recv(
        &self,
        shape: &[usize],
        dtype: DType,
        src: usize,
    ) -> Result<Array, DistributedError> {
        let src = self.peer(src)?;
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let code = codes::dtype(dtype);
        let mut outs = self.collective("recv", 1, |g, _, out| {
            // SAFETY: `dims` is live for the call; the handle and the out-slot are valid.
            unsafe { sys::rlx_mlx_recv(g, dims.as_ptr(), dims.len(), code, src, out) }
        })?;
        Ok(outs.remove(0))
    }

    /// [`Group::all_sum`] of a host tensor.
    pub fn all_sum_tensor(&self, x: TensorRef<'_>) -> Result<HostTensor, DistributedError> {
        Ok(self.all_sum(&Array::from_tensor(x)?)?.to_host()?)
    }

    /// [`Group::all_gather`] of a host tensor.
    pub fn all_gather_tensor(&self, x: TensorRef<'_>) -> Result<HostTensor, DistributedError> {
        Ok(self.all_gather(&Array::from_tensor(x)?)?.to_host()?)
    }

    /// Rank `root`'s `x`, bit for bit, on every rank (each rank passes a tensor of the same
    /// shape and dtype; only the root's values matter).
    pub fn broadcast_tensor(
        &self,
        x: TensorRef<'_>,
        root: usize,
    ) -> Result<HostTensor, DistributedError> {
        if root >= self.size {
            return Err(DistributedError::Peer {
                rank: root,
                me: self.rank,
                size: self.size,
            });
        }
        if self.size == 1 {
            return Ok(x.to_host());
        }
        // A gather of the bytes rather than a sum with zeros: exact for every value (a sum
        // would turn -0.0 into 0.0) and every dtype.
        let n = x.bytes.len();
        let bytes = TensorRef {
            dtype: DType::U8,
            shape: &[n],
            bytes: x.bytes,
        };
        let all = self.all_gather_tensor(bytes)?;
        let root_bytes = &all.data().bytes()[root * n..(root + 1) * n];
        Ok(TensorRef {
            bytes: root_bytes,
            ..x
        }
        .to_host())
    }

    /// Waits until every rank has reached this call.
    pub fn barrier(&self) -> Result<(), DistributedError> {
        self.all_sum_tensor(HostTensor::scalar(1.0f32).view())?;
        Ok(())
    }

    fn peer(&self, rank: usize) -> Result<i32, DistributedError> {
        if rank >= self.size || rank == self.rank {
            return Err(DistributedError::Peer {
                rank,
                me: self.rank,
                size: self.size,
            });
        }
        Ok(rank as i32)
    }

    /// Builds `count` ops with `make`, evaluates them within the timeout, and records a
    /// failure as the group's end.
    fn collective(
        &self,
        op: &'static str,
        count: usize,
        make: impl Fn(*const sys::rlx_mlx_group, usize, *mut *mut sys::rlx_mlx_array) -> c_int,
    ) -> Result<Vec<Array>, DistributedError> {
        let link = self.link.as_ref().ok_or(DistributedError::Peer {
            rank: 0,
            me: 0,
            size: 1,
        })?;
        let mut state = link.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(first) = state.as_ref() {
            return Err(DistributedError::Broken(first.clone()));
        }
        // NCCL runs on the GPU, whose calls take turns within the process.
        let _turn = (self.transport == Some(Transport::Nccl))
            .then(|| gpu_turn(Device::Gpu))
            .flatten();
        let mut outs = Vec::with_capacity(count);
        for i in 0..count {
            let mut out = ptr::null_mut();
            let status = make(link.raw.as_ptr(), i, &mut out);
            let made = Array::from_raw(out);
            if status != 0 {
                return Err(DistributedError::Mlx(Array::last_error()));
            }
            outs.push(made.ok_or_else(|| MlxError::new("the shim made no array"))?);
        }
        let raw: Vec<*mut sys::rlx_mlx_array> = outs.iter().map(|a| a.ptr()).collect();
        let millis = i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX);
        // SAFETY: every handle is live for the call.
        let status = unsafe { sys::rlx_mlx_eval_within(raw.as_ptr(), raw.len(), millis) };
        let error = match status {
            0 => return Ok(outs),
            s if s == sys::RLX_MLX_STATUS_TIMED_OUT as c_int => DistributedError::Timeout {
                op,
                after: self.timeout,
            },
            _ => DistributedError::Failed {
                op,
                message: Array::last_error().message,
            },
        };
        *state = Some(error.to_string());
        Err(error)
    }
}
