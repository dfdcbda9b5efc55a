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

    /// The GPUs this rank uses where `--devices` does not say: the GPUs identical to the one
    /// `auto` chooses, dealt in turn to the ranks that share the host (a rank of more ranks
    /// than GPUs shares one). Empty where the library's default holds: one process on the
    /// host, one such GPU, or an adapter named with `--adapter`.
    pub fn default_devices(&self, adapter: Option<&str>) -> Vec<String> {
        #[cfg(feature = "mpi")]
        if let (Some(mpi), None) = (&self.mpi, adapter) {
            let (local, on_host) = mpi.on_host();
            let adapters = knng::adapters();
            let Some(auto) = adapters.iter().find(|a| a.auto_choice) else { return Vec::new() };
            let gpus: Vec<usize> = adapters
                .iter()
                .filter(|a| a.info.name == auto.info.name && a.info.backend == auto.info.backend)
                .map(|a| a.index)
                .collect();
            return deal_gpus(&gpus, local, on_host).iter().map(usize::to_string).collect();
        }
        let _ = adapter;
        Vec::new()
    }

    /// Ends a failed run: on a rank of a job, says which rank failed and ends every rank
    /// (their partial outputs are removed as on an interrupt); otherwise returns the exit
    /// status.
    pub fn fail(&self, line: &str) -> std::process::ExitCode {
        #[cfg(feature = "mpi")]
        if let Some(mpi) = &self.mpi {
            crate::tell(format_args!("error: rank {} of {}: {line}", mpi.rank(), mpi.size()));
            knng::io::remove_partial_outputs();
            mpi.abort(1);
        }
        crate::tell(format_args!("error: {line}"));
        std::process::ExitCode::from(1)
    }
}

/// The GPUs of `gpus` for rank `local` of the `on_host` ranks of one host: every
/// `on_host`-th from the `local`-th, or one shared GPU where there are more ranks than GPUs;
/// none (the library's default: all of them) for a lone rank or a single GPU.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn deal_gpus(gpus: &[usize], local: usize, on_host: usize) -> Vec<usize> {
    if on_host <= 1 || gpus.len() <= 1 {
        return Vec::new();
    }
    let mine: Vec<usize> = gpus.iter().enumerate().filter(|(i, _)| i % on_host == local).map(|(_, &g)| g).collect();
    if mine.is_empty() {
        vec![gpus[local % gpus.len()]]
    } else {
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::deal_gpus;

    #[test]
    fn gpus_are_dealt_to_the_ranks_of_a_host() {
        let four = [0, 1, 2, 3];
        assert_eq!(deal_gpus(&four, 0, 1), Vec::<usize>::new());
        assert_eq!(deal_gpus(&four, 1, 2), [1, 3]);
        assert_eq!(deal_gpus(&four, 3, 4), [3]);
        // More ranks than GPUs: ranks share them in turn.
        assert_eq!(deal_gpus(&four, 5, 6), [1]);
        assert_eq!(deal_gpus(&[2, 5], 1, 3), [5]);
        assert_eq!(deal_gpus(&[2, 5], 2, 3), [2]);
        assert_eq!(deal_gpus(&[7], 1, 2), Vec::<usize>::new());
    }
}
