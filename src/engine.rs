//! The backends behind one interface: what a search round and a block of the partitioned
//! graph ask of a CPU or a GPU.

use crate::cpu::CpuEngine;
use crate::data::MatrixRef;
use crate::error::{Error, Result};
use crate::gpu::GpuEngine;
use crate::metric::Metric;
use crate::refine::{Candidates, NONE};

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

    /// Whether a whole graph of `rows x cols` data is ranked on this engine's device, rows
    /// reaching the host as answers tile by tile (`Strategy::SingleOnDisk`).
    pub fn ranks_graph_on_device(&self, rows: usize, cols: usize) -> bool {
        match self {
            Engine::Cpu(_) => false,
            Engine::Gpu(g) => g.ranks_graph_on_device(rows, cols),
        }
    }

    /// The most rows of a graph's block, fewer than `rows`, that this engine ranks on its
    /// device where it cannot rank all `rows x cols` (`None`: it can, or it ranks none, or
    /// it is the CPU).
    pub fn device_block_rows(&self, rows: usize, cols: usize) -> Option<usize> {
        let ranks = |r: usize| self.ranks_graph_on_device(r, cols);
        if rows == 0 || ranks(rows) || !ranks(1) {
            return None;
        }
        // Ranking fits fewer rows whenever it fits more: the largest that fits, by bisection.
        let (mut fits, mut too_many) = (1, rows);
        while too_many - fits > 1 {
            let mid = fits + (too_many - fits) / 2;
            if ranks(mid) {
                fits = mid;
            } else {
                too_many = mid;
            }
        }
        Some(fits)
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

impl Engine {
    /// The two sides of an off-diagonal block of a graph: the `kc` best candidates of each row
    /// of `i` among the rows of `j` (ids rows of `j`), and of each row of `j` among those of
    /// `i` (ids rows of `i`). The CPU computes each key once for both rows, where both blocks
    /// have at least `kc` rows; elsewhere the two sides are two searches.
    pub fn pair_candidates(
        &self,
        i: MatrixRef<'_>,
        j: MatrixRef<'_>,
        kc: usize,
        shift: &[f32],
        metric: Metric,
    ) -> Result<(Candidates, Candidates)> {
        if let (Engine::Cpu(c), true) = (self, kc <= i.rows().min(j.rows())) {
            let mut both = Vec::with_capacity(i.as_slice().len() + j.as_slice().len());
            both.extend_from_slice(i.as_slice());
            both.extend_from_slice(j.as_slice());
            let both = MatrixRef::new(&both, i.rows() + j.rows(), i.cols())?;
            let session = c.open(both, shift, metric, None);
            let cands = session.two_sided_candidates(i.rows(), kc);
            return Ok(split_sides(cands, i.rows()));
        }
        let side = |queries: MatrixRef<'_>, corpus: MatrixRef<'_>| {
            let exclude = vec![NONE; queries.rows()];
            let kc = kc.min(corpus.rows());
            let job = CandidateJob {
                corpus,
                queries,
                queries_are_corpus: false,
                exclude: &exclude,
                kc,
                shift,
                metric,
                symmetric: None,
            };
            self.candidates(job, &|_| {})
        };
        Ok((side(i, j)?, side(j, i)?))
    }
}

/// Candidates of the rows `[i; j]` of a two-sided block, ids into `[i; j]`, as those of `i`
/// (ids rows of `j`) and those of `j` (ids rows of `i`).
fn split_sides(mut cands: Candidates, split: usize) -> (Candidates, Candidates) {
    let kc = cands.kc;
    let j_keys = cands.keys.split_off(split * kc);
    let j_ids = cands.ids.split_off(split * kc);
    for id in cands.ids.iter_mut().filter(|id| **id != NONE) {
        *id -= split as u32;
    }
    let side = |keys, ids, failed: Vec<bool>| Candidates {
        kc,
        keys,
        ids,
        failed,
        incomplete: Vec::new(),
        shortlisted: 0,
        buffers_allocated: false,
        symmetric: true,
        bounded: false,
        shared_keys: false,
        published: 0,
        exact: None,
        ranked: None,
    };
    let j_failed = cands.failed.split_off(split);
    let i_side = side(cands.keys, cands.ids, cands.failed);
    (i_side, side(j_keys, j_ids, j_failed))
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
