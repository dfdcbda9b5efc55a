//! Exact float64 keys of the candidates (`refine.wgsl`, rows read one value at a time or as
//! vec4s), by one invocation, a few, or a workgroup per candidate; needs SHADER_F64.

use super::pipelines::{Checks, Pipelines, Shader, RO, RW};
use super::{Kernel, Step};
use crate::gpu::context::Context;
use crate::gpu::shaders;
use crate::metric::Metric;
use crate::plan::WIDE_ROWS;

/// Dimension from which exact keys are computed by a group of invocations per candidate.
pub(in crate::gpu) const GROUPED_ROWS: usize = 32;
/// Invocations in a workgroup of refine.wgsl (`WG`).
const REFINE_WG: usize = 64;
// Every group width (`group_width`: at most 8) divides the workgroup.
const _: () = assert!(REFINE_WG.is_multiple_of(8));

/// Invocations per candidate of `exact_keys_grouped` over rows of `dim4` vec4s: the most, up to
/// 8, that leave each at least 8 vec4s to read. More invocations per candidate mean more
/// partial sums through workgroup memory and more registers idle; fewer, a longer loop each.
/// The widths measured: `notes/exactness.md`.
fn refine_group(dim4: usize) -> usize {
    group_width(dim4, 8, 8)
}

/// Invocations per candidate of `exact_keys_grouped` over rows of `d` values read one at a
/// time (lengths not a multiple of 4): the most, up to 4, that leave each at least 16 values.
/// Eight invocations were the slowest but one at every length measured (`notes/exactness.md`).
fn scalar_refine_group(d: usize) -> usize {
    group_width(d, 4, 16)
}

/// The most invocations, a power of two up to `most`, that leave each at least `each` of a
/// row's `len` loads.
fn group_width(len: usize, most: usize, each: usize) -> usize {
    let mut group = most;
    while group > 1 && len < each * group {
        group /= 2;
    }
    group
}

/// The entry points of refine.wgsl, by row length (one layout).
pub(in crate::gpu) struct RefineKernels {
    /// One invocation per candidate.
    pub(in crate::gpu) narrow: Kernel,
    /// A few invocations per candidate, from `GROUPED_ROWS` values a row.
    pub(super) grouped: wgpu::ComputePipeline,
    /// One workgroup per candidate, from `WIDE_ROWS` values a row.
    pub(super) wide: wgpu::ComputePipeline,
    /// The same from vec4 loads, for rows of a multiple of 4 values (`refine_vec4.wgsl`).
    pub(super) wide4: wgpu::ComputePipeline,
    /// Keys of pairs listed by both their rows, copied from the row that computed them.
    pub(super) copy_mutual: wgpu::ComputePipeline,
    /// A few invocations per candidate from vec4 loads, for rows of a multiple of 4 values.
    pub(super) grouped4: wgpu::ComputePipeline,
}

/// `Params` of refine.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct RefineParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) kc: u32,
    pub(in crate::gpu) dim: u32,
    pub(in crate::gpu) mode: u32,
    pub(in crate::gpu) groups_x: u32,
    /// See refine.wgsl.
    pub(in crate::gpu) row_base: u32,
    pub(in crate::gpu) mutual: u32,
    /// Invocations per candidate of `exact_keys_grouped` ([`refine_group`]).
    pub(in crate::gpu) group: u32,
    /// The tile's first query row in the query rows' float64 norms (cosine).
    pub(in crate::gpu) norm_base: u32,
    /// The corpus rows of the bound chunk of original rows, `first..end`.
    pub(in crate::gpu) first: u32,
    pub(in crate::gpu) end: u32,
}

/// refine.wgsl's `mode` for the metric.
pub(in crate::gpu) fn refine_mode(metric: Metric) -> u32 {
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => 0,
        Metric::Cosine => 1,
        Metric::Correlation => 2,
        Metric::InnerProduct => 3,
    }
}

/// The exact-keys kernel for `rows` rows of `kc` candidates of `d` values, its workgroups, and
/// its invocations per candidate ([`refine_group`]). Longer rows are read faster by several
/// invocations each (coalesced loads).
pub(in crate::gpu) fn exact_keys_dispatch(d: usize, rows: usize, kc: usize) -> (Step, usize, usize) {
    let group = if d.is_multiple_of(4) { refine_group(d / 4) } else { scalar_refine_group(d) };
    let (step, groups) = if d >= WIDE_ROWS && d.is_multiple_of(4) {
        (Step::RefineWide4, rows * kc)
    } else if d >= WIDE_ROWS {
        (Step::RefineWide, rows * kc)
    } else if d >= GROUPED_ROWS && d.is_multiple_of(4) {
        (Step::RefineGrouped4, (rows * kc).div_ceil(REFINE_WG / group))
    } else if d >= GROUPED_ROWS {
        (Step::RefineGrouped, (rows * kc).div_ceil(REFINE_WG / group))
    } else {
        (Step::Refine, (rows * kc).div_ceil(REFINE_WG))
    };
    (step, groups, group)
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> RefineKernels {
    let slots = [RO, RO, RO, RW, RO, RO];
    let scalar = Shader { name: "refine", source: shaders::refine(false), checks: Checks::EndingLoops };
    let narrow = pipelines.kernel(ctx, "refine", &scalar, "exact_keys", &slots, &[]);
    let layout = &narrow.layout;
    let grouped = pipelines.pipeline(ctx, "refine grouped", &scalar, layout, "exact_keys_grouped", &[]);
    let wide = pipelines.pipeline(ctx, "refine wide", &scalar, layout, "exact_keys_wide", &[]);
    let copy_mutual = pipelines.pipeline(ctx, "copy mutual keys", &scalar, layout, "copy_mutual_keys", &[]);
    let vec4 = Shader { name: "refine vec4", source: shaders::refine(true), checks: Checks::EndingLoops };
    let wide4 = pipelines.pipeline(ctx, "refine wide vec4", &vec4, layout, "exact_keys_wide", &[]);
    let grouped4 = pipelines.pipeline(ctx, "refine grouped vec4", &vec4, layout, "exact_keys_grouped", &[]);
    RefineKernels { narrow, grouped, wide, wide4, grouped4, copy_mutual }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refine_groups_leave_each_invocation_eight_vec4s() {
        let widths: Vec<usize> = [8, 15, 16, 31, 32, 50, 63].into_iter().map(refine_group).collect();
        assert_eq!(widths, [1, 1, 2, 2, 4, 4, 4]);
        assert_eq!(refine_group(64), 8);
    }

    #[test]
    fn scalar_refine_groups_leave_each_invocation_sixteen_values() {
        let widths: Vec<usize> = [33, 38, 50, 63, 64, 74, 150, 255].into_iter().map(scalar_refine_group).collect();
        assert_eq!(widths, [2, 2, 2, 2, 4, 4, 4, 4]);
    }
}
