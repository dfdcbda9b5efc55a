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
}

/// The points (read); the entries and their sets, in and out; the sets; the counters; the
/// distances of a peel.
const SLOTS: [super::pipelines::Slot; 8] = [RO, RW, RW, RW, RW, RW, RW, RW];

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
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> CoverTreeKernels {
    // Every loop counts up to the dimension, a set's members or its record's words, or a
    // fixed 160.
    let shader = Shader { name: "cover_tree", source: shaders::COVER_TREE.to_string(), checks: Checks::EndingLoops };
    let root = pipelines.kernel(ctx, "cover_tree", &shader, "root", &SLOTS, &[]);
    let entry = |name| pipelines.pipeline(ctx, "cover_tree", &shader, &root.layout, name, &[]);
    let (measure, prepare, scatter, finish, relabel) =
        (entry("measure"), entry("prepare"), entry("scatter"), entry("finish"), entry("relabel"));
    let nodes = entry("nodes");
    CoverTreeKernels { root, measure, prepare, scatter, finish, relabel, nodes }
}
