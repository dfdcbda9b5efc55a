//! A corpus on the GPU and the candidate search against it: query tiles, distance tiles,
//! selection, merges, exact keys and certificates, and the buffers they reuse.

mod bounded;

use std::collections::VecDeque;

use rayon::prelude::*;

use super::engine::GpuEngine;
use super::kernels::{
    bind_group, bind_group_at, bind_group_ranges, exact_keys_dispatch, gemm_tiles, grid, metric_modes,
    publishing_groups, refine_mode, reported_as, CertifyParams, DistanceParams, Job, NormsParams, ParamSlots,
    RefineParams, SelectParams, Step, AUX_NAMES, GROUPED_ROWS, MAX_CERTIFY_KC, PARAM_SLOT, WIDE_MERGE_KC,
};
use super::transfer::{read_mapped, Mapping};
use crate::data::{stream_copy, zeroed_answers, MatrixRef};
use crate::error::Result;
use crate::metric::Metric;
use crate::plan::{self, CorpusPlan, TilePlan, WIDE_ROWS};
use crate::prepare;
use crate::refine::{found, order_ties_by_index, BackendRanked, Candidates, Certify, TileRanked, NONE};

/// Query tiles a round may be cut into so that it runs in the buffers already allocated
/// (`TileBuffers::new`); below this it allocates its own.
const MIN_REUSED_QUERY_ROWS: usize = 256;

thread_local! {
    /// A row of ranked answers whose ties are being ordered by index, per reader thread.
    static TIED_ROW: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Query tiles whose answers are copied out at once.
const READERS: usize = 2;

/// Share of a symmetric graph's progress reports given to the sweep, before any row is final.
const SWEEP_SHARE: f64 = 0.9;

/// Prepared corpus rows are also the query rows of a graph, copied on the GPU.
const STORAGE_COPY_SRC: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC);

impl GpuEngine {
    /// Allocates the buffers of a resident corpus ahead of [`Self::open`] and writes its
    /// original rows where they stay on the GPU, so that both overlap the input's validation
    /// (`open` then only prepares them). Nothing for a streamed corpus. `caller`: the thread
    /// that will open it (this may run on another).
    pub fn stage(&self, corpus: MatrixRef<'_>, caller: std::thread::ThreadId) -> Result<()> {
        let (rows, cols) = (corpus.rows(), corpus.cols());
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        self.forget_other_shapes(rows, cols);
        let plan = plan::plan_corpus(rows, cols, self.budget())?;
        if plan.resident {
            let mut buffers = self.corpus_buffers(rows, cols, plan)?;
            if let Some(raw) = &buffers.raw {
                // Block by block, so that a mapped input is not all resident at once.
                let row_bytes = (cols * 4) as u64;
                corpus
                    .in_blocks(|first, block| {
                        self.write_at(raw, first as u64 * row_bytes, "corpus", bytemuck::cast_slice(block.as_slice()))
                    })
                    .into_iter()
                    .collect::<Result<()>>()?;
                buffers.staged = Some(Staged::of(corpus, caller));
            }
            *self.corpus_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(buffers);
        }
        Ok(())
    }

    /// Frees cached buffers of another corpus shape: they would count against this one's
    /// budget.
    fn forget_other_shapes(&self, rows: usize, cols: usize) {
        let mut tiles = self.tile_cache.lock().unwrap_or_else(|e| e.into_inner());
        if tiles.as_ref().is_some_and(|(key, _)| key.corpus != (rows, cols)) {
            *tiles = None;
        }
        let mut corpus = self.corpus_cache.lock().unwrap_or_else(|e| e.into_inner());
        if corpus.as_ref().is_some_and(|c| c.shape != (rows, cols)) {
            *corpus = None;
        }
    }

    /// The cached buffers of a resident corpus of this shape and plan, else new ones.
    fn corpus_buffers(&self, rows: usize, cols: usize, plan: CorpusPlan) -> Result<CorpusBuffers> {
        let cached = self.corpus_cache.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(buffers) = cached.filter(|b| b.shape == (rows, cols) && b.plan == plan) {
            return Ok(buffers);
        }
        let keep_raw = self.keeps_raw_rows(rows, cols, plan);
        let prepared = (0..rows)
            .step_by(plan.chunk_rows)
            .map(|first| self.prepared_rows(first, plan.chunk_rows.min(rows - first), cols))
            .collect::<Result<_>>()?;
        let raw = keep_raw.then(|| self.raw_rows(rows, cols)).transpose()?;
        Ok(CorpusBuffers { shape: (rows, cols), plan, prepared, raw, staged: None })
    }

    /// Exact re-ranking on the GPU needs the original rows in one binding, beside the
    /// prepared ones, within the budget.
    fn keeps_raw_rows(&self, rows: usize, cols: usize, plan: CorpusPlan) -> bool {
        let raw_bytes = (rows * cols * 4) as u64;
        self.kernels.refine.is_some()
            && plan.chunk_rows >= rows
            && raw_bytes <= self.max_binding
            && raw_bytes + rows as u64 * plan::prepared_row_bytes(cols) <= self.budget().budget / 2
    }

    /// Whether the graph of `rows x cols` data is ranked and certified on the device (its
    /// corpus resident, its original rows beside the prepared ones), so that the host receives
    /// only answers, tile by tile.
    pub fn ranks_graph_on_device(&self, rows: usize, cols: usize) -> bool {
        rows > 0
            && cols > 0
            && self.kernels.certify.is_some()
            && plan::plan_corpus(rows, cols, self.budget())
                .is_ok_and(|plan| plan.resident && self.keeps_raw_rows(rows, cols, plan))
    }

    fn prepared_rows(&self, first: usize, rows: usize, cols: usize) -> Result<PreparedRows> {
        let vectors = self.buffer("corpus rows", rows as u64 * plan::prepared_row_bytes(cols), STORAGE_COPY_SRC)?;
        let norms = self.buffer("corpus norms", (rows * 4) as u64, STORAGE_COPY_SRC)?;
        Ok(PreparedRows { first, rows, vectors, norms })
    }

    fn raw_rows(&self, rows: usize, cols: usize) -> Result<wgpu::Buffer> {
        self.buffer("corpus", (rows * cols * 4) as u64, STORAGE_COPY_SRC | wgpu::BufferUsages::COPY_DST)
    }

    /// Prepares the corpus on the GPU (resident if it fits half the budget, else streamed
    /// per query tile).
    pub fn open<'a>(&'a self, corpus: MatrixRef<'a>, shift: &[f32], metric: Metric) -> Result<CorpusSession<'a>> {
        let (rows, cols) = (corpus.rows(), corpus.cols());
        self.forget_other_shapes(rows, cols);
        let plan = plan::plan_corpus(rows, cols, self.budget())?;
        let buffers = if plan.resident {
            self.corpus_buffers(rows, cols, plan)?
        } else {
            *self.corpus_cache.lock().unwrap_or_else(|e| e.into_inner()) = None;
            CorpusBuffers { shape: (rows, cols), plan, prepared: Vec::new(), raw: None, staged: None }
        };
        let raw_written = buffers.staged.is_some_and(|s| s == Staged::of(corpus, std::thread::current().id()));
        let shift_buf = self.upload("shift", bytemuck::cast_slice(shift))?;
        let mut session = CorpusSession {
            gpu: self,
            corpus,
            metric,
            plan,
            shift: shift_buf,
            resident: Vec::new(),
            raw_corpus: buffers.raw,
            exact_norms: None,
        };
        for chunk in buffers.prepared {
            session.prepare_chunk(&chunk, session.raw_corpus.as_ref(), raw_written)?;
            session.resident.push(chunk);
        }
        Ok(session)
    }
}

/// Prepared rows on the GPU: vec4-padded vectors and squared norms.
pub(super) struct PreparedRows {
    first: usize,
    rows: usize,
    vectors: wgpu::Buffer,
    norms: wgpu::Buffer,
}

/// A resident corpus's buffers (`GpuEngine::corpus_cache`).
pub(super) struct CorpusBuffers {
    shape: (usize, usize),
    plan: CorpusPlan,
    /// Each chunk's prepared rows.
    prepared: Vec<PreparedRows>,
    /// The original rows, where exact keys are computed on the GPU.
    raw: Option<wgpu::Buffer>,
    /// Whose rows `raw` holds, when written by [`GpuEngine::stage`] for the next `open`.
    staged: Option<Staged>,
}

/// A corpus written by [`GpuEngine::stage`]: its address and length, and the thread whose
/// call staged it (concurrent calls of one engine on corpora of one shape may swap cached
/// buffers between them; each `open` prepares only rows that its own call wrote).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Staged {
    data: (usize, usize),
    thread: std::thread::ThreadId,
}

impl Staged {
    fn of(corpus: MatrixRef<'_>, thread: std::thread::ThreadId) -> Self {
        let data = corpus.as_slice();
        Staged { data: (data.as_ptr() as usize, data.len()), thread }
    }
}

pub(crate) struct CorpusSession<'a> {
    gpu: &'a GpuEngine,
    corpus: MatrixRef<'a>,
    metric: Metric,
    plan: CorpusPlan,
    shift: wgpu::Buffer,
    resident: Vec<PreparedRows>,
    /// The original corpus rows, for exact re-ranking on the GPU.
    raw_corpus: Option<wgpu::Buffer>,
    /// Cosine keys re-ranked on the GPU: the float64 norms of the corpus rows and of the
    /// current round's query rows (the same buffer when those are the corpus rows).
    exact_norms: Option<(wgpu::Buffer, wgpu::Buffer)>,
}

impl Drop for CorpusSession<'_> {
    /// A resident corpus's buffers go back to the cache, for the next corpus of this shape.
    fn drop(&mut self) {
        if self.plan.resident {
            let buffers = CorpusBuffers {
                shape: (self.corpus.rows(), self.corpus.cols()),
                plan: self.plan,
                prepared: std::mem::take(&mut self.resident),
                raw: self.raw_corpus.take(),
                staged: None,
            };
            *self.gpu.corpus_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(buffers);
        }
    }
}

/// What the buffers of a round of candidates depend on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct TileKey {
    corpus: (usize, usize),
    tiles: TilePlan,
    kc: usize,
    column_tiles: usize,
    gpu_exact: bool,
    /// k, when rows are ranked and certified on the GPU.
    certify_k: Option<usize>,
}

impl TileKey {
    /// Rows of the per-row state: the query tile's, or every corpus row's in a symmetric or a
    /// bounded sweep.
    fn state_rows(&self) -> usize {
        if self.tiles.symmetric || self.tiles.bounded.is_some() {
            self.corpus.0
        } else {
            self.tiles.query_rows
        }
    }

    /// Whether a symmetric sweep computes each mutual pair's exact key once (`mutual` in
    /// refine.wgsl): where every row's lists stay on the GPU, are ranked there, fit one sort
    /// (`MAX_CERTIFY_KC`), and are long enough for the exact keys to dominate (`WIDE_ROWS`).
    /// Graphs of long rows list most of their pairs in both rows (notes/exactness.md).
    fn shares_mutual_keys(&self) -> bool {
        self.tiles.symmetric
            && self.gpu_exact
            && self.certify_k.is_some()
            && self.kc <= MAX_CERTIFY_KC
            && self.corpus.1 >= WIDE_ROWS
    }
}

/// Ranked answers of one query tile, laid out as in the read-back buffer.
struct CertifyBuffers {
    k: usize,
    error_bounds: wgpu::Buffer,
    /// Ids from 0, reported (f32) distances from `distances_at` (not keys: a third fewer
    /// bytes to read back), certificates from `status_at`; the read-back buffer has the
    /// failure flags after them, at `flags_at`. One layout in both, so that the answers go
    /// to the host as one flat copy: published by the next query tile's distance kernel
    /// (`distance_publish.wgsl`) or copied after the ranking.
    answers: wgpu::Buffer,
    /// Per row and run of `MAX_CERTIFY_KC` slots, for longer lists (`sort_runs`).
    run_stats: wgpu::Buffer,
    distances_at: u64,
    status_at: u64,
    flags_at: u64,
}

impl CertifyBuffers {
    /// The ranking kernels' bindings of the ids, distances and certificates.
    fn bindings(&self) -> [wgpu::BufferBinding<'_>; 3] {
        let part = |from: u64, to: u64| wgpu::BufferBinding {
            buffer: &self.answers,
            offset: from,
            size: std::num::NonZeroU64::new(to - from),
        };
        [part(0, self.distances_at), part(self.distances_at, self.status_at), part(self.status_at, self.flags_at)]
    }
}

/// Buffers of one round of candidates, reused by every query tile.
pub(super) struct TileBuffers {
    raw_queries: wgpu::Buffer,
    queries: PreparedRows,
    /// Per row: (corpus index to exclude, shortlist bound). This and the other per-row arrays
    /// (`failed`, the running lists at the start of `candidates`, `shortlist_len`, `shortlist`)
    /// hold `state_rows` rows: a query tile's, or in a symmetric sweep every corpus row's, bound
    /// from the tile's first row.
    row_state: wgpu::Buffer,
    state_rows: usize,
    failed: wgpu::Buffer,
    dist: wgpu::Buffer,
    /// The select's two auxiliary arrays, keys and indices apart, in binding order (a's keys,
    /// a's indices, b's keys, b's indices; select.wgsl).
    aux: [wgpu::Buffer; 4],
    candidates: wgpu::Buffer,
    /// Lengths and pairs of each row's shortlist: in a bounded sweep, of each row's list of
    /// every key under its bound.
    shortlist_len: wgpu::Buffer,
    shortlist: wgpu::Buffer,
    uniform: wgpu::Buffer,
    /// Read-back of the running lists, then (at `flags_at`) the failure flags; two where the
    /// budget allows (`TilePlan::read_backs`), so that one query tile's results are copied out
    /// on the host while the next tile runs.
    staging: Vec<wgpu::Buffer>,
    flags_at: u64,
    /// Exact keys of the candidates (with GPU re-ranking), and where they go in `staging`.
    exact: Option<(wgpu::Buffer, u64)>,
    /// Mutual pairs share their exact keys (`TileKey::shares_mutual_keys`): `exact` holds
    /// every state row's keys, not a tile's.
    shared_keys: bool,
    /// Ranked answers, when rows are certified on the GPU.
    certify: Option<CertifyBuffers>,
    /// What each buffer holds (for a set reused by a later key, the sizes it was made with).
    sizes: TileSizes,
}

/// Bytes of each buffer of a set of tile buffers, from its key (`TileBuffers::new`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct TileSizes {
    raw_queries: u64,
    query_vectors: u64,
    query_norms: u64,
    row_state: u64,
    failed: u64,
    dist: u64,
    /// Each of the auxiliary arrays' four buffers (keys and indices of each).
    aux: u64,
    candidates: u64,
    shortlist_len: u64,
    shortlist: u64,
    uniform: u64,
    /// Each read-back buffer, and how many there are.
    staging: u64,
    read_backs: usize,
    exact: Option<u64>,
    certify: Option<CertifySizes>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct CertifySizes {
    error_bounds: u64,
    /// Ids, distances and certificates (`CertifyBuffers::answers`).
    answers: u64,
    run_stats: u64,
}

impl TileSizes {
    fn of(d: usize, key: &TileKey) -> Self {
        let TileKey { tiles, kc, column_tiles, gpu_exact, certify_k, .. } = *key;
        let q = tiles.query_rows;
        let state_rows = key.state_rows();
        // Parameter slots per distance tile: distance, select, merge, and the merges of the
        // column rows' shortlists (a query tile's rows at a time). A bounded sweep's tile takes
        // three too: distance, filter, select.
        let slots_per_tile = 3 + if tiles.symmetric { tiles.column_tile.div_ceil(q) } else { 0 };
        let certify = certify_k.map(|k| CertifySizes {
            error_bounds: (q * 8) as u64,
            answers: CertifyLayout::new(q, k).flags_at,
            run_stats: (q * kc.div_ceil(MAX_CERTIFY_KC) * 8) as u64,
        });
        let candidate_staging =
            (q * kc * 8 + q * 4).next_multiple_of(8) as u64 + if gpu_exact { (q * kc * 8) as u64 } else { 0 };
        let certify_staging = certify_k.map_or(0, |k| CertifyLayout::new(q, k).flags_at + (q * 4) as u64);
        // Shared keys are read across tiles: every row's are kept.
        let key_rows = if key.shares_mutual_keys() { state_rows } else { q };
        TileSizes {
            raw_queries: (q * d * 4) as u64,
            query_vectors: (q * d.div_ceil(4) * 16) as u64,
            query_norms: (q * 4) as u64,
            row_state: (state_rows * 8) as u64,
            failed: (state_rows * 4) as u64,
            dist: (q * tiles.dist_stride * 4) as u64,
            aux: (q * tiles.scratch_stride * 4) as u64,
            candidates: ((state_rows + q) * kc * 8) as u64,
            shortlist_len: (state_rows * 4) as u64,
            shortlist: (state_rows * tiles.shortlist_cap * 8).max(8) as u64,
            uniform: (1 + (slots_per_tile * column_tiles) as u64) * PARAM_SLOT,
            staging: candidate_staging.max(certify_staging),
            read_backs: tiles.read_backs,
            exact: gpu_exact.then_some((key_rows * kc * 8) as u64),
            certify,
        }
    }

    /// Whether buffers of these sizes can serve a set of `want`'s: each at least as large
    /// and used the same way, and as many read-back buffers (up to two).
    fn hold(&self, want: &TileSizes) -> bool {
        let certify = match (&self.certify, &want.certify) {
            (Some(c), Some(w)) => {
                c.error_bounds >= w.error_bounds && c.answers >= w.answers && c.run_stats >= w.run_stats
            }
            (None, None) => true,
            _ => false,
        };
        let exact = match (self.exact, want.exact) {
            (Some(c), Some(w)) => c >= w,
            (None, None) => true,
            _ => false,
        };
        let sizes = self.plain_sizes().into_iter().zip(want.plain_sizes()).all(|(have, need)| have >= need);
        // A third read-back buffer only gives the host slack: two serve a set that wants three
        // (a symmetric sweep's set, with two, serves its later rounds).
        certify && exact && sizes && self.read_backs >= want.read_backs.min(2)
    }

    /// The sizes of the buffers every set has.
    fn plain_sizes(&self) -> [u64; 12] {
        [
            self.raw_queries,
            self.query_vectors,
            self.query_norms,
            self.row_state,
            self.failed,
            self.dist,
            self.aux,
            self.candidates,
            self.shortlist_len,
            self.shortlist,
            self.uniform,
            self.staging,
        ]
    }
}

/// Where the ranked answers of a query tile of `q` rows go in its read-back buffer.
struct CertifyLayout {
    distances_at: u64,
    status_at: u64,
    flags_at: u64,
}

impl CertifyLayout {
    fn new(q: usize, k: usize) -> Self {
        // Each part is bound as storage: offsets of whole 256-byte blocks. The flags start at
        // one too, so that a copy of the answers in whole vec4s stops short of them.
        let distances_at = (q * k * 4).next_multiple_of(256) as u64;
        let status_at = distances_at + (q * k * 4).next_multiple_of(256) as u64;
        CertifyLayout { distances_at, status_at, flags_at: status_at + (q * 4).next_multiple_of(256) as u64 }
    }
}

impl TileBuffers {
    /// The buffers for `key`: those of `earlier` where it holds them all (a later round of
    /// fewer rows then runs in the memory of the first instead of freeing it and allocating
    /// more), else new ones.
    fn new(gpu: &GpuEngine, d: usize, key: TileKey, earlier: Option<&TileBuffers>) -> Result<Self> {
        let TileKey { tiles, kc, certify_k, .. } = key;
        let q = tiles.query_rows;
        let want = TileSizes::of(d, &key);
        let earlier = earlier.filter(|e| e.sizes.hold(&want));
        // A reused set keeps the sizes it was made with, for the next comparison.
        let sizes = earlier.map_or(want, |e| e.sizes);
        let buffer = |old: Option<&wgpu::Buffer>, label: &str, size: u64, usage: wgpu::BufferUsages| match old {
            Some(b) => Ok(b.clone()),
            None => gpu.buffer(label, size, usage),
        };
        let storage = wgpu::BufferUsages::STORAGE;
        let copy = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let certify = match (certify_k, want.certify) {
            (Some(k), Some(c)) => {
                let old = earlier.and_then(|e| e.certify.as_ref());
                let CertifyLayout { distances_at, status_at, flags_at } = CertifyLayout::new(q, k);
                Some(CertifyBuffers {
                    k,
                    error_bounds: buffer(old.map(|o| &o.error_bounds), "error bounds", c.error_bounds, storage | copy)?,
                    answers: buffer(old.map(|o| &o.answers), "ranked answers", c.answers, storage | copy)?,
                    run_stats: buffer(old.map(|o| &o.run_stats), "run statistics", c.run_stats, storage)?,
                    distances_at,
                    status_at,
                    flags_at,
                })
            }
            _ => None,
        };
        let mut read_back_usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        if want.certify.is_some() && gpu.kernels.publishes() {
            read_back_usage |= storage;
        }
        // Every read-back buffer of a reused set is kept: a second one lets the host copy out
        // one tile while the next runs.
        let staging = match earlier {
            Some(e) => e.staging.clone(),
            None => (0..want.read_backs)
                .map(|_| gpu.buffer("read-back", want.staging, read_back_usage))
                .collect::<Result<_>>()?,
        };
        let old = |field: fn(&TileBuffers) -> &wgpu::Buffer| earlier.map(field);
        Ok(TileBuffers {
            certify,
            raw_queries: buffer(old(|e| &e.raw_queries), "queries", want.raw_queries, storage | copy)?,
            queries: PreparedRows {
                first: 0,
                rows: q,
                vectors: buffer(old(|e| &e.queries.vectors), "query rows", want.query_vectors, storage | copy)?,
                norms: buffer(old(|e| &e.queries.norms), "query norms", want.query_norms, storage | copy)?,
            },
            row_state: buffer(old(|e| &e.row_state), "row state", want.row_state, storage | copy)?,
            failed: buffer(old(|e| &e.failed), "failed", want.failed, storage | copy)?,
            dist: buffer(old(|e| &e.dist), "distances", want.dist, storage)?,
            aux: [
                buffer(old(|e| &e.aux[0]), AUX_NAMES[0], want.aux, storage)?,
                buffer(old(|e| &e.aux[1]), AUX_NAMES[1], want.aux, storage)?,
                buffer(old(|e| &e.aux[2]), AUX_NAMES[2], want.aux, storage)?,
                buffer(old(|e| &e.aux[3]), AUX_NAMES[3], want.aux, storage)?,
            ],
            candidates: buffer(old(|e| &e.candidates), "candidates", want.candidates, storage | copy)?,
            shortlist_len: buffer(old(|e| &e.shortlist_len), "shortlist lengths", want.shortlist_len, storage | copy)?,
            shortlist: buffer(old(|e| &e.shortlist), "shortlists", want.shortlist, storage)?,
            state_rows: key.state_rows(),
            uniform: buffer(
                old(|e| &e.uniform),
                "params",
                want.uniform,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            )?,
            staging,
            flags_at: (q * kc * 8) as u64,
            exact: match want.exact {
                Some(bytes) => {
                    let old = earlier.and_then(|e| e.exact.as_ref()).map(|(b, _)| b);
                    let keys = buffer(old, "exact keys", bytes, storage | copy)?;
                    Some((keys, (q * kc * 8 + q * 4).next_multiple_of(8) as u64))
                }
                None => None,
            },
            shared_keys: key.shares_mutual_keys(),
            sizes,
        })
    }
}

/// Rows `q0..q0 + rows` of the queries; `from_corpus` when they are the resident corpus
/// itself (a graph).
#[derive(Clone, Copy)]
struct QueryTile {
    q0: usize,
    rows: usize,
    from_corpus: bool,
    /// Part of a symmetric sweep (`TilePlan::symmetric`).
    symmetric: bool,
    /// Part of a bounded sweep (`TilePlan::bounded`): per-row arrays hold every row, as in a
    /// symmetric sweep.
    bounded: bool,
}

impl CorpusSession<'_> {
    /// Records copies of prepared corpus rows `q0..q0 + rows` into the query buffers (the
    /// original rows, for exact keys, are copied when the tile is finished).
    fn copy_corpus_rows(&self, encoder: &mut wgpu::CommandEncoder, q0: usize, rows: usize, b: &TileBuffers) {
        let d = self.corpus.cols();
        let row_bytes = plan::prepared_row_bytes(d);
        for chunk in &self.resident {
            let lo = q0.max(chunk.first);
            let hi = (q0 + rows).min(chunk.first + chunk.rows);
            if lo >= hi {
                continue;
            }
            let (src, dst, n) = ((lo - chunk.first) as u64, (lo - q0) as u64, (hi - lo) as u64);
            encoder.copy_buffer_to_buffer(
                &chunk.vectors,
                src * row_bytes,
                &b.queries.vectors,
                dst * row_bytes,
                n * row_bytes,
            );
            encoder.copy_buffer_to_buffer(&chunk.norms, src * 4, &b.queries.norms, dst * 4, n * 4);
        }
    }

    /// Uploads the corpus rows of `chunk` and prepares them into it: through `raw`, which
    /// keeps the original rows (already there when `raw_written`), or through a temporary
    /// buffer.
    fn prepare_chunk(&self, chunk: &PreparedRows, raw: Option<&wgpu::Buffer>, raw_written: bool) -> Result<()> {
        let gpu = self.gpu;
        let d = self.corpus.cols();
        let (first, rows) = (chunk.first, chunk.rows);
        let started = std::time::Instant::now();
        let temporary;
        let raw = match raw {
            Some(raw) => raw,
            None => {
                temporary = gpu.raw_rows(rows, d)?;
                &temporary
            }
        };
        if !raw_written {
            gpu.write(raw, "corpus", bytemuck::cast_slice(&self.corpus.as_slice()[first * d..(first + rows) * d]))?;
        }
        gpu.add_transfer_time(started);
        let mut params = ParamSlots::default();
        let (gx, gy) = grid(rows, gpu.max_groups);
        let offset = params.push(NormsParams::new(rows, d, self.metric, gx));
        let uniform = gpu.upload_uniform(&params)?;
        let bind = bind_group(
            &gpu.ctx.device,
            &gpu.kernels.norms.layout,
            &uniform,
            &[raw, &self.shift, &chunk.vectors, &chunk.norms],
        );
        let job = Job { step: Step::Norms, offset, groups: (gx, gy), bind: &bind };
        gpu.submit(gpu.ctx.device.create_command_encoder(&Default::default()), &[job])?;
        Ok(())
    }

    /// The kc best fp32 candidates of every query, tile by tile. `queries_are_corpus`: the
    /// queries are the corpus rows themselves, in order (a graph's first round).
    pub fn candidates(
        &mut self,
        queries: MatrixRef<'_>,
        queries_are_corpus: bool,
        exclude: &[u32],
        kc: usize,
        certify: Option<&Certify<'_>>,
        report: &(dyn Fn(usize) + Sync),
    ) -> Result<Candidates> {
        let gpu = self.gpu;
        let nq = queries.rows();
        let d = queries.cols();
        // A graph's queries are the resident corpus rows: copied on the GPU, not uploaded and
        // prepared again; and where all rows' state fits, swept in symmetric blocks.
        let from_corpus = self.plan.resident && queries_are_corpus;
        let gpu_exact = self.raw_corpus.is_some();
        // Ranking on the GPU needs its exact keys.
        let certify = certify.filter(|_| gpu_exact && gpu.kernels.certify.is_some());
        let forced = gpu.symmetric_graphs == Some(true);
        let symmetric = (from_corpus && gpu.symmetric_graphs != Some(false))
            .then(|| plan::plan_symmetric(nq, d, kc, self.plan, gpu.tile_caps, gpu.budget(), forced))
            .flatten();
        // A bounded sweep's rows are finished tile by tile on the GPU, ranked there.
        let bounded_forced = gpu.bounded_sweeps == Some(true);
        let wanted = bounded_forced || (symmetric.is_none() && gpu.bounded_sweeps != Some(false));
        let bounded = (from_corpus && certify.is_some() && wanted)
            .then(|| plan::plan_bounded(nq, d, kc, self.plan, gpu.tile_caps, gpu.budget(), bounded_forced))
            .flatten();
        let plan_with =
            |caps: plan::TileCaps| plan::plan_tiles(nq, d, kc, self.plan, self.corpus.rows(), caps, gpu.budget());
        let tiles = match (bounded, symmetric) {
            (Some(tiles), _) | (None, Some(tiles)) => tiles,
            (None, None) => plan_with(gpu.tile_caps)?,
        };
        // The one-invocation kernel of rows under GROUPED_ROWS sums its own norms.
        if gpu_exact && self.metric == Metric::Cosine && gpu.kernels.refine.is_some() && d >= GROUPED_ROWS {
            let corpus_norms = match self.exact_norms.take() {
                Some((corpus_norms, _)) => corpus_norms,
                None => gpu.upload("corpus norms (f64)", bytemuck::cast_slice(&prepare::row_norms(self.corpus)))?,
            };
            let query_norms = if queries_are_corpus {
                corpus_norms.clone()
            } else {
                gpu.upload("query norms (f64)", bytemuck::cast_slice(&prepare::row_norms(queries)))?
            };
            self.exact_norms = Some((corpus_norms, query_norms));
        }
        let started = std::time::Instant::now();
        let certify_k = certify.map(|c| c.k);
        let key_of = |tiles: TilePlan| {
            let column_tiles = if self.plan.resident {
                self.resident.iter().map(|c| c.rows.div_ceil(tiles.column_tile)).sum::<usize>()
            } else {
                self.plan.chunk_rows.div_ceil(tiles.column_tile)
            };
            TileKey { corpus: (self.corpus.rows(), d), tiles, kc, column_tiles, gpu_exact, certify_k }
        };
        let mut key = key_of(tiles);
        let mut reused = true;
        let cached = gpu.tile_cache.lock().unwrap_or_else(|e| e.into_inner()).take();
        let buffers = match cached {
            Some((cached_key, buffers)) if cached_key == key => buffers,
            Some((_, earlier)) => {
                // A later round has fewer rows and longer lists: in query tiles small enough,
                // it runs in the buffers of the round before. Allocating (and first touching)
                // new ones costs far more than such a round (notes/exactness.md, "Later rounds
                // in the first round's buffers"). The set keeps the sizes it was made with, so
                // the next call of the first round's shape (symmetric sweeps included) finds it
                // as planned.
                let mut query_rows = tiles.query_rows;
                let fewest = query_rows.min(MIN_REUSED_QUERY_ROWS);
                let mut within = earlier.sizes.hold(&TileSizes::of(d, &key)).then_some(key);
                while within.is_none() && !tiles.symmetric && tiles.bounded.is_none() && query_rows >= fewest {
                    let Ok(capped) = plan_with(plan::TileCaps { query: query_rows, ..gpu.tile_caps }) else {
                        break;
                    };
                    let candidate = key_of(capped);
                    if earlier.sizes.hold(&TileSizes::of(d, &candidate)) {
                        within = Some(candidate);
                        break;
                    }
                    query_rows /= 2;
                }
                match within {
                    Some(within) => {
                        key = within;
                        TileBuffers::new(gpu, d, key, Some(&earlier))?
                    }
                    None => {
                        // Freed before the new set is allocated.
                        drop(earlier);
                        reused = false;
                        TileBuffers::new(gpu, d, key, None)?
                    }
                }
            }
            None => {
                reused = false;
                TileBuffers::new(gpu, d, key, None)?
            }
        };
        crate::trace::mark(|| {
            let how = if reused { "reused" } else { "allocated" };
            format!("tile buffers {how}: query tiles of {} rows, {kc} candidates", key.tiles.query_rows)
        });
        let tiles = key.tiles;
        let q = tiles.query_rows;
        // Ranked rows need only k answers each on the host. Every query tile overwrites its
        // rows of these arrays: zeroed pages cost nothing until then, where sentinels written
        // first took seconds at large k (notes/exactness.md).
        let lists = if certify.is_some() { 0 } else { nq * kc };
        let mut out = Candidates {
            exact: (gpu_exact && certify.is_none()).then(|| zeroed_answers(lists)),
            kc,
            keys: zeroed_answers(lists),
            ids: zeroed_answers(lists),
            failed: vec![false; nq],
            incomplete: if tiles.symmetric || tiles.bounded.is_some() { vec![false; nq] } else { Vec::new() },
            shortlisted: 0,
            buffers_allocated: !reused,
            published: 0,
            symmetric: tiles.symmetric,
            bounded: tiles.bounded.is_some(),
            shared_keys: buffers.shared_keys,
            ranked: certify.map(|c| {
                let (ids, distances) = c.answers.take(nq * c.k);
                BackendRanked { k: c.k, ids, distances, status: vec![1; nq] }
            }),
        };
        if let Some(p) = &gpu.profiler {
            p.times.lock().unwrap_or_else(|e| e.into_inner()).allocation += started.elapsed().as_secs_f64();
        }
        let query_tiles: Vec<QueryTile> = (0..nq)
            .step_by(q)
            .map(|q0| QueryTile {
                q0,
                rows: q.min(nq - q0),
                from_corpus,
                symmetric: tiles.symmetric,
                bounded: tiles.bounded.is_some(),
            })
            .collect();
        if tiles.symmetric {
            // Every row's list takes keys from later tiles too: all tiles are swept before
            // any is finished.
            self.reset_rows(&buffers, exclude)?;
            for tile in &query_tiles {
                self.sweep(queries, *tile, &[], kc, tiles, &buffers, None)?;
                // No row is final before the last tile, but the sweep is most of the work
                // (tile I costs in proportion to its last row): progress counts it as 90%.
                let swept = (tile.q0 + tile.rows) as f64 / nq as f64;
                report((SWEEP_SHARE * swept * swept * nq as f64) as usize);
            }
            if buffers.shared_keys {
                self.sort_lists_by_index(kc, &buffers)?;
            }
        }
        if tiles.bounded.is_some() {
            // Every row's bound and empty list before the first tile appends to later rows.
            self.reset_rows(&buffers, exclude)?;
            self.sample_bounds(tiles, &buffers)?;
        }
        // What finishing a tile reports: its last row, or in a symmetric sweep the rest.
        let finished = |done: usize| match tiles.symmetric {
            true => ((SWEEP_SHARE + (1.0 - SWEEP_SHARE) * done as f64 / nq as f64) * nq as f64) as usize,
            false => done,
        };
        // Tile t's results go to staging buffer t % slots. With several, tile t is submitted
        // before the host reads an earlier tile's results, whose copy out of mapped memory then
        // runs on another thread beside the GPU; the host waits only for tiles `slots - 1`
        // behind the last one finished. Ranked answers of tile t - 1 reach their staging buffer
        // during tile t's sweep, which publishes them (`distance_publish.wgsl`); only the last
        // tile's are copied after its ranking. Each reader writes its tile's part of `out`
        // (`TileOut`), so that up to READERS tiles are copied out at once.
        let slots = buffers.staging.len();
        let publishes =
            gpu.kernels.publishes() && slots > 1 && !tiles.symmetric && certify.is_some() && buffers.certify.is_some();
        let mut parts: Vec<Option<TileOut<'_>>> =
            TileOut::split(&mut out, &query_tiles).into_iter().map(Some).collect();
        let shortlisted = std::thread::scope(|scope| -> Result<usize> {
            type Reader<'s> = std::thread::ScopedJoinHandle<'s, Result<(usize, usize)>>;
            // Tiles being read, oldest first, and their readers.
            let mut reading: VecDeque<(usize, Reader<'_>)> = VecDeque::new();
            // Finished tiles not yet being read, oldest first: the tile, its results, and their
            // mapping (requested once they are on their way: after the sweep that publishes them).
            let mut unread: VecDeque<(usize, TileRead, Option<Mapping>)> = VecDeque::new();
            let mut shortlisted = 0;
            let collect = |reader: Reader<'_>, shortlisted: &mut usize| -> Result<()> {
                let (done, rows_shortlisted) = join(reader)?;
                report(finished(done));
                *shortlisted += rows_shortlisted;
                Ok(())
            };
            let tile_ranked = certify.and_then(|c| c.tile_ranked);
            let start_reader = |(t, read, mapping): (usize, TileRead, Option<Mapping>), part| -> Result<_> {
                let staging = &buffers.staging[t % slots];
                let started = std::time::Instant::now();
                // Waited for here, not on the reader's thread: wgpu 30 cannot be polled from
                // two threads at once (an assertion in its poll fails).
                mapping.unwrap_or_else(|| Mapping::request(staging, None)).wait(gpu)?;
                gpu.add_transfer_time(started);
                crate::trace::mark(|| format!("rows {}..{} mapped", read.q0, read.q0 + read.rows));
                let b = &buffers;
                Ok(scope.spawn(move || {
                    let rows_shortlisted = read.copy_out(gpu, b, staging, part, tile_ranked)?;
                    crate::trace::mark(|| format!("rows {}..{} copied out", read.q0, read.q0 + read.rows));
                    Ok((read.q0 + read.rows, rows_shortlisted))
                }))
            };
            // Starts reading the oldest unread tiles no later than `upto`, while fewer than
            // READERS run.
            let start_oldest = |upto: usize,
                                reading: &mut VecDeque<(usize, _)>,
                                unread: &mut VecDeque<(usize, TileRead, Option<Mapping>)>,
                                parts: &mut Vec<Option<_>>|
             -> Result<()> {
                while reading.len() < READERS && unread.front().is_some_and(|&(t, _, _)| t <= upto) {
                    let tile = unread.pop_front().expect("the front tile was just seen");
                    let part = parts[tile.0].take().expect("each tile is read once");
                    reading.push_back((tile.0, start_reader(tile, part)?));
                }
                Ok(())
            };
            // Reads every finished tile up to `last`.
            let read_through = |last: usize,
                                reading: &mut VecDeque<(usize, _)>,
                                unread: &mut VecDeque<(usize, TileRead, Option<Mapping>)>,
                                parts: &mut Vec<Option<_>>,
                                shortlisted: &mut usize|
             -> Result<()> {
                loop {
                    start_oldest(last, reading, unread, parts)?;
                    match reading.front() {
                        Some(&(t, _)) if t <= last => {
                            let (_, reader) = reading.pop_front().expect("the front reader was just seen");
                            collect(reader, shortlisted)?;
                        }
                        _ => return Ok(()),
                    }
                }
            };
            for (t, &tile) in query_tiles.iter().enumerate() {
                let QueryTile { q0, rows, .. } = tile;
                if !tiles.symmetric {
                    // Queued before the host reads earlier tiles, so that the GPU sweeps this
                    // tile meanwhile; it publishes the tile before, whose mapping then follows.
                    let unpublished = unread.back().filter(|(_, _, mapping)| mapping.is_none());
                    let publish = unpublished.map(|&(before, _, _)| &buffers.staging[before % slots]);
                    let index = match tiles.bounded {
                        Some(_) => self.sweep_bounded(tile, kc, tiles, &buffers, publish)?,
                        None => self.sweep(queries, tile, &exclude[q0..q0 + rows], kc, tiles, &buffers, publish)?,
                    };
                    if let Some((before, _, mapping @ None)) = unread.back_mut() {
                        *mapping = Some(Mapping::request(&buffers.staging[*before % slots], Some(index)));
                    }
                }
                // The tile that last used this tile's staging buffer must have been read.
                // The reader of the tile `slots - 1` behind starts first, beside the one being
                // waited for: at large k the readers' copy-outs pace the loop (notes/select.md,
                // "Two readers at once").
                if let Some(behind) = (t + 1).checked_sub(slots) {
                    start_oldest(behind, &mut reading, &mut unread, &mut parts)?;
                }
                if let Some(last) = t.checked_sub(slots) {
                    read_through(last, &mut reading, &mut unread, &mut parts, &mut shortlisted)?;
                }
                let published_later = publishes && t + 1 < query_tiles.len();
                let staging = &buffers.staging[t % slots];
                let (read, mapping) = self.finish(tile, kc, certify, &buffers, staging, published_later)?;
                unread.push_back((t, read, mapping));
                // Start reading the tile `slots - 1` behind (with one read-back buffer, this
                // tile), whose results are ready or nearly: the host then waits on the GPU only
                // that far behind it.
                if let Some(behind) = (t + 1).checked_sub(slots) {
                    start_oldest(behind, &mut reading, &mut unread, &mut parts)?;
                }
            }
            read_through(usize::MAX, &mut reading, &mut unread, &mut parts, &mut shortlisted)?;
            Ok(shortlisted)
        })?;
        out.shortlisted = shortlisted;
        // Every tile's answers but the last one's.
        out.published = if publishes { nq - query_tiles.last().map_or(0, |t| t.rows) } else { 0 };
        *gpu.tile_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, buffers));
        Ok(out)
    }

    /// Starts the per-row state (of a query tile, or of every row in a symmetric sweep):
    /// each row's exclusion and no bound yet, no flags, empty shortlists.
    fn reset_rows(&self, b: &TileBuffers, exclude: &[u32]) -> Result<()> {
        let gpu = self.gpu;
        let started = std::time::Instant::now();
        let row_state: Vec<[u32; 2]> = exclude.iter().map(|&e| [e, f32::INFINITY.to_bits()]).collect();
        gpu.ctx.queue.write_buffer(&b.row_state, 0, bytemuck::cast_slice(&row_state));
        let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(&b.failed, 0, None);
        encoder.clear_buffer(&b.shortlist_len, 0, None);
        gpu.ctx.queue.submit([encoder.finish()]);
        gpu.add_transfer_time(started);
        Ok(())
    }

    /// The select kernels' bind group with the per-row arrays bound from state row `base`.
    fn select_bind(&self, b: &TileBuffers, base: usize, kc: usize, shortlist_cap: usize) -> wgpu::BindGroup {
        let gpu = self.gpu;
        let base = base as u64;
        bind_group_at(
            &gpu.ctx.device,
            &gpu.kernels.select.rows.layout,
            &b.uniform,
            &[
                (&b.dist, 0),
                (&b.aux[0], 0),
                (&b.aux[1], 0),
                (&b.aux[2], 0),
                (&b.aux[3], 0),
                (&b.candidates, base * kc as u64 * 8),
                (&b.failed, base * 4),
                (&b.row_state, base * 8),
                (&b.shortlist_len, base * 4),
                (&b.shortlist, base * shortlist_cap as u64 * 8),
            ],
        )
    }

    /// Runs one query tile's distance tiles, selections and merges on the GPU. In a
    /// symmetric sweep the tile meets the corpus rows up to its own last row, and the column
    /// rows of earlier tiles merge what it appended to their shortlists. `exclude`: the
    /// tile's rows' exclusions, when its per-row state is set here (not in a symmetric
    /// sweep, which sets every row's at once). `publish`: the read-back buffer into which its
    /// first distance dispatch copies the ranked answers of the query tile before
    /// (`distance_publish.wgsl`). Returns the submission that does so.
    #[allow(clippy::too_many_arguments)]
    fn sweep(
        &self,
        queries: MatrixRef<'_>,
        tile: QueryTile,
        exclude: &[u32],
        kc: usize,
        tiles: TilePlan,
        b: &TileBuffers,
        publish: Option<&wgpu::Buffer>,
    ) -> Result<wgpu::SubmissionIndex> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let d = queries.cols();
        let QueryTile { q0, rows, from_corpus, symmetric, .. } = tile;
        let base = if symmetric { q0 } else { 0 };
        let cap = tiles.shortlist_cap;
        if !symmetric {
            if !from_corpus {
                let started = std::time::Instant::now();
                gpu.ctx.queue.write_buffer(
                    &b.raw_queries,
                    0,
                    bytemuck::cast_slice(&queries.as_slice()[q0 * d..(q0 + rows) * d]),
                );
                gpu.add_transfer_time(started);
            }
            self.reset_rows(b, exclude)?;
        }

        let select_bind = self.select_bind(b, base, kc, cap);
        let norms_bind = bind_group(
            device,
            &gpu.kernels.norms.layout,
            &b.uniform,
            &[&b.raw_queries, &self.shift, &b.queries.vectors, &b.queries.norms],
        );
        debug_assert!(
            publish.is_none() || b.certify.is_some() && gpu.kernels.distance_publish.is_some(),
            "published answers are ranked ones"
        );
        let distance_bind = |chunk: &PreparedRows| {
            bind_group(device, &gpu.kernels.distance.layout, &b.uniform, &distance_buffers(b, chunk))
        };
        // A symmetric sweep stops at the tile's last row: later rows meet this tile as columns.
        let columns_end = if symmetric { q0 + rows } else { self.corpus.rows() };
        // Column rows that merge this tile's keys: the rows of earlier tiles, a query tile's
        // worth at a time (the auxiliary arrays hold that many rows).
        let column_merges = |c0: usize, cols: usize| -> Vec<(usize, usize)> {
            if !symmetric {
                return Vec::new();
            }
            let end = (c0 + cols).min(q0);
            (c0..end).step_by(tiles.query_rows).map(|r0| (r0, tiles.query_rows.min(end - r0))).collect()
        };

        // A resident corpus goes in one submission; a streamed one a chunk at a time.
        let starts: Vec<usize> = (0..self.corpus.rows()).step_by(self.plan.chunk_rows).collect();
        let batches: Vec<Vec<usize>> = if self.plan.resident {
            vec![(0..starts.len()).collect()]
        } else {
            (0..starts.len()).map(|i| vec![i]).collect()
        };
        let mut first_tile = true;
        let mut publishing = None;
        for (batch_no, batch) in batches.iter().enumerate() {
            let streamed: Vec<PreparedRows> = if self.plan.resident {
                Vec::new()
            } else {
                batch
                    .iter()
                    .map(|&c| {
                        let rows = self.plan.chunk_rows.min(self.corpus.rows() - starts[c]);
                        let chunk = gpu.prepared_rows(starts[c], rows, d)?;
                        self.prepare_chunk(&chunk, None, false)?;
                        Ok(chunk)
                    })
                    .collect::<Result<_>>()?
            };
            let chunks: Vec<&PreparedRows> = if self.plan.resident {
                batch.iter().map(|&c| &self.resident[c]).collect()
            } else {
                streamed.iter().collect()
            };
            let distance_binds: Vec<wgpu::BindGroup> = chunks.iter().map(|c| distance_bind(c)).collect();
            // Only the sweep's first distance tile publishes.
            let publishing_bind =
                publish.filter(|_| first_tile).and_then(|read_back| self.publishing(b, chunks[0], read_back));
            // Distance tiles of each chunk: (first row in the chunk, rows).
            let column_tiles: Vec<Vec<(usize, usize)>> = chunks
                .iter()
                .map(|chunk| {
                    let end = chunk.rows.min(columns_end.saturating_sub(chunk.first));
                    (0..end).step_by(tiles.column_tile).map(|c0| (c0, tiles.column_tile.min(end - c0))).collect()
                })
                .collect();
            let column_binds: Vec<wgpu::BindGroup> = chunks
                .iter()
                .zip(&column_tiles)
                .flat_map(|(chunk, cts)| cts.iter().flat_map(|&(c0, cols)| column_merges(chunk.first + c0, cols)))
                .map(|(r0, _)| self.select_bind(b, r0, kc, cap))
                .collect();
            let mut column_binds = column_binds.iter();

            let mut params = ParamSlots::default();
            let mut jobs = Vec::new();
            if batch_no == 0 && !from_corpus {
                let (gx, gy) = grid(rows, gpu.max_groups);
                let offset = params.push(NormsParams::new(rows, d, self.metric, gx));
                jobs.push(Job { step: Step::Norms, offset, groups: (gx, gy), bind: &norms_bind });
            }
            // Long lists merge with a workgroup per row; short ones with a subgroup each.
            let per_subgroup =
                gpu.kernels.select.rows_per_subgroup_group(&gpu.ctx.info).filter(|_| kc <= WIDE_MERGE_KC);
            let merge_step = if per_subgroup.is_some() { Step::Merge } else { Step::MergeWide };
            let merge_groups = |rows: usize| match per_subgroup {
                Some(per_group) => (grid(rows.div_ceil(per_group as usize), gpu.max_groups), per_group),
                None => (grid(rows, gpu.max_groups), 0),
            };
            for ((chunk, dbind), cts) in chunks.iter().zip(&distance_binds).zip(&column_tiles) {
                for &(c0, cols) in cts {
                    let col_base = (chunk.first + c0) as u32;
                    // From the second tile on, rows have a bound and keys under it go to
                    // their shortlists.
                    let shortlist_cap = if first_tile { 0 } else { cap as u32 };
                    let tile_count = gemm_tiles(rows, cols);
                    let publishing = publishing_bind.as_ref().filter(|_| first_tile).map(|(bind, _)| bind);
                    let groups = if publishing.is_some() { publishing_groups(tile_count) } else { tile_count };
                    let (gx, gy) = grid(groups, gpu.max_groups);
                    let offset = params.push(DistanceParams {
                        q_rows: rows as u32,
                        c_rows: cols as u32,
                        dim4: d.div_ceil(4) as u32,
                        c_offset: c0 as u32,
                        col_base,
                        out_stride: tiles.dist_stride as u32,
                        mode: metric_modes(self.metric).1,
                        groups_x: gx,
                        shortlist_cap,
                        row_base: base as u32,
                        column_end: if symmetric { q0 as u32 } else { 0 },
                        column_cap: cap as u32,
                        publish_len: publishing_bind.as_ref().filter(|_| first_tile).map_or(0, |&(_, len)| len),
                        ..Default::default()
                    });
                    let job = match publishing {
                        Some(bind) => Job { step: Step::DistancePublishing, offset, groups: (gx, gy), bind },
                        None => Job { step: Step::Distance, offset, groups: (gx, gy), bind: dbind },
                    };
                    jobs.push(job);
                    let (sx, sy) = grid(rows, gpu.max_groups);
                    // Running lists of all state rows first, then the latest tile's lists.
                    let tile_region = ((b.state_rows - base) * kc) as u32;
                    let select = SelectParams {
                        rows: rows as u32,
                        need: kc as u32,
                        scratch_stride: tiles.scratch_stride as u32,
                        out_stride: kc as u32,
                        groups_x: sx,
                        shortlist_cap,
                        ..Default::default()
                    };
                    // The tile's kc best: straight into the running lists for the first tile,
                    // else into the tile region.
                    let offset = params.push(SelectParams {
                        len: cols as u32,
                        in_stride: tiles.dist_stride as u32,
                        col_base,
                        out_offset: if first_tile { 0 } else { tile_region },
                        dense: 1,
                        ..select
                    });
                    jobs.push(Job { step: Step::SelectRows, offset, groups: (sx, sy), bind: &select_bind });
                    // Merge: the kc best of the running list and the tile's list.
                    let merge = SelectParams { len: 2 * kc as u32, in_stride: tile_region, ..select };
                    if !first_tile {
                        let ((mx, my), per_group) = merge_groups(rows);
                        let offset = params.push(SelectParams { groups_x: mx, rows_per_group: per_group, ..merge });
                        jobs.push(Job { step: merge_step, offset, groups: (mx, my), bind: &select_bind });
                    }
                    // The column rows' shortlists, with no tile list to fall back on.
                    for (_, merge_rows) in column_merges(col_base as usize, cols) {
                        let ((mx, my), per_group) = merge_groups(merge_rows);
                        let offset = params.push(SelectParams {
                            rows: merge_rows as u32,
                            in_stride: NONE,
                            shortlist_cap: cap as u32,
                            groups_x: mx,
                            rows_per_group: per_group,
                            ..merge
                        });
                        let bind = column_binds.next().expect("a bind group per column merge");
                        jobs.push(Job { step: merge_step, offset, groups: (mx, my), bind });
                    }
                    first_tile = false;
                }
            }
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            let mut encoder = device.create_command_encoder(&Default::default());
            if batch_no == 0 && from_corpus {
                self.copy_corpus_rows(&mut encoder, q0, rows, b);
            }
            let submitted = gpu.submit(encoder, &jobs)?;
            crate::trace::mark(|| format!("rows {q0}..{} swept against chunk {batch_no} (submitted)", q0 + rows));
            publishing.get_or_insert(submitted.index.clone());
            if !self.plan.resident {
                // A streamed chunk is freed when its tiles have run: one in memory at a time.
                gpu.completion(submitted)?;
            }
        }
        publishing.ok_or_else(|| crate::error::Error::Gpu("a corpus of no rows has nothing to sweep".into()))
    }

    /// The publishing distance kernel's bind group against `chunk`, with the ranked answers it
    /// copies into `read_back` (`distance_publish.wgsl`), and how many vec4s it copies; `None`
    /// where answers are not ranked on the GPU or the adapter cannot publish.
    fn publishing(
        &self,
        b: &TileBuffers,
        chunk: &PreparedRows,
        read_back: &wgpu::Buffer,
    ) -> Option<(wgpu::BindGroup, u32)> {
        let gpu = self.gpu;
        let (cb, kernel) = (b.certify.as_ref()?, gpu.kernels.distance_publish.as_ref()?);
        let buffers = [distance_buffers(b, chunk).as_slice(), &[&cb.answers, read_back]].concat();
        // In whole vec4s: the layout's parts start at multiples of 256 bytes.
        Some((bind_group(&gpu.ctx.device, &kernel.layout, &b.uniform, &buffers), (cb.flags_at / 16) as u32))
    }

    /// Sorts every row's list by index (`sort_by_index`), for exact keys shared by the two
    /// rows of a mutual pair (`TileKey::shares_mutual_keys`).
    fn sort_lists_by_index(&self, kc: usize, b: &TileBuffers) -> Result<()> {
        let gpu = self.gpu;
        let (Some(cb), Some(kernels), Some((keys, _))) = (&b.certify, &gpu.kernels.certify, &b.exact) else {
            unreachable!("shared keys are planned only where rows are ranked on the GPU")
        };
        let rows = b.state_rows;
        let (gx, gy) = grid(rows, gpu.max_groups);
        let mut params = ParamSlots::default();
        let offset = params.push(CertifyParams {
            rows: rows as u32,
            kc: kc as u32,
            k: cb.k as u32,
            corpus_rows: self.corpus.rows() as u32,
            groups_x: gx,
            floor_zero: 0,
            reported_as: reported_as(self.metric),
            _pad: 0,
        });
        let whole = |buffer| wgpu::BufferBinding { buffer, offset: 0, size: None };
        let [ids, distances, status] = cb.bindings();
        let bind = bind_group_ranges(
            &gpu.ctx.device,
            &kernels.rows.layout,
            &b.uniform,
            &[
                whole(&b.candidates),
                whole(keys),
                whole(&b.row_state),
                whole(&cb.error_bounds),
                ids,
                distances,
                status,
                whole(&cb.run_stats),
            ],
        );
        gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
        let job = Job { step: Step::SortByIndex, offset, groups: (gx, gy), bind: &bind };
        gpu.submit(gpu.ctx.device.create_command_encoder(&Default::default()), &[job])?;
        Ok(())
    }

    /// Finishes one swept query tile: exact keys and certificates where the GPU computes them,
    /// then copies its results into `staging`, whose mapping for the host is requested. Ranked
    /// answers that the next query tile's sweep publishes (`published_later`) are left in GPU
    /// memory: only the failure flags are copied, and the mapping waits for that sweep.
    fn finish(
        &self,
        tile: QueryTile,
        kc: usize,
        certify: Option<&Certify<'_>>,
        b: &TileBuffers,
        staging: &wgpu::Buffer,
        published_later: bool,
    ) -> Result<(TileRead, Option<Mapping>)> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let d = self.corpus.cols();
        let QueryTile { q0, rows, from_corpus, symmetric, bounded } = tile;
        let base = if symmetric || bounded { q0 } else { 0 } as u64;
        let lists_at = base * kc as u64 * 8;
        let mutual = b.shared_keys;
        if let (Some((keys, _)), Some(raw_corpus), Some(refine)) = (&b.exact, &self.raw_corpus, &gpu.kernels.refine) {
            let mut encoder = device.create_command_encoder(&Default::default());
            if from_corpus {
                let raw_row = (d * 4) as u64;
                encoder.copy_buffer_to_buffer(
                    raw_corpus,
                    q0 as u64 * raw_row,
                    &b.raw_queries,
                    0,
                    rows as u64 * raw_row,
                );
            }
            let (step, groups, group) = exact_keys_dispatch(d, rows, kc);
            let (gx, gy) = grid(groups, gpu.max_groups);
            let mut params = ParamSlots::default();
            let refine_params = RefineParams {
                rows: rows as u32,
                kc: kc as u32,
                dim: d as u32,
                mode: refine_mode(self.metric),
                groups_x: gx,
                row_base: if mutual { q0 as u32 } else { 0 },
                mutual: mutual as u32,
                group: group as u32,
                norm_base: q0 as u32,
            };
            let offset = params.push(refine_params);
            // Metrics other than cosine read no norms: the corpus rows stand in for them.
            let (query_norms, corpus_norms) = match &self.exact_norms {
                Some((corpus_norms, query_norms)) => (query_norms, corpus_norms),
                None => (raw_corpus, raw_corpus),
            };
            // Shared keys read other rows' lists and keys: every row's are bound.
            let bind = bind_group_at(
                device,
                &refine.narrow.layout,
                &b.uniform,
                &[
                    (&b.raw_queries, 0),
                    (raw_corpus, 0),
                    (&b.candidates, if mutual { 0 } else { lists_at }),
                    (keys, 0),
                    (query_norms, 0),
                    (corpus_norms, 0),
                ],
            );
            let mut jobs = vec![Job { step, offset, groups: (gx, gy), bind: &bind }];
            if mutual {
                debug_assert!(
                    matches!(step, Step::RefineWide | Step::RefineWide4),
                    "shared keys need the wide kernels"
                );
                let (cx, cy) = grid((rows * kc).div_ceil(64), gpu.max_groups);
                let copy_offset = params.push(RefineParams { groups_x: cx, ..refine_params });
                jobs.push(Job { step: Step::CopyMutualKeys, offset: copy_offset, groups: (cx, cy), bind: &bind });
            }
            let keys_at = if mutual { base * kc as u64 * 8 } else { 0 };
            let certify_bind;
            if let (Some(cb), Some(kernel), Some(c)) = (&b.certify, &gpu.kernels.certify, certify) {
                gpu.ctx.queue.write_buffer(
                    &cb.error_bounds,
                    0,
                    bytemuck::cast_slice(&(c.error_bounds)()[q0..q0 + rows]),
                );
                let (gx, gy) = grid(rows, gpu.max_groups);
                let certify_params = CertifyParams {
                    rows: rows as u32,
                    kc: kc as u32,
                    k: cb.k as u32,
                    corpus_rows: self.corpus.rows() as u32,
                    groups_x: gx,
                    floor_zero: c.floor_zero as u32,
                    reported_as: reported_as(self.metric),
                    _pad: 0,
                };
                let offset = params.push(certify_params);
                let whole = |buffer, offset| wgpu::BufferBinding { buffer, offset, size: None };
                let [ids, distances, status] = cb.bindings();
                certify_bind = bind_group_ranges(
                    device,
                    &kernel.rows.layout,
                    &b.uniform,
                    &[
                        whole(&b.candidates, lists_at),
                        whole(keys, keys_at),
                        whole(&b.row_state, base * 8),
                        whole(&cb.error_bounds, 0),
                        ids,
                        distances,
                        status,
                        whole(&cb.run_stats, 0),
                    ],
                );
                if kc <= MAX_CERTIFY_KC {
                    jobs.push(Job { step: Step::Certify, offset, groups: (gx, gy), bind: &certify_bind });
                } else {
                    let (sx, sy) = grid(rows * kc.div_ceil(MAX_CERTIFY_KC), gpu.max_groups);
                    let sort_offset = params.push(CertifyParams { groups_x: sx, ..certify_params });
                    jobs.push(Job { step: Step::SortRuns, offset: sort_offset, groups: (sx, sy), bind: &certify_bind });
                    jobs.push(Job { step: Step::CertifyRuns, offset, groups: (gx, gy), bind: &certify_bind });
                }
            }
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            gpu.submit(encoder, &jobs)?;
            crate::trace::mark(|| format!("rows {q0}..{}: exact keys, ranking (submitted)", q0 + rows));
        }

        let started = std::time::Instant::now();
        let mut encoder = device.create_command_encoder(&Default::default());
        let flags_at = base * 4;
        let ranked = b.certify.as_ref().filter(|_| certify.is_some());
        let read = if let Some(cb) = ranked {
            // Only the ranked answers, the certificates and the failure flags come back.
            if !published_later {
                encoder.copy_buffer_to_buffer(&cb.answers, 0, staging, 0, cb.flags_at);
            }
            encoder.copy_buffer_to_buffer(&b.failed, flags_at, staging, cb.flags_at, (rows * 4) as u64);
            TileRead { q0, rows, kc, ranked: true }
        } else {
            // The running lists, the failure flags and the exact keys.
            let pair_bytes = (rows * kc * 8) as u64;
            encoder.copy_buffer_to_buffer(&b.candidates, lists_at, staging, 0, pair_bytes);
            encoder.copy_buffer_to_buffer(&b.failed, flags_at, staging, b.flags_at, (rows * 4) as u64);
            if let Some((keys, at)) = &b.exact {
                encoder.copy_buffer_to_buffer(keys, 0, staging, *at, pair_bytes);
            }
            TileRead { q0, rows, kc, ranked: false }
        };
        let index = gpu.ctx.queue.submit([encoder.finish()]);
        gpu.add_transfer_time(started);
        debug_assert!(!published_later || ranked.is_some(), "only ranked answers are published");
        Ok((read, (!published_later).then(|| Mapping::request(staging, Some(index)))))
    }
}

/// A query tile's results in a mapped staging buffer, to be copied into the candidates.
struct TileRead {
    q0: usize,
    rows: usize,
    kc: usize,
    /// Ranked answers (`CertifyBuffers`), else running lists and exact keys.
    ranked: bool,
}

impl TileRead {
    /// Copies the tile's results out of `staging` into its part of the candidates and unmaps
    /// it, then hands ranked rows to `tile_ranked`. Returns how many of its rows took a
    /// shortlist.
    fn copy_out(
        &self,
        gpu: &GpuEngine,
        b: &TileBuffers,
        staging: &wgpu::Buffer,
        mut out: TileOut<'_>,
        tile_ranked: Option<&TileRanked<'_>>,
    ) -> Result<usize> {
        let started = std::time::Instant::now();
        let TileRead { rows, kc, ranked, .. } = *self;
        let mut shortlisted = 0;
        read_mapped(staging, |bytes| {
            let at = |offset: u64, len: usize| &bytes[offset as usize..offset as usize + len];
            let flags_at = match (&b.certify, out.ranked.as_mut()) {
                (Some(cb), Some((out_ids, out_distances, out_status))) if ranked => {
                    // Straight into the output's form, on every core: the GPU reported the
                    // distances; rows of one distance are listed by index here.
                    let k = cb.k;
                    let ids: &[u32] = bytemuck::cast_slice(at(0, rows * k * 4));
                    let distances: &[f32] = bytemuck::cast_slice(at(cb.distances_at, rows * k * 4));
                    out_status.copy_from_slice(bytemuck::cast_slice(at(cb.status_at, rows * 4)));
                    out_ids
                        .par_chunks_mut(k)
                        .zip(out_distances.par_chunks_mut(k))
                        .zip(ids.par_chunks(k).zip(distances.par_chunks(k)))
                        .zip(out_status.par_iter())
                        .for_each(|(((out_ids, out_dists), (ids, distances)), &status)| {
                            let m = found(status, k).unwrap_or(0);
                            let (ids, distances) = (&ids[..m], &distances[..m]);
                            // Rows with equal distances are ordered in a buffer of the thread's
                            // own: the streaming stores leave the output out of the cache.
                            if distances.windows(2).any(|w| w[0].to_bits() == w[1].to_bits()) {
                                TIED_ROW.with_borrow_mut(|row| {
                                    row.clear();
                                    row.extend_from_slice(ids);
                                    order_ties_by_index(row, distances);
                                    stream_copy(&mut out_ids[..m], row);
                                });
                            } else {
                                stream_copy(&mut out_ids[..m], ids);
                            }
                            stream_copy(&mut out_dists[..m], distances);
                        });
                    cb.flags_at
                }
                _ => {
                    let pairs: &[[u32; 2]] = bytemuck::cast_slice(at(0, rows * kc * 8));
                    // Mapped memory is uncached on some systems: unpack it once, on every core.
                    pairs.par_iter().zip(out.keys.par_iter_mut()).zip(out.ids.par_iter_mut()).for_each(
                        |((pair, key), id)| {
                            *key = f32::from_bits(pair[0]);
                            *id = pair[1];
                        },
                    );
                    if let (Some((_, keys_at)), Some(exact)) = (&b.exact, out.exact) {
                        parallel_copy(exact, bytemuck::cast_slice(at(*keys_at, rows * kc * 8)));
                    }
                    b.flags_at
                }
            };
            // Bit 0: unfinished; bit 1: took a shortlist; bit 2: a column-side shortlist
            // overflowed (symmetric sweep) or a list came out short or overflowed (bounded).
            let flags: &[u32] = bytemuck::cast_slice(at(flags_at, rows * 4));
            for (i, &flag) in flags.iter().enumerate() {
                out.failed[i] = flag & 1 != 0;
                shortlisted += (flag >> 1 & 1) as usize;
            }
            if let Some(incomplete) = out.incomplete {
                for (incomplete, &flag) in incomplete.iter_mut().zip(flags) {
                    *incomplete = flag & 4 != 0;
                }
            }
        })?;
        gpu.add_transfer_time(started);
        if let (Some(hand_over), Some((ids, distances, _)), true) = (tile_ranked, out.ranked.as_mut(), ranked) {
            hand_over(self.q0, ids, distances)?;
        }
        Ok(shortlisted)
    }
}

/// A query tile's part of the candidates: what its reader writes, so that readers of
/// different tiles can run at once.
struct TileOut<'a> {
    /// Ranked answers: ids and distances (k a row), statuses.
    ranked: Option<(&'a mut [u32], &'a mut [f32], &'a mut [u32])>,
    /// Otherwise the running lists' keys and ids (kc a row) and, from the GPU, exact keys.
    keys: &'a mut [f32],
    ids: &'a mut [u32],
    exact: Option<&'a mut [f64]>,
    failed: &'a mut [bool],
    /// Where the candidates track rows that may have missed keys.
    incomplete: Option<&'a mut [bool]>,
}

impl<'a> TileOut<'a> {
    /// `out` cut at the tiles' boundaries, tile by tile.
    fn split(out: &'a mut Candidates, tiles: &[QueryTile]) -> Vec<TileOut<'a>> {
        fn cut<'s, T>(rest: &mut &'s mut [T], len: usize) -> &'s mut [T] {
            let (part, later) = std::mem::take(rest).split_at_mut(len);
            *rest = later;
            part
        }
        let kc = out.kc;
        let (mut keys, mut ids, mut failed) = (&mut out.keys[..], &mut out.ids[..], &mut out.failed[..]);
        let mut exact = out.exact.as_deref_mut();
        let mut incomplete = (!out.incomplete.is_empty()).then_some(&mut out.incomplete[..]);
        let mut ranked = out.ranked.as_mut().map(|r| (r.k, &mut r.ids[..], &mut r.distances[..], &mut r.status[..]));
        tiles
            .iter()
            .map(|t| {
                // Ranked rounds keep no lists on the host.
                let lists = if keys.is_empty() { 0 } else { t.rows * kc };
                TileOut {
                    ranked: ranked.as_mut().map(|(k, ids, distances, status)| {
                        (cut(ids, t.rows * *k), cut(distances, t.rows * *k), cut(status, t.rows))
                    }),
                    keys: cut(&mut keys, lists),
                    ids: cut(&mut ids, lists),
                    exact: exact.as_mut().map(|exact| cut(exact, lists)),
                    failed: cut(&mut failed, t.rows),
                    incomplete: incomplete.as_mut().map(|incomplete| cut(incomplete, t.rows)),
                }
            })
            .collect()
    }
}

/// The distance kernel's storage buffers for query tile buffers `b` against `chunk`.
fn distance_buffers<'a>(b: &'a TileBuffers, chunk: &'a PreparedRows) -> [&'a wgpu::Buffer; 8] {
    [
        &b.queries.vectors,
        &chunk.vectors,
        &b.queries.norms,
        &chunk.norms,
        &b.row_state,
        &b.dist,
        &b.shortlist_len,
        &b.shortlist,
    ]
}

/// Waits for a query tile's reader thread.
fn join<T>(reader: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    reader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Copies out of mapped memory on every core: a single core reads uncached mapped memory too
/// slowly to keep up with the GPU (notes/exactness.md).
fn parallel_copy<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) {
    dst.par_chunks_mut(1 << 16).zip(src.par_chunks(1 << 16)).for_each(|(d, s)| d.copy_from_slice(s));
}
