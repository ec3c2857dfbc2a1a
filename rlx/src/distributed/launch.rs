//! Starting the ranks of a ring on one machine.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

/// The environment variable holding a process's rank (every transport but MPI).
pub const RANK_ENV: &str = "MLX_RANK";
/// The environment variable naming the ring transport's hostfile.
pub const HOSTFILE_ENV: &str = "MLX_HOSTFILE";

/// A ring of `ranks` processes on this machine over loopback: a hostfile with a free port
/// per rank, and the environment each rank starts with. The hostfile is removed on drop.
///
/// Across machines, write the hostfile yourself: a JSON list with one list of `"ip:port"`
/// per rank, in rank order (`[["10.0.0.1:5000"], ["10.0.0.2:5000"]]`), the same file on
/// every host, and start rank `r` with `MLX_RANK=r MLX_HOSTFILE=that-file`.
///
/// ```no_run
/// use std::process::Command;
/// use rlx::distributed::LoopbackRing;
///
/// let ring = LoopbackRing::new(2)?;
/// let children: Vec<_> = (0..2)
///     .map(|rank| Command::new("target/release/examples/08_data_parallel").envs(ring.env(rank)).spawn())
///     .collect::<Result<_, _>>()?;
/// for mut child in children {
///     child.wait()?;
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct LoopbackRing {
    ranks: usize,
    hostfile: PathBuf,
}

impl LoopbackRing {
    /// Picks `ranks` free loopback ports and writes the hostfile into the temp directory.
    pub fn new(ranks: usize) -> io::Result<LoopbackRing> {
        // Ask the kernel for free ports, all held at once so they differ, then release them
        // for the ranks to bind (a window in which another process could take one; the join
        // then fails with a typed error).
        let listeners = (0..ranks)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let mut json = String::from("[");
        for (i, l) in listeners.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            json.push_str(&format!("{sep}[\"{}\"]", l.local_addr()?));
        }
        json.push(']');
        drop(listeners);
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let hostfile =
            std::env::temp_dir().join(format!("rlx-ring-{}-{unique}.json", std::process::id()));
        std::fs::write(&hostfile, json)?;
        Ok(LoopbackRing { ranks, hostfile })
    }

    /// How many ranks the ring has.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The hostfile's path.
    pub fn hostfile(&self) -> &Path {
        &self.hostfile
    }

    /// The environment rank `rank` starts with.
    pub fn env(&self, rank: usize) -> [(&'static str, String); 2] {
        [
            (RANK_ENV, rank.to_string()),
            (HOSTFILE_ENV, self.hostfile.display().to_string()),
        ]
    }
}

impl Drop for LoopbackRing {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.hostfile);
    }
}
