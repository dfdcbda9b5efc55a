//! The cover tree's query kernels (`cover_tree_query.wgsl`): a group's members against its
//! cover set, `bound` then `collect`.

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// Members a group (`GROUP` in cover_tree_query.wgsl): one workgroup a group.
pub(in crate::gpu) const COVER_SET_GROUP: usize = 32;

/// `Params` of cover_tree_query.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct CoverSetParams {
    pub(in crate::gpu) dims: u32,
    pub(in crate::gpu) k: u32,
    pub(in crate::gpu) cap: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) groups: u32,
    pub(in crate::gpu) euclidean: u32,
    pub(in crate::gpu) heap_depth: u32,
    pub(in crate::gpu) pad: u32,
    pub(in crate::gpu) sum_rel: f32,
    pub(in crate::gpu) sum_abs: f32,
    pub(in crate::gpu) vector_err: f32,
    pub(in crate::gpu) key_err: f32,
}

/// The vectors, groups, members and lists (read); the heaps, thresholds, counts and found
/// points.
const SLOTS: [super::pipelines::Slot; 8] = [RO, RO, RO, RO, RW, RW, RW, RW];

/// The entry points of cover_tree_query.wgsl (one layout).
pub(in crate::gpu) struct CoverSetKernels {
    /// `bound`; its layout binds `collect` too.
    pub(in crate::gpu) bound: Kernel,
    pub(super) collect: wgpu::ComputePipeline,
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> CoverSetKernels {
    // Every loop counts up to a list's length, the dimension, a constant or a heap's depth.
    let shader =
        Shader { name: "cover_tree_query", source: shaders::COVER_TREE_QUERY.to_string(), checks: Checks::EndingLoops };
    let bound = pipelines.kernel(ctx, "cover_tree_query", &shader, "bound", &SLOTS, &[]);
    let collect = pipelines.pipeline(ctx, "cover_tree_query", &shader, &bound.layout, "collect", &[]);
    CoverSetKernels { bound, collect }
}
