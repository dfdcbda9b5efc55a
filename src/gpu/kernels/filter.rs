//! The two-sided filter of a dense block (`filter_two_sided.wgsl`): each key under its row's
//! bound appended to that row's list, and right of the diagonal block to its column row's.

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// `Params` of filter_two_sided.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct FilterParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) cols: u32,
    pub(in crate::gpu) stride: u32,
    pub(in crate::gpu) row_base: u32,
    pub(in crate::gpu) col_base: u32,
    pub(in crate::gpu) column_begin: u32,
    pub(in crate::gpu) cap: u32,
    pub(in crate::gpu) groups_x: u32,
}

/// Rows and columns of the block one workgroup of filter_two_sided.wgsl takes (one invocation
/// a column; the module is built with them, `shaders::filter_two_sided`). Short strips hold
/// few keys in registers, so more workgroups run at once, for more atomics a key; 16 x 256 was
/// the fastest of the shapes measured (`notes/select.md`, "Bounded sweeps").
pub(in crate::gpu) const FILTER_STRIP: (usize, usize) = (16, 256);

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> Kernel {
    let shader = Shader { name: "filter", source: shaders::filter_two_sided(), checks: Checks::EndingLoops };
    pipelines.kernel(ctx, "filter", &shader, "filter_block", &[RO, RO, RW, RW], &[])
}
