//! The select (`select.wgsl`): each row's kc best of a dense distance tile or of its shortlist,
//! and the merges of a tile's candidates into the running lists, by a workgroup per row
//! (`select_rows`) or a subgroup per row (`select_rows_per_subgroup`).

use super::pipelines::{Checks, Kernel, Pipelines, Shader, Slot, RO, RW};
use crate::error::{Error, Result};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// The select's auxiliary arrays in binding order (select.wgsl): the keys and indices of each
/// of two arrays, apart, 4 bytes a slot.
pub(in crate::gpu) const AUX_NAMES: [&str; 4] = ["aux a keys", "aux a indices", "aux b keys", "aux b indices"];

/// Lists longer than this are merged by a workgroup per row (`select_rows`) instead of a
/// subgroup (`select_rows_per_subgroup`), whose 32 lanes walk 2 kc pairs: the subgroup is
/// faster up to a few hundred pairs, the workgroup beyond (`notes/select.md`).
pub(in crate::gpu) const WIDE_MERGE_KC: usize = 512;

/// `Params` of select.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct SelectParams {
    pub(in crate::gpu) rows: u32,
    pub(in crate::gpu) len: u32,
    pub(in crate::gpu) in_stride: u32,
    pub(in crate::gpu) col_base: u32,
    pub(in crate::gpu) need: u32,
    pub(in crate::gpu) scratch_stride: u32,
    pub(in crate::gpu) out_stride: u32,
    pub(in crate::gpu) out_offset: u32,
    pub(in crate::gpu) dense: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) rows_per_group: u32,
    pub(in crate::gpu) shortlist_cap: u32,
}

/// The keys, the auxiliary arrays, candidates, flags, row state, shortlist lengths (written)
/// and shortlists.
const SLOTS: [Slot; 10] = [RO, RW, RW, RW, RW, RW, RW, RW, RW, RO];

/// The entry points of select.wgsl (one layout).
pub(in crate::gpu) struct SelectKernels {
    /// A workgroup per row: the selects of distance tiles.
    pub(in crate::gpu) rows: Kernel,
    /// The same pipeline, for merges of long lists or without subgroups.
    pub(super) merge_wide: wgpu::ComputePipeline,
    /// `select_rows_per_subgroup`, for merging short candidate lists, where subgroups exist.
    pub(super) merge_per_subgroup: Option<wgpu::ComputePipeline>,
}

/// Refuses adapters that cannot bind the select's buffers.
pub(super) fn check_bindings(ctx: &Context) -> Result<()> {
    // The select binds the most storage buffers of any kernel, two more than WebGPU's
    // default limit.
    if (ctx.limits.max_storage_buffers_per_shader_stage as usize) < SLOTS.len() {
        return Err(Error::NoAdapter(format!(
            "{}: {} storage buffers per shader stage, and knng's select binds {}",
            ctx.info.name,
            ctx.limits.max_storage_buffers_per_shader_stage,
            SLOTS.len()
        )));
    }
    Ok(())
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines) -> SelectKernels {
    let shader = Shader { name: "select", source: shaders::select(ctx.subgroups), checks: Checks::EndingLoops };
    let rows = pipelines.kernel(ctx, "select", &shader, "select_rows", &SLOTS, &[]);
    let merge_wide = pipelines.pipeline(ctx, "select", &shader, &rows.layout, "select_rows", &[]);
    // Same module and layout, other entry point: pipelines share the bind groups.
    let merge_per_subgroup = ctx
        .subgroups
        .then(|| pipelines.pipeline(ctx, "merge per subgroup", &shader, &rows.layout, "select_rows_per_subgroup", &[]));
    SelectKernels { rows, merge_wide, merge_per_subgroup }
}

impl SelectKernels {
    /// Rows per workgroup of `select_rows_per_subgroup`, when it exists: sized for the
    /// largest subgroup the adapter may use, so that every row gets a subgroup.
    pub(in crate::gpu) fn rows_per_subgroup_group(&self, info: &wgpu::AdapterInfo) -> Option<u32> {
        self.merge_per_subgroup.as_ref()?;
        Some((256 / info.subgroup_max_size.clamp(1, 256)).max(1))
    }
}
