//! The cover tree built on the GPU (`shaders/cover_tree.wgsl`): the host uploads the points,
//! submits rounds until every set is done, and reads the sets back. What the sets mean and
//! how the tree is laid out for its queries is `lowdim::covertree`'s.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::engine::GpuEngine;
use super::kernels::*;
use super::transfer::read_back;
use crate::error::{interrupted, Error, Result};

/// Rounds recorded in one submission between looks at the counters: enough to hide the
/// submission's latency, few enough not to run many rounds past the end.
const ROUNDS_PER_SUBMISSION: usize = 32;

/// One set of a tree built on the GPU: a node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BuiltSet {
    pub point: u32,
    /// The set whose peel made this one (`u32::MAX` for the root).
    pub parent: u32,
    /// The f32 squared distance from the point to its parent's, as the GPU summed it.
    pub parent_sq: f32,
    /// The f32 squared distance to the farthest point below it, as the GPU summed it.
    pub radius_sq: f32,
}

const STORAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::COPY_SRC);

impl GpuEngine {
    /// GPU memory the build over `points` points of `dims` values takes, in bytes.
    pub(crate) fn cover_tree_bytes(points: usize, dims: usize) -> u64 {
        let points = points as u64;
        // Points; two arrays of entries and of their sets; a peel's distances; the sets and
        // their counters.
        points * dims as u64 * 4 + points * (2 * 8 + 2 * 4 + 4) + points * (SET_WORDS as u64 * 4 + 16)
    }

    /// Points a chunk of the build's points holds (each chunk one binding) for `points` points
    /// of `dims` values, or `None` where they take more bindings than the adapter gives the
    /// build, or its sets (the largest of its other arrays) more than one binding.
    pub(crate) fn cover_tree_chunk_rows(&self, points: usize, dims: usize) -> Option<usize> {
        let row_bytes = dims.max(1) as u64 * 4;
        let chunk_rows = (self.max_binding / row_bytes).min(u32::MAX as u64) as usize;
        let chunks = points.div_ceil(chunk_rows.max(1));
        let sets_fit = points as u64 * SET_WORDS as u64 * 4 <= self.max_binding;
        (chunk_rows > 0 && sets_fit && chunks <= cover_tree_point_chunks(&self.ctx.limits)).then_some(chunk_rows)
    }

    /// The cover tree of `vectors` (rows of `dims` values, each a distinct point), point 0 its
    /// root: every set in the order made, set 0 the root's and each set after its parent's.
    /// `None` where `interrupt` was set.
    pub(crate) fn build_cover_tree(
        &self,
        vectors: &[f32],
        dims: usize,
        interrupt: &Option<Arc<AtomicBool>>,
    ) -> Result<Option<Vec<BuiltSet>>> {
        let points = vectors.len() / dims.max(1);
        if points >= u32::MAX as usize / SET_WORDS {
            return Err(Error::TooLargeForDevice(format!("a cover tree of {points} points")));
        }
        let Some(chunk_rows) = self.cover_tree_chunk_rows(points, dims) else {
            return Err(Error::TooLargeForDevice(format!(
                "a cover tree of {points} points of {dims} values on this device's bindings"
            )));
        };
        let kernels = self.kernels.cover_tree_kernels(&self.ctx)?;
        let entries = points.saturating_sub(1);
        let mut chunks = vectors
            .chunks(chunk_rows * dims.max(1))
            .map(|chunk| self.upload("cover tree points", bytemuck::cast_slice(chunk)))
            .collect::<Result<Vec<_>>>()?;
        if chunks.is_empty() {
            chunks.push(self.upload("cover tree points", &[])?);
        }
        // Bindings past the points' last chunk are never read; they hold the first.
        let point_buffers: Vec<&wgpu::Buffer> =
            (0..kernels.point_chunks).map(|c| chunks.get(c).unwrap_or(&chunks[0])).collect();
        let entry_buffers = [(); 2].map(|_| self.buffer("cover tree entries", entries as u64 * 8, STORAGE));
        let set_of_buffers = [(); 2].map(|_| self.buffer("cover tree entry sets", entries as u64 * 4, STORAGE));
        let [e0, e1] = entry_buffers;
        let [s0, s1] = set_of_buffers;
        let (e0, e1, s0, s1) = (e0?, e1?, s0?, s1?);
        let peeled = self.buffer("cover tree peel distances", entries as u64 * 4, STORAGE)?;
        // The root's set: point 0, every other point a member.
        let mut sets = vec![0u32; points * SET_WORDS];
        sets[SET_END] = entries as u32;
        sets[SET_STEP] = if entries > 0 { STEP_SPLIT } else { 0 };
        sets[SET_PARENT] = u32::MAX;
        let sets_buffer = self.upload("cover tree sets", bytemuck::cast_slice(&sets))?;
        drop(sets);
        let mut counters = vec![0u32; COUNTER_HEAD + 4 * points];
        counters[COUNTER_MADE] = 1;
        counters[COUNTER_OF_ROUND] = 1;
        counters[COUNTER_FINISHED] = u32::from(entries == 0);
        let counter_buffer = self.upload("cover tree counters", bytemuck::cast_slice(&counters))?;
        drop(counters);

        let by_entries = grid(entries.div_ceil(COVER_TREE_GROUP).max(1), self.max_groups);
        let by_sets = grid(points.div_ceil(COVER_TREE_GROUP), self.max_groups);
        let mut params = ParamSlots::default();
        let param = |groups: (u32, u32)| CoverTreeParams {
            entries: entries as u32,
            dims: dims as u32,
            sets: points as u32,
            groups_x: groups.0,
            chunk_rows: chunk_rows as u32,
        };
        let entry_offset = params.push(param(by_entries));
        let set_offset = params.push(param(by_sets));
        let uniform = self.upload_uniform(&params)?;
        let layout = &kernels.root.layout;
        let [there, back] = [[&e0, &e1, &s0, &s1], [&e1, &e0, &s1, &s0]].map(|[ein, eout, sin, sout]| {
            let build = [point_buffers[0], ein, eout, sin, sout, &sets_buffer, &counter_buffer, &peeled];
            let storage: Vec<&wgpu::Buffer> = build.into_iter().chain(point_buffers[1..].iter().copied()).collect();
            bind_group(&self.ctx.device, layout, &uniform, &storage)
        });
        fn round(bind: &wgpu::BindGroup, by_entries: (u32, u32), by_sets: (u32, u32), at: (u32, u32)) -> [Job<'_>; 5] {
            let (entry_offset, set_offset) = at;
            let job = |step, offset, groups| Job { step, offset, groups, bind };
            [
                job(Step::CoverTreeMeasure, entry_offset, by_entries),
                job(Step::CoverTreePrepare, set_offset, by_sets),
                job(Step::CoverTreeScatter, entry_offset, by_entries),
                job(Step::CoverTreeFinish, set_offset, by_sets),
                job(Step::CoverTreeRelabel, entry_offset, by_entries),
            ]
        }
        let mut jobs = vec![Job { step: Step::CoverTreeRoot, offset: entry_offset, groups: by_entries, bind: &there }];
        // A set's every step leaves a point to a child or ends it, and a set makes at most
        // one child a round: no build needs more rounds than two a point and a level.
        let most_rounds = 2 * points + 64;
        let mut rounds = 0;
        loop {
            for _ in 0..ROUNDS_PER_SUBMISSION {
                jobs.extend(round(
                    if rounds % 2 == 0 { &there } else { &back },
                    by_entries,
                    by_sets,
                    (entry_offset, set_offset),
                ));
                rounds += 1;
            }
            let encoder = self.ctx.device.create_command_encoder(&Default::default());
            let submitted = self.submit(encoder, &jobs)?;
            self.completion(submitted)?;
            jobs.clear();
            let counters: Vec<u32> = read_back(self, &counter_buffer, Some(COUNTER_HEAD * 4))?;
            if counters[COUNTER_CUT_SHORT] != 0 {
                return Err(Error::Gpu(
                    "the driver ended the cover tree build's loops early (llvmpipe stops an invocation after 65535 \
                     loop steps)"
                        .into(),
                ));
            }
            if counters[COUNTER_FINISHED] as usize >= points {
                break;
            }
            if interrupted(interrupt) {
                return Ok(None);
            }
            if rounds > most_rounds {
                return Err(Error::Gpu(format!(
                    "the cover tree's build did not end in {rounds} rounds ({} of {points} sets done)",
                    counters[COUNTER_FINISHED]
                )));
            }
        }
        crate::trace::mark(|| format!("cover tree: built on the GPU in {rounds} rounds"));
        let gather = [Job { step: Step::CoverTreeNodes, offset: set_offset, groups: by_sets, bind: &there }];
        let encoder = self.ctx.device.create_command_encoder(&Default::default());
        let submitted = self.submit(encoder, &gather)?;
        self.completion(submitted)?;
        let links: Vec<u32> = read_back(self, &e0, Some(entries * 8))?;
        let squares: Vec<u32> = read_back(self, &e1, Some(entries * 8))?;
        let root: Vec<u32> = read_back(self, &sets_buffer, Some(SET_WORDS * 4))?;
        self.ctx.wait()?;
        crate::trace::mark(|| "cover tree: sets read back".to_string());
        let root =
            BuiltSet { point: 0, parent: u32::MAX, parent_sq: 0.0, radius_sq: f32::from_bits(root[SET_RADIUS_SQ]) };
        let others = links.chunks_exact(2).zip(squares.chunks_exact(2)).map(|(l, q)| BuiltSet {
            point: l[0],
            parent: l[1],
            parent_sq: f32::from_bits(q[0]),
            radius_sq: f32::from_bits(q[1]),
        });
        Ok(Some(std::iter::once(root).chain(others).collect()))
    }
}
