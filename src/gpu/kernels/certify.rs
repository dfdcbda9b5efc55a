//! Ranking by exact keys and the certificate of each row (`certify.wgsl`); needs SHADER_F64.

use super::pipelines::{Checks, Kernel, Pipelines, Shader, RO, RW};
use crate::error::Result;
use crate::gpu::context::Context;
use crate::gpu::shaders;
use crate::metric::Metric;

/// Longest candidate list ranked and certified by one workgroup per row: certify.wgsl sorts a
/// row in workgroup memory (12 bytes a candidate); longer lists are sorted in runs this long
/// and ranked across them. 1024 rather than 2048: a list of 1250 (k=1000) was padded to a
/// 2048-wide sort, and the smaller workgroup memory keeps more rows resident
/// (`notes/exactness.md`).
pub(crate) const MAX_CERTIFY_KC: usize = 1024;
const _: () = assert!(MAX_CERTIFY_KC.is_power_of_two());

/// `Params` of certify.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct CertifyParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) kc: u32,
    pub(in crate::gpu) k: u32,
    pub(in crate::gpu) corpus_rows: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) floor_zero: u32,
    /// How the key becomes the reported distance ([`reported_as`]).
    pub(in crate::gpu) reported_as: u32,
    pub(in crate::gpu) _pad: u32,
}

/// certify.wgsl's `REPORT_*` constant for the metric: the same rule as
/// `Metric::key_to_distance`.
pub(in crate::gpu) fn reported_as(metric: Metric) -> u32 {
    match metric {
        Metric::Euclidean => 0,
        Metric::InnerProduct => 1,
        Metric::SqEuclidean | Metric::Cosine | Metric::Correlation => 2,
    }
}

/// The entry points of certify.wgsl (one layout).
pub(in crate::gpu) struct CertifyKernels {
    /// A workgroup per row, for lists of up to `MAX_CERTIFY_KC` candidates.
    pub(in crate::gpu) rows: Kernel,
    /// Longer lists: each run of `MAX_CERTIFY_KC` slots sorted in place.
    pub(super) sort_runs: wgpu::ComputePipeline,
    /// Longer lists: ranks across the sorted runs and the certificate.
    pub(super) certify_runs: wgpu::ComputePipeline,
    /// A symmetric sweep's lists sorted by index, for exact keys shared by mutual neighbours.
    pub(super) sort_by_index: wgpu::ComputePipeline,
}

/// The ranking kernels, where the adapter has SHADER_F64 and the workgroup memory of a row.
pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> Result<Option<CertifyKernels>> {
    // certify.wgsl sorts a row's keys and indices in workgroup memory, beside two
    // 256-entry reductions.
    let certify_bytes = (MAX_CERTIFY_KC * 12 + 256 * 8 + 8) as u32;
    if !(ctx.f64 && certify_bytes <= ctx.limits.max_compute_workgroup_storage_size) {
        return Ok(None);
    }
    let slots = [RW, RW, RO, RO, RW, RW, RW, RW];
    let constants = [("MAX_KC", MAX_CERTIFY_KC as f64)];
    let kernels = ctx.allocating(|| {
        let shader = Shader { name: "certify", source: shaders::CERTIFY.to_string(), checks: Checks::EndingLoops };
        let rows = pipelines.kernel(ctx, "certify", &shader, "certify_rows", &slots, &constants);
        let layout = &rows.layout;
        let sort_runs = pipelines.pipeline(ctx, "sort runs", &shader, layout, "sort_runs", &constants);
        let certify_runs = pipelines.pipeline(ctx, "certify runs", &shader, layout, "certify_runs", &constants);
        let sort_by_index = pipelines.pipeline(ctx, "sort by index", &shader, layout, "sort_by_index", &constants);
        CertifyKernels { rows, sort_runs, certify_runs, sort_by_index }
    })?;
    Ok(Some(kernels))
}
