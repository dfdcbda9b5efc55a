//! The distance GEMM (`distance.wgsl`): a query tile's keys against corpus rows in
//! register-blocked workgroup tiles, each row's keys under its bound appended to its shortlist;
//! and the same kernel publishing the previous query tile's ranked answers
//! (`distance_publish.wgsl`).

use super::pipelines::{Checks, Kernel, Pipelines, Shader, Slot, RO, RW};
use crate::error::{Error, Result};
use crate::gpu::context::Context;
use crate::gpu::shaders;

/// Distance tile shape (override constants of distance.wgsl).
const TILE_M: u32 = 128;
pub(in crate::gpu) const TILE_N: u32 = 128;
pub(in crate::gpu) const TILE_K: u32 = 16;
// distance.wgsl loads at most two 4 x 4 operand blocks per invocation and slice.
const MAX_TILE_K: u32 = 32;
// Every invocation loads at most two 4 x 4 blocks of a slice.
const _: () = assert!((TILE_M / 4 + TILE_N / 4) * (MAX_TILE_K / 4) <= 2 * (TILE_M / 8) * (TILE_N / 8));
const _: () = assert!(TILE_M.is_multiple_of(8) && TILE_N.is_multiple_of(8) && TILE_K.is_multiple_of(4));

/// Workgroup tiles of the distance GEMM over `rows` query rows and `cols` corpus rows.
pub(in crate::gpu) fn gemm_tiles(rows: usize, cols: usize) -> usize {
    rows.div_ceil(TILE_M as usize) * cols.div_ceil(TILE_N as usize)
}

/// In the publishing distance kernel, every this many workgroups one copies answers instead of
/// computing a tile (`PUBLISH_STRIDE` in distance_publish.wgsl, built in by `shaders::distance`).
pub(in crate::gpu) const PUBLISH_STRIDE: usize = 16;

/// Workgroups of a publishing distance dispatch of `tiles` tiles: whole runs of
/// `PUBLISH_STRIDE`, each ending in a copying workgroup.
pub(in crate::gpu) fn publishing_groups(tiles: usize) -> usize {
    tiles.div_ceil(PUBLISH_STRIDE - 1) * PUBLISH_STRIDE
}

/// `Params` of distance.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::gpu) struct DistanceParams {
    pub(in crate::gpu) q_rows: u32,
    pub(in crate::gpu) c_rows: u32,
    pub(in crate::gpu) dim4: u32,
    pub(in crate::gpu) c_offset: u32,
    pub(in crate::gpu) col_base: u32,
    pub(in crate::gpu) out_stride: u32,
    pub(in crate::gpu) mode: u32,
    pub(in crate::gpu) groups_x: u32,
    pub(in crate::gpu) shortlist_cap: u32,
    pub(in crate::gpu) row_base: u32,
    pub(in crate::gpu) column_end: u32,
    pub(in crate::gpu) column_cap: u32,
    /// Vec4s of ranked answers to publish (distance_publish.wgsl); 0: none.
    pub(in crate::gpu) publish_len: u32,
    /// Index of the tile's first query row, which column rows list as its id.
    pub(in crate::gpu) query_first: u32,
    /// Shortlist slot of the tile's first column, where columns take keys (`column_end`);
    /// query row r's is slot r.
    pub(in crate::gpu) column_lists: u32,
    /// Index in the row state of global column 0, whose bound column rows read.
    pub(in crate::gpu) column_state: u32,
}

/// Queries, corpus rows, their norms, row state (read); keys, shortlist lengths, shortlists.
const SLOTS: [Slot; 8] = [RO, RO, RO, RO, RO, RW, RW, RW];

/// The distance kernels' workgroup tile, as override constants, for tiles `depth` deep.
fn tile_constants(depth: u32) -> [(&'static str, f64); 3] {
    [("BM", TILE_M as f64), ("BN", TILE_N as f64), ("BK", depth as f64)]
}

/// The depth of the distance kernel's workgroup tiles: `asked`, else `TILE_K`, if the
/// kernel can be built with it on this adapter.
pub(super) fn tile_depth(ctx: &Context, asked: Option<u32>) -> Result<u32> {
    let depth = asked.unwrap_or(TILE_K);
    // Each depth holds one padded row of vec4s per operand (QS, CS in distance.wgsl).
    let tile_bytes = depth * (TILE_M / 4 + 1 + TILE_N / 4 + 1) * 16;
    if ![4, 8, 16, MAX_TILE_K].contains(&depth) || tile_bytes > ctx.limits.max_compute_workgroup_storage_size {
        return Err(Error::arg(
            "tile-depth",
            format!(
                "distance tile depth {depth}: must be 4, 8, 16 or 32 and its {tile_bytes} bytes of workgroup memory \
                 fit the adapter's {}",
                ctx.limits.max_compute_workgroup_storage_size
            ),
        ));
    }
    Ok(depth)
}

pub(super) fn create(ctx: &Context, pipelines: &Pipelines, depth: u32) -> Kernel {
    let shader = Shader { name: "distance", source: shaders::distance(depth, false), checks: Checks::Unchecked };
    pipelines.kernel(ctx, "distance", &shader, "distance_tile", &SLOTS, &tile_constants(depth))
}

/// The publishing distance kernel, where the adapter can bind mapped buffers as storage.
pub(super) fn create_publishing(ctx: &Context, pipelines: &Pipelines, depth: u32) -> Result<Option<Kernel>> {
    // Publishing binds two more storage buffers, one of them mapped.
    if !(ctx.mappable_storage && ctx.limits.max_storage_buffers_per_shader_stage >= 10) {
        return Ok(None);
    }
    let slots = [SLOTS.as_slice(), &[RO, RW]].concat();
    Ok(Some(ctx.allocating(|| {
        let source = shaders::distance(depth, true);
        let shader = Shader { name: "distance publishing", source, checks: Checks::Unchecked };
        pipelines.kernel(ctx, "distance publishing", &shader, "distance_tile", &slots, &tile_constants(depth))
    })?))
}
