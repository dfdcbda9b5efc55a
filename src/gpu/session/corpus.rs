//! A corpus on the GPU: its buffers (staged ahead of a call, cached for the next corpus of its
//! shape), its rows prepared there, and those rows copied into query tiles.

use super::tile_buffers::TileBuffers;
use super::CorpusSession;
use crate::data::MatrixRef;
use crate::error::Result;
use crate::gpu::engine::GpuEngine;
use crate::gpu::kernels::{bind_group, grid, Job, NormsParams, ParamSlots, Step};
use crate::metric::Metric;
use crate::plan::{self, CorpusPlan};

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
            if !buffers.raw.is_empty() {
                // Block by block, so that a mapped input is not all resident at once; a block
                // may straddle two chunks.
                let row_bytes = (cols * 4) as u64;
                let write = |first: usize, block: MatrixRef<'_>| -> Result<()> {
                    let mut row = first;
                    while row < first + block.rows() {
                        let (chunk, at) = (row / plan.chunk_rows, row % plan.chunk_rows);
                        let end = (first + block.rows()).min((chunk + 1) * plan.chunk_rows);
                        let part = &block.as_slice()[(row - first) * cols..(end - first) * cols];
                        self.write_at(
                            &buffers.raw[chunk],
                            at as u64 * row_bytes,
                            "corpus",
                            bytemuck::cast_slice(part),
                        )?;
                        row = end;
                    }
                    Ok(())
                };
                corpus.in_blocks(write).into_iter().collect::<Result<()>>()?;
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
        self.corpus_buffers_keeping(rows, cols, plan, self.keeps_raw_rows(rows, cols, plan))
    }

    /// [`Self::corpus_buffers`], with the original rows beside the prepared ones or not.
    fn corpus_buffers_keeping(
        &self,
        rows: usize,
        cols: usize,
        plan: CorpusPlan,
        keep_raw: bool,
    ) -> Result<CorpusBuffers> {
        let cached = self.corpus_cache.lock().unwrap_or_else(|e| e.into_inner()).take();
        let fits = |b: &CorpusBuffers| b.shape == (rows, cols) && b.plan == plan && b.raw.is_empty() != keep_raw;
        if let Some(buffers) = cached.filter(fits) {
            return Ok(buffers);
        }
        let chunks = || (0..rows).step_by(plan.chunk_rows).map(|first| (first, plan.chunk_rows.min(rows - first)));
        let prepared = chunks().map(|(first, n)| self.prepared_rows(first, n, cols)).collect::<Result<_>>()?;
        let raw = match keep_raw {
            true => chunks().map(|(_, n)| self.raw_rows(n, cols)).collect::<Result<_>>()?,
            false => Vec::new(),
        };
        Ok(CorpusBuffers { shape: (rows, cols), plan, prepared, raw, staged: None })
    }

    /// Exact re-ranking on the GPU needs the original rows beside the prepared ones, within
    /// the budget: a chunk of them beside each chunk of prepared rows (which are longer, so
    /// that a binding holds it).
    fn keeps_raw_rows(&self, rows: usize, cols: usize, plan: CorpusPlan) -> bool {
        let raw_bytes = (rows * cols * 4) as u64;
        self.kernels.refine.is_some()
            && plan.resident
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

    /// Whether this device's sweep of a whole graph of `rows x cols` data with `kc`
    /// candidates a row computes every key twice: neither symmetric (the data in one binding
    /// and every row's state do not both fit) nor bounded, so that each key is computed once
    /// for each of its two rows.
    pub fn graph_sweep_computes_keys_twice(&self, rows: usize, cols: usize, kc: usize) -> bool {
        if rows == 0 || cols == 0 {
            return false;
        }
        let Ok(corpus) = plan::plan_corpus(rows, cols, self.budget()) else { return false };
        let (caps, dev) = (self.tile_caps, self.budget());
        let ask = plan::TileAsk { nq: rows, d: cols, kc, corpus, corpus_rows: rows, caps, dev };
        let tiles = self.choose_sweep(ask, true, self.ranks_graph_on_device(rows, cols));
        tiles.is_ok_and(|t| !t.symmetric && t.bounded.is_none())
    }

    /// The sweep of a round asked as `tiles` that `plan::choose_sweep` picks under this
    /// engine's options; `from_corpus` and `ranks` as in [`plan::SweepAsk`].
    pub(super) fn choose_sweep(&self, tiles: plan::TileAsk, from_corpus: bool, ranks: bool) -> Result<plan::TilePlan> {
        plan::choose_sweep(plan::SweepAsk {
            tiles,
            from_corpus,
            ranks,
            symmetric: self.symmetric_graphs,
            bounded: self.bounded_sweeps,
            sorts: self.sort_select,
        })
    }

    /// Whether a pair of blocks, J of `j_rows` rows, whose every row has a bound is computed
    /// one way (`CorpusSession::filtered_candidates`, the rows of I starting with
    /// their bounds) rather than two-sided: both compute each key once, but one way stores no
    /// distance tile and selects only the few keys under the bounds, where a two-sided pair's
    /// tiles are dense. So wherever its column lists fit and sparse tiles still pay on the
    /// data, unless `symmetric_graphs` forces two-sided pairs.
    pub fn one_way_pairs_pay(&self, j_rows: usize, kc: usize) -> bool {
        let filter = super::ColumnFilter { rows: j_rows, cap: plan::filtered_list_cap(kc) };
        self.symmetric_graphs != Some(true) && self.sparse_tiles_pay() && self.filtered_budget(filter).is_some()
    }

    /// The tiles of a two-sided block of `rows x cols` data split at `split` (a symmetric
    /// sweep over both sides, `CorpusSession::two_sided_candidates`) with `kc` candidates a
    /// row, where the device holds it and it pays against two searches
    /// (`plan::two_sided_pays`) or `symmetric_graphs` forces it: the split on a tile
    /// boundary, kc rows a side at least.
    pub fn two_sided_tiles(&self, rows: usize, split: usize, cols: usize, kc: usize) -> Option<plan::TilePlan> {
        let tiles = self.two_sided_fit(rows, split, cols, kc)?;
        let pays = || plan::two_sided_pays(&tiles, rows, split, cols, kc, self.tile_caps, self.budget());
        (self.symmetric_graphs == Some(true) || pays()).then_some(tiles)
    }

    /// The tiles of [`Self::two_sided_tiles`] where the device holds the block, whether or
    /// not it pays.
    pub fn two_sided_fit(&self, rows: usize, split: usize, cols: usize, kc: usize) -> Option<plan::TilePlan> {
        if cols == 0
            || split == 0
            || !split.is_multiple_of(plan::ALIGN_ROWS)
            || kc > split.min(rows.saturating_sub(split))
        {
            return None;
        }
        let corpus =
            plan::plan_corpus(rows, cols, self.budget()).ok().filter(|c| c.resident && c.chunk_rows >= rows)?;
        // No more than a side's rows a tile.
        let side = split.max(rows - split).next_multiple_of(plan::ALIGN_ROWS);
        let caps = plan::TileCaps { query: self.tile_caps.query.min(side), ..self.tile_caps };
        let tiles = plan::choose_sweep(plan::SweepAsk {
            tiles: plan::TileAsk { nq: rows, d: cols, kc, corpus, corpus_rows: rows, caps, dev: self.budget() },
            from_corpus: true,
            ranks: false,
            symmetric: Some(true),
            bounded: Some(false),
            sorts: self.sort_select,
        })
        .ok()?;
        tiles.symmetric.then_some(tiles)
    }

    pub(super) fn prepared_rows(&self, first: usize, rows: usize, cols: usize) -> Result<PreparedRows> {
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
        self.open_keeping(corpus, shift, metric, true)
    }

    /// [`Self::open`] with no exact keys on the GPU: the original rows are not kept there
    /// (the host ranks the candidates, as it does those of a filtered search's corpus rows).
    pub fn open_without_exact<'a>(
        &'a self,
        corpus: MatrixRef<'a>,
        shift: &[f32],
        metric: Metric,
    ) -> Result<CorpusSession<'a>> {
        self.open_keeping(corpus, shift, metric, false)
    }

    fn open_keeping<'a>(
        &'a self,
        corpus: MatrixRef<'a>,
        shift: &[f32],
        metric: Metric,
        exact: bool,
    ) -> Result<CorpusSession<'a>> {
        let (rows, cols) = (corpus.rows(), corpus.cols());
        self.forget_other_shapes(rows, cols);
        let plan = plan::plan_corpus(rows, cols, self.budget())?;
        let buffers = if plan.resident {
            self.corpus_buffers_keeping(rows, cols, plan, exact && self.keeps_raw_rows(rows, cols, plan))?
        } else {
            *self.corpus_cache.lock().unwrap_or_else(|e| e.into_inner()) = None;
            CorpusBuffers { shape: (rows, cols), plan, prepared: Vec::new(), raw: Vec::new(), staged: None }
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
        for (i, chunk) in buffers.prepared.into_iter().enumerate() {
            session.prepare_chunk(&chunk, session.raw_corpus.get(i), raw_written)?;
            session.resident.push(chunk);
        }
        Ok(session)
    }
}

impl Drop for CorpusSession<'_> {
    /// A resident corpus's buffers go back to the cache, for the next corpus of this shape.
    fn drop(&mut self) {
        if self.plan.resident {
            let buffers = CorpusBuffers {
                shape: (self.corpus.rows(), self.corpus.cols()),
                plan: self.plan,
                prepared: std::mem::take(&mut self.resident),
                raw: std::mem::take(&mut self.raw_corpus),
                staged: None,
            };
            *self.gpu.corpus_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(buffers);
        }
    }
}

/// Prepared rows on the GPU: vec4-padded vectors and squared norms.
pub(super) struct PreparedRows {
    pub(super) first: usize,
    pub(super) rows: usize,
    pub(super) vectors: wgpu::Buffer,
    pub(super) norms: wgpu::Buffer,
}

/// A resident corpus's buffers (`GpuEngine::corpus_cache`).
pub(in crate::gpu) struct CorpusBuffers {
    shape: (usize, usize),
    plan: CorpusPlan,
    /// Each chunk's prepared rows.
    prepared: Vec<PreparedRows>,
    /// The original rows of each chunk, where exact keys are computed on the GPU.
    raw: Vec<wgpu::Buffer>,
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

impl CorpusSession<'_> {
    /// Records copies of prepared corpus rows `q0..q0 + rows` into the query buffers (the
    /// original rows, for exact keys, are copied when the tile is finished).
    pub(super) fn copy_corpus_rows(&self, encoder: &mut wgpu::CommandEncoder, q0: usize, rows: usize, b: &TileBuffers) {
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
    pub(super) fn prepare_chunk(
        &self,
        chunk: &PreparedRows,
        raw: Option<&wgpu::Buffer>,
        raw_written: bool,
    ) -> Result<()> {
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
}
