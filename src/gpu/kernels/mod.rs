//! The kernel layer: every WGSL kernel the engine dispatches, one file per kernel family with
//! its parameters, the buffers it binds, its pipelines and the rules that shape its
//! dispatches. What drives the kernels (submission, a corpus session and its sweeps) is
//! outside: a new way of driving them leaves this layer as it is.

mod bindings;
mod bounded;
mod certify;
mod cover_tree;
mod cover_tree_query;
mod distance;
mod filter;
mod grid;
mod norms;
mod pipelines;
mod refine;
mod select;
mod sort;
mod sort_select;

use std::sync::OnceLock;

pub(super) use bindings::{bind_group, bind_group_at, bind_group_ranges, grid, ParamSlots, PARAM_SLOT};
pub(super) use bounded::{BoundedKernels, GatherParams, ShortSelectParams, SHORT_SELECT_LISTS, SHORT_SELECT_SAMPLE};
pub(crate) use certify::MAX_CERTIFY_KC;
pub(super) use certify::{reported_as, CertifyKernels, CertifyParams};
pub(super) use cover_tree::*;
pub(super) use cover_tree_query::*;
pub(super) use distance::{gemm_tiles, publishing_groups, DistanceParams, PUBLISH_STRIDE, TILE_K, TILE_N};
pub(super) use filter::{FilterParams, FILTER_STRIP};
pub(super) use grid::{GridKernels, GridParams, GridProveParams, GRID_GROUP};
pub(crate) use grid::{GRID_FAILED, GRID_MAX_DIMS, GRID_PROVEN, GRID_PROVE_MAX_KC, GRID_UNANSWERED};
pub(super) use norms::NormsParams;
pub(super) use pipelines::Kernel;
use pipelines::Pipelines;
pub(super) use refine::{exact_keys_dispatch, refine_mode, RefineKernels, RefineParams, GROUPED_ROWS};
pub(super) use select::{SelectKernels, SelectParams, AUX_NAMES, WIDE_MERGE_KC};
pub(super) use sort::{ScanParams, SortKernels, SortParams, DIGIT_BITS, FLOAT_IN, FLOAT_OUT, SCAN_BLOCK, SORT_TILE};
pub(super) use sort_select::{SortSelectKernels, SortSelectParams};

use super::context::Context;
use crate::error::Result;
use crate::metric::Metric;

/// The engine's kernels: those every search runs, built with the engine; those of bounded
/// sweeps, built on first use; those of exact keys and ranking, where the adapter has
/// SHADER_F64.
pub(super) struct Kernels {
    pipelines: Pipelines,
    pub(super) norms: Kernel,
    pub(super) distance: Kernel,
    /// The distance kernel that also publishes ranked answers (`distance_publish.wgsl`), where
    /// mapped buffers can be bound as storage: a module of its own, so that the dispatches
    /// that publish nothing run the plain kernel, every workgroup a tile.
    pub(super) distance_publish: Option<Kernel>,
    /// The two-sided filter of dense blocks (`filter_two_sided.wgsl`), built on first use by
    /// bounded sweeps.
    filter: OnceLock<Kernel>,
    /// The sample gather and list kernels of bounded sweeps, built on first use.
    bounded: OnceLock<BoundedKernels>,
    /// The radix sort and its prefix sum, built on first use.
    sort: OnceLock<SortKernels>,
    /// The batch index sort selector's kernels, built on first use.
    sort_select: OnceLock<SortSelectKernels>,
    /// The low-dimensional grid's kernels, built on first use.
    grid: OnceLock<GridKernels>,
    /// The cover tree's construction kernels, built on first use.
    cover_tree: OnceLock<CoverTreeKernels>,
    cover_sets: OnceLock<CoverSetKernels>,
    pub(super) select: SelectKernels,
    /// Exact float64 keys of the candidates, where the adapter has SHADER_F64.
    pub(super) refine: Option<RefineKernels>,
    /// Ranking and certificate of each row (`certify.wgsl`), where the adapter has SHADER_F64.
    pub(super) certify: Option<CertifyKernels>,
}

impl Kernels {
    /// Builds the kernels for `ctx`'s device, the distance kernel's tiles `depth` deep
    /// (default `TILE_K`); refuses a depth or an adapter they cannot run with.
    pub(super) fn new(ctx: &Context, depth: Option<u32>) -> Result<Self> {
        let depth = distance::tile_depth(ctx, depth)?;
        select::check_bindings(ctx)?;
        let pipelines = Pipelines::default();
        let (select, norms, distance) = ctx.allocating(|| {
            (select::create(ctx, &pipelines), norms::create(ctx, &pipelines), distance::create(ctx, &pipelines, depth))
        })?;
        let distance_publish = distance::create_publishing(ctx, &pipelines, depth)?;
        ctx.wait()?;
        let certify = certify::create(ctx, &pipelines)?;
        let refine = if ctx.f64 { Some(ctx.allocating(|| refine::create(ctx, &pipelines))?) } else { None };
        Ok(Kernels {
            pipelines,
            norms,
            distance,
            distance_publish,
            filter: Default::default(),
            bounded: Default::default(),
            sort: Default::default(),
            sort_select: Default::default(),
            grid: Default::default(),
            cover_tree: Default::default(),
            cover_sets: Default::default(),
            select,
            refine,
            certify,
        })
    }

    /// The two-sided filter kernel (`filter_two_sided.wgsl`), built on first use.
    pub(super) fn filter_kernel(&self, ctx: &Context) -> Result<&Kernel> {
        if let Some(built) = self.filter.get() {
            return Ok(built);
        }
        let built = ctx.allocating(|| filter::create(ctx, &self.pipelines))?;
        Ok(self.filter.get_or_init(|| built))
    }

    /// The kernels of bounded sweeps (`gather_rows.wgsl`, `bounded_lists.wgsl`), built on
    /// first use.
    pub(super) fn bounded_kernels(&self, ctx: &Context) -> Result<&BoundedKernels> {
        if let Some(built) = self.bounded.get() {
            return Ok(built);
        }
        let built = ctx.allocating(|| bounded::create(ctx, &self.pipelines))?;
        Ok(self.bounded.get_or_init(|| built))
    }

    /// The radix sort's kernels, built on first use.
    pub(super) fn sort_kernels(&self, ctx: &Context) -> Result<&SortKernels> {
        if let Some(built) = self.sort.get() {
            return Ok(built);
        }
        let built = ctx.allocating(|| sort::create(ctx, &self.pipelines))?;
        Ok(self.sort.get_or_init(|| built))
    }

    /// The batch index sort selector's kernels, built on first use.
    pub(super) fn sort_select_kernels(&self, ctx: &Context) -> Result<&SortSelectKernels> {
        if let Some(built) = self.sort_select.get() {
            return Ok(built);
        }
        let built = ctx.allocating(|| sort_select::create(ctx, &self.pipelines))?;
        Ok(self.sort_select.get_or_init(|| built))
    }

    /// The low-dimensional grid's kernels, built on first use.
    pub(super) fn grid_kernels(&self, ctx: &Context) -> Result<&GridKernels> {
        if let Some(built) = self.grid.get() {
            return Ok(built);
        }
        let built = ctx.allocating(|| grid::create(ctx, &self.pipelines))?;
        Ok(self.grid.get_or_init(|| built))
    }

    /// The cover tree's construction kernels, built on first use.
    pub(super) fn cover_tree_kernels(&self, ctx: &Context) -> Result<&CoverTreeKernels> {
        if let Some(built) = self.cover_tree.get() {
            return Ok(built);
        }
        let built = ctx.allocating(|| cover_tree::create(ctx, &self.pipelines))?;
        Ok(self.cover_tree.get_or_init(|| built))
    }

    /// The cover tree's query kernels, built on first use.
    pub(super) fn cover_set_kernels(&self, ctx: &Context) -> Result<&CoverSetKernels> {
        if let Some(built) = self.cover_sets.get() {
            return Ok(built);
        }
        let built = ctx.allocating(|| cover_tree_query::create(ctx, &self.pipelines))?;
        Ok(self.cover_sets.get_or_init(|| built))
    }

    /// The kernels of bounded sweeps, once [`Self::bounded_kernels`] has built them.
    pub(super) fn built_bounded(&self) -> &BoundedKernels {
        self.bounded.get().expect("built (`bounded_kernels`) before it is bound")
    }

    /// Whether the distance kernel can publish ranked answers (`distance_publish.wgsl`).
    pub(super) fn publishes(&self) -> bool {
        self.distance_publish.is_some()
    }

    /// The pipeline that runs `step`.
    pub(super) fn pipeline(&self, step: Step) -> &wgpu::ComputePipeline {
        match step {
            Step::Norms => &self.norms.pipeline,
            Step::Distance => &self.distance.pipeline,
            Step::DistancePublishing => &self.distance_publish.as_ref().expect("only planned where it exists").pipeline,
            Step::Filter => &self.filter.get().expect("built (`filter_kernel`) before it is planned").pipeline,
            Step::GatherRows | Step::SelectShort => {
                let built = self.bounded.get().expect("built (`bounded_kernels`) before it is planned");
                match step {
                    Step::GatherRows => &built.gather.pipeline,
                    _ => &built.short_select.pipeline,
                }
            }
            Step::SortCount | Step::SortScatter | Step::ScanBlocks | Step::ScanAddOffsets => {
                let built = self.sort.get().expect("built (`sort_kernels`) before it is planned");
                match step {
                    Step::SortCount => &built.count.pipeline,
                    Step::SortScatter => &built.scatter,
                    Step::ScanBlocks => &built.scan.pipeline,
                    _ => &built.add_offsets,
                }
            }
            Step::SortSelectPairs
            | Step::SortSelectRowKeys
            | Step::SortSelectTake
            | Step::SortSelectColumnKeys
            | Step::SortSelectTakeColumns
            | Step::SortSelectOrderRowKeys => {
                let built = self.sort_select.get().expect("built (`sort_select_kernels`) before it is planned");
                match step {
                    Step::SortSelectPairs => &built.pairs.pipeline,
                    Step::SortSelectRowKeys => &built.row_keys,
                    Step::SortSelectColumnKeys => &built.columns.pipeline,
                    Step::SortSelectTakeColumns => &built.take_columns,
                    Step::SortSelectOrderRowKeys => &built.order_row_keys,
                    _ => &built.take,
                }
            }
            Step::GridCellIds | Step::GridQuery | Step::GridProve => {
                let built = self.grid.get().expect("built (`grid_kernels`) before it is planned");
                match step {
                    Step::GridCellIds => &built.cell_ids.pipeline,
                    Step::GridQuery => &built.query_cells,
                    _ => &built.prove.as_ref().expect("only planned with f64").pipeline,
                }
            }
            Step::CoverTreeRoot
            | Step::CoverTreeMeasure
            | Step::CoverTreePrepare
            | Step::CoverTreeScatter
            | Step::CoverTreeFinish
            | Step::CoverTreeRelabel
            | Step::CoverTreeNodes => {
                let built = self.cover_tree.get().expect("built (`cover_tree_kernels`) before it is planned");
                match step {
                    Step::CoverTreeRoot => &built.root.pipeline,
                    Step::CoverTreeMeasure => &built.measure,
                    Step::CoverTreePrepare => &built.prepare,
                    Step::CoverTreeScatter => &built.scatter,
                    Step::CoverTreeFinish => &built.finish,
                    Step::CoverTreeRelabel => &built.relabel,
                    _ => &built.nodes,
                }
            }
            Step::CoverSetBound | Step::CoverSetCollect => {
                let built = self.cover_sets.get().expect("built (`cover_set_kernels`) before it is planned");
                match step {
                    Step::CoverSetBound => &built.bound.pipeline,
                    _ => &built.collect,
                }
            }
            Step::SelectRows => &self.select.rows.pipeline,
            Step::Merge => self.select.merge_per_subgroup.as_ref().expect("only planned with subgroups"),
            Step::MergeWide => &self.select.merge_wide,
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
        }
    }
}

/// What a dispatch does, for profiles.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::gpu) enum Step {
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
    /// A radix sort pass's digit counts per tile (`count_digits`).
    SortCount,
    /// A radix sort pass's stable ranking and scatter (`scatter`).
    SortScatter,
    /// The prefix sum's blocks scanned (`scan_blocks`).
    ScanBlocks,
    /// The prefix sum's block offsets added (`add_block_offsets`).
    ScanAddOffsets,
    /// A distance tile laid out as pairs for the sort selector (`tile_pairs`).
    SortSelectPairs,
    /// The sort selector's pairs keyed by row (`row_keys`).
    SortSelectRowKeys,
    /// Each row's list taken from its sorted pairs (`take_rows`).
    SortSelectTake,
    /// The key order kept and the pairs keyed by column (`column_keys`).
    SortSelectColumnKeys,
    /// Each column's best appended to its row's shortlist (`take_columns`).
    SortSelectTakeColumns,
    /// The kept key order keyed by row (`order_row_keys`).
    SortSelectOrderRowKeys,
    /// Corpus points keyed by their grid cell (`cell_ids`).
    GridCellIds,
    /// Queries' nearest points among the cells around their own (`query_cells`).
    GridQuery,
    /// Queries' answers ranked and proven from those points (`grid_prove.wgsl`).
    GridProve,
    /// The cover tree's root set (`cover_tree.wgsl`: `root`).
    CoverTreeRoot,
    /// A round's farthest members and peel distances (`measure`).
    CoverTreeMeasure,
    /// A round's levels and leaves (`prepare`).
    CoverTreePrepare,
    /// A round's entries moved to their parts (`scatter`).
    CoverTreeScatter,
    /// A round's children and next steps (`finish`).
    CoverTreeFinish,
    /// A round's moved entries given their sets (`relabel`).
    CoverTreeRelabel,
    /// The sets' nodes gathered for the host (`nodes`).
    CoverTreeNodes,
    /// Cover sets' k-th distances and thresholds (`cover_tree_query.wgsl`: `bound`).
    CoverSetBound,
    /// Cover sets' points within their thresholds (`collect`).
    CoverSetCollect,
}

/// One dispatch: kernel, parameter slot, workgroups, bind group.
pub(in crate::gpu) struct Job<'b> {
    pub(in crate::gpu) step: Step,
    pub(in crate::gpu) offset: u32,
    pub(in crate::gpu) groups: (u32, u32),
    pub(in crate::gpu) bind: &'b wgpu::BindGroup,
}

pub(super) fn metric_modes(metric: Metric) -> (u32, u32) {
    // (norms.wgsl mode, distance.wgsl mode)
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => (0, 0),
        Metric::Cosine => (1, 1),
        Metric::Correlation => (2, 1),
        Metric::InnerProduct => (3, 2),
    }
}
