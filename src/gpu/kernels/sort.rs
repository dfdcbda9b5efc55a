//! The radix sort (`radix_sort.wgsl`, with `radix_entry_subgroup.wgsl` or
//! `radix_entry_workgroup.wgsl`) and the prefix sum its passes scan their counts with
//! (`prefix_sum.wgsl`).

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// Pairs a workgroup of the sort ranks at once (`TILE` in radix_sort.wgsl).
pub(in crate::gpu) const SORT_TILE: usize = 1024;
/// Bits of the key each pass sorts by (16 digits, `DIGITS` in radix_sort.wgsl).
pub(in crate::gpu) const DIGIT_BITS: u32 = 4;
/// Entries a workgroup of the prefix sum scans (`BLOCK` in prefix_sum.wgsl).
pub(in crate::gpu) const SCAN_BLOCK: usize = 1024;

/// `flags` of [`SortParams`]: the first pass reads f32 keys and maps them to ordered u32s.
pub(in crate::gpu) const FLOAT_IN: u32 = 1;
/// `flags` of [`SortParams`]: the last pass writes the keys back as f32.
pub(in crate::gpu) const FLOAT_OUT: u32 = 2;

/// `Params` of radix_sort.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct SortParams {
    pub(in crate::gpu) len: u32,
    pub(in crate::gpu) shift: u32,
    pub(in crate::gpu) tiles: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) flags: u32,
    /// The digit's bits that belong to the key: all 4 but in a last pass past the key's bits.
    pub(in crate::gpu) digit_mask: u32,
    pub(in crate::gpu) _pad: [u32; 2],
}

/// `Params` of prefix_sum.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct ScanParams {
    pub(in crate::gpu) len: u32,
    pub(in crate::gpu) blocks: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) _pad: u32,
}

/// The sort's and the prefix sum's pipelines.
pub(in crate::gpu) struct SortKernels {
    /// `count_digits`; its layout (keys and values in, keys and values out, the counts)
    /// binds `scatter` too.
    pub(in crate::gpu) count: Kernel,
    pub(super) scatter: wgpu::ComputePipeline,
    /// `scan_blocks`; its layout (the entries, the blocks' totals) binds `add_block_offsets`.
    pub(in crate::gpu) scan: Kernel,
    pub(super) add_offsets: wgpu::ComputePipeline,
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> SortKernels {
    // Every loop has a constant trip count or counts up to the workgroup's subgroups.
    let sort = Shader { name: "radix sort", source: shaders::radix_sort(ctx.subgroups), checks: Checks::EndingLoops };
    let count = pipelines.kernel(ctx, "radix sort", &sort, "count_digits", &[RO, RO, RW, RW, RW], &[]);
    let scatter = pipelines.pipeline(ctx, "radix sort", &sort, &count.layout, "scatter", &[]);
    let sum = Shader { name: "prefix sum", source: shaders::PREFIX_SUM.to_string(), checks: Checks::EndingLoops };
    let scan = pipelines.kernel(ctx, "prefix sum", &sum, "scan_blocks", &[RW, RW], &[]);
    let add_offsets = pipelines.pipeline(ctx, "prefix sum", &sum, &scan.layout, "add_block_offsets", &[]);
    SortKernels { count, scatter, scan, add_offsets }
}
