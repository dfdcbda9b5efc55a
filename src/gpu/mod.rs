//! The GPU backend: WGSL kernels through wgpu.
//!
//! Per query tile and corpus chunk, one submission runs, for every distance tile:
//! `distance_tile` (norms + GEMM; from the second tile on it also appends each row's keys
//! under its running bound to a shortlist) -> `select_rows` on the dense tile (the first
//! tile, and rows whose shortlist overflowed) -> a merge into the running kc best. Then
//! `exact_keys` computes float64 keys of the final candidates and `certify_rows` ranks them
//! and checks each row's certificate (lists longer than 1024: `sort_runs` and `certify_runs`),
//! so that only k answers per row come back; without SHADER_F64 the candidate lists come back
//! and the host does both (`refine`).
//!
//! This module holds the engine (device, pipelines, submission, profiling); `session` a
//! prepared corpus and the candidate search against it; `context` adapter discovery and
//! error capture; `shaders` the WGSL sources; `bench` the select-only benchmark.

mod bench;
mod context;
mod diagnose;
mod session;
pub mod shaders;

pub(crate) use session::CorpusSession;
use session::{CorpusBuffers, TileBuffers, TileKey};

use std::sync::mpsc;

use rayon::prelude::*;

use wgpu::util::DeviceExt;

use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::plan::{self, DeviceBudget, WIDE_ROWS};

pub(crate) use context::identical_gpus;
use context::Context;
pub use context::{adapters, AdapterReport};
pub use diagnose::missing_gpu_hint;

/// Default GPU memory budget: wgpu does not report how much memory an adapter has, so this
/// is what any adapter of its kind can be expected to hold. Discrete GPUs of the last several
/// years have 6 GiB or more; integrated and software adapters share the host's memory. An
/// allocation that fails anyway halves the budget and runs again (`retry_smaller`).
const DEFAULT_BUDGET: u64 = 1 << 30;
const DISCRETE_BUDGET: u64 = 4 << 30;
/// Dimension from which exact keys are computed by a group of invocations per candidate.
const GROUPED_ROWS: usize = 32;
/// Invocations in a workgroup of refine.wgsl (`WG`).
const REFINE_WG: usize = 64;
// Every group width (`group_width`: at most 8) divides the workgroup.
const _: () = assert!(REFINE_WG.is_multiple_of(8));

/// Invocations per candidate of `exact_keys_grouped` over rows of `dim4` vec4s: the most, up to
/// 8, that leave each at least 8 vec4s to read. More invocations per candidate mean more
/// partial sums through workgroup memory and more registers idle; fewer, a longer loop each.
/// The widths measured: `notes/exactness.md`.
fn refine_group(dim4: usize) -> usize {
    group_width(dim4, 8, 8)
}

/// Invocations per candidate of `exact_keys_grouped` over rows of `d` values read one at a
/// time (lengths not a multiple of 4): the most, up to 4, that leave each at least 16 values.
/// Eight invocations were the slowest but one at every length measured (`notes/exactness.md`).
fn scalar_refine_group(d: usize) -> usize {
    group_width(d, 4, 16)
}

/// The most invocations, a power of two up to `most`, that leave each at least `each` of a
/// row's `len` loads.
fn group_width(len: usize, most: usize, each: usize) -> usize {
    let mut group = most;
    while group > 1 && len < each * group {
        group /= 2;
    }
    group
}
/// Uploads larger than this are split into parts written by several cores, a group of one
/// part per core submitted at a time (2 MiB: eight groups at d=4096 n=16384, whose copies
/// overlap the writing of the next; 8 MiB parts gave two groups and no gain).
const UPLOAD_PART: usize = 2 << 20;
/// Below this budget an out-of-memory error is final.
const MIN_RETRY_BUDGET: u64 = 8 << 20;
/// Uniform slots are this far apart (the largest `min_uniform_buffer_offset_alignment`).
const PARAM_SLOT: u64 = 256;
/// The select's auxiliary arrays in binding order (select.wgsl): the keys and indices of each
/// of two arrays, apart, 4 bytes a slot.
const AUX_NAMES: [&str; 4] = ["aux a keys", "aux a indices", "aux b keys", "aux b indices"];
/// Distance tile shape (override constants of distance.wgsl).
const TILE_M: u32 = 128;
const TILE_N: u32 = 128;
const TILE_K: u32 = 16;
// distance.wgsl loads at most two 4 x 4 operand blocks per invocation and slice.
const MAX_TILE_K: u32 = 32;
// Every invocation loads at most two 4 x 4 blocks of a slice.
const _: () = assert!((TILE_M / 4 + TILE_N / 4) * (MAX_TILE_K / 4) <= 2 * (TILE_M / 8) * (TILE_N / 8));
const _: () = assert!(TILE_M.is_multiple_of(8) && TILE_N.is_multiple_of(8) && TILE_K.is_multiple_of(4));

/// Workgroup tiles of the distance GEMM over `rows` query rows and `cols` corpus rows.
fn gemm_tiles(rows: usize, cols: usize) -> usize {
    rows.div_ceil(TILE_M as usize) * cols.div_ceil(TILE_N as usize)
}

/// In the publishing distance kernel, every this many workgroups one copies answers instead of
/// computing a tile (`PUBLISH_STRIDE` in distance_publish.wgsl, built in by `shaders::distance`).
const PUBLISH_STRIDE: usize = 16;

/// Workgroups of a publishing distance dispatch of `tiles` tiles: whole runs of
/// `PUBLISH_STRIDE`, each ending in a copying workgroup.
fn publishing_groups(tiles: usize) -> usize {
    tiles.div_ceil(PUBLISH_STRIDE - 1) * PUBLISH_STRIDE
}

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
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
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
    row_base: u32,
    column_end: u32,
    column_cap: u32,
    /// Vec4s of ranked answers to publish (distance_publish.wgsl); 0: none.
    publish_len: u32,
    /// Unused by distance.wgsl; kept so that the struct's layout stays that of its `Params`.
    column_begin: u32,
    _pad: [u32; 2],
}

/// `Params` of filter_two_sided.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct FilterParams {
    rows: u32,
    cols: u32,
    stride: u32,
    row_base: u32,
    col_base: u32,
    column_begin: u32,
    cap: u32,
    groups_x: u32,
}

/// `Params` of gather_rows.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherParams {
    rows: u32,
    dim4: u32,
    first: u32,
    step: u32,
    groups_x: u32,
    _pad: [u32; 3],
}

/// `Params` of bounded_lists.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct ShortSelectParams {
    rows: u32,
    cap: u32,
    need: u32,
    row_base: u32,
    /// [`SHORT_SELECT_SAMPLE`] or [`SHORT_SELECT_LISTS`].
    mode: u32,
    groups_x: u32,
    key_stride: u32,
    _pad: u32,
}

/// bounded_lists.wgsl's modes: each row's bound from its keys against the sample, or each
/// row's kc best from its list.
const SHORT_SELECT_SAMPLE: u32 = 0;
const SHORT_SELECT_LISTS: u32 = 1;

/// Rows and columns of the block one workgroup of filter_two_sided.wgsl takes (one invocation
/// a column; the module is built with them, `shaders::filter_two_sided`). Short strips hold
/// few keys in registers, so more workgroups run at once, for more atomics a key; 16 x 256 was
/// the fastest of the shapes measured (`notes/select.md`, "Bounded sweeps").
const FILTER_STRIP: (usize, usize) = (16, 256);

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
    /// How the key becomes the reported distance ([`reported_as`]).
    reported_as: u32,
    _pad: u32,
}

/// certify.wgsl's `REPORT_*` constant for the metric: the same rule as
/// `Metric::key_to_distance`.
fn reported_as(metric: Metric) -> u32 {
    match metric {
        Metric::Euclidean => 0,
        Metric::InnerProduct => 1,
        Metric::SqEuclidean | Metric::Cosine | Metric::Correlation => 2,
    }
}

/// Lists longer than this are merged by a workgroup per row (`select_rows`) instead of a
/// subgroup (`select_rows_per_subgroup`), whose 32 lanes walk 2 kc pairs: the subgroup is
/// faster up to a few hundred pairs, the workgroup beyond (`notes/select.md`).
const WIDE_MERGE_KC: usize = 512;

/// Longest candidate list ranked and certified by one workgroup per row: certify.wgsl sorts a
/// row in workgroup memory (12 bytes a candidate); longer lists are sorted in runs this long
/// and ranked across them. 1024 rather than 2048: a list of 1250 (k=1000) was padded to a
/// 2048-wide sort, and the smaller workgroup memory keeps more rows resident
/// (`notes/exactness.md`).
pub(crate) const MAX_CERTIFY_KC: usize = 1024;
const _: () = assert!(MAX_CERTIFY_KC.is_power_of_two());

/// The entry points of certify.wgsl (one layout).
struct CertifyKernels {
    /// A workgroup per row, for lists of up to `MAX_CERTIFY_KC` candidates.
    rows: Kernel,
    /// Longer lists: each run of `MAX_CERTIFY_KC` slots sorted in place.
    sort_runs: wgpu::ComputePipeline,
    /// Longer lists: ranks across the sorted runs and the certificate.
    certify_runs: wgpu::ComputePipeline,
    /// A symmetric sweep's lists sorted by index, for exact keys shared by mutual neighbours.
    sort_by_index: wgpu::ComputePipeline,
}

/// The entry points of refine.wgsl, by row length (one layout).
struct RefineKernels {
    /// One invocation per candidate.
    narrow: Kernel,
    /// A few invocations per candidate, from `GROUPED_ROWS` values a row.
    grouped: wgpu::ComputePipeline,
    /// One workgroup per candidate, from `WIDE_ROWS` values a row.
    wide: wgpu::ComputePipeline,
    /// The same from vec4 loads, for rows of a multiple of 4 values (`refine_vec4.wgsl`).
    wide4: wgpu::ComputePipeline,
    /// Keys of pairs listed by both their rows, copied from the row that computed them.
    copy_mutual: wgpu::ComputePipeline,
    /// A few invocations per candidate from vec4 loads, for rows of a multiple of 4 values.
    grouped4: wgpu::ComputePipeline,
}

/// `Params` of refine.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RefineParams {
    rows: u32,
    kc: u32,
    dim: u32,
    mode: u32,
    groups_x: u32,
    /// See refine.wgsl.
    row_base: u32,
    mutual: u32,
    /// Invocations per candidate of `exact_keys_grouped` ([`refine_group`]).
    group: u32,
    /// The tile's first query row in the query rows' float64 norms (cosine).
    norm_base: u32,
}

/// Bytes bound for each parameter block: the largest of them.
const PARAMS_SIZE: u64 = std::mem::size_of::<DistanceParams>() as u64;
const _: () = assert!(std::mem::size_of::<SelectParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<NormsParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<RefineParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<CertifyParams>() as u64 <= PARAMS_SIZE);

struct Kernel {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// The kernels only bounded sweeps use (`plan::plan_bounded`).
struct BoundedKernels {
    /// Every step-th prepared row into the sample (`gather_rows.wgsl`).
    gather: Kernel,
    /// Bounds from the sample's keys, candidates from the lists (`bounded_lists.wgsl`).
    short_select: Kernel,
}

/// What a caller chooses of a GPU engine: its adapter, features, budget and tile shapes.
#[derive(Clone, Debug)]
pub(crate) struct GpuSettings {
    /// The adapter's index or part of its name; `None`: the preferred one.
    pub adapter: Option<String>,
    /// Select and merge without subgroup operations even where the adapter has them.
    pub no_subgroups: bool,
    /// Time every kernel with timestamp queries ([`GpuEngine::take_profile`]).
    pub profile: bool,
    /// Depth of the distance kernel's workgroup tiles (default `TILE_K`).
    pub distance_tile_depth: Option<u32>,
    /// Bytes the engine may allocate (default: by the adapter's kind).
    pub memory_budget: Option<u64>,
    /// Cap on workgroups per dispatch dimension (default: the adapter's limit).
    pub max_workgroups_per_dimension: Option<u32>,
    /// Cap on corpus rows per distance tile.
    pub max_column_tile: Option<usize>,
    /// Cap on query rows per query tile.
    pub max_query_tile: Option<usize>,
    /// Symmetric blocks for graphs: forced on or off, or `None` for the planner's choice.
    pub symmetric_graphs: Option<bool>,
    /// Bounded sweeps for graphs with long lists: forced on or off, or `None` for the
    /// planner's choice.
    pub bounded_sweeps: Option<bool>,
}

pub(crate) struct GpuEngine {
    ctx: Context,
    norms: Kernel,
    distance: Kernel,
    /// The distance kernel that also publishes ranked answers (`distance_publish.wgsl`), where
    /// mapped buffers can be bound as storage: a module of its own, so that the dispatches
    /// that publish nothing run the plain kernel, every workgroup a tile.
    distance_publish: Option<Kernel>,
    /// The two-sided filter of dense blocks (`filter_two_sided.wgsl`), built on first use by
    /// bounded sweeps.
    filter: std::sync::OnceLock<Kernel>,
    /// The sample gather and list kernels of bounded sweeps, built on first use.
    bounded: std::sync::OnceLock<BoundedKernels>,
    select: Kernel,
    /// `select_rows_per_subgroup`, for merging short candidate lists, where subgroups exist.
    merge_per_subgroup: Option<wgpu::ComputePipeline>,
    /// Exact float64 keys of the candidates, where the adapter has SHADER_F64.
    refine: Option<RefineKernels>,
    /// Ranking and certificate of each row (`certify.wgsl`), where the adapter has SHADER_F64.
    certify: Option<CertifyKernels>,
    profiler: Option<Profiler>,
    /// Largest workgroup count per dispatch dimension.
    max_groups: u32,
    /// Caps on distance tiles and query tiles.
    tile_caps: plan::TileCaps,
    /// Symmetric blocks for graphs: forced on or off, or `None` for the planner's choice.
    symmetric_graphs: Option<bool>,
    /// Graphs with long lists swept under sampled bounds (`plan::plan_bounded`): `Some(true)`
    /// wherever it fits, `Some(false)` never, `None` where the planner expects it to pay.
    bounded_sweeps: Option<bool>,
    /// The buffers of the last round of candidates, kept for the next call of the same shape
    /// (as FAISS and PyTorch keep temporary memory): creating and first touching a few GiB
    /// costs more than a small graph's whole computation. A later round, or a call whose
    /// plan differs, runs in them too where its query tiles can be cut to fit
    /// (`session::TileBuffers::new`).
    tile_cache: std::sync::Mutex<Option<(TileKey, TileBuffers)>>,
    /// The buffers of the last resident corpus, kept for the next one of the same shape:
    /// allocating and freeing a few hundred MB take milliseconds each.
    corpus_cache: std::sync::Mutex<Option<CorpusBuffers>>,
    max_binding: u64,
    /// Bytes the engine may allocate; halved after each out-of-memory error.
    budget: std::sync::atomic::AtomicU64,
}

#[derive(Clone, Copy)]
enum Slot {
    Storage { read_only: bool },
}

/// A layout for `slots` and the pipeline of `entry` in `module`; other entry points of the
/// module share the layout (`pipeline`).
fn kernel(
    ctx: &Context,
    name: &str,
    module: &wgpu::ShaderModule,
    entry: &str,
    slots: &[Slot],
    constants: &[(&str, f64)],
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
    let pipeline = pipeline(ctx, name, &layout, module, entry, constants);
    Kernel { pipeline, layout }
}

/// How much the runtime guards a shader's memory accesses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checks {
    /// wgpu's bounds checks on every access, and its counter in every loop (which ends a loop
    /// that would otherwise never end).
    Checked,
    /// wgpu's bounds checks without the loop counters: for kernels whose every loop ends by
    /// construction (a fixed trip count, a pass limit, a binary search, or a bound below 2^31
    /// stepped by a nonzero constant). The counters cost the select 4-7% of its time (its
    /// passes are bound by instructions per key), the ranking 10% and the exact keys 3%
    /// (`notes/select.md`, version 14).
    EndingLoops,
    /// None: for kernels whose every access is guarded by an explicit range check in the
    /// WGSL itself (the distance GEMM, where the checks cost most of its speed).
    Unchecked,
}

fn shader_module(ctx: &Context, name: &str, source: &str, checks: Checks) -> wgpu::ShaderModule {
    let desc = wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(source.into()) };
    match checks {
        Checks::Checked => ctx.device.create_shader_module(desc),
        // SAFETY: only used for shaders whose loops all end (see `Checks::EndingLoops`); every
        // access is still checked.
        Checks::EndingLoops => unsafe {
            let checks =
                wgpu::ShaderRuntimeChecks { force_loop_bounding: false, ..wgpu::ShaderRuntimeChecks::checked() };
            ctx.device.create_shader_module_trusted(desc, checks)
        },
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

/// The distance kernels' workgroup tile, as override constants, for tiles `depth` deep.
fn tile_constants(depth: u32) -> [(&'static str, f64); 3] {
    [("BM", TILE_M as f64), ("BN", TILE_N as f64), ("BK", depth as f64)]
}

const RO: Slot = Slot::Storage { read_only: true };
const RW: Slot = Slot::Storage { read_only: false };

impl GpuEngine {
    pub fn new(settings: &GpuSettings, hardware_only: bool) -> Result<Self> {
        let (_instance, adapters) = context::discover();
        let chosen = context::choose_adapter(
            &adapters,
            settings.adapter.as_deref(),
            hardware_only && settings.adapter.is_none(),
        )?;
        let ctx = Context::open(&adapters[chosen], !settings.no_subgroups, settings.profile)?;
        let depth = settings.distance_tile_depth.unwrap_or(TILE_K);
        // Each depth holds one padded row of vec4s per operand (QS, CS in distance.wgsl).
        let tile_bytes = depth * (TILE_M / 4 + 1 + TILE_N / 4 + 1) * 16;
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
        let tile = tile_constants(depth);
        let select_slots = [RO, RW, RW, RW, RW, RW, RW, RW, RW, RO];
        // The select binds the most storage buffers of any kernel, two more than WebGPU's
        // default limit.
        if (ctx.limits.max_storage_buffers_per_shader_stage as usize) < select_slots.len() {
            return Err(Error::NoAdapter(format!(
                "{}: {} storage buffers per shader stage, and knng's select binds {}",
                ctx.info.name,
                ctx.limits.max_storage_buffers_per_shader_stage,
                select_slots.len()
            )));
        }
        let distance_slots = [RO, RO, RO, RO, RO, RW, RW, RW];
        let (norms, distance, select, merge_per_subgroup) = ctx.allocating(|| {
            let module = shader_module(&ctx, "select", &shaders::select(ctx.subgroups), Checks::EndingLoops);
            let select = kernel(&ctx, "select", &module, "select_rows", &select_slots, &[]);
            // Same module and layout, other entry point: pipelines share the bind groups.
            let merge = ctx.subgroups.then(|| {
                pipeline(&ctx, "merge per subgroup", &select.layout, &module, "select_rows_per_subgroup", &[])
            });
            let norms = shader_module(&ctx, "norms", shaders::NORMS, Checks::Checked);
            let distance = shader_module(&ctx, "distance", &shaders::distance(depth, false), Checks::Unchecked);
            (
                kernel(&ctx, "norms", &norms, "prepare_rows", &[RO, RO, RW, RW], &[]),
                kernel(&ctx, "distance", &distance, "distance_tile", &distance_slots, &tile),
                select,
                merge,
            )
        })?;
        // Publishing binds two more storage buffers, one of them mapped.
        let distance_publish = if ctx.mappable_storage && ctx.limits.max_storage_buffers_per_shader_stage >= 10 {
            let slots = [distance_slots.as_slice(), &[RO, RW]].concat();
            Some(ctx.allocating(|| {
                let source = shaders::distance(depth, true);
                let module = shader_module(&ctx, "distance publishing", &source, Checks::Unchecked);
                kernel(&ctx, "distance publishing", &module, "distance_tile", &slots, &tile)
            })?)
        } else {
            None
        };
        ctx.wait()?;
        let max_binding = ctx.limits.max_storage_buffer_binding_size.min(ctx.limits.max_buffer_size);
        let default_budget =
            if ctx.info.device_type == wgpu::DeviceType::DiscreteGpu { DISCRETE_BUDGET } else { DEFAULT_BUDGET };
        let budget = settings.memory_budget.unwrap_or(default_budget).into();
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
        if let Some(m) = settings.max_workgroups_per_dimension {
            max_groups = max_groups.min(m.max(1));
        }
        // certify.wgsl sorts a row's keys and indices in workgroup memory, beside two
        // 256-entry reductions.
        let certify_bytes = (MAX_CERTIFY_KC * 12 + 256 * 8 + 8) as u32;
        let certify = if ctx.f64 && certify_bytes <= ctx.limits.max_compute_workgroup_storage_size {
            let slots = [RW, RW, RO, RO, RW, RW, RW, RW];
            let constants = [("MAX_KC", MAX_CERTIFY_KC as f64)];
            Some(ctx.allocating(|| {
                let module = shader_module(&ctx, "certify", shaders::CERTIFY, Checks::EndingLoops);
                let rows = kernel(&ctx, "certify", &module, "certify_rows", &slots, &constants);
                let sort_runs = pipeline(&ctx, "sort runs", &rows.layout, &module, "sort_runs", &constants);
                let certify_runs = pipeline(&ctx, "certify runs", &rows.layout, &module, "certify_runs", &constants);
                let sort_by_index = pipeline(&ctx, "sort by index", &rows.layout, &module, "sort_by_index", &constants);
                CertifyKernels { rows, sort_runs, certify_runs, sort_by_index }
            })?)
        } else {
            None
        };
        let refine = if ctx.f64 {
            let slots = [RO, RO, RO, RW, RO, RO];
            Some(ctx.allocating(|| {
                let scalar = shaders::refine(false);
                let module = shader_module(&ctx, "refine", &scalar, Checks::EndingLoops);
                let narrow = kernel(&ctx, "refine", &module, "exact_keys", &slots, &[]);
                let grouped = pipeline(&ctx, "refine grouped", &narrow.layout, &module, "exact_keys_grouped", &[]);
                let wide = pipeline(&ctx, "refine wide", &narrow.layout, &module, "exact_keys_wide", &[]);
                let copy_mutual = pipeline(&ctx, "copy mutual keys", &narrow.layout, &module, "copy_mutual_keys", &[]);
                let module4 = shader_module(&ctx, "refine vec4", &shaders::refine(true), Checks::EndingLoops);
                let wide4 = pipeline(&ctx, "refine wide vec4", &narrow.layout, &module4, "exact_keys_wide", &[]);
                let grouped4 =
                    pipeline(&ctx, "refine grouped vec4", &narrow.layout, &module4, "exact_keys_grouped", &[]);
                RefineKernels { narrow, grouped, wide, wide4, grouped4, copy_mutual }
            })?)
        } else {
            None
        };
        Ok(GpuEngine {
            ctx,
            norms,
            distance,
            distance_publish,
            filter: Default::default(),
            bounded: Default::default(),
            select,
            merge_per_subgroup,
            refine,
            certify,
            profiler,
            max_groups,
            symmetric_graphs: settings.symmetric_graphs,
            bounded_sweeps: settings.bounded_sweeps,
            tile_caps: plan::TileCaps {
                column: settings.max_column_tile.unwrap_or(usize::MAX).max(1),
                query: settings.max_query_tile.unwrap_or(usize::MAX).max(1),
            },
            tile_cache: Default::default(),
            corpus_cache: Default::default(),
            max_binding,
            budget,
        })
    }

    /// The two-sided filter kernel (`filter_two_sided.wgsl`), built on first use.
    fn filter_kernel(&self) -> Result<&Kernel> {
        if let Some(built) = self.filter.get() {
            return Ok(built);
        }
        let built = self.ctx.allocating(|| {
            let module = shader_module(&self.ctx, "filter", &shaders::filter_two_sided(), Checks::EndingLoops);
            kernel(&self.ctx, "filter", &module, "filter_block", &[RO, RO, RW, RW], &[])
        })?;
        Ok(self.filter.get_or_init(|| built))
    }

    /// The kernels of bounded sweeps (`gather_rows.wgsl`, `bounded_lists.wgsl`), built on
    /// first use.
    fn bounded_kernels(&self) -> Result<&BoundedKernels> {
        if let Some(built) = self.bounded.get() {
            return Ok(built);
        }
        let built = self.ctx.allocating(|| {
            let gather = shader_module(&self.ctx, "gather rows", shaders::GATHER_ROWS, Checks::EndingLoops);
            let lists = shader_module(&self.ctx, "short select", &shaders::bounded_lists(), Checks::EndingLoops);
            BoundedKernels {
                gather: kernel(&self.ctx, "gather rows", &gather, "gather_rows", &[RO, RO, RW, RW], &[]),
                short_select: kernel(&self.ctx, "short select", &lists, "select_short", &[RO, RO, RO, RW, RW, RW], &[]),
            }
        })?;
        Ok(self.bounded.get_or_init(|| built))
    }

    /// Whether the distance kernel can publish ranked answers (`distance_publish.wgsl`).
    fn publishes(&self) -> bool {
        self.distance_publish.is_some()
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
            let barriers = if self.ctx.subgroup_barrier { ", subgroup barriers" } else { "" };
            format!("subgroup select, sizes {}-{}{barriers}", i.subgroup_min_size, i.subgroup_max_size)
        } else {
            "workgroup select, no subgroups".to_string()
        };
        let rerank = if self.refine.is_some() { ", f64 re-ranking" } else { "" };
        let publish = if self.publishes() { ", answers published during the GEMM" } else { "" };
        format!("gpu: {} ({:?}, {select}{rerank}{publish})", i.name, i.backend)
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

    fn upload(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        // wgpu refuses zero-sized bindings: `buffer` pads empty ones to one word.
        let buffer = self.buffer(label, bytes.len() as u64, usage)?;
        self.write(&buffer, label, bytes)?;
        Ok(buffer)
    }

    /// Writes `bytes` at the start of `buffer`; the copy to the GPU runs before the next
    /// submission's work.
    fn write(&self, buffer: &wgpu::Buffer, label: &str, bytes: &[u8]) -> Result<()> {
        self.write_at(buffer, 0, label, bytes)
    }

    /// Writes `bytes` at byte `offset` of `buffer`, as [`Self::write`].
    fn write_at(&self, buffer: &wgpu::Buffer, offset: u64, label: &str, bytes: &[u8]) -> Result<()> {
        if bytes.len() <= UPLOAD_PART {
            if !bytes.is_empty() {
                self.ctx.queue.write_buffer(buffer, offset, bytes);
            }
            return Ok(());
        }
        // Large inputs: written part by part into wgpu's staging memory on every core (one
        // core writes mapped memory at a few GB/s), then copied on the GPU at the next
        // submission. Not through buffers mapped at creation: wgpu zero-fills those on the
        // creating thread first, which doubled the bytes written (d=4096: 268 MB). A group of
        // parts, one per core, is submitted as soon as it is written, so that its copy runs
        // while the next group is written.
        let group = rayon::current_num_threads().max(1) * UPLOAD_PART;
        for (g, bytes) in bytes.chunks(group).enumerate() {
            let written = bytes.par_chunks(UPLOAD_PART).enumerate().all(|(i, part)| {
                let size = wgpu::BufferSize::new(part.len() as u64).expect("parts are not empty");
                let at = offset + (g * group + i * UPLOAD_PART) as u64;
                match self.ctx.queue.write_buffer_with(buffer, at, size) {
                    Some(mut view) => {
                        view.copy_from_slice(part);
                        true
                    }
                    None => false,
                }
            });
            if !written {
                // The error was recorded by the device's handler; report it (usually out of memory).
                self.ctx.wait()?;
                return Err(Error::OutOfMemory(format!("staging memory for uploading {label}")));
            }
            self.ctx.queue.submit([]);
            crate::trace::mark(|| format!("{label}: {} MB written", (g * group + bytes.len()) >> 20));
        }
        Ok(())
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
    /// A distance tile that also publishes the previous query tile's answers.
    DistancePublishing,
    /// The two-sided filter of a dense block (`filter_two_sided.wgsl`).
    Filter,
    /// A bounded sweep's sample rows gathered (`gather_rows.wgsl`).
    GatherRows,
    /// A bounded sweep's bounds from its sample, or candidates from its lists
    /// (`bounded_lists.wgsl`).
    SelectShort,
    SelectRows,
    /// A merge by one subgroup per row (`select_rows_per_subgroup`), for short lists where
    /// the adapter has subgroups.
    Merge,
    /// A merge by one workgroup per row (`select_rows`): long lists, or no subgroups.
    MergeWide,
    Refine,
    RefineGrouped,
    RefineWide,
    RefineWide4,
    RefineGrouped4,
    Certify,
    SortRuns,
    CertifyRuns,
    SortByIndex,
    CopyMutualKeys,
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
    /// The two-sided filter of dense blocks (`filter_two_sided.wgsl`): bounded sweeps, and
    /// `knng bench --what distance --filter`.
    pub filter: f64,
    /// A bounded sweep's selects of its rows' bounds and of their candidates from their lists,
    /// and its sample gathered (`bounded_lists.wgsl`, `gather_rows.wgsl`).
    pub lists: f64,
    /// Merging each tile's candidates into the running lists.
    pub merge: f64,
    /// Exact float64 keys of the final candidates (`refine.wgsl`); adapters with SHADER_F64.
    pub refine: f64,
    /// Ranking by exact keys and the certificate, per row (`certify.wgsl`).
    pub certify: f64,
    /// Host time uploading inputs and reading candidates back, summed over threads: copies out
    /// of one query tile's read-back overlap the next tile's kernels.
    pub transfers: f64,
    /// GPU time from the first kernel's start to the last kernel's end, summed over
    /// submissions: kernels plus the gaps between them (barriers, ramp-up and tails).
    pub span: f64,
    /// Host time from each submission to its completion, summed: `span` plus launch and
    /// completion latency.
    pub submitted: f64,
    /// Host time recording command buffers, summed (before `submitted` starts).
    pub recording: f64,
    /// Host time inside wgpu's submissions (validation, resource tracking, the driver's
    /// submit), summed: part of `submitted`'s lead over `span`.
    pub submit_calls: f64,
    /// Host time creating the buffers of a round of candidates and the host arrays that
    /// receive them.
    pub allocation: f64,
}

impl GpuTimes {
    fn add(&mut self, step: Step, seconds: f64) {
        match step {
            Step::Norms => self.prepare_rows += seconds,
            Step::Distance | Step::DistancePublishing => self.distance += seconds,
            Step::SelectRows => self.select += seconds,
            Step::Filter => self.filter += seconds,
            Step::GatherRows | Step::SelectShort => self.lists += seconds,
            Step::Merge | Step::MergeWide => self.merge += seconds,
            Step::Refine
            | Step::RefineGrouped
            | Step::RefineWide
            | Step::RefineWide4
            | Step::RefineGrouped4
            | Step::SortByIndex
            | Step::CopyMutualKeys => self.refine += seconds,
            Step::Certify | Step::SortRuns | Step::CertifyRuns => self.certify += seconds,
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

    /// Records `jobs` in one compute pass (each timed when profiling) and submits them. Work
    /// runs in submission order and the host goes on: it waits only where it reads results
    /// (mapping a staging buffer) or, when profiling, here, to read the timestamps.
    fn submit(&self, mut encoder: wgpu::CommandEncoder, jobs: &[Job<'_>]) -> Result<Submitted> {
        let recording = std::time::Instant::now();
        let timed = self.profiler.as_ref().map(|p| (p, (jobs.len() as u32).min(p.capacity / 2)));
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for (i, job) in jobs.iter().enumerate() {
                let pipeline = match job.step {
                    Step::Norms => &self.norms.pipeline,
                    Step::Distance => &self.distance.pipeline,
                    Step::DistancePublishing => {
                        &self.distance_publish.as_ref().expect("only planned where it exists").pipeline
                    }
                    Step::Filter => &self.filter.get().expect("built (`filter_kernel`) before it is planned").pipeline,
                    Step::GatherRows | Step::SelectShort => {
                        let built = self.bounded.get().expect("built (`bounded_kernels`) before it is planned");
                        match job.step {
                            Step::GatherRows => &built.gather.pipeline,
                            _ => &built.short_select.pipeline,
                        }
                    }
                    Step::SelectRows => &self.select.pipeline,
                    Step::Merge => self.merge_per_subgroup.as_ref().expect("only planned with subgroups"),
                    Step::MergeWide => &self.select.pipeline,
                    Step::Refine => &self.refine.as_ref().expect("only planned with f64").narrow.pipeline,
                    Step::RefineGrouped => &self.refine.as_ref().expect("only planned with f64").grouped,
                    Step::RefineWide => &self.refine.as_ref().expect("only planned with f64").wide,
                    Step::RefineWide4 => &self.refine.as_ref().expect("only planned with f64").wide4,
                    Step::RefineGrouped4 => &self.refine.as_ref().expect("only planned with f64").grouped4,
                    Step::Certify => &self.certify.as_ref().expect("only planned with f64").rows.pipeline,
                    Step::SortRuns => &self.certify.as_ref().expect("only planned with f64").sort_runs,
                    Step::SortByIndex => &self.certify.as_ref().expect("only planned with f64").sort_by_index,
                    Step::CopyMutualKeys => &self.refine.as_ref().expect("only planned with f64").copy_mutual,
                    Step::CertifyRuns => &self.certify.as_ref().expect("only planned with f64").certify_runs,
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
        let index = self.ctx.queue.submit([encoder.finish()]);
        let returned = std::time::Instant::now();
        let Some((p, n)) = timed else {
            return Ok(Submitted { index, completed: None });
        };
        self.ctx.wait_for(index.clone())?;
        let completed = std::time::Instant::now();
        let waited = (completed - started).as_secs_f64();
        {
            let stamps: Vec<u64> = read_back(self, &p.resolved, Some(16 * n as usize))?;
            let period = self.ctx.queue.get_timestamp_period() as f64 * 1e-9;
            let mut times = p.times.lock().unwrap_or_else(|e| e.into_inner());
            for (i, job) in jobs.iter().take(n as usize).enumerate() {
                times.add(job.step, stamps[2 * i + 1].saturating_sub(stamps[2 * i]) as f64 * period);
            }
            times.span += stamps[2 * n as usize - 1].saturating_sub(stamps[0]) as f64 * period;
            times.submitted += waited;
            times.recording += (started - recording).as_secs_f64();
            times.submit_calls += (returned - started).as_secs_f64();
        }
        Ok(Submitted { index, completed: Some(completed) })
    }

    /// When a submission's work completed: waits for it unless profiling already did.
    fn completion(&self, submitted: Submitted) -> Result<std::time::Instant> {
        match submitted.completed {
            Some(at) => Ok(at),
            None => {
                self.ctx.wait_for(submitted.index)?;
                Ok(std::time::Instant::now())
            }
        }
    }
}

/// Work handed to the GPU by [`GpuEngine::submit`].
struct Submitted {
    index: wgpu::SubmissionIndex,
    /// When it completed, if the host waited for it (profiling).
    completed: Option<std::time::Instant>,
}

fn bind_group(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    uniform: &wgpu::Buffer,
    storage: &[&wgpu::Buffer],
) -> wgpu::BindGroup {
    let whole: Vec<(&wgpu::Buffer, u64)> = storage.iter().map(|&b| (b, 0)).collect();
    bind_group_at(device, layout, uniform, &whole)
}

/// A bind group of storage buffers each bound from a byte offset to its end (per-row arrays
/// bound at a tile's first row; offsets are multiples of 256 bytes).
fn bind_group_at(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    uniform: &wgpu::Buffer,
    storage: &[(&wgpu::Buffer, u64)],
) -> wgpu::BindGroup {
    let ranges: Vec<wgpu::BufferBinding<'_>> =
        storage.iter().map(|&(buffer, offset)| wgpu::BufferBinding { buffer, offset, size: None }).collect();
    bind_group_ranges(device, layout, uniform, &ranges)
}

/// A bind group of storage buffer ranges (offsets are multiples of 256 bytes).
fn bind_group_ranges(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    uniform: &wgpu::Buffer,
    storage: &[wgpu::BufferBinding<'_>],
) -> wgpu::BindGroup {
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: uniform,
            offset: 0,
            size: std::num::NonZeroU64::new(PARAMS_SIZE),
        }),
    }];
    for (i, range) in storage.iter().enumerate() {
        debug_assert!(range.offset.is_multiple_of(256) && range.offset < range.buffer.size());
        entries.push(wgpu::BindGroupEntry {
            binding: i as u32 + 1,
            resource: wgpu::BindingResource::Buffer(range.clone()),
        });
    }
    device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout, entries: &entries })
}

/// Waits for submitted work, maps `staging` and hands its bytes to `read`.
fn map_and_read(gpu: &GpuEngine, staging: &wgpu::Buffer, read: impl FnOnce(&[u8])) -> Result<()> {
    map_ready(gpu, staging)?;
    read_mapped(staging, read)
}

/// Maps a buffer for reading, once the GPU work writing it is done.
fn map_ready(gpu: &GpuEngine, staging: &wgpu::Buffer) -> Result<()> {
    Mapping::request(staging, None).wait(gpu)
}

/// A staging buffer's mapping for reading, requested right after the work that fills it was
/// submitted, so that the host can queue more work before it waits.
struct Mapping {
    done: mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
    /// The submission that fills the buffer (`None`: whatever was submitted last).
    after: Option<wgpu::SubmissionIndex>,
}

impl Mapping {
    fn request(staging: &wgpu::Buffer, after: Option<wgpu::SubmissionIndex>) -> Self {
        let (tx, done) = mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        Mapping { done, after }
    }

    /// Waits until the buffer is mapped, not for work submitted after it.
    fn wait(self, gpu: &GpuEngine) -> Result<()> {
        match self.after {
            Some(index) => gpu.ctx.wait_for(index)?,
            None => gpu.ctx.wait()?,
        }
        let result = match self.done.try_recv() {
            Ok(r) => Ok(r),
            // The mapping's callback may wait for a later poll: wait for everything.
            Err(_) => gpu
                .ctx
                .wait()
                .and_then(|()| self.done.recv().map_err(|_| Error::Gpu("buffer mapping was abandoned".into()))),
        };
        result?.map_err(|e| Error::Gpu(format!("reading results back: {e}")))
    }
}

/// Reads a buffer mapped by [`map_ready`], then unmaps it.
fn read_mapped(staging: &wgpu::Buffer, read: impl FnOnce(&[u8])) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refine_groups_leave_each_invocation_eight_vec4s() {
        let widths: Vec<usize> = [8, 15, 16, 31, 32, 50, 63].into_iter().map(refine_group).collect();
        assert_eq!(widths, [1, 1, 2, 2, 4, 4, 4]);
        assert_eq!(refine_group(64), 8);
    }

    #[test]
    fn scalar_refine_groups_leave_each_invocation_sixteen_values() {
        let widths: Vec<usize> = [33, 38, 50, 63, 64, 74, 150, 255].into_iter().map(scalar_refine_group).collect();
        assert_eq!(widths, [2, 2, 2, 2, 4, 4, 4, 4]);
    }
}
