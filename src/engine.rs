//! The backends behind one interface: what a search round and a block of the partitioned
//! graph ask of a CPU or a GPU.

use crate::cpu::CpuEngine;
use crate::data::MatrixRef;
use crate::error::{Error, Result};
use crate::gpu::GpuEngine;
use crate::metric::Metric;
use crate::refine::Candidates;

/// One backend: the host's cores, or one GPU device.
pub(crate) enum Engine {
    Cpu(CpuEngine),
    Gpu(Box<GpuEngine>),
}

impl Engine {
    /// What runs the work, e.g. `gpu: NVIDIA H200 (Vulkan, subgroup select, size 32)`.
    pub fn description(&self) -> String {
        match self {
            Engine::Cpu(c) => c.description(),
            Engine::Gpu(g) => g.description(),
        }
    }

    /// The `kc` best fp32 candidates of each row of `queries` among the rows of `corpus`,
    /// prepared with the whole data's `shift`, so that keys of different corpora compare.
    /// `queries_are_corpus`: the queries are the corpus rows themselves, in order, which a
    /// backend may sweep in symmetric blocks. Ids are rows of `corpus`.
    pub fn candidates(&self, job: CandidateJob<'_>, report: &(dyn Fn(usize) + Sync)) -> Result<Candidates> {
        let CandidateJob { corpus, queries, queries_are_corpus, exclude, kc, shift, metric, symmetric } = job;
        match self {
            Engine::Cpu(c) => {
                let mut session = c.open(corpus, shift, metric, symmetric);
                Ok(session.candidates(queries, queries_are_corpus, exclude, kc, report))
            }
            Engine::Gpu(g) => retry_smaller(g, || {
                let mut session = g.open(corpus, shift, metric)?;
                session.candidates(queries, queries_are_corpus, exclude, kc, None, report)
            }),
        }
    }
}

/// What [`Engine::candidates`] computes.
#[derive(Clone, Copy)]
pub(crate) struct CandidateJob<'a> {
    pub corpus: MatrixRef<'a>,
    pub queries: MatrixRef<'a>,
    pub queries_are_corpus: bool,
    /// Per query, a corpus row it may not list (itself) or `NONE`.
    pub exclude: &'a [u32],
    pub kc: usize,
    pub shift: &'a [f32],
    pub metric: Metric,
    /// `Options::symmetric_graphs`, for the CPU backend.
    pub symmetric: Option<bool>,
}

/// Runs `f`, and after each GPU out-of-memory error halves the memory budget and runs it
/// again, until it succeeds or the budget is too small to try.
pub(crate) fn retry_smaller<T>(gpu: &GpuEngine, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    loop {
        match f() {
            Err(Error::OutOfMemory(_)) if gpu.shrink_budget() => continue,
            other => return other,
        }
    }
}
