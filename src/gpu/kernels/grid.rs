//! The low-dimensional grid's kernels (`grid.wgsl`): corpus points keyed by cell, and each
//! query's nearest points among the cells around its own.

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// Most coordinates a point of the grid has (`MAX_DIMS` in grid.wgsl): a query visits 3^d
/// cells, 729 at six.
pub(crate) const GRID_MAX_DIMS: usize = 6;

/// The count `query_cells` reports for a query it could not answer (its loops were cut
/// short).
pub(crate) const GRID_FAILED: u32 = u32::MAX;

/// Invocations a workgroup of grid.wgsl.
pub(in crate::gpu) const GRID_GROUP: usize = 64;

/// `Params` of grid.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct GridParams {
    pub(in crate::gpu) len: u32,
    pub(in crate::gpu) dims: u32,
    pub(in crate::gpu) kc: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) points: u32,
    pub(in crate::gpu) _pad: [u32; 3],
}

/// The geometry (read); the points keyed (coordinates read, cell ids and points written);
/// each query's heap and count; the corpus points (read).
const SLOTS: [super::pipelines::Slot; 8] = [RO, RO, RW, RW, RW, RW, RW, RO];

/// The entry points of grid.wgsl (one layout).
pub(in crate::gpu) struct GridKernels {
    /// `cell_ids`; its layout binds `query_cells` too.
    pub(in crate::gpu) cell_ids: Kernel,
    pub(super) query_cells: wgpu::ComputePipeline,
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> GridKernels {
    // Every loop counts up to a bound below 2^31 (dimensions, cells, heap slots, a bisection
    // or a run of one cell's points) or halves a range.
    let shader = Shader { name: "grid", source: shaders::GRID.to_string(), checks: Checks::EndingLoops };
    let cell_ids = pipelines.kernel(ctx, "grid", &shader, "cell_ids", &SLOTS, &[]);
    let query_cells = pipelines.pipeline(ctx, "grid", &shader, &cell_ids.layout, "query_cells", &[]);
    GridKernels { cell_ids, query_cells }
}
