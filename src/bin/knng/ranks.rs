//! The ranks of an MPI job, where `mpirun` or `srun` started this process: MPI is started
//! once, graphs are shared by every rank, rank 0 alone writes and reports, and a failure on
//! any rank ends the whole job.

use std::sync::Arc;

use knng::Cluster;

#[cfg(not(feature = "mpi"))]
use crate::Failure;
use crate::Outcome;

/// This process's place in the job, for the length of `main`: MPI is finalised when it is
/// dropped.
pub struct Ranks {
    #[cfg(feature = "mpi")]
    mpi: Option<Arc<knng::Mpi>>,
}

impl Ranks {
    /// Starts MPI where a launcher started several copies of knng; refuses to run them as
    /// independent copies where this build has no MPI.
    pub fn start() -> Outcome<Self> {
        let launched = knng::launched_ranks().unwrap_or(1);
        #[cfg(feature = "mpi")]
        {
            let mpi = if launched > 1 { Some(Arc::new(knng::Mpi::init()?)) } else { None };
            Ok(Ranks { mpi })
        }
        #[cfg(not(feature = "mpi"))]
        {
            if launched > 1 {
                return Err(Failure(format!(
                    "started as one of {launched} processes by an MPI launcher, but this knng was built without \
                     MPI: build it with `cargo build --release --features mpi` (needs libopenmpi-dev or an MPICH, \
                     and libclang-dev), or run one process"
                )));
            }
            Ok(Ranks {})
        }
    }

    /// The job's ranks, where there are several.
    pub fn cluster(&self) -> Option<Arc<dyn Cluster>> {
        #[cfg(feature = "mpi")]
        {
            self.mpi.clone().map(|m| m as Arc<dyn Cluster>)
        }
        #[cfg(not(feature = "mpi"))]
        {
            None
        }
    }

    /// This process's rank (0 outside a job).
    pub fn rank(&self) -> usize {
        self.cluster().map_or(0, |c| c.rank())
    }

    /// Whether this process writes outputs and reports: rank 0, or a lone process.
    pub fn leads(&self) -> bool {
        self.rank() == 0
    }

    /// Names this rank's host, where it is one of several.
    pub fn host_name(&self) -> Option<String> {
        #[cfg(feature = "mpi")]
        {
            self.mpi.as_ref().map(|m| m.host_name())
        }
        #[cfg(not(feature = "mpi"))]
        {
            None
        }
    }

    /// Ends a failed run: on a rank of a job, says which rank failed and ends every rank
    /// (their partial outputs are removed as on an interrupt); otherwise returns the exit
    /// status.
    pub fn fail(&self, line: &str) -> std::process::ExitCode {
        #[cfg(feature = "mpi")]
        if let Some(mpi) = &self.mpi {
            eprintln!("error: rank {} of {}: {line}", mpi.rank(), mpi.size());
            knng::io::remove_partial_outputs();
            mpi.abort(1);
        }
        eprintln!("error: {line}");
        std::process::ExitCode::from(1)
    }
}
