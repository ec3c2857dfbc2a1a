//! Starting the ranks of a group on one machine.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::Transport;

/// The environment variable holding a process's rank (the ring and NCCL).
pub const RANK_ENV: &str = "MLX_RANK";
/// The environment variable naming the ring transport's hostfile.
pub const HOSTFILE_ENV: &str = "MLX_HOSTFILE";

/// The environment of the ranks of a group on this machine, over loopback: for the ring a
/// hostfile with a free port per rank (removed on drop); for NCCL rank 0's address, the
/// group's size and one GPU per rank (`CUDA_VISIBLE_DEVICES`, picked from the parent's own
/// list when it has one). Start each rank with [`LocalLaunch::env`].
///
/// Across machines, give each process the same variables yourself. For the ring: a JSON
/// hostfile with one list of `"ip:port"` per rank, in rank order
/// (`[["10.0.0.1:5000"], ["10.0.0.2:5000"]]`), the same file on every host, and rank `r`
/// started with `MLX_RANK=r MLX_HOSTFILE=that-file`. For NCCL: `NCCL_HOST_IP` and
/// `NCCL_PORT` (where rank 0 listens), `MLX_WORLD_SIZE` and `MLX_RANK`.
///
/// ```no_run
/// use std::process::Command;
/// use rlx::distributed::{LocalLaunch, Transport};
///
/// let launch = LocalLaunch::new(Transport::Ring, 2)?;
/// let children: Vec<_> = (0..2)
///     .map(|rank| Command::new("target/release/examples/08_data_parallel").envs(launch.env(rank)).spawn())
///     .collect::<Result<_, _>>()?;
/// for mut child in children {
///     child.wait()?;
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct LocalLaunch {
    transport: Transport,
    ranks: usize,
    /// The ring's hostfile.
    hostfile: Option<PathBuf>,
    /// NCCL's rendezvous port on loopback.
    port: u16,
}

impl LocalLaunch {
    /// Prepares `ranks` ranks over `transport` (the ring or NCCL; MPI brings its own
    /// launcher, `mpirun`).
    pub fn new(transport: Transport, ranks: usize) -> io::Result<LocalLaunch> {
        // Free ports from the kernel, all held at once so they differ, then released for
        // the ranks to bind (a window in which another process could take one; the join
        // then fails with a typed error).
        let count = match transport {
            Transport::Ring => ranks,
            Transport::Nccl => 1,
            Transport::Mpi => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "MPI ranks are started by mpirun",
                ));
            }
        };
        let listeners = (0..count)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let addresses = listeners
            .iter()
            .map(TcpListener::local_addr)
            .collect::<io::Result<Vec<_>>>()?;
        drop(listeners);
        let mut launch = LocalLaunch {
            transport,
            ranks,
            hostfile: None,
            port: addresses[0].port(),
        };
        if transport == Transport::Ring {
            let entries: Vec<String> = addresses.iter().map(|a| format!("[\"{a}\"]")).collect();
            let unique = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let path =
                std::env::temp_dir().join(format!("rlx-ring-{}-{unique}.json", std::process::id()));
            std::fs::write(&path, format!("[{}]", entries.join(", ")))?;
            launch.hostfile = Some(path);
        }
        Ok(launch)
    }

    /// The transport.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// How many ranks the group has.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The ring's hostfile (`None` for NCCL).
    pub fn hostfile(&self) -> Option<&Path> {
        self.hostfile.as_deref()
    }

    /// Starts every rank as a copy of this program with its arguments, and waits for them
    /// all. Rank 0's stdout is this process's; the other ranks' is discarded (each rank
    /// typically prints the same result). Fails naming the ranks that failed.
    pub fn run_self(&self) -> io::Result<()> {
        let program = std::env::current_exe()?;
        let children = (0..self.ranks)
            .map(|rank| {
                Command::new(&program)
                    .args(std::env::args_os().skip(1))
                    .envs(self.env(rank))
                    .stdout(if rank == 0 {
                        Stdio::inherit()
                    } else {
                        Stdio::null()
                    })
                    .spawn()
            })
            .collect::<io::Result<Vec<_>>>()?;
        let mut failed = Vec::new();
        for (rank, mut child) in children.into_iter().enumerate() {
            let status = child.wait()?;
            if !status.success() {
                failed.push(format!("rank {rank} ({status})"));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "ranks failed: {}",
                failed.join(", ")
            )))
        }
    }

    /// The environment rank `rank` starts with.
    pub fn env(&self, rank: usize) -> Vec<(&'static str, String)> {
        let mut env = vec![(RANK_ENV, rank.to_string())];
        if let Some(hostfile) = &self.hostfile {
            env.push((HOSTFILE_ENV, hostfile.display().to_string()));
        }
        if self.transport == Transport::Nccl {
            env.push(("NCCL_HOST_IP", Ipv4Addr::LOCALHOST.to_string()));
            env.push(("NCCL_PORT", self.port.to_string()));
            env.push(("MLX_WORLD_SIZE", self.ranks.to_string()));
            // One GPU per rank, so MLX's computations and NCCL use the same one.
            let gpu = std::env::var("CUDA_VISIBLE_DEVICES")
                .ok()
                .and_then(|list| list.split(',').nth(rank).map(str::to_string))
                .unwrap_or_else(|| rank.to_string());
            env.push(("CUDA_VISIBLE_DEVICES", gpu));
        }
        env
    }
}

impl Drop for LocalLaunch {
    fn drop(&mut self) {
        if let Some(path) = &self.hostfile {
            let _ = std::fs::remove_file(path);
        }
    }
}
