//! Row preparation (`norms.wgsl`): centring, normalisation and squared norms.

use super::metric_modes;
use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::gpu::context::Context;
use crate::gpu::shaders;
use crate::metric::Metric;

/// `Params` of norms.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct NormsParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) dim: u32,
    pub(in crate::gpu) dim4: u32,
    pub(in crate::gpu) mode: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) in_offset: u32,
    pub(in crate::gpu) _pad: [u32; 2],
}

impl NormsParams {
    /// Preparing `rows` rows of `d` values for `metric`.
    pub(in crate::gpu) fn new(rows: usize, d: usize, metric: Metric, groups_x: u32) -> Self {
        NormsParams {
            rows: rows as u32,
            dim: d as u32,
            dim4: d.div_ceil(4) as u32,
            mode: metric_modes(metric).0,
            groups_x,
            in_offset: 0,
            _pad: [0; 2],
        }
    }
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> Kernel {
    let shader = Shader { name: "norms", source: shaders::NORMS.to_string(), checks: Checks::Checked };
    pipelines.kernel(ctx, "norms", &shader, "prepare_rows", &[RO, RO, RW, RW], &[])
}
