//! A cover tree's queries on the GPU (`shaders/cover_tree_query.wgsl`): the tree's vectors
//! resident, and for each batch of groups the host's cover sets uploaded, both passes
//! submitted at once, and each member's collected points read back. What the sets hold and
//! how the answers are proven is `lowdim::covertree::gpu_query`'s.

use super::engine::GpuEngine;
use super::kernels::*;
use super::transfer::read_back;
use crate::error::{Error, Result};

/// Members a group: one workgroup each.
pub(crate) const COVER_SET_MEMBERS: usize = COVER_SET_GROUP;

/// One batch of groups: per group (first entry of `lists`, its length, first member slot,
/// members), each member slot's point, and the groups' lists of points.
pub(crate) struct CoverSets<'a> {
    pub groups: &'a [[u32; 4]],
    pub members: &'a [u32],
    pub lists: &'a [u32],
}

/// The host's error terms of an f32 squared distance summed on the GPU, and of a float64
/// key, for the kernel's thresholds (`Space`'s, rounded up to f32).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoverSetBounds {
    pub euclidean: bool,
    pub sum_rel: f32,
    pub sum_abs: f32,
    pub vector_err: f32,
    pub key_err: f32,
}

/// What the GPU found for each member slot of a batch.
pub(crate) struct CoverSetsFound {
    /// The largest squared distance the member collected to (`inf`: all of its list).
    pub thresholds: Vec<f32>,
    /// Points collected (past `cap`, only the first `cap` are held), and list points looked
    /// at, the member's own left out.
    pub counts: Vec<[u32; 2]>,
    /// `cap` (point, f32 bits of the squared distance) a member slot.
    pub found: Vec<[u32; 2]>,
    pub cap: usize,
}

/// A tree's vectors resident on one GPU for its queries.
pub(crate) struct TreeOnGpu<'e> {
    gpu: &'e GpuEngine,
    vectors: wgpu::Buffer,
    dims: usize,
    k: usize,
    cap: usize,
    bounds: CoverSetBounds,
}

const STORAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::COPY_SRC);

impl GpuEngine {
    /// Points a member may collect where k are wanted: the k, ties and the margin of the
    /// error bounds.
    pub(crate) fn cover_set_cap(k: usize) -> usize {
        k + k / 2 + 16
    }

    /// GPU memory a member slot of a batch takes beside the lists, in bytes: its heap, its
    /// threshold and count, its collected points, its point.
    pub(crate) fn cover_set_member_bytes(k: usize) -> u64 {
        4 * k as u64 + 16 + 8 * Self::cover_set_cap(k) as u64
    }

    /// The tree vectors `vectors` (`dims` values a point, in node order) uploaded for
    /// queries of `k` neighbours.
    pub(crate) fn tree_for_queries(
        &self,
        vectors: &[f32],
        dims: usize,
        k: usize,
        bounds: CoverSetBounds,
    ) -> Result<TreeOnGpu<'_>> {
        if std::mem::size_of_val(vectors) as u64 > self.max_binding || vectors.len() >= u32::MAX as usize {
            return Err(Error::TooLargeForDevice(format!(
                "a cover tree's vectors of {} bytes in one binding",
                std::mem::size_of_val(vectors)
            )));
        }
        self.kernels.cover_set_kernels(&self.ctx)?;
        let vectors = self.upload("cover tree vectors", bytemuck::cast_slice(vectors))?;
        Ok(TreeOnGpu { gpu: self, vectors, dims, k, cap: Self::cover_set_cap(k), bounds })
    }
}

impl TreeOnGpu<'_> {
    /// Runs both passes over the batch `sets` and reads back what each member collected.
    pub(crate) fn run(&self, sets: &CoverSets<'_>) -> Result<CoverSetsFound> {
        let gpu = self.gpu;
        let slots = sets.members.len();
        let (k, cap) = (self.k, self.cap);
        if (slots * cap) as u64 * 8 > gpu.max_binding || (slots * k) as u64 * 4 > gpu.max_binding {
            return Err(Error::TooLargeForDevice(format!("{slots} queries' cover sets in one binding")));
        }
        let kernels = gpu.kernels.cover_set_kernels(&gpu.ctx)?;
        let groups = gpu.upload("cover set groups", bytemuck::cast_slice(sets.groups))?;
        let members = gpu.upload("cover set members", bytemuck::cast_slice(sets.members))?;
        let lists = gpu.upload("cover set lists", bytemuck::cast_slice(sets.lists))?;
        let heaps = gpu.buffer("cover set heaps", (slots * k) as u64 * 4, STORAGE)?;
        let thresholds = gpu.buffer("cover set thresholds", slots as u64 * 4, STORAGE)?;
        let counts = gpu.buffer("cover set counts", slots as u64 * 8, STORAGE)?;
        let found = gpu.buffer("cover set points", (slots * cap) as u64 * 8, STORAGE)?;
        let by_groups = grid(sets.groups.len(), gpu.max_groups);
        let b = self.bounds;
        let mut params = ParamSlots::default();
        let offset = params.push(CoverSetParams {
            dims: self.dims as u32,
            k: k as u32,
            cap: cap as u32,
            groups_x: by_groups.0,
            groups: sets.groups.len() as u32,
            euclidean: u32::from(b.euclidean),
            heap_depth: usize::BITS - k.leading_zeros(),
            pad: 0,
            sum_rel: b.sum_rel,
            sum_abs: b.sum_abs,
            vector_err: b.vector_err,
            key_err: b.key_err,
        });
        let uniform = gpu.upload_uniform(&params)?;
        let storage = [&self.vectors, &groups, &members, &lists, &heaps, &thresholds, &counts, &found];
        let bind = bind_group(&gpu.ctx.device, &kernels.bound.layout, &uniform, &storage);
        let jobs = [
            Job { step: Step::CoverSetBound, offset, groups: by_groups, bind: &bind },
            Job { step: Step::CoverSetCollect, offset, groups: by_groups, bind: &bind },
        ];
        let encoder = gpu.ctx.device.create_command_encoder(&Default::default());
        let submitted = gpu.submit(encoder, &jobs)?;
        gpu.completion(submitted)?;
        crate::trace::mark(|| format!("cover sets: {slots} members' kernels done"));
        let thresholds: Vec<f32> = read_back(gpu, &thresholds, Some(slots * 4))?;
        let counts: Vec<[u32; 2]> = read_back(gpu, &counts, Some(slots * 8))?;
        let found: Vec<[u32; 2]> = read_back(gpu, &found, Some(slots * cap * 8))?;
        gpu.ctx.wait()?;
        Ok(CoverSetsFound { thresholds, counts, found, cap })
    }
}
