//! The batch index sort selector's own kernels (`sort_select.wgsl`): a distance tile laid out
//! as pairs for the radix sort, the sorted pairs keyed by row, and each row's first `need`
//! taken as its list; in symmetric and two-sided blocks also keyed by column, each column's
//! first `need` appended to its row's shortlist.

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// `Params` of sort_select.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct SortSelectParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) cols: u32,
    pub(in crate::gpu) in_stride: u32,
    pub(in crate::gpu) col_base: u32,
    pub(in crate::gpu) need: u32,
    pub(in crate::gpu) out_stride: u32,
    pub(in crate::gpu) out_offset: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) row_base: u32,
    pub(in crate::gpu) column_end: u32,
    pub(in crate::gpu) column_cap: u32,
    /// Shortlist slot of the tile's first column.
    pub(in crate::gpu) column_lists: u32,
}

/// The distance tile (read); the sort's keys and positions, the lists, the row state.
const SLOTS: [super::pipelines::Slot; 5] = [RO, RW, RW, RW, RW];

/// The column side's: those, and the kept key order, the shortlists' lengths and pairs.
const COLUMN_SLOTS: [super::pipelines::Slot; 8] = [RO, RW, RW, RW, RW, RW, RW, RW];

/// The entry points of sort_select.wgsl (one layout).
pub(in crate::gpu) struct SortSelectKernels {
    /// `tile_pairs`; its layout binds the other two.
    pub(in crate::gpu) pairs: Kernel,
    pub(super) row_keys: wgpu::ComputePipeline,
    pub(super) take: wgpu::ComputePipeline,
    /// `column_keys`; its layout binds `take_columns` and `order_row_keys`.
    pub(in crate::gpu) columns: Kernel,
    pub(super) take_columns: wgpu::ComputePipeline,
    pub(super) order_row_keys: wgpu::ComputePipeline,
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> SortSelectKernels {
    let shader = Shader { name: "sort select", source: shaders::SORT_SELECT.to_string(), checks: Checks::EndingLoops };
    let pairs = pipelines.kernel(ctx, "sort select", &shader, "tile_pairs", &SLOTS, &[]);
    let row_keys = pipelines.pipeline(ctx, "sort select", &shader, &pairs.layout, "row_keys", &[]);
    let take = pipelines.pipeline(ctx, "sort select", &shader, &pairs.layout, "take_rows", &[]);
    // The same source under a name of its own: a module's entry points share one layout.
    let column_shader = Shader { name: "sort select columns", ..shader };
    let columns = pipelines.kernel(ctx, "sort select", &column_shader, "column_keys", &COLUMN_SLOTS, &[]);
    let take_columns = pipelines.pipeline(ctx, "sort select", &column_shader, &columns.layout, "take_columns", &[]);
    let order_row_keys = pipelines.pipeline(ctx, "sort select", &column_shader, &columns.layout, "order_row_keys", &[]);
    SortSelectKernels { pairs, row_keys, take, columns, take_columns, order_row_keys }
}
