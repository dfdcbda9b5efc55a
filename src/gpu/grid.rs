//! The low-dimensional grid driven (`shaders/grid.wgsl`): the corpus points keyed by cell on
//! the GPU and sorted there (`sort.rs`), then batches of queries answered against it. What
//! the grid's cells are and what its answers prove is decided in `lowdim::grid`.

use super::engine::GpuEngine;
use super::kernels::{
    bind_group, grid, GridParams, GridProveParams, Job, ParamSlots, Step, GRID_FAILED, GRID_GROUP, GRID_MAX_DIMS,
    GRID_UNANSWERED,
};
use super::sort::{Pairs, SortKey};
use super::transfer::{read_mapped, Mapping};
use crate::error::{Error, Result};

/// The grid's cells: per dimension the corner `lo` and the number of cells, their width
/// `1 / inv`, and the linear id of cell (c_0, c_1, ...) as the sum of c_j stride_j.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GridCells {
    pub lo: Vec<f32>,
    pub sides: Vec<u32>,
    pub inv: f32,
}

impl GridCells {
    /// Strides of the linear cell id, or `None` where the ids need more than 32 bits.
    pub(crate) fn strides(&self) -> Option<Vec<u32>> {
        let mut stride = 1u64;
        let mut strides = Vec::with_capacity(self.sides.len());
        for &side in &self.sides {
            strides.push(u32::try_from(stride).ok()?);
            stride = stride.checked_mul(u64::from(side))?;
        }
        (stride <= u64::from(u32::MAX)).then_some(strides)
    }
}

/// Each query's `kc` nearest corpus points (f32 keys, NONE-padded, in no order) among the
/// cells around its own, and how many points those cells held (`GRID_FAILED` for a query the
/// GPU could not answer).
pub(crate) struct GridAnswers {
    pub kc: usize,
    pub keys: Vec<f32>,
    pub points: Vec<u32>,
    pub seen: Vec<u32>,
    /// Queries the GPU could not answer.
    pub failed: usize,
}

/// A corpus of points indexed on the GPU: the points and their (cell id, point) pairs sorted.
pub(crate) struct GpuGrid<'g> {
    gpu: &'g GpuEngine,
    dims: usize,
    points: usize,
    corpus: wgpu::Buffer,
    geometry: wgpu::Buffer,
    cell_keys: wgpu::Buffer,
    cell_points: wgpu::Buffer,
    /// The read-back buffer of the last batch, kept for the next: batches shrink, so the
    /// first one's serves them all, and host-visible memory is slow to allocate and pin.
    staging: std::sync::Mutex<Option<wgpu::Buffer>>,
}

/// Threads that copy a batch's answers out of mapped memory: one thread copies a few GB/s,
/// well below what the mapping gives.
const READ_BACK_THREADS: usize = 4;

const STORAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::COPY_SRC);

impl GpuEngine {
    /// Indexes `points` (rows of `dims` coordinates) by the cells of `cells` on the GPU.
    pub(crate) fn build_grid(&self, points: &[f32], dims: usize, cells: &GridCells) -> Result<GpuGrid<'_>> {
        let n = points.len() / dims.max(1);
        let strides = cells.strides().filter(|_| (1..=GRID_MAX_DIMS).contains(&dims) && n < u32::MAX as usize);
        let Some(strides) = strides else {
            return Err(Error::Gpu(format!(
                "a grid of {:?} cells in {dims} dimensions has no 32-bit ids",
                cells.sides
            )));
        };
        let kernels = self.kernels.grid_kernels(&self.ctx)?;
        let mut words = vec![0u32; 25];
        for j in 0..dims {
            words[j] = cells.lo[j].to_bits();
            words[8 + j] = cells.sides[j];
            words[16 + j] = strides[j];
        }
        words[24] = cells.inv.to_bits();
        // Written on this thread alone: the hybrid join rebuilds its grid while the host's
        // thread pool is busy with the kd-tree (`upload` would wait for it).
        let geometry = self.upload_from_this_thread("grid geometry", bytemuck::cast_slice(&words))?;
        let corpus = self.upload_from_this_thread("grid points", bytemuck::cast_slice(points))?;
        let cell_keys = self.buffer("grid cell ids", n as u64 * 4, STORAGE)?;
        let cell_points = self.buffer("grid cell points", n as u64 * 4, STORAGE)?;
        let built = GpuGrid {
            gpu: self,
            dims,
            points: n,
            corpus,
            geometry,
            cell_keys,
            cell_points,
            staging: Default::default(),
        };
        let cells_in_all = u64::from(strides[dims - 1]) * u64::from(cells.sides[dims - 1]);
        let cell_bits = u64::BITS - cells_in_all.saturating_sub(1).leading_zeros();
        let sort = self.plan_sort(
            Pairs { keys: &built.cell_keys, values: &built.cell_points },
            None,
            n,
            SortKey::Bits(cell_bits.max(1)),
        )?;
        let (gx, gy) = grid(n.div_ceil(GRID_GROUP), self.max_groups);
        let mut params = ParamSlots::default();
        let offset = params.push(GridParams { len: n as u32, dims: dims as u32, groups_x: gx, ..Default::default() });
        let uniform = self.upload_uniform(&params)?;
        let unused = [(); 3].map(|_| self.buffer("unused", 4, STORAGE));
        let [a, b, c] = unused;
        let (a, b, c) = (a?, b?, c?);
        let bind = bind_group(
            &self.ctx.device,
            &kernels.cell_ids.layout,
            &uniform,
            &[&built.geometry, &built.corpus, &built.cell_keys, &built.cell_points, &a, &b, &c, &built.corpus],
        );
        let mut jobs = vec![Job { step: Step::GridCellIds, offset, groups: (gx, gy), bind: &bind }];
        jobs.extend(sort.jobs());
        let encoder = self.ctx.device.create_command_encoder(&Default::default());
        let submitted = self.submit(encoder, &jobs)?;
        self.completion(submitted)?;
        Ok(built)
    }
}

/// Each distinct point's rows on the GPU, for queries proven there (`GpuGrid::query_proven`).
pub(crate) struct GridRows {
    buffer: wgpu::Buffer,
}

/// What proving a batch of grid queries on the GPU needs besides the grid: the corpus rows
/// of each point, each query's excluded row (`NONE`: none), k, and the bounds of
/// `lowdim::grid::outside_bound` (the squared reach of the cells; a kept f32 key's lower
/// bound on the exact key, `key * kept_scale - kept_floor`).
pub(crate) struct GridProof<'a> {
    pub rows: &'a GridRows,
    pub excluded: &'a [u32],
    pub k: usize,
    pub reach_key: f64,
    pub kept_scale: f64,
    pub kept_floor: f64,
}

/// Each query's answer ranked and proven on the GPU: a status (`GRID_PROVEN`; 1 where its
/// candidates did not prove it; `GRID_UNANSWERED`), and where proven, its k rows at the start
/// of its `kc` slots of `rows` and their exact keys, k a query in `keys`, ascending by key
/// (rows of equal keys in point order: `refine::write_row` orders them by index).
pub(crate) struct GridProven {
    pub k: usize,
    pub kc: usize,
    pub status: Vec<u32>,
    pub rows: Vec<u32>,
    pub keys: Vec<f64>,
    /// Queries the GPU could not answer.
    pub failed: usize,
}

impl GpuEngine {
    /// `first` and `rows` of a corpus's distinct points (point t stands for rows
    /// `rows[first[t]..first[t + 1]]`) on the GPU, or `None` where the adapter cannot prove
    /// grid queries (no SHADER_F64).
    pub(crate) fn grid_rows(&self, first: &[u32], rows: &[u32]) -> Result<Option<GridRows>> {
        if self.kernels.grid_kernels(&self.ctx)?.prove.is_none() {
            return Ok(None);
        }
        let words = [first, rows].concat();
        let buffer = self.upload_from_this_thread("grid point rows", bytemuck::cast_slice(&words))?;
        Ok(Some(GridRows { buffer }))
    }
}

/// A batch's arrays on the GPU after `query_cells`.
struct Queried {
    nq: usize,
    coords: wgpu::Buffer,
    heap_keys: wgpu::Buffer,
    heap_ids: wgpu::Buffer,
    seen: wgpu::Buffer,
}

impl GpuGrid<'_> {
    /// Most queries a batch of [`Self::query`] (or, with `proven_k`, of
    /// [`Self::query_proven`] at that k) takes with `kc` slots each: a quarter of the
    /// engine's budget for their arrays, each array within one binding, and what is read back
    /// within one buffer.
    pub(crate) fn query_rows(&self, kc: usize, proven_k: Option<usize>) -> usize {
        let (answers, read) = match proven_k {
            Some(k) => (k * 8 + 4, kc * 4 + 4 + k * 8),
            None => (0, kc * 8 + 4),
        };
        let per_query = (self.dims * 4 + kc * 8 + 4 + answers) as u64;
        let widest = (kc * 4).max(proven_k.unwrap_or(0) * 8).max(1) as u64;
        let binding = self.gpu.max_binding / widest;
        let staging = self.gpu.ctx.limits.max_buffer_size / read as u64;
        (self.gpu.budget().budget / 4 / per_query).min(binding).min(staging).max(1) as usize
    }

    /// Answers `queries` (rows of the grid's dimensions): each one's `kc` nearest points among
    /// the cells around its own.
    pub(crate) fn query(&self, queries: &[f32], kc: usize) -> Result<GridAnswers> {
        let batch = self.query_cells(queries, kc, 1)?;
        let nq = batch.nq;
        let (mut keys, mut points, mut seen) = (vec![0f32; nq * kc], vec![0u32; nq * kc], vec![0u32; nq]);
        self.read_back(&mut [
            ReadBack::new(&batch.heap_keys, &mut keys),
            ReadBack::new(&batch.heap_ids, &mut points),
            ReadBack::new(&batch.seen, &mut seen),
        ])?;
        let failed = seen.iter().filter(|&&found| found == GRID_FAILED).count();
        crate::trace::mark(|| format!("grid: {} queries' answers read back, {failed} not answered", batch.nq));
        Ok(GridAnswers { kc, keys, points, seen, failed })
    }

    /// Answers `queries` as [`Self::query`] does, then ranks and proves each one's answer on
    /// the GPU (`grid_prove.wgsl`), so that only proven answers come back.
    pub(crate) fn query_proven(&self, queries: &[f32], kc: usize, proof: &GridProof<'_>) -> Result<GridProven> {
        let gpu = self.gpu;
        let kernels = gpu.kernels.grid_kernels(&gpu.ctx)?;
        let prove = kernels.prove.as_ref().expect("`GridRows` exist only where the kernel does");
        let batch = self.query_cells(queries, kc, 2)?;
        let nq = batch.nq;
        let k = proof.k;
        gpu.ctx.queue.write_buffer(&batch.seen, nq as u64 * 4, bytemuck::cast_slice(proof.excluded));
        let answer_keys = gpu.buffer("grid answer keys", (nq * k) as u64 * 8, STORAGE)?;
        let (gx, gy) = grid(nq.div_ceil(GRID_GROUP), gpu.max_groups);
        let mut params = ParamSlots::default();
        let offset = params.push(GridProveParams {
            len: nq as u32,
            dims: self.dims as u32,
            kc: kc as u32,
            k: k as u32,
            groups_x: gx,
            points: self.points as u32,
            reach_key: proof.reach_key,
            kept_scale: proof.kept_scale,
            kept_floor: proof.kept_floor,
            one: 1.0,
            ..Default::default()
        });
        let uniform = gpu.upload_uniform(&params)?;
        let bind = bind_group(
            &gpu.ctx.device,
            &prove.layout,
            &uniform,
            &[
                &batch.coords,
                &self.corpus,
                &batch.heap_keys,
                &batch.heap_ids,
                &batch.seen,
                &proof.rows.buffer,
                &answer_keys,
            ],
        );
        let jobs = [Job { step: Step::GridProve, offset, groups: (gx, gy), bind: &bind }];
        let encoder = gpu.ctx.device.create_command_encoder(&Default::default());
        gpu.submit(encoder, &jobs)?;
        let (mut rows, mut status, mut keys) = (vec![0u32; nq * kc], vec![0u32; nq], vec![0f64; nq * k]);
        self.read_back(&mut [
            ReadBack::new(&batch.heap_ids, &mut rows),
            ReadBack::new(&batch.seen, &mut status),
            ReadBack::new(&answer_keys, &mut keys),
        ])?;
        let failed = status.iter().filter(|&&s| s == GRID_UNANSWERED).count();
        crate::trace::mark(|| format!("grid: {nq} queries proven on the GPU and read back, {failed} not answered"));
        Ok(GridProven { k, kc, status, rows, keys, failed })
    }

    /// Uploads `queries` and runs `query_cells` over them, with `seen_words` words a query in
    /// the counts' buffer.
    fn query_cells(&self, queries: &[f32], kc: usize, seen_words: usize) -> Result<Queried> {
        let gpu = self.gpu;
        let nq = queries.len() / self.dims;
        let kernels = gpu.kernels.grid_kernels(&gpu.ctx)?;
        // The hybrid join calls this while the host's thread pool is busy with the kd-tree.
        let coords = gpu.upload_from_this_thread("grid queries", bytemuck::cast_slice(queries))?;
        let heap_bytes = (nq * kc) as u64 * 4;
        let heap_keys = gpu.buffer("grid heap keys", heap_bytes, STORAGE)?;
        let heap_ids = gpu.buffer("grid heap points", heap_bytes, STORAGE)?;
        let seen = gpu.buffer("grid points seen", (nq * seen_words) as u64 * 4, STORAGE)?;
        let (gx, gy) = grid(nq.div_ceil(GRID_GROUP), gpu.max_groups);
        let mut params = ParamSlots::default();
        let offset = params.push(GridParams {
            len: nq as u32,
            dims: self.dims as u32,
            kc: kc as u32,
            groups_x: gx,
            points: self.points as u32,
            ..Default::default()
        });
        let uniform = gpu.upload_uniform(&params)?;
        let bind = bind_group(
            &gpu.ctx.device,
            &kernels.cell_ids.layout,
            &uniform,
            &[&self.geometry, &coords, &self.cell_keys, &self.cell_points, &heap_keys, &heap_ids, &seen, &self.corpus],
        );
        let jobs = [Job { step: Step::GridQuery, offset, groups: (gx, gy), bind: &bind }];
        let encoder = gpu.ctx.device.create_command_encoder(&Default::default());
        gpu.submit(encoder, &jobs)?;
        Ok(Queried { nq, coords, heap_keys, heap_ids, seen })
    }

    /// Reads `parts` back: copied into one staging buffer by a submission queued behind the
    /// kernels', mapped once, and copied out on several threads.
    fn read_back(&self, parts: &mut [ReadBack<'_>]) -> Result<()> {
        let gpu = self.gpu;
        let size: u64 = parts.iter().map(|part| part.to.len() as u64).sum();
        let mut kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let staging = match kept.take() {
            Some(buffer) if buffer.size() >= size => buffer,
            _ => gpu.buffer("grid staging", size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST)?,
        };
        let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
        let mut at = 0;
        for part in parts.iter() {
            encoder.copy_buffer_to_buffer(part.from, 0, &staging, at, part.to.len() as u64);
            at += part.to.len() as u64;
        }
        let index = gpu.ctx.queue.submit([encoder.finish()]);
        Mapping::request(&staging, Some(index)).wait(gpu)?;
        crate::trace::mark(|| "grid: a batch's answers mapped".to_string());
        read_mapped(&staging, |bytes| {
            let mut at = 0;
            for part in parts.iter_mut() {
                let end = at + part.to.len();
                copy_on_threads(&bytes[at..end], part.to);
                at = end;
            }
        })?;
        *kept = Some(staging);
        Ok(())
    }
}

/// One array read back: its buffer, and the host array its first bytes go to.
struct ReadBack<'b> {
    from: &'b wgpu::Buffer,
    to: &'b mut [u8],
}

impl<'b> ReadBack<'b> {
    fn new<T: bytemuck::Pod>(from: &'b wgpu::Buffer, to: &'b mut [T]) -> Self {
        ReadBack { from, to: bytemuck::cast_slice_mut(to) }
    }
}

/// Copies `from` into `to` in `READ_BACK_THREADS` parts at once. Threads of its own: the
/// caller runs beside a thread pool that the kd-tree keeps busy.
fn copy_on_threads<T: Copy + Send + Sync>(from: &[T], to: &mut [T]) {
    let part = to.len().div_ceil(READ_BACK_THREADS).max(1);
    std::thread::scope(|scope| {
        for (to, from) in to.chunks_mut(part).zip(from.chunks(part)) {
            scope.spawn(move || to.copy_from_slice(from));
        }
    });
}
