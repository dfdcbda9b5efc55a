//! The low-dimensional grid's kernels (`grid.wgsl`): corpus points keyed by cell, and each
//! query's nearest points among the cells around its own; where the adapter has SHADER_F64,
//! each query's answer ranked and proven from them (`grid_prove.wgsl`).

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

/// Most heap slots a query may have for its answer to be proven on the GPU
/// (`grid_prove.wgsl` keeps them in private arrays; k + 2 slots, so k <= 128).
pub(crate) const GRID_PROVE_MAX_KC: usize = 130;

/// A query's status from `grid_prove.wgsl`: its answer proven, and in its slots.
pub(crate) const GRID_PROVEN: u32 = 0;
/// (Status 1: its candidates did not prove its answer.) The grid could not answer it (`GRID_FAILED`), or the proof's loops were cut short.
pub(crate) const GRID_UNANSWERED: u32 = 2;

/// `Params` of grid_prove.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct GridProveParams {
    pub(in crate::gpu) len: u32,
    pub(in crate::gpu) dims: u32,
    pub(in crate::gpu) kc: u32,
    pub(in crate::gpu) k: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) points: u32,
    pub(in crate::gpu) _pad: [u32; 2],
    pub(in crate::gpu) reach_key: f64,
    pub(in crate::gpu) kept_scale: f64,
    pub(in crate::gpu) kept_floor: f64,
    /// 1.0, which the shader multiplies each key's terms by (see its `exact_key`).
    pub(in crate::gpu) one: f64,
}

/// The queries' coordinates, the corpus points and heap keys (read); the heap's points
/// (answer rows written over them), the counts and excluded rows (statuses written over the
/// counts), each point's rows (read), the answers' keys.
const PROVE_SLOTS: [super::pipelines::Slot; 7] = [RO, RO, RO, RW, RW, RO, RW];

/// The geometry (read); the points keyed (coordinates read, cell ids and points written);
/// each query's heap and count; the corpus points (read).
const SLOTS: [super::pipelines::Slot; 8] = [RO, RO, RW, RW, RW, RW, RW, RO];

/// The entry points of grid.wgsl (one layout).
pub(in crate::gpu) struct GridKernels {
    /// `cell_ids`; its layout binds `query_cells` too.
    pub(in crate::gpu) cell_ids: Kernel,
    pub(super) query_cells: wgpu::ComputePipeline,
    /// `prove_rows` (grid_prove.wgsl), where the adapter has SHADER_F64.
    pub(in crate::gpu) prove: Option<Kernel>,
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> GridKernels {
    // Every loop counts up to a bound below 2^31 (dimensions, cells, heap slots, a bisection
    // or a run of one cell's points) or halves a range.
    let shader = Shader { name: "grid", source: shaders::GRID.to_string(), checks: Checks::EndingLoops };
    let cell_ids = pipelines.kernel(ctx, "grid", &shader, "cell_ids", &SLOTS, &[]);
    let query_cells = pipelines.pipeline(ctx, "grid", &shader, &cell_ids.layout, "query_cells", &[]);
    let prove = ctx.f64.then(|| {
        // Loops as in grid.wgsl, and a heapsort's, which halve or count down to 0.
        let shader = Shader { name: "grid_prove", source: shaders::grid_prove(), checks: Checks::EndingLoops };
        pipelines.kernel(ctx, "grid prove", &shader, "prove_rows", &PROVE_SLOTS, &[])
    });
    GridKernels { cell_ids, query_cells, prove }
}
