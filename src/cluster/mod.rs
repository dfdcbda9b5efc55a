//! The processes of one job that share a graph (MPI's ranks), and what they say to each
//! other: a rank computes its share of the partition's blocks on its own devices, sends each
//! block of rows' partial lists to the rank that owns it, and the owners send their finished
//! rows to rank 0, which hands them to the caller.

#[cfg(feature = "mpi")]
mod mpi;

#[cfg(feature = "mpi")]
pub use self::mpi::Mpi;

use crate::error::Result;

/// The processes of a job that build one graph together: each holds the same data and calls
/// [`Knn::graph`](crate::Knn::graph) (or one of its forms) with the same arguments, and
/// the messages between them go through this.
///
/// A graph over a cluster is cut into blocks whatever its size; rank `r` of `R` computes
/// every `R`-th pair of blocks (from the `r`-th), owns the blocks of rows `b` with
/// `b % R == r`, and rank 0 alone hands the rows to the caller. The answer is the same as one
/// process's.
///
/// Messages between two ranks arrive in the order they were sent. A rank whose call fails
/// leaves the others waiting for its messages: the job must then end every rank, as
/// `Mpi::abort` (the `mpi` feature) does.
pub trait Cluster: Send + Sync {
    /// This process's rank, from 0.
    fn rank(&self) -> usize;
    /// How many ranks the job has.
    fn size(&self) -> usize;
    /// Sends `bytes` to rank `to`; may wait until `to` receives them.
    fn send(&self, to: usize, bytes: &[u8]) -> Result<()>;
    /// The next message from rank `from`, waiting for it.
    fn receive(&self, from: usize) -> Result<Vec<u8>>;
}

/// How many processes the MPI launcher that started this one (Open MPI's `mpirun`, MPICH's
/// Hydra, `srun` with PMI-2 or PMIx) started in all, read from the environment before MPI
/// starts; `None` where no launcher did. Works without the `mpi` feature, so that a build
/// without it can refuse to run as many copies of one job.
pub fn launched_ranks() -> Option<usize> {
    let number = |v: &str| std::env::var(v).ok().and_then(|s| s.trim().parse().ok());
    number("OMPI_COMM_WORLD_SIZE")
        .or_else(|| number("PMI_SIZE"))
        .or_else(|| std::env::var_os("PMIX_RANK").and_then(|_| number("SLURM_NTASKS").or(Some(1))))
}

/// The rank that owns block of rows `b`: it merges the block's lists and finishes its rows.
pub(crate) fn owner(b: usize, ranks: usize) -> usize {
    b % ranks
}

/// Whether job `j` of the partition's list of jobs is this rank's.
pub(crate) fn deals(j: usize, cluster: &dyn Cluster) -> bool {
    j % cluster.size() == cluster.rank()
}

/// Sends `value` (a few words the ranks must agree on) from rank 0 to every other rank, and
/// returns rank 0's.
pub(crate) fn agree(cluster: &dyn Cluster, value: Vec<u8>) -> Result<Vec<u8>> {
    if cluster.rank() == 0 {
        for to in 1..cluster.size() {
            cluster.send(to, &value)?;
        }
        Ok(value)
    } else {
        cluster.receive(0)
    }
}
