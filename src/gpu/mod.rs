//! The GPU backend: WGSL kernels through wgpu.
//!
//! Per query tile and corpus chunk, one submission runs, for every distance tile:
//! `distance_tile` (norms + GEMM) -> `select_rows` on the dense tile (the tile's kc best)
//! -> `select_rows` on pairs (merge into the running kc best). Only the final candidate lists
//! come back to the host, which re-ranks them exactly (`refine`).

mod context;
pub mod shaders;

use std::sync::mpsc;

use wgpu::util::DeviceExt;

use crate::data::MatrixRef;
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::plan::{self, CorpusPlan, DeviceBudget, TilePlan};
use crate::refine::Candidates;
use crate::search::Options;

use context::Context;
pub use context::{adapters, AdapterReport};

/// Default GPU memory budget.
const DEFAULT_BUDGET: u64 = 1 << 30;
/// Below this budget an out-of-memory error is final.
const MIN_RETRY_BUDGET: u64 = 8 << 20;
/// Uniform slots are this far apart (the largest `min_uniform_buffer_offset_alignment`).
const PARAM_SLOT: u64 = 256;
/// Distance tile shape (override constants of distance.wgsl).
const TILE_M: u32 = 128;
const TILE_N: u32 = 128;
const TILE_K: u32 = 16;
// distance.wgsl loads at most two 4 x 4 operand blocks per invocation and slice.
const _: () = assert!((TILE_M / 4 + TILE_N / 4) * (TILE_K / 4) <= 2 * (TILE_M / 8) * (TILE_N / 8));
const _: () = assert!(TILE_M % 8 == 0 && TILE_N % 8 == 0 && TILE_K % 4 == 0);

/// `Params` of norms.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct NormsParams {
    rows: u32,
    dim: u32,
    dim4: u32,
    mode: u32,
    groups_x: u32,
    in_offset: u32,
    _pad: [u32; 2],
}

/// `Params` of distance.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DistanceParams {
    q_rows: u32,
    c_rows: u32,
    dim4: u32,
    c_offset: u32,
    col_base: u32,
    out_stride: u32,
    mode: u32,
    groups_x: u32,
}

/// `Params` of select.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct SelectParams {
    rows: u32,
    len: u32,
    in_stride: u32,
    col_base: u32,
    need: u32,
    scratch_stride: u32,
    out_stride: u32,
    out_offset: u32,
    dense: u32,
    groups_x: u32,
    rows_per_group: u32,
    _pad: u32,
}

/// Bytes bound for each parameter block: the largest of them.
const PARAMS_SIZE: u64 = std::mem::size_of::<SelectParams>() as u64;

struct Kernel {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

pub(crate) struct GpuEngine {
    ctx: Context,
    norms: Kernel,
    distance: Kernel,
    select: Kernel,
    /// `select_rows_per_subgroup`, for merging short candidate lists, where subgroups exist.
    merge_per_subgroup: Option<wgpu::ComputePipeline>,
    max_binding: u64,
    /// Bytes the engine may allocate; halved after each out-of-memory error.
    budget: std::sync::atomic::AtomicU64,
}

#[derive(Clone, Copy)]
enum Slot {
    Storage { read_only: bool },
}

fn kernel(ctx: &Context, name: &str, source: &str, entry: &str, slots: &[Slot], constants: &[(&str, f64)]) -> Kernel {
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: None,
        },
        count: None,
    }];
    for (i, slot) in slots.iter().enumerate() {
        let Slot::Storage { read_only } = *slot;
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: i as u32 + 1,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    let device = &ctx.device;
    let layout =
        device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(name), entries: &entries });
    let module = shader_module(ctx, name, source);
    let pipeline = pipeline(ctx, name, &layout, &module, entry, constants);
    Kernel { pipeline, layout }
}

fn shader_module(ctx: &Context, name: &str, source: &str) -> wgpu::ShaderModule {
    ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    })
}

fn pipeline(
    ctx: &Context,
    name: &str,
    layout: &wgpu::BindGroupLayout,
    module: &wgpu::ShaderModule,
    entry: &str,
    constants: &[(&str, f64)],
) -> wgpu::ComputePipeline {
    let pipeline_layout = ctx.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(name),
        bind_group_layouts: &[Some(layout)],
        immediate_size: 0,
    });
    ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: Some(&pipeline_layout),
        module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions { constants, zero_initialize_workgroup_memory: false },
        cache: None,
    })
}

const RO: Slot = Slot::Storage { read_only: true };
const RW: Slot = Slot::Storage { read_only: false };

impl GpuEngine {
    pub fn new(options: &Options, hardware_only: bool) -> Result<Self> {
        let (_instance, adapters) = context::discover();
        let chosen =
            context::choose_adapter(&adapters, options.adapter.as_deref(), hardware_only && options.adapter.is_none())?;
        let ctx = Context::open(&adapters[chosen], !options.no_subgroups)?;
        let tile = [("BM", TILE_M as f64), ("BN", TILE_N as f64), ("BK", TILE_K as f64)];
        let select_slots = [RO, RW, RW, RW, RW];
        let (norms, distance, select, merge_per_subgroup) = ctx.allocating(|| {
            let select = kernel(&ctx, "select", &shaders::select(ctx.subgroups), "select_rows", &select_slots, &[]);
            // Same module and layout, other entry point: pipelines share the bind groups.
            let merge = ctx.subgroups.then(|| {
                let module = shader_module(&ctx, "select", &shaders::select(true));
                pipeline(&ctx, "merge per subgroup", &select.layout, &module, "select_rows_per_subgroup", &[])
            });
            (
                kernel(&ctx, "norms", shaders::NORMS, "prepare_rows", &[RO, RO, RW, RW], &[]),
                kernel(&ctx, "distance", shaders::DISTANCE, "distance_tile", &[RO, RO, RO, RO, RO, RW], &tile),
                select,
                merge,
            )
        })?;
        ctx.wait()?;
        let max_binding = ctx.limits.max_storage_buffer_binding_size.min(ctx.limits.max_buffer_size);
        let budget = options.memory_budget.unwrap_or(DEFAULT_BUDGET).into();
        Ok(GpuEngine { ctx, norms, distance, select, merge_per_subgroup, max_binding, budget })
    }

    /// Rows per workgroup of `select_rows_per_subgroup`, when it exists: sized for the
    /// largest subgroup the adapter may use, so that every row gets a subgroup.
    fn rows_per_subgroup_group(&self) -> Option<u32> {
        self.merge_per_subgroup.as_ref()?;
        Some((256 / self.ctx.info.subgroup_max_size.clamp(1, 256)).max(1))
    }

    pub fn description(&self) -> String {
        let i = &self.ctx.info;
        let select = if self.ctx.subgroups {
            format!("subgroup select, sizes {}-{}", i.subgroup_min_size, i.subgroup_max_size)
        } else {
            "workgroup prefix-sum select".to_string()
        };
        format!("gpu: {} ({:?}, {select})", i.name, i.backend)
    }

    fn budget(&self) -> DeviceBudget {
        DeviceBudget { max_binding: self.max_binding, budget: self.budget.load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// Halves the memory budget after an out-of-memory error; false when it is already too
    /// small to be worth another try.
    pub fn shrink_budget(&self) -> bool {
        let now = self.budget.load(std::sync::atomic::Ordering::Relaxed);
        if now < MIN_RETRY_BUDGET {
            return false;
        }
        self.budget.store(now / 2, std::sync::atomic::Ordering::Relaxed);
        true
    }

    pub fn open<'a>(&'a self, corpus: MatrixRef<'a>, shift: &[f32], metric: Metric) -> Result<CorpusSession<'a>> {
        let plan = plan::plan_corpus(corpus.rows(), corpus.cols(), self.budget())?;
        let shift_buf = self.upload("shift", bytemuck::cast_slice(shift))?;
        let mut session = CorpusSession { gpu: self, corpus, metric, plan, shift: shift_buf, resident: Vec::new() };
        if plan.resident {
            for first in (0..corpus.rows()).step_by(plan.chunk_rows) {
                let rows = plan.chunk_rows.min(corpus.rows() - first);
                let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
                let chunk = session.prepare(&mut encoder, corpus, first, rows, "corpus")?;
                self.ctx.queue.submit([encoder.finish()]);
                self.ctx.wait()?;
                session.resident.push(chunk);
            }
        }
        Ok(session)
    }

    fn upload(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        // wgpu refuses zero-sized bindings; pad empty uploads to one word.
        let padded;
        let contents = if bytes.is_empty() {
            padded = [0u8; 4];
            &padded[..]
        } else {
            bytes
        };
        self.ctx.allocating(|| {
            self.ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            })
        })
    }

    fn buffer(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        self.ctx.allocating(|| {
            self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: size.max(4).next_multiple_of(4),
                usage,
                mapped_at_creation: false,
            })
        })
    }
}

/// One dispatch of a query tile.
#[derive(Clone, Copy)]
enum Step {
    Distance,
    SelectRows,
    MergePerSubgroup,
}

/// Prepared rows on the GPU: vec4-padded vectors and squared norms.
struct PreparedRows {
    first: usize,
    rows: usize,
    vectors: wgpu::Buffer,
    norms: wgpu::Buffer,
}

/// Per-submission uniform parameters, one 256-byte slot per dispatch.
#[derive(Default)]
struct ParamSlots {
    bytes: Vec<u8>,
}

impl ParamSlots {
    fn push<T: bytemuck::Pod>(&mut self, p: T) -> u32 {
        let offset = self.bytes.len();
        self.bytes.extend_from_slice(bytemuck::bytes_of(&p));
        self.bytes.resize(offset + PARAM_SLOT as usize, 0);
        offset as u32
    }
}

/// 2-D dispatch for `groups` workgroups: no dimension may exceed 65535.
fn grid(groups: usize) -> (u32, u32) {
    let x = groups.clamp(1, 65535);
    (x as u32, groups.div_ceil(x).max(1) as u32)
}

fn metric_modes(metric: Metric) -> (u32, u32) {
    // (norms.wgsl mode, distance.wgsl mode)
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => (0, 0),
        Metric::Cosine => (1, 1),
        Metric::Correlation => (2, 1),
        Metric::InnerProduct => (3, 2),
    }
}

pub(crate) struct CorpusSession<'a> {
    gpu: &'a GpuEngine,
    corpus: MatrixRef<'a>,
    metric: Metric,
    plan: CorpusPlan,
    shift: wgpu::Buffer,
    resident: Vec<PreparedRows>,
}

impl CorpusSession<'_> {
    /// Uploads rows `first..first + rows` of `m` and records their preparation.
    fn prepare(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        m: MatrixRef<'_>,
        first: usize,
        rows: usize,
        label: &str,
    ) -> Result<PreparedRows> {
        let gpu = self.gpu;
        let d = m.cols();
        let dim4 = d.div_ceil(4);
        let raw = gpu.upload(label, bytemuck::cast_slice(&m.as_slice()[first * d..(first + rows) * d]))?;
        let usage = wgpu::BufferUsages::STORAGE;
        let vectors = gpu.buffer(label, (rows * dim4 * 16) as u64, usage)?;
        let norms = gpu.buffer(label, (rows * 4) as u64, usage)?;
        let (gx, gy) = grid(rows);
        let mut params = ParamSlots::default();
        let offset =
            params.push([rows as u32, d as u32, dim4 as u32, metric_modes(self.metric).0, gx, 0, 0, 0, 0, 0, 0, 0]);
        let uniform = self.uniform(&params)?;
        let bind = bind_group(&gpu.ctx.device, &gpu.norms.layout, &uniform, &[&raw, &self.shift, &vectors, &norms]);
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&gpu.norms.pipeline);
        pass.set_bind_group(0, &bind, &[offset]);
        pass.dispatch_workgroups(gx, gy, 1);
        drop(pass);
        Ok(PreparedRows { first, rows, vectors, norms })
    }

    fn uniform(&self, params: &ParamSlots) -> Result<wgpu::Buffer> {
        self.gpu.ctx.allocating(|| {
            self.gpu.ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: &params.bytes,
                usage: wgpu::BufferUsages::UNIFORM,
            })
        })
    }

    /// The kc best fp32 candidates of every query, tile by tile.
    pub fn candidates(
        &mut self,
        queries: MatrixRef<'_>,
        exclude: &[u32],
        kc: usize,
        report: &(dyn Fn(usize) + Sync),
    ) -> Result<Candidates> {
        let nq = queries.rows();
        let mut out = Candidates {
            kc,
            keys: vec![f32::INFINITY; nq * kc],
            ids: vec![u32::MAX; nq * kc],
            failed: vec![false; nq],
        };
        let tiles = plan::plan_tiles(nq, queries.cols(), kc, self.plan, self.corpus.rows(), self.gpu.budget())?;
        for q0 in (0..nq).step_by(tiles.query_rows) {
            let rows = tiles.query_rows.min(nq - q0);
            self.query_tile(queries, q0, rows, &exclude[q0..q0 + rows], kc, tiles, &mut out)?;
            report(q0 + rows);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn query_tile(
        &self,
        queries: MatrixRef<'_>,
        q0: usize,
        rows: usize,
        exclude: &[u32],
        kc: usize,
        tiles: TilePlan,
        out: &mut Candidates,
    ) -> Result<()> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let dim4 = queries.cols().div_ceil(4) as u32;
        let storage = wgpu::BufferUsages::STORAGE;
        let cand_stride = 2 * kc;
        let exclude_buf = gpu.upload("exclude", bytemuck::cast_slice(exclude))?;
        let failed = gpu.upload("failed", bytemuck::cast_slice(&vec![0u32; rows]))?;
        let dist = gpu.buffer("distances", (rows * tiles.column_tile * 4) as u64, storage)?;
        let aux_a = gpu.buffer("aux a", (rows * tiles.scratch_stride * 8) as u64, storage)?;
        let aux_b = gpu.buffer("aux b", (rows * tiles.scratch_stride * 8) as u64, storage)?;
        let cand = gpu.buffer("candidates", (rows * cand_stride * 8) as u64, storage | wgpu::BufferUsages::COPY_SRC)?;
        let select_bind = |uniform: &wgpu::Buffer| {
            bind_group(device, &gpu.select.layout, uniform, &[&dist, &aux_a, &aux_b, &cand, &failed])
        };

        let chunk_starts: Vec<usize> = (0..self.corpus.rows()).step_by(self.plan.chunk_rows).collect();
        let mut first_tile = true;
        let mut query_rows = None;
        for (c, &chunk_first) in chunk_starts.iter().enumerate() {
            let mut encoder = device.create_command_encoder(&Default::default());
            if query_rows.is_none() {
                query_rows = Some(self.prepare(&mut encoder, queries, q0, rows, "queries")?);
            }
            let q = query_rows.as_ref().expect("prepared above");
            let streamed;
            let chunk = if self.plan.resident {
                &self.resident[c]
            } else {
                let n = self.plan.chunk_rows.min(self.corpus.rows() - chunk_first);
                streamed = self.prepare(&mut encoder, self.corpus, chunk_first, n, "corpus chunk")?;
                &streamed
            };
            let mut params = ParamSlots::default();
            let mut dispatches = Vec::new();
            for c0 in (0..chunk.rows).step_by(tiles.column_tile) {
                let cols = tiles.column_tile.min(chunk.rows - c0);
                let col_base = (chunk.first + c0) as u32;
                let gemm_groups = rows.div_ceil(TILE_M as usize) * cols.div_ceil(TILE_N as usize);
                let (gx, gy) = grid(gemm_groups);
                let p = params.push(DistanceParams {
                    q_rows: rows as u32,
                    c_rows: cols as u32,
                    dim4,
                    c_offset: c0 as u32,
                    col_base,
                    out_stride: tiles.column_tile as u32,
                    mode: metric_modes(self.metric).1,
                    groups_x: gx,
                });
                dispatches.push((Step::Distance, p, gx, gy));
                let (sx, sy) = grid(rows);
                let select = SelectParams {
                    rows: rows as u32,
                    need: kc as u32,
                    scratch_stride: tiles.scratch_stride as u32,
                    out_stride: cand_stride as u32,
                    groups_x: sx,
                    ..Default::default()
                };
                // The tile's kc best: straight into the running list for the first tile, else
                // beside it.
                let p = params.push(SelectParams {
                    len: cols as u32,
                    in_stride: tiles.column_tile as u32,
                    col_base,
                    out_offset: if first_tile { 0 } else { kc as u32 },
                    dense: 1,
                    ..select
                });
                dispatches.push((Step::SelectRows, p, sx, sy));
                if !first_tile {
                    // Merge: the kc best of the running list and the tile's list.
                    if let Some(per_group) = gpu.rows_per_subgroup_group() {
                        let (mx, my) = grid(rows.div_ceil(per_group as usize));
                        let p = params.push(SelectParams {
                            len: cand_stride as u32,
                            groups_x: mx,
                            rows_per_group: per_group,
                            ..select
                        });
                        dispatches.push((Step::MergePerSubgroup, p, mx, my));
                    } else {
                        let p = params.push(SelectParams { len: cand_stride as u32, ..select });
                        dispatches.push((Step::SelectRows, p, sx, sy));
                    }
                }
                first_tile = false;
            }
            let uniform = self.uniform(&params)?;
            let distance_bind = bind_group(
                device,
                &gpu.distance.layout,
                &uniform,
                &[&q.vectors, &chunk.vectors, &q.norms, &chunk.norms, &exclude_buf, &dist],
            );
            let select_bind = select_bind(&uniform);
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                for (step, offset, gx, gy) in dispatches {
                    let (pipeline, bind) = match step {
                        Step::Distance => (&gpu.distance.pipeline, &distance_bind),
                        Step::SelectRows => (&gpu.select.pipeline, &select_bind),
                        Step::MergePerSubgroup => {
                            (gpu.merge_per_subgroup.as_ref().expect("only planned with subgroups"), &select_bind)
                        }
                    };
                    pass.set_pipeline(pipeline);
                    pass.set_bind_group(0, bind, &[offset]);
                    pass.dispatch_workgroups(gx, gy, 1);
                }
            }
            gpu.ctx.queue.submit([encoder.finish()]);
            gpu.ctx.wait()?;
        }

        let pairs: Vec<[u32; 2]> = read_back(gpu, &cand)?;
        let flags: Vec<u32> = read_back(gpu, &failed)?;
        for r in 0..rows {
            let dst = (q0 + r) * kc;
            for (slot, pair) in pairs[r * cand_stride..r * cand_stride + kc].iter().enumerate() {
                out.keys[dst + slot] = f32::from_bits(pair[0]);
                out.ids[dst + slot] = pair[1];
            }
            out.failed[q0 + r] = flags[r] != 0;
        }
        Ok(())
    }
}

fn bind_group(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    uniform: &wgpu::Buffer,
    storage: &[&wgpu::Buffer],
) -> wgpu::BindGroup {
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: uniform,
            offset: 0,
            size: std::num::NonZeroU64::new(PARAMS_SIZE),
        }),
    }];
    for (i, b) in storage.iter().enumerate() {
        entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.as_entire_binding() });
    }
    device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout, entries: &entries })
}

/// Copies a storage buffer to the host.
fn read_back<T: bytemuck::Pod>(gpu: &GpuEngine, src: &wgpu::Buffer) -> Result<Vec<T>> {
    let size = src.size();
    let staging = gpu.buffer("staging", size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST)?;
    let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(src, 0, &staging, 0, size);
    gpu.ctx.queue.submit([encoder.finish()]);
    let (tx, rx) = mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    gpu.ctx.wait()?;
    rx.recv()
        .map_err(|_| Error::Gpu("buffer mapping was abandoned".into()))?
        .map_err(|e| Error::Gpu(format!("reading results back: {e}")))?;
    let view = staging.get_mapped_range(..).map_err(|e| Error::Gpu(format!("reading results back: {e:?}")))?;
    let values = bytemuck::pod_collect_to_vec(&view);
    drop(view);
    staging.unmap();
    Ok(values)
}
