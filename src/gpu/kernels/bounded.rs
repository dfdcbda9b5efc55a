//! The kernels only bounded sweeps use (`plan::plan_bounded`): the sample's rows gathered from
//! the prepared corpus (`gather_rows.wgsl`), and selects of short rows in workgroup memory
//! (`bounded_lists.wgsl`).

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// `Params` of gather_rows.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct GatherParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) dim4: u32,
    pub(in crate::gpu) first: u32,
    pub(in crate::gpu) step: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) _pad: [u32; 3],
}

/// `Params` of bounded_lists.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct ShortSelectParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) cap: u32,
    pub(in crate::gpu) need: u32,
    pub(in crate::gpu) row_base: u32,
    /// [`SHORT_SELECT_SAMPLE`] or [`SHORT_SELECT_LISTS`].
    pub(in crate::gpu) mode: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) key_stride: u32,
    pub(in crate::gpu) _pad: u32,
}

/// bounded_lists.wgsl's modes: each row's bound from its keys against the sample, or each
/// row's kc best from its list.
pub(in crate::gpu) const SHORT_SELECT_SAMPLE: u32 = 0;
pub(in crate::gpu) const SHORT_SELECT_LISTS: u32 = 1;

/// The kernels only bounded sweeps use (`plan::plan_bounded`).
pub(in crate::gpu) struct BoundedKernels {
    /// Every step-th prepared row into the sample (`gather_rows.wgsl`).
    pub(in crate::gpu) gather: Kernel,
    /// Bounds from the sample's keys, candidates from the lists (`bounded_lists.wgsl`).
    pub(in crate::gpu) short_select: Kernel,
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> BoundedKernels {
    let gather = Shader { name: "gather rows", source: shaders::GATHER_ROWS.to_string(), checks: Checks::EndingLoops };
    let lists = Shader { name: "short select", source: shaders::bounded_lists(), checks: Checks::EndingLoops };
    BoundedKernels {
        gather: pipelines.kernel(ctx, "gather rows", &gather, "gather_rows", &[RO, RO, RW, RW], &[]),
        short_select: pipelines.kernel(ctx, "short select", &lists, "select_short", &[RO, RO, RO, RW, RW, RW], &[]),
    }
}
