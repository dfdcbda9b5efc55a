//! [`Cluster`] over MPI (the `mpi` feature): the ranks of a job started by `mpirun` or `srun`.

use std::sync::Mutex;

use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;

use super::Cluster;
use crate::error::{Error, Result};

/// Bytes a single MPI message carries: counts are C ints, so larger messages go in pieces.
const PIECE: usize = 1 << 30;

/// The ranks of an MPI job (`MPI_COMM_WORLD`). MPI is finalised when it is dropped.
///
/// Every call into MPI goes through one lock (MPI is initialised for serialised calls), so
/// it may be shared between threads.
pub struct Mpi {
    world: Mutex<SimpleCommunicator>,
    rank: usize,
    size: usize,
    /// This rank among those of its host (`MPI_COMM_TYPE_SHARED`), and how many they are.
    local: (usize, usize),
    // Dropped last: finalises MPI.
    _universe: Universe,
}

// SAFETY: MPI is initialised with `Threading::Serialized` (checked in `init`), which allows
// calls from any thread that do not overlap; every call goes through the `world` lock, and
// the universe is only dropped.
unsafe impl Send for Mpi {}
unsafe impl Sync for Mpi {}

impl Mpi {
    /// Starts MPI. From then on a panic on any rank ends the whole job (`MPI_Abort`) rather
    /// than leaving the other ranks waiting for its messages.
    pub fn init() -> Result<Self> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| Error::Cluster("MPI was already started in this process".into()))?;
        if !matches!(threading, Threading::Serialized | Threading::Multiple) {
            return Err(Error::Cluster(format!(
                "this MPI library offers threading level {threading:?}; knng needs Serialized"
            )));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let host = world.split_shared(rank as i32);
        let local = (host.rank() as usize, host.size() as usize);
        drop(host);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            // One write: the ranks share a terminal and their lines must not interleave.
            let line = format!("knng: rank {rank} of {size} panicked; ending the job\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            SimpleCommunicator::world().abort(101);
        }));
        Ok(Mpi { world: Mutex::new(world), rank, size, local, _universe: universe })
    }

    /// Ends every rank of the job with exit status `code` (`MPI_Abort`).
    pub fn abort(&self, code: i32) -> ! {
        self.world.lock().unwrap_or_else(|e| e.into_inner()).abort(code)
    }

    /// This rank's place among the ranks that share its host: its number there, from 0, and
    /// how many they are.
    pub fn on_host(&self) -> (usize, usize) {
        self.local
    }

    /// The name of this rank's host.
    pub fn host_name(&self) -> String {
        let _serialised = self.world.lock().unwrap_or_else(|e| e.into_inner());
        mpi::environment::processor_name().unwrap_or_else(|_| "(unnamed host)".into())
    }

    fn check_rank(&self, rank: usize) -> Result<i32> {
        if rank < self.size {
            Ok(rank as i32)
        } else {
            Err(Error::Cluster(format!("rank {rank} does not exist: the job has {} ranks", self.size)))
        }
    }
}

impl Cluster for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn send(&self, to: usize, bytes: &[u8]) -> Result<()> {
        let to = self.check_rank(to)?;
        let world = self.world.lock().unwrap_or_else(|e| e.into_inner());
        let process = world.process_at_rank(to);
        process.send(&(bytes.len() as u64));
        for piece in bytes.chunks(PIECE) {
            process.send(piece);
        }
        Ok(())
    }

    fn receive(&self, from: usize) -> Result<Vec<u8>> {
        let from = self.check_rank(from)?;
        let world = self.world.lock().unwrap_or_else(|e| e.into_inner());
        let process = world.process_at_rank(from);
        let (len, _) = process.receive::<u64>();
        let len = usize::try_from(len)
            .map_err(|_| Error::Cluster(format!("rank {from} announced a message of {len} bytes")))?;
        let mut bytes = vec![0u8; len];
        for piece in bytes.chunks_mut(PIECE) {
            let status = process.receive_into(piece);
            let count = status.count(u8::equivalent_datatype()) as usize;
            if count != piece.len() {
                return Err(Error::Cluster(format!(
                    "rank {from} sent a piece of {count} bytes where {} were due",
                    piece.len()
                )));
            }
        }
        Ok(bytes)
    }
}
