//! Kernel times from timestamp queries, and host times around them.

use super::context::Context;
use super::engine::GpuEngine;
use super::kernels::Step;
use crate::error::Result;

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
    /// Radix sort passes and the prefix sums of their counts (`radix_sort.wgsl`,
    /// `prefix_sum.wgsl`).
    pub sort: f64,
    /// The low-dimensional grid's kernels (`grid.wgsl`): cell ids and queries.
    pub grid: f64,
    /// The cover tree's construction (`cover_tree.wgsl`) and queries (`cover_tree_query.wgsl`).
    pub cover_tree: f64,
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
    pub(super) fn add(&mut self, step: Step, seconds: f64) {
        match step {
            Step::Norms => self.prepare_rows += seconds,
            Step::Distance | Step::DistancePublishing => self.distance += seconds,
            Step::SelectRows
            | Step::SortSelectPairs
            | Step::SortSelectRowKeys
            | Step::SortSelectTake
            | Step::SortSelectColumnKeys
            | Step::SortSelectTakeColumns
            | Step::SortSelectOrderRowKeys => self.select += seconds,
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
            Step::SortCount | Step::SortScatter | Step::ScanBlocks | Step::ScanAddOffsets => self.sort += seconds,
            Step::GridCellIds | Step::GridQuery | Step::GridProve => self.grid += seconds,
            Step::CoverTreeRoot
            | Step::CoverTreeMeasure
            | Step::CoverTreePrepare
            | Step::CoverTreeScatter
            | Step::CoverTreeFinish
            | Step::CoverTreeRelabel
            | Step::CoverTreeNodes
            | Step::CoverSetBound
            | Step::CoverSetCollect => self.cover_tree += seconds,
        }
    }
}

/// Timestamp queries around every dispatch, where the adapter allows them inside passes.
pub(super) struct Profiler {
    pub(super) queries: wgpu::QuerySet,
    pub(super) resolved: wgpu::Buffer,
    pub(super) capacity: u32,
    pub(super) times: std::sync::Mutex<GpuTimes>,
}

impl Profiler {
    /// A profiler where the device records timestamps inside passes, else `None`.
    pub(super) fn new(ctx: &Context) -> Result<Option<Self>> {
        if !ctx.timestamps {
            return Ok(None);
        }
        let capacity = 4096;
        Ok(Some(Profiler {
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
        }))
    }
}

impl GpuEngine {
    /// Takes the times recorded since the last call; `None` without profiling.
    pub fn take_profile(&self) -> Option<GpuTimes> {
        let p = self.profiler.as_ref()?;
        Some(std::mem::take(&mut *p.times.lock().unwrap_or_else(|e| e.into_inner())))
    }

    pub(super) fn add_transfer_time(&self, since: std::time::Instant) {
        if let Some(p) = &self.profiler {
            p.times.lock().unwrap_or_else(|e| e.into_inner()).transfers += since.elapsed().as_secs_f64();
        }
    }
}
