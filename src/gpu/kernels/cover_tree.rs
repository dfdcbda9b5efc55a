//! The cover tree's construction kernels (`cover_tree.wgsl`): the root's members, then rounds
//! of measure, prepare, scatter, finish and relabel that advance every open set one step,
//! and the sets' nodes gathered for the host.

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// Invocations a workgroup of cover_tree.wgsl.
pub(in crate::gpu) const COVER_TREE_GROUP: usize = 64;

/// Words of a set's record (`STRIDE` in cover_tree.wgsl) and their fields the host reads.
pub(in crate::gpu) const SET_WORDS: usize = 16;
pub(in crate::gpu) const SET_END: usize = 4;
pub(in crate::gpu) const SET_STEP: usize = 5;
pub(in crate::gpu) const SET_PARENT: usize = 7;
pub(in crate::gpu) const SET_RADIUS_SQ: usize = 9;
/// `SPLIT` in cover_tree.wgsl.
pub(in crate::gpu) const STEP_SPLIT: u32 = 1;

/// Counters ahead of the per-set ones (`HEAD`), and the sets done (`FINISHED`) and made
/// (`MADE`), the sets of the round (`OF_ROUND`), and whether a driver ended an invocation's
/// loops early (`CUT_SHORT`).
pub(in crate::gpu) const COUNTER_HEAD: usize = 4;
pub(in crate::gpu) const COUNTER_MADE: usize = 0;
pub(in crate::gpu) const COUNTER_FINISHED: usize = 1;
pub(in crate::gpu) const COUNTER_OF_ROUND: usize = 2;
pub(in crate::gpu) const COUNTER_CUT_SHORT: usize = 3;

/// `Params` of cover_tree.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct CoverTreeParams {
    pub(in crate::gpu) entries: u32,
    pub(in crate::gpu) dims: u32,
    pub(in crate::gpu) sets: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) chunk_rows: u32,
}

/// Most bindings the build reads its points from: points past one binding are cut into
/// chunks of whole points, one binding each.
pub(in crate::gpu) const COVER_TREE_MOST_CHUNKS: usize = 8;

/// Storage bindings of the build besides its points' chunks beyond the first.
const BUILD_BINDINGS: usize = 8;

/// Bindings the build's points may take on an adapter of `limits`.
pub(in crate::gpu) fn cover_tree_point_chunks(limits: &wgpu::Limits) -> usize {
    (limits.max_storage_buffers_per_shader_stage as usize)
        .saturating_sub(BUILD_BINDINGS - 1)
        .clamp(1, COVER_TREE_MOST_CHUNKS)
}

/// The points (read); the entries and their sets, in and out; the sets; the counters; the
/// distances of a peel; then the points' other chunks (read).
const SLOTS: [super::pipelines::Slot; BUILD_BINDINGS] = [RO, RW, RW, RW, RW, RW, RW, RW];

/// The entry points of cover_tree.wgsl (one layout).
pub(in crate::gpu) struct CoverTreeKernels {
    /// `root`; its layout binds the others too.
    pub(in crate::gpu) root: Kernel,
    pub(super) measure: wgpu::ComputePipeline,
    pub(super) prepare: wgpu::ComputePipeline,
    pub(super) scatter: wgpu::ComputePipeline,
    pub(super) finish: wgpu::ComputePipeline,
    pub(super) relabel: wgpu::ComputePipeline,
    pub(super) nodes: wgpu::ComputePipeline,
    /// Bindings for the points (`cover_tree_point_chunks`), each bound whether used or not.
    pub(in crate::gpu) point_chunks: usize,
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> CoverTreeKernels {
    // Every loop counts up to the dimension, a set's members or its record's words, or a
    // fixed 160.
    let point_chunks = cover_tree_point_chunks(&ctx.limits);
    let shader = Shader { name: "cover_tree", source: shaders::cover_tree(point_chunks), checks: Checks::EndingLoops };
    let slots: Vec<_> = SLOTS.into_iter().chain(std::iter::repeat_n(RO, point_chunks - 1)).collect();
    let root = pipelines.kernel(ctx, "cover_tree", &shader, "root", &slots, &[]);
    let entry = |name| pipelines.pipeline(ctx, "cover_tree", &shader, &root.layout, name, &[]);
    let (measure, prepare, scatter, finish, relabel) =
        (entry("measure"), entry("prepare"), entry("scatter"), entry("finish"), entry("relabel"));
    let nodes = entry("nodes");
    CoverTreeKernels { root, measure, prepare, scatter, finish, relabel, nodes, point_chunks }
}
