//! The GPU backend: WGSL kernels through wgpu.
//!
//! Per query tile and corpus chunk, one submission runs, for every distance tile:
//! `distance_tile` (norms + GEMM; from the second tile on it also appends each row's keys
//! under its running bound to a shortlist) -> `select_rows` on the dense tile (the first
//! tile, and rows whose shortlist overflowed) -> a merge into the running kc best. Then
//! `exact_keys` computes float64 keys of the final candidates and `certify_rows` ranks them
//! and checks each row's certificate, so that only k answers per row come back; without
//! SHADER_F64 (or for kc > 2048) the candidate lists come back and the host does both
//! (`refine`).

mod context;
pub mod shaders;

use std::sync::mpsc;

use rayon::prelude::*;

use wgpu::util::DeviceExt;

use crate::data::MatrixRef;
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::plan::{self, CorpusPlan, DeviceBudget, TilePlan};
use crate::refine::{BackendRanked, Candidates, Certify};
use crate::search::Options;

use context::Context;
pub use context::{adapters, AdapterReport};

/// Default GPU memory budget.
const DEFAULT_BUDGET: u64 = 1 << 30;
/// Dimension from which exact keys are computed by a workgroup per candidate.
const WIDE_ROWS: usize = 256;
/// Below this budget an out-of-memory error is final.
const MIN_RETRY_BUDGET: u64 = 8 << 20;
/// Uniform slots are this far apart (the largest `min_uniform_buffer_offset_alignment`).
const PARAM_SLOT: u64 = 256;
/// Distance tile shape (override constants of distance.wgsl).
const TILE_M: u32 = 128;
const TILE_N: u32 = 128;
const TILE_K: u32 = 16;
// distance.wgsl loads at most two 4 x 4 operand blocks per invocation and slice.
const MAX_TILE_K: u32 = 32;
// Every invocation loads at most two 4 x 4 blocks of a slice.
const _: () = assert!((TILE_M / 4 + TILE_N / 4) * (MAX_TILE_K / 4) <= 2 * (TILE_M / 8) * (TILE_N / 8));
const _: () = assert!(TILE_M.is_multiple_of(8) && TILE_N.is_multiple_of(8) && TILE_K.is_multiple_of(4));

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
    shortlist_cap: u32,
    _pad: [u32; 3],
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
    shortlist_cap: u32,
}

/// `Params` of certify.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CertifyParams {
    rows: u32,
    kc: u32,
    k: u32,
    corpus_rows: u32,
    groups_x: u32,
    floor_zero: u32,
    _pad: [u32; 2],
}

/// Largest candidate list ranked and certified on the GPU: ranking by counting costs kc^2
/// comparisons a row.
const MAX_CERTIFY_KC: usize = 2048;

/// `Params` of refine.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RefineParams {
    rows: u32,
    kc: u32,
    dim: u32,
    mode: u32,
    groups_x: u32,
    _pad: [u32; 3],
}

/// Bytes bound for each parameter block: the largest of them.
const PARAMS_SIZE: u64 = std::mem::size_of::<SelectParams>() as u64;
const _: () = assert!(std::mem::size_of::<DistanceParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<NormsParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<RefineParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<CertifyParams>() as u64 <= PARAMS_SIZE);

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
    /// Exact float64 keys of the candidates, where the adapter has SHADER_F64: an invocation
    /// per candidate, and `exact_keys_wide`, a workgroup per candidate for wide rows.
    refine: Option<(Kernel, wgpu::ComputePipeline)>,
    /// Ranking and certificate of each row (`certify.wgsl`), where the adapter has SHADER_F64.
    certify: Option<Kernel>,
    profiler: Option<Profiler>,
    /// Largest workgroup count per dispatch dimension.
    max_groups: u32,
    /// Largest distance tile, in corpus rows.
    max_column_tile: usize,
    /// The buffers of the last round of candidates, kept for the next call of the same shape
    /// (as FAISS and PyTorch keep temporary memory): creating and first touching a few GiB
    /// costs more than a small graph's whole computation.
    tile_cache: std::sync::Mutex<Option<(TileKey, TileBuffers)>>,
    max_binding: u64,
    /// Bytes the engine may allocate; halved after each out-of-memory error.
    budget: std::sync::atomic::AtomicU64,
}

#[derive(Clone, Copy)]
enum Slot {
    Storage { read_only: bool },
}

fn kernel(
    ctx: &Context,
    name: &str,
    source: &str,
    entry: &str,
    slots: &[Slot],
    constants: &[(&str, f64)],
    checks: Checks,
) -> Kernel {
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
    let module = shader_module(ctx, name, source, checks);
    let pipeline = pipeline(ctx, name, &layout, &module, entry, constants);
    Kernel { pipeline, layout }
}

/// How much the runtime guards a shader's memory accesses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checks {
    /// wgpu's bounds checks on every access.
    Checked,
    /// None: for kernels whose every access is guarded by an explicit range check in the
    /// WGSL itself (the distance GEMM, where the checks cost most of its speed).
    Unchecked,
}

fn shader_module(ctx: &Context, name: &str, source: &str, checks: Checks) -> wgpu::ShaderModule {
    let desc = wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(source.into()) };
    match checks {
        Checks::Checked => ctx.device.create_shader_module(desc),
        // SAFETY: only used for shaders whose storage and workgroup indices are all checked
        // against the buffer extents in the shader (see `Checks::Unchecked`).
        Checks::Unchecked => unsafe {
            ctx.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
        },
    }
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
/// Prepared corpus rows are also the query rows of a graph, copied on the GPU.
const STORAGE_COPY_SRC: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC);
const RW: Slot = Slot::Storage { read_only: false };

impl GpuEngine {
    pub fn new(options: &Options, hardware_only: bool) -> Result<Self> {
        let (_instance, adapters) = context::discover();
        let chosen =
            context::choose_adapter(&adapters, options.adapter.as_deref(), hardware_only && options.adapter.is_none())?;
        let ctx = Context::open(&adapters[chosen], !options.no_subgroups, options.profile)?;
        let depth = options.distance_tile_depth.unwrap_or(TILE_K);
        let tile_bytes = depth * (TILE_M + TILE_N) * 4;
        if ![4, 8, 16, MAX_TILE_K].contains(&depth) || tile_bytes > ctx.limits.max_compute_workgroup_storage_size {
            return Err(Error::arg(
                "tile-depth",
                format!(
                    "distance tile depth {depth}: must be 4, 8, 16 or 32 and its {tile_bytes} bytes of workgroup memory \
                     fit the adapter's {}",
                    ctx.limits.max_compute_workgroup_storage_size
                ),
            ));
        }
        let tile = [("BM", TILE_M as f64), ("BN", TILE_N as f64), ("BK", depth as f64)];
        let select_slots = [RO, RW, RW, RW, RW, RW, RW, RO];
        let (norms, distance, select, merge_per_subgroup) = ctx.allocating(|| {
            let select = kernel(
                &ctx,
                "select",
                &shaders::select(ctx.subgroups),
                "select_rows",
                &select_slots,
                &[],
                Checks::Checked,
            );
            // Same module and layout, other entry point: pipelines share the bind groups.
            let merge = ctx.subgroups.then(|| {
                let module = shader_module(&ctx, "select", &shaders::select(true), Checks::Checked);
                pipeline(&ctx, "merge per subgroup", &select.layout, &module, "select_rows_per_subgroup", &[])
            });
            (
                kernel(&ctx, "norms", shaders::NORMS, "prepare_rows", &[RO, RO, RW, RW], &[], Checks::Checked),
                kernel(
                    &ctx,
                    "distance",
                    shaders::DISTANCE,
                    "distance_tile",
                    &[RO, RO, RO, RO, RO, RW, RW, RW],
                    &tile,
                    Checks::Unchecked,
                ),
                select,
                merge,
            )
        })?;
        ctx.wait()?;
        let max_binding = ctx.limits.max_storage_buffer_binding_size.min(ctx.limits.max_buffer_size);
        let budget = options.memory_budget.unwrap_or(DEFAULT_BUDGET).into();
        let profiler = if ctx.timestamps {
            let capacity = 4096;
            Some(Profiler {
                queries: ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("kernel timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: capacity,
                }),
                resolved: ctx.allocating(|| {
                    ctx.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("timestamps"),
                        size: capacity as u64 * 8,
                        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                        mapped_at_creation: false,
                    })
                })?,
                capacity,
                times: Default::default(),
            })
        } else {
            None
        };
        let mut max_groups = ctx.limits.max_compute_workgroups_per_dimension.max(1);
        if let Some(m) = options.max_workgroups_per_dimension {
            max_groups = max_groups.min(m.max(1));
        }
        let certify = if ctx.f64 {
            let slots = [RO, RO, RO, RO, RW, RW, RW];
            Some(ctx.allocating(|| {
                kernel(&ctx, "certify", shaders::CERTIFY, "certify_rows", &slots, &[], Checks::Checked)
            })?)
        } else {
            None
        };
        let refine = if ctx.f64 {
            let slots = [RO, RO, RO, RW];
            Some(ctx.allocating(|| {
                let narrow = kernel(&ctx, "refine", shaders::REFINE, "exact_keys", &slots, &[], Checks::Checked);
                let module = shader_module(&ctx, "refine", shaders::REFINE, Checks::Checked);
                let wide = pipeline(&ctx, "refine wide", &narrow.layout, &module, "exact_keys_wide", &[]);
                (narrow, wide)
            })?)
        } else {
            None
        };
        Ok(GpuEngine {
            ctx,
            norms,
            distance,
            select,
            merge_per_subgroup,
            refine,
            certify,
            profiler,
            max_groups,
            max_column_tile: options.max_column_tile.unwrap_or(plan::MAX_COLUMN_TILE).max(1),
            tile_cache: Default::default(),
            max_binding,
            budget,
        })
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
            "workgroup select, no subgroups".to_string()
        };
        let rerank = if self.refine.is_some() { ", f64 re-ranking" } else { "" };
        format!("gpu: {} ({:?}, {select}{rerank})", i.name, i.backend)
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
        // Cached buffers of another corpus shape would count against this one's budget.
        {
            let mut cache = self.tile_cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.as_ref().is_some_and(|(key, _)| key.corpus != (corpus.rows(), corpus.cols())) {
                *cache = None;
            }
        }
        let plan = plan::plan_corpus(corpus.rows(), corpus.cols(), self.budget())?;
        let shift_buf = self.upload("shift", bytemuck::cast_slice(shift))?;
        let mut session =
            CorpusSession { gpu: self, corpus, metric, plan, shift: shift_buf, resident: Vec::new(), raw_corpus: None };
        // Exact re-ranking on the GPU needs the original rows in one binding, beside the
        // prepared ones, within the budget.
        let raw_bytes = (corpus.rows() * corpus.cols() * 4) as u64;
        let keep_raw = self.refine.is_some()
            && plan.resident
            && plan.chunk_rows >= corpus.rows()
            && raw_bytes <= self.max_binding
            && raw_bytes + corpus.rows() as u64 * plan::prepared_row_bytes(corpus.cols()) <= self.budget().budget / 2;
        if plan.resident {
            for first in (0..corpus.rows()).step_by(plan.chunk_rows) {
                let (chunk, raw) = session.prepare_chunk(first, plan.chunk_rows.min(corpus.rows() - first))?;
                session.resident.push(chunk);
                if keep_raw {
                    session.raw_corpus = Some(raw);
                }
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

/// What a dispatch does, for profiles.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    Norms,
    Distance,
    SelectRows,
    Merge,
    Refine,
    RefineWide,
    Certify,
}

/// One dispatch: kernel, parameter slot, workgroups, bind group.
struct Job<'b> {
    step: Step,
    offset: u32,
    groups: (u32, u32),
    bind: &'b wgpu::BindGroup,
}

/// Prepared rows on the GPU: vec4-padded vectors and squared norms.
struct PreparedRows {
    first: usize,
    rows: usize,
    vectors: wgpu::Buffer,
    norms: wgpu::Buffer,
}

/// Uniform parameters of one submission, one 256-byte slot per dispatch.
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

/// 2-D dispatch for `groups` workgroups: no dimension may exceed `max` (65535 on every
/// adapter wgpu exposes). Kernels recover the linear index as x + y * groups_x.
fn grid(groups: usize, max: u32) -> (u32, u32) {
    let x = groups.clamp(1, max as usize);
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

/// GPU time per kernel, from timestamp queries, and host time spent moving data.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuTimes {
    /// Row preparation (`norms.wgsl`: centring, normalisation, squared norms).
    pub prepare_rows: f64,
    /// Distance tiles (`distance.wgsl`).
    pub distance: f64,
    /// Selection of each tile's candidates (`select_rows` on distance tiles).
    pub select: f64,
    /// Merging each tile's candidates into the running lists.
    pub merge: f64,
    /// Exact float64 keys of the final candidates (`refine.wgsl`) and, for moderate kc, their
    /// ranking and certificate (`certify.wgsl`); adapters with SHADER_F64.
    pub refine: f64,
    /// Host time uploading inputs and reading candidates back.
    pub transfers: f64,
    /// GPU time from the first kernel's start to the last kernel's end, summed over
    /// submissions: kernels plus the gaps between them (barriers, ramp-up and tails).
    pub span: f64,
    /// Host time from each submission to its completion, summed: `span` plus launch and
    /// completion latency.
    pub submitted: f64,
    /// Host time creating the buffers of a round of candidates and the host arrays that
    /// receive them.
    pub allocation: f64,
}

impl GpuTimes {
    fn add(&mut self, step: Step, seconds: f64) {
        match step {
            Step::Norms => self.prepare_rows += seconds,
            Step::Distance => self.distance += seconds,
            Step::SelectRows => self.select += seconds,
            Step::Merge => self.merge += seconds,
            Step::Refine | Step::RefineWide | Step::Certify => self.refine += seconds,
        }
    }
}

/// Timestamp queries around every dispatch, where the adapter allows them inside passes.
struct Profiler {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    capacity: u32,
    times: std::sync::Mutex<GpuTimes>,
}

impl GpuEngine {
    /// Takes the times recorded since the last call; `None` without profiling.
    pub fn take_profile(&self) -> Option<GpuTimes> {
        let p = self.profiler.as_ref()?;
        Some(std::mem::take(&mut *p.times.lock().unwrap_or_else(|e| e.into_inner())))
    }

    fn add_transfer_time(&self, since: std::time::Instant) {
        if let Some(p) = &self.profiler {
            p.times.lock().unwrap_or_else(|e| e.into_inner()).transfers += since.elapsed().as_secs_f64();
        }
    }

    fn upload_uniform(&self, params: &ParamSlots) -> Result<wgpu::Buffer> {
        self.ctx.allocating(|| {
            self.ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: &params.bytes,
                usage: wgpu::BufferUsages::UNIFORM,
            })
        })
    }

    /// Records `jobs` in one compute pass (each timed when profiling), submits and waits.
    fn submit(&self, mut encoder: wgpu::CommandEncoder, jobs: &[Job<'_>]) -> Result<()> {
        let timed = self.profiler.as_ref().map(|p| (p, (jobs.len() as u32).min(p.capacity / 2)));
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for (i, job) in jobs.iter().enumerate() {
                let pipeline = match job.step {
                    Step::Norms => &self.norms.pipeline,
                    Step::Distance => &self.distance.pipeline,
                    Step::SelectRows => &self.select.pipeline,
                    Step::Merge => self.merge_per_subgroup.as_ref().unwrap_or(&self.select.pipeline),
                    Step::Refine => &self.refine.as_ref().expect("only planned with f64").0.pipeline,
                    Step::RefineWide => &self.refine.as_ref().expect("only planned with f64").1,
                    Step::Certify => &self.certify.as_ref().expect("only planned with f64").pipeline,
                };
                let stamp = timed.filter(|&(_, n)| (i as u32) < n).map(|(p, _)| p);
                if let Some(p) = stamp {
                    pass.write_timestamp(&p.queries, 2 * i as u32);
                }
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, job.bind, &[job.offset]);
                pass.dispatch_workgroups(job.groups.0, job.groups.1, 1);
                if let Some(p) = stamp {
                    pass.write_timestamp(&p.queries, 2 * i as u32 + 1);
                }
            }
        }
        let timed = timed.filter(|&(_, n)| n > 0);
        if let Some((p, n)) = timed {
            encoder.resolve_query_set(&p.queries, 0..2 * n, &p.resolved, 0);
        }
        let started = std::time::Instant::now();
        self.ctx.queue.submit([encoder.finish()]);
        self.ctx.wait()?;
        let waited = started.elapsed().as_secs_f64();
        if let Some((p, n)) = timed {
            let stamps: Vec<u64> = read_back(self, &p.resolved, Some(16 * n as usize))?;
            let period = self.ctx.queue.get_timestamp_period() as f64 * 1e-9;
            let mut times = p.times.lock().unwrap_or_else(|e| e.into_inner());
            for (i, job) in jobs.iter().take(n as usize).enumerate() {
                times.add(job.step, stamps[2 * i + 1].saturating_sub(stamps[2 * i]) as f64 * period);
            }
            times.span += stamps[2 * n as usize - 1].saturating_sub(stamps[0]) as f64 * period;
            times.submitted += waited;
        }
        Ok(())
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
}

/// What the buffers of a round of candidates depend on.
#[derive(Clone, Copy, PartialEq, Eq)]
struct TileKey {
    corpus: (usize, usize),
    tiles: TilePlan,
    kc: usize,
    column_tiles: usize,
    gpu_exact: bool,
    /// k, when rows are ranked and certified on the GPU.
    certify_k: Option<usize>,
}

/// Ranked answers of one query tile and where they go in the staging buffer.
struct CertifyBuffers {
    k: usize,
    error_bounds: wgpu::Buffer,
    ids: wgpu::Buffer,
    keys: wgpu::Buffer,
    status: wgpu::Buffer,
    keys_at: u64,
    status_at: u64,
    flags_at: u64,
}

/// Buffers of one round of candidates, reused by every query tile.
struct TileBuffers {
    raw_queries: wgpu::Buffer,
    queries: PreparedRows,
    /// Per query row: (corpus index to exclude, shortlist bound).
    row_state: wgpu::Buffer,
    failed: wgpu::Buffer,
    dist: wgpu::Buffer,
    aux_a: wgpu::Buffer,
    aux_b: wgpu::Buffer,
    candidates: wgpu::Buffer,
    shortlist_len: wgpu::Buffer,
    shortlist: wgpu::Buffer,
    uniform: wgpu::Buffer,
    /// Read-back of the running lists, then (at `flags_at`) the failure flags.
    staging: wgpu::Buffer,
    flags_at: u64,
    /// Exact keys of the candidates (with GPU re-ranking), and where they go in `staging`.
    exact: Option<(wgpu::Buffer, u64)>,
    /// Ranked answers, when rows are certified on the GPU.
    certify: Option<CertifyBuffers>,
}

impl TileBuffers {
    fn new(gpu: &GpuEngine, d: usize, key: TileKey) -> Result<Self> {
        let TileKey { tiles, kc, column_tiles, gpu_exact, certify_k, .. } = key;
        let q = tiles.query_rows;
        let storage = wgpu::BufferUsages::STORAGE;
        let copy = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let certify = match certify_k {
            Some(k) => {
                let keys_at = (q * k * 4).next_multiple_of(8) as u64;
                let status_at = keys_at + (q * k * 8) as u64;
                Some(CertifyBuffers {
                    k,
                    error_bounds: gpu.buffer("error bounds", (q * 8) as u64, storage | copy)?,
                    ids: gpu.buffer("ranked rows", (q * k * 4) as u64, storage | copy)?,
                    keys: gpu.buffer("ranked keys", (q * k * 8) as u64, storage | copy)?,
                    status: gpu.buffer("certificates", (q * 4) as u64, storage | copy)?,
                    keys_at,
                    status_at,
                    flags_at: status_at + (q * 4) as u64,
                })
            }
            None => None,
        };
        let candidate_staging =
            (q * kc * 8 + q * 4).next_multiple_of(8) as u64 + if gpu_exact { (q * kc * 8) as u64 } else { 0 };
        let staging_bytes = candidate_staging.max(certify.as_ref().map_or(0, |c| c.flags_at + (q * 4) as u64));
        Ok(TileBuffers {
            certify,
            raw_queries: gpu.buffer("queries", (q * d * 4) as u64, storage | copy)?,
            queries: PreparedRows {
                first: 0,
                rows: q,
                vectors: gpu.buffer("query rows", (q * d.div_ceil(4) * 16) as u64, storage | copy)?,
                norms: gpu.buffer("query norms", (q * 4) as u64, storage | copy)?,
            },
            row_state: gpu.buffer("row state", (q * 8) as u64, storage | copy)?,
            failed: gpu.buffer("failed", (q * 4) as u64, storage | copy)?,
            dist: gpu.buffer("distances", (q * tiles.dist_stride * 4) as u64, storage)?,
            aux_a: gpu.buffer("aux a", (q * tiles.scratch_stride * 8) as u64, storage)?,
            aux_b: gpu.buffer("aux b", (q * tiles.scratch_stride * 8) as u64, storage)?,
            candidates: gpu.buffer("candidates", (q * 2 * kc * 8) as u64, storage | copy)?,
            shortlist_len: gpu.buffer("shortlist lengths", (q * 4) as u64, storage | copy)?,
            shortlist: gpu.buffer("shortlists", (q * tiles.shortlist_cap * 8).max(8) as u64, storage)?,
            uniform: gpu.buffer(
                "params",
                (1 + 3 * column_tiles as u64) * PARAM_SLOT,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            )?,
            staging: gpu.buffer(
                "read-back",
                staging_bytes,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?,
            flags_at: (q * kc * 8) as u64,
            exact: if gpu_exact {
                let keys = gpu.buffer("exact keys", (q * kc * 8) as u64, storage | copy)?;
                Some((keys, (q * kc * 8 + q * 4).next_multiple_of(8) as u64))
            } else {
                None
            },
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
}

impl CorpusSession<'_> {
    /// Records copies of corpus rows `q0..q0 + rows`, prepared and (where kept) original, into
    /// the query buffers.
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
        if let Some(raw) = &self.raw_corpus {
            let raw_row = (d * 4) as u64;
            encoder.copy_buffer_to_buffer(raw, q0 as u64 * raw_row, &b.raw_queries, 0, rows as u64 * raw_row);
        }
    }

    /// Uploads rows `first..first + rows` of the corpus and prepares them; also returns the
    /// uploaded original rows.
    fn prepare_chunk(&self, first: usize, rows: usize) -> Result<(PreparedRows, wgpu::Buffer)> {
        let gpu = self.gpu;
        let d = self.corpus.cols();
        let dim4 = d.div_ceil(4);
        let started = std::time::Instant::now();
        let raw = gpu.upload("corpus", bytemuck::cast_slice(&self.corpus.as_slice()[first * d..(first + rows) * d]))?;
        gpu.add_transfer_time(started);
        let chunk = PreparedRows {
            first,
            rows,
            vectors: gpu.buffer("corpus rows", (rows * dim4 * 16) as u64, STORAGE_COPY_SRC)?,
            norms: gpu.buffer("corpus norms", (rows * 4) as u64, STORAGE_COPY_SRC)?,
        };
        let mut params = ParamSlots::default();
        let (gx, gy) = grid(rows, gpu.max_groups);
        let offset = params.push(self.norms_params(rows, d, gx));
        let uniform = gpu.upload_uniform(&params)?;
        let bind = bind_group(
            &gpu.ctx.device,
            &gpu.norms.layout,
            &uniform,
            &[&raw, &self.shift, &chunk.vectors, &chunk.norms],
        );
        let job = Job { step: Step::Norms, offset, groups: (gx, gy), bind: &bind };
        gpu.submit(gpu.ctx.device.create_command_encoder(&Default::default()), &[job])?;
        Ok((chunk, raw))
    }

    fn norms_params(&self, rows: usize, d: usize, groups_x: u32) -> NormsParams {
        NormsParams {
            rows: rows as u32,
            dim: d as u32,
            dim4: d.div_ceil(4) as u32,
            mode: metric_modes(self.metric).0,
            groups_x,
            in_offset: 0,
            _pad: [0; 2],
        }
    }

    /// The kc best fp32 candidates of every query, tile by tile.
    pub fn candidates(
        &mut self,
        queries: MatrixRef<'_>,
        exclude: &[u32],
        kc: usize,
        certify: Option<&Certify<'_>>,
        report: &(dyn Fn(usize) + Sync),
    ) -> Result<Candidates> {
        let gpu = self.gpu;
        let nq = queries.rows();
        let d = queries.cols();
        let tiles = plan::plan_tiles(nq, d, kc, self.plan, self.corpus.rows(), gpu.max_column_tile, gpu.budget())?;
        let q = tiles.query_rows;
        let column_tiles = if self.plan.resident {
            self.resident.iter().map(|c| c.rows.div_ceil(tiles.column_tile)).sum::<usize>()
        } else {
            self.plan.chunk_rows.div_ceil(tiles.column_tile)
        };
        let gpu_exact = self.raw_corpus.is_some();
        let started = std::time::Instant::now();
        // Ranking on the GPU needs its exact keys, and costs kc^2 a row.
        let certify = certify.filter(|_| gpu_exact && gpu.certify.is_some() && kc <= MAX_CERTIFY_KC);
        let certify_k = certify.map(|c| c.k);
        let key = TileKey { corpus: (self.corpus.rows(), d), tiles, kc, column_tiles, gpu_exact, certify_k };
        let mut cached = gpu.tile_cache.lock().unwrap_or_else(|e| e.into_inner()).take();
        if cached.as_ref().is_some_and(|(k, _)| *k != key) {
            // Freed before the new set is allocated.
            cached = None;
        }
        let buffers = match cached {
            Some((_, buffers)) => buffers,
            None => TileBuffers::new(gpu, d, key)?,
        };
        // Ranked rows need only k answers each on the host.
        let lists = if certify.is_some() { 0 } else { nq * kc };
        let mut out = Candidates {
            exact: (gpu_exact && certify.is_none()).then(|| vec![0.0; lists]),
            kc,
            keys: vec![f32::INFINITY; lists],
            ids: vec![u32::MAX; lists],
            failed: vec![false; nq],
            shortlisted: 0,
            ranked: certify.map(|c| BackendRanked {
                k: c.k,
                ids: vec![u32::MAX; nq * c.k],
                keys: vec![0.0; nq * c.k],
                status: vec![1; nq],
            }),
        };
        if let Some(p) = &gpu.profiler {
            p.times.lock().unwrap_or_else(|e| e.into_inner()).allocation += started.elapsed().as_secs_f64();
        }
        // A graph's queries are the resident corpus rows: copied on the GPU, not uploaded and
        // prepared again.
        let from_corpus = self.plan.resident
            && queries.rows() == self.corpus.rows()
            && std::ptr::eq(queries.as_slice().as_ptr(), self.corpus.as_slice().as_ptr());
        for q0 in (0..nq).step_by(q) {
            let rows = q.min(nq - q0);
            let tile = QueryTile { q0, rows, from_corpus };
            self.query_tile(queries, tile, &exclude[q0..q0 + rows], kc, certify, tiles, &buffers, &mut out)?;
            report(q0 + rows);
        }
        *gpu.tile_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, buffers));
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn query_tile(
        &self,
        queries: MatrixRef<'_>,
        tile: QueryTile,
        exclude: &[u32],
        kc: usize,
        certify: Option<&Certify<'_>>,
        tiles: TilePlan,
        b: &TileBuffers,
        out: &mut Candidates,
    ) -> Result<()> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let d = queries.cols();
        let QueryTile { q0, rows, from_corpus } = tile;
        let started = std::time::Instant::now();
        if !from_corpus {
            gpu.ctx.queue.write_buffer(
                &b.raw_queries,
                0,
                bytemuck::cast_slice(&queries.as_slice()[q0 * d..(q0 + rows) * d]),
            );
        }
        // No bound before the first tile.
        let row_state: Vec<[u32; 2]> = exclude.iter().map(|&e| [e, f32::INFINITY.to_bits()]).collect();
        gpu.ctx.queue.write_buffer(&b.row_state, 0, bytemuck::cast_slice(&row_state));
        gpu.add_transfer_time(started);

        let select_bind = bind_group(
            device,
            &gpu.select.layout,
            &b.uniform,
            &[&b.dist, &b.aux_a, &b.aux_b, &b.candidates, &b.failed, &b.row_state, &b.shortlist_len, &b.shortlist],
        );
        let norms_bind = bind_group(
            device,
            &gpu.norms.layout,
            &b.uniform,
            &[&b.raw_queries, &self.shift, &b.queries.vectors, &b.queries.norms],
        );
        let distance_bind = |chunk: &PreparedRows| {
            bind_group(
                device,
                &gpu.distance.layout,
                &b.uniform,
                &[
                    &b.queries.vectors,
                    &chunk.vectors,
                    &b.queries.norms,
                    &chunk.norms,
                    &b.row_state,
                    &b.dist,
                    &b.shortlist_len,
                    &b.shortlist,
                ],
            )
        };

        // A resident corpus goes in one submission; a streamed one a chunk at a time.
        let starts: Vec<usize> = (0..self.corpus.rows()).step_by(self.plan.chunk_rows).collect();
        let batches: Vec<Vec<usize>> = if self.plan.resident {
            vec![(0..starts.len()).collect()]
        } else {
            (0..starts.len()).map(|i| vec![i]).collect()
        };
        let mut first_tile = true;
        for (batch_no, batch) in batches.iter().enumerate() {
            let streamed: Vec<PreparedRows> = if self.plan.resident {
                Vec::new()
            } else {
                batch
                    .iter()
                    .map(|&c| {
                        let rows = self.plan.chunk_rows.min(self.corpus.rows() - starts[c]);
                        self.prepare_chunk(starts[c], rows).map(|(chunk, _)| chunk)
                    })
                    .collect::<Result<_>>()?
            };
            let chunks: Vec<&PreparedRows> = if self.plan.resident {
                batch.iter().map(|&c| &self.resident[c]).collect()
            } else {
                streamed.iter().collect()
            };
            let distance_binds: Vec<wgpu::BindGroup> = chunks.iter().map(|c| distance_bind(c)).collect();

            let mut params = ParamSlots::default();
            let mut jobs = Vec::new();
            if batch_no == 0 && !from_corpus {
                let (gx, gy) = grid(rows, gpu.max_groups);
                let offset = params.push(self.norms_params(rows, d, gx));
                jobs.push(Job { step: Step::Norms, offset, groups: (gx, gy), bind: &norms_bind });
            }
            for (chunk, dbind) in chunks.iter().zip(&distance_binds) {
                for c0 in (0..chunk.rows).step_by(tiles.column_tile) {
                    let cols = tiles.column_tile.min(chunk.rows - c0);
                    let col_base = (chunk.first + c0) as u32;
                    // From the second tile on, rows have a bound and keys under it go to
                    // their shortlists.
                    let shortlist_cap = if first_tile { 0 } else { tiles.shortlist_cap as u32 };
                    let (gx, gy) =
                        grid(rows.div_ceil(TILE_M as usize) * cols.div_ceil(TILE_N as usize), gpu.max_groups);
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
                        _pad: [0; 3],
                    });
                    jobs.push(Job { step: Step::Distance, offset, groups: (gx, gy), bind: dbind });
                    let (sx, sy) = grid(rows, gpu.max_groups);
                    // Running lists of all rows first, then the latest tile's lists.
                    let tile_region = (tiles.query_rows * kc) as u32;
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
                    if !first_tile {
                        // Merge: the kc best of the running list and the tile's list.
                        let merge = SelectParams { len: 2 * kc as u32, in_stride: tile_region, ..select };
                        let (offset, groups) = match gpu.rows_per_subgroup_group() {
                            Some(per_group) => {
                                let groups = grid(rows.div_ceil(per_group as usize), gpu.max_groups);
                                (
                                    params.push(SelectParams {
                                        groups_x: groups.0,
                                        rows_per_group: per_group,
                                        ..merge
                                    }),
                                    groups,
                                )
                            }
                            None => (params.push(merge), (sx, sy)),
                        };
                        jobs.push(Job { step: Step::Merge, offset, groups, bind: &select_bind });
                    }
                    first_tile = false;
                }
            }
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            let mut encoder = device.create_command_encoder(&Default::default());
            if batch_no == 0 {
                encoder.clear_buffer(&b.failed, 0, None);
                encoder.clear_buffer(&b.shortlist_len, 0, None);
                if from_corpus {
                    self.copy_corpus_rows(&mut encoder, q0, rows, b);
                }
            }
            gpu.submit(encoder, &jobs)?;
        }

        if let (Some((keys, _)), Some(raw_corpus), Some(refine)) = (&b.exact, &self.raw_corpus, &gpu.refine) {
            // Rows of a few hundred values and more are read faster by a workgroup each.
            let wide = d >= WIDE_ROWS;
            let groups = if wide { rows * kc } else { (rows * kc).div_ceil(64) };
            let (gx, gy) = grid(groups, gpu.max_groups);
            let mut params = ParamSlots::default();
            let offset = params.push(RefineParams {
                rows: rows as u32,
                kc: kc as u32,
                dim: d as u32,
                mode: match self.metric {
                    Metric::Euclidean | Metric::SqEuclidean => 0,
                    Metric::Cosine => 1,
                    Metric::Correlation => 2,
                    Metric::InnerProduct => 3,
                },
                groups_x: gx,
                _pad: [0; 3],
            });
            let bind =
                bind_group(device, &refine.0.layout, &b.uniform, &[&b.raw_queries, raw_corpus, &b.candidates, keys]);
            let step = if wide { Step::RefineWide } else { Step::Refine };
            let mut jobs = vec![Job { step, offset, groups: (gx, gy), bind: &bind }];
            let certify_bind;
            if let (Some(cb), Some(kernel), Some(c)) = (&b.certify, &gpu.certify, certify) {
                gpu.ctx.queue.write_buffer(&cb.error_bounds, 0, bytemuck::cast_slice(&c.error_bounds[q0..q0 + rows]));
                let (gx, gy) = grid(rows, gpu.max_groups);
                let offset = params.push(CertifyParams {
                    rows: rows as u32,
                    kc: kc as u32,
                    k: cb.k as u32,
                    corpus_rows: self.corpus.rows() as u32,
                    groups_x: gx,
                    floor_zero: c.floor_zero as u32,
                    _pad: [0; 2],
                });
                certify_bind = bind_group(
                    device,
                    &kernel.layout,
                    &b.uniform,
                    &[&b.candidates, keys, &b.row_state, &cb.error_bounds, &cb.ids, &cb.keys, &cb.status],
                );
                jobs.push(Job { step: Step::Certify, offset, groups: (gx, gy), bind: &certify_bind });
            }
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            gpu.submit(device.create_command_encoder(&Default::default()), &jobs)?;
        }

        if let (Some(cb), Some(ranked)) = (&b.certify, out.ranked.as_mut()) {
            // Only the ranked answers, the certificates and the failure flags come back.
            let started = std::time::Instant::now();
            let k = cb.k;
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(&cb.ids, 0, &b.staging, 0, (rows * k * 4) as u64);
            encoder.copy_buffer_to_buffer(&cb.keys, 0, &b.staging, cb.keys_at, (rows * k * 8) as u64);
            encoder.copy_buffer_to_buffer(&cb.status, 0, &b.staging, cb.status_at, (rows * 4) as u64);
            encoder.copy_buffer_to_buffer(&b.failed, 0, &b.staging, cb.flags_at, (rows * 4) as u64);
            gpu.ctx.queue.submit([encoder.finish()]);
            map_and_read(gpu, &b.staging, |bytes| {
                let at = |offset: u64, len: usize| &bytes[offset as usize..offset as usize + len];
                parallel_copy(&mut ranked.ids[q0 * k..(q0 + rows) * k], bytemuck::cast_slice(at(0, rows * k * 4)));
                parallel_copy(
                    &mut ranked.keys[q0 * k..(q0 + rows) * k],
                    bytemuck::cast_slice(at(cb.keys_at, rows * k * 8)),
                );
                ranked.status[q0..q0 + rows].copy_from_slice(bytemuck::cast_slice(at(cb.status_at, rows * 4)));
                let flags: &[u32] = bytemuck::cast_slice(at(cb.flags_at, rows * 4));
                for (failed, &flag) in out.failed[q0..q0 + rows].iter_mut().zip(flags) {
                    *failed = flag & 1 != 0;
                    out.shortlisted += (flag >> 1 & 1) as usize;
                }
            })?;
            gpu.add_transfer_time(started);
            return Ok(());
        }

        // One copy of the running lists, the failure flags and the exact keys into the
        // staging buffer.
        let started = std::time::Instant::now();
        let pair_bytes = (rows * kc * 8) as u64;
        let mut encoder = device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&b.candidates, 0, &b.staging, 0, pair_bytes);
        encoder.copy_buffer_to_buffer(&b.failed, 0, &b.staging, b.flags_at, (rows * 4) as u64);
        if let Some((keys, at)) = &b.exact {
            encoder.copy_buffer_to_buffer(keys, 0, &b.staging, *at, pair_bytes);
        }
        gpu.ctx.queue.submit([encoder.finish()]);
        map_and_read(gpu, &b.staging, |bytes| {
            let pairs: &[[u32; 2]] = bytemuck::cast_slice(&bytes[..pair_bytes as usize]);
            let flags: &[u32] = bytemuck::cast_slice(&bytes[b.flags_at as usize..b.flags_at as usize + rows * 4]);
            let keys = &mut out.keys[q0 * kc..(q0 + rows) * kc];
            let ids = &mut out.ids[q0 * kc..(q0 + rows) * kc];
            // Mapped memory is uncached on some systems: unpack it once, on every core.
            pairs.par_iter().zip(keys.par_iter_mut()).zip(ids.par_iter_mut()).for_each(|((pair, key), id)| {
                *key = f32::from_bits(pair[0]);
                *id = pair[1];
            });
            // Bit 0: unfinished; bit 1: took a shortlist.
            for (failed, &flag) in out.failed[q0..q0 + rows].iter_mut().zip(flags) {
                *failed = flag & 1 != 0;
                out.shortlisted += (flag >> 1 & 1) as usize;
            }
            if let (Some((_, at)), Some(exact)) = (&b.exact, out.exact.as_mut()) {
                let keys: &[f64] = bytemuck::cast_slice(&bytes[*at as usize..*at as usize + pair_bytes as usize]);
                parallel_copy(&mut exact[q0 * kc..(q0 + rows) * kc], keys);
            }
        })?;
        gpu.add_transfer_time(started);
        Ok(())
    }
}

/// Copies out of mapped memory on every core: a single core reads uncached mapped memory at a
/// few GB/s (measured: 786 MB of ranked answers took 450 ms).
fn parallel_copy<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) {
    dst.par_chunks_mut(1 << 16).zip(src.par_chunks(1 << 16)).for_each(|(d, s)| d.copy_from_slice(s));
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

/// Waits for submitted work, maps `staging` and hands its bytes to `read`.
fn map_and_read(gpu: &GpuEngine, staging: &wgpu::Buffer, read: impl FnOnce(&[u8])) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    gpu.ctx.wait()?;
    rx.recv()
        .map_err(|_| Error::Gpu("buffer mapping was abandoned".into()))?
        .map_err(|e| Error::Gpu(format!("reading results back: {e}")))?;
    {
        let view = staging.get_mapped_range(..).map_err(|e| Error::Gpu(format!("reading results back: {e:?}")))?;
        read(&view);
    }
    staging.unmap();
    Ok(())
}

/// Copies the first `bytes` (default: all) of a buffer to the host.
fn read_back<T: bytemuck::Pod>(gpu: &GpuEngine, src: &wgpu::Buffer, bytes: Option<usize>) -> Result<Vec<T>> {
    let size = bytes.map_or(src.size(), |b| (b as u64).next_multiple_of(4).min(src.size()));
    let staging = gpu.buffer("staging", size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST)?;
    let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(src, 0, &staging, 0, size);
    gpu.ctx.queue.submit([encoder.finish()]);
    let mut values = Vec::new();
    map_and_read(gpu, &staging, |bytes| values = bytemuck::pod_collect_to_vec(bytes))?;
    Ok(values)
}

impl GpuEngine {
    /// Times `select_rows` alone: the `k` smallest of each of `rows` rows of `cols` uniform
    /// random keys, as on one distance tile, after one untimed warm-up tile. Returns (wall
    /// seconds from the first timed submission to the last completion, GPU times from
    /// timestamps when profiling).
    pub fn bench_select(&self, rows: usize, cols: usize, k: usize, seed: u64) -> Result<(f64, Option<GpuTimes>)> {
        if k == 0 || k > cols {
            return Err(Error::arg("k", format!("k = {k} must be between 1 and the row length {cols}")));
        }
        let row_bytes = cols as u64 * 8;
        let tile_rows = (self.max_binding / row_bytes).min(rows as u64).min(65535) as usize;
        if tile_rows == 0 {
            return Err(Error::TooLargeForDevice(format!("a row of {cols} keys does not fit one binding")));
        }
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        let keys: Vec<f32> = (0..tile_rows * cols)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect();
        let dist = self.buffer("keys", (tile_rows * cols * 4) as u64, storage)?;
        self.ctx.queue.write_buffer(&dist, 0, bytemuck::cast_slice(&keys));
        let aux_a = self.buffer("aux a", tile_rows as u64 * row_bytes, storage)?;
        let aux_b = self.buffer("aux b", tile_rows as u64 * row_bytes, storage)?;
        let out = self.buffer("selected", (tile_rows * k * 8) as u64, storage)?;
        let failed = self.buffer("failed", (tile_rows * 4) as u64, storage)?;
        // Bounds are written, shortlists unused (one tile, no merge).
        let row_state = self.buffer("row state", (tile_rows * 8) as u64, storage)?;
        let no_shortlist_len = self.buffer("no shortlist lengths", 16, storage)?;
        let no_shortlist = self.buffer("no shortlist", 16, storage)?;
        self.ctx.wait()?;
        // One untimed tile first: the buffers' first use (zero-fill, driver allocation)
        // would otherwise be timed as selection.
        let mut started = std::time::Instant::now();
        for (tile_no, r0) in std::iter::once(0).chain((0..rows).step_by(tile_rows)).enumerate() {
            if tile_no == 1 {
                self.take_profile();
                started = std::time::Instant::now();
            }
            let r = tile_rows.min(rows - r0);
            let (gx, gy) = grid(r, self.max_groups);
            let mut params = ParamSlots::default();
            let offset = params.push(SelectParams {
                rows: r as u32,
                len: cols as u32,
                in_stride: cols as u32,
                need: k as u32,
                scratch_stride: cols as u32,
                out_stride: k as u32,
                dense: 1,
                groups_x: gx,
                ..Default::default()
            });
            let uniform = self.upload_uniform(&params)?;
            let bind = bind_group(
                &self.ctx.device,
                &self.select.layout,
                &uniform,
                &[&dist, &aux_a, &aux_b, &out, &failed, &row_state, &no_shortlist_len, &no_shortlist],
            );
            let job = Job { step: Step::SelectRows, offset, groups: (gx, gy), bind: &bind };
            self.submit(self.ctx.device.create_command_encoder(&Default::default()), &[job])?;
        }
        let wall = started.elapsed().as_secs_f64();
        // A benchmark of wrong answers would be worthless: check the flags, and the first
        // row of the last tile against a sort on the host.
        let flags: Vec<u32> = read_back(self, &failed, None)?;
        let selected: Vec<[u32; 2]> = read_back(self, &out, Some(k * 8))?;
        let mut want = keys[..cols].to_vec();
        want.sort_by(f32::total_cmp);
        let mut got: Vec<f32> = selected.iter().map(|p| f32::from_bits(p[0])).collect();
        got.sort_by(f32::total_cmp);
        let unfinished = flags.iter().filter(|&&f| f & 1 != 0).count();
        if unfinished > 0 {
            return Err(Error::Gpu(format!(
                "select-only benchmark: {unfinished} of the last {} rows did not finish within the pass limit \
                 (the search falls back to the host for such rows)",
                flags.len()
            )));
        }
        if got != want[..k] {
            return Err(Error::Gpu("select-only benchmark: the selection differs from a host sort".into()));
        }
        Ok((wall, self.take_profile()))
    }
}
