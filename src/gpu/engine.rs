//! The engine: a device, its kernels and memory budget, and the buffers it keeps between
//! calls.

use super::budget::{self, BudgetOrigin};
use super::context::{self, Context};
use super::kernels::Kernels;
use super::profile::Profiler;
use super::session::{CorpusBuffers, TileBuffers, TileKey};
use crate::error::Result;
use crate::plan::{self, DeviceBudget};

/// Below this budget an out-of-memory error is final.
const MIN_RETRY_BUDGET: u64 = 8 << 20;

/// What a caller chooses of a GPU engine: its adapter, features, budget and tile shapes.
#[derive(Clone, Debug)]
pub(crate) struct GpuSettings {
    /// The adapter's index or part of its name; `None`: the preferred one.
    pub adapter: Option<String>,
    /// Select and merge without subgroup operations even where the adapter has them.
    pub no_subgroups: bool,
    /// Dense distance tiles' candidates picked by the batch index sort
    /// (`sort_select.wgsl`) rather than the quick multi-select.
    pub sort_select: bool,
    /// Time every kernel with timestamp queries ([`GpuEngine::take_profile`]).
    pub profile: bool,
    /// Depth of the distance kernel's workgroup tiles (default `TILE_K`).
    pub distance_tile_depth: Option<u32>,
    /// Bytes the engine may allocate (default: `budget::default_budget`).
    pub memory_budget: Option<u64>,
    /// Engines the process opens on this adapter, which share its memory.
    pub engines_on_adapter: usize,
    /// Cap on workgroups per dispatch dimension (default: the adapter's limit).
    pub max_workgroups_per_dimension: Option<u32>,
    /// Cap on corpus rows per distance tile.
    pub max_column_tile: Option<usize>,
    /// Cap on the bytes of a storage binding (default: the adapter's limit).
    pub max_binding: Option<u64>,
    /// Cap on query rows per query tile.
    pub max_query_tile: Option<usize>,
    /// Symmetric blocks for graphs: forced on or off, or `None` for the planner's choice.
    pub symmetric_graphs: Option<bool>,
    /// Bounded sweeps for graphs with long lists: forced on or off, or `None` for the
    /// planner's choice.
    pub bounded_sweeps: Option<bool>,
    /// `Options::interrupt`: query tiles stop being queued once it is set.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

#[cfg(test)]
impl GpuSettings {
    /// The settings of the unit tests' engines: the test adapter (`KNNG_TEST_ADAPTER`), the
    /// default budget, and dispatches cut to `max_workgroups_per_dimension` so that their
    /// 2-D path runs too.
    pub(crate) fn for_tests(no_subgroups: bool, max_workgroups_per_dimension: u32) -> Self {
        GpuSettings {
            adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
            no_subgroups,
            sort_select: false,
            profile: false,
            distance_tile_depth: None,
            memory_budget: None,
            engines_on_adapter: 1,
            max_workgroups_per_dimension: Some(max_workgroups_per_dimension),
            max_column_tile: None,
            max_binding: None,
            max_query_tile: None,
            symmetric_graphs: None,
            bounded_sweeps: None,
            interrupt: None,
        }
    }
}

pub(crate) struct GpuEngine {
    pub(super) ctx: Context,
    pub(super) kernels: Kernels,
    pub(super) profiler: Option<Profiler>,
    /// Largest workgroup count per dispatch dimension.
    pub(super) max_groups: u32,
    /// Caps on distance tiles and query tiles.
    pub(super) tile_caps: plan::TileCaps,
    /// Symmetric blocks for graphs: forced on or off, or `None` for the planner's choice.
    pub(super) symmetric_graphs: Option<bool>,
    /// Graphs with long lists swept under sampled bounds (`plan::plan_bounded`): `Some(true)`
    /// wherever it fits, `Some(false)` never, `None` where the planner expects it to pay.
    pub(super) bounded_sweeps: Option<bool>,
    /// Dense distance tiles' candidates picked by the batch index sort.
    pub(super) sort_select: bool,
    /// The buffers of the last round of candidates, kept for the next call of the same shape
    /// (as FAISS and PyTorch keep temporary memory): creating and first touching a few GiB
    /// costs more than a small graph's whole computation. A later round, or a call whose
    /// plan differs, runs in them too where its query tiles can be cut to fit
    /// (`session::TileBuffers::new`).
    pub(super) tile_cache: std::sync::Mutex<Option<(TileKey, TileBuffers)>>,
    /// The buffers of the last resident corpus, kept for the next one of the same shape:
    /// allocating and freeing a few hundred MB take milliseconds each.
    pub(super) corpus_cache: std::sync::Mutex<Option<CorpusBuffers>>,
    pub(super) max_binding: u64,
    /// Bytes the engine may allocate; halved after each out-of-memory error.
    pub(super) budget: std::sync::atomic::AtomicU64,
    /// How the budget was first set.
    pub(super) budget_origin: BudgetOrigin,
    /// Query rows swept with sparse distance tiles, and those of them whose shortlists
    /// overflowed (`plan::sparse_tiles_pay`).
    pub(super) sparse_rows: [std::sync::atomic::AtomicU64; 2],
    /// [`GpuSettings::interrupt`].
    pub(crate) interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl GpuEngine {
    pub fn new(settings: &GpuSettings, hardware_only: bool) -> Result<Self> {
        let (_instance, adapters) = context::discover();
        let chosen = context::choose_adapter(
            &adapters,
            settings.adapter.as_deref(),
            hardware_only && settings.adapter.is_none(),
        )?;
        let ctx = Context::open(&adapters[chosen], !settings.no_subgroups, settings.profile)?;
        let kernels = Kernels::new(&ctx, settings.distance_tile_depth)?;
        let max_binding = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size)
            .min(settings.max_binding.unwrap_or(u64::MAX));
        let (budget, budget_origin) = match settings.memory_budget {
            Some(bytes) => (bytes, BudgetOrigin::Set),
            None => budget::default_budget(&adapters[chosen], settings.engines_on_adapter),
        };
        let profiler = Profiler::new(&ctx)?;
        let mut max_groups = ctx.limits.max_compute_workgroups_per_dimension.max(1);
        if let Some(m) = settings.max_workgroups_per_dimension {
            max_groups = max_groups.min(m.max(1));
        }
        Ok(GpuEngine {
            ctx,
            kernels,
            profiler,
            max_groups,
            symmetric_graphs: settings.symmetric_graphs,
            bounded_sweeps: settings.bounded_sweeps,
            sort_select: settings.sort_select,
            tile_caps: plan::TileCaps {
                column: settings.max_column_tile.unwrap_or(usize::MAX).max(1),
                query: settings.max_query_tile.unwrap_or(usize::MAX).max(1),
            },
            tile_cache: Default::default(),
            corpus_cache: Default::default(),
            max_binding,
            budget: budget.into(),
            budget_origin,
            sparse_rows: Default::default(),
            interrupt: settings.interrupt.clone(),
        })
    }

    pub fn description(&self) -> String {
        let i = &self.ctx.info;
        let select = if self.sort_select {
            let scans = if self.ctx.subgroups { "subgroup scans" } else { "workgroup scans" };
            format!("batch index sort select, {scans}")
        } else if self.ctx.subgroups {
            let barriers = if self.ctx.subgroup_barrier { ", subgroup barriers" } else { "" };
            format!("subgroup select, sizes {}-{}{barriers}", i.subgroup_min_size, i.subgroup_max_size)
        } else {
            "workgroup select, no subgroups".to_string()
        };
        let rerank = if self.kernels.refine.is_some() { ", f64 re-ranking" } else { "" };
        let publish = if self.kernels.publishes() { ", answers published during the GEMM" } else { "" };
        let budget = budget::size(self.memory_budget().0);
        format!("gpu: {} ({:?}, {select}{rerank}{publish}, {budget} budget)", i.name, i.backend)
    }

    /// The memory budget as it was set, and how.
    pub fn memory_budget(&self) -> (u64, BudgetOrigin) {
        (self.budget.load(std::sync::atomic::Ordering::Relaxed), self.budget_origin)
    }

    pub(crate) fn budget(&self) -> DeviceBudget {
        DeviceBudget { max_binding: self.max_binding, budget: self.budget.load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// The budget a filtered search's tiles plan within (`plan::filtered_budget`).
    pub(super) fn filtered_budget(&self, filter: super::session::ColumnFilter) -> Option<DeviceBudget> {
        plan::filtered_budget(self.budget(), filter.rows, filter.cap)
    }

    /// Records a round swept with sparse distance tiles: `rows` query rows, `overflowed` of
    /// them marked incomplete.
    pub(super) fn record_sparse(&self, rows: usize, overflowed: usize) {
        self.sparse_rows[0].fetch_add(rows as u64, std::sync::atomic::Ordering::Relaxed);
        self.sparse_rows[1].fetch_add(overflowed as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets the sparse tiles' record of earlier data.
    pub fn forget_data(&self) {
        self.sparse_rows.iter().for_each(|a| a.store(0, std::sync::atomic::Ordering::Relaxed));
    }

    /// Whether sparse distance tiles still pay on this engine's data (`plan::sparse_tiles_pay`).
    pub(super) fn sparse_tiles_pay(&self) -> bool {
        let [rows, overflowed] = &self.sparse_rows;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        plan::sparse_tiles_pay(load(rows), load(overflowed))
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
}
