//! A graph's queries of a cover tree answered on a GPU, a group of near points at a time.
//!
//! The points of a group (`groups`: up to `GROUP_POINTS`, a node and its nearest children's
//! subtrees) lie within a radius r of its middle point c. Whatever k + 1 rows are nearest to
//! c lie within D of it, and within D + r of any member, at least k of them other than the
//! member's own row; so each member's answer lies within `reach_of(D + r)` of it, and within
//! `reach_of(D + r) + r` of c. The host's descent for c with that reach
//! (`query::cover_set`) lists every point a member may need: the group's cover set. The GPU
//! computes every member's distances to the list and collects the points under a threshold
//! it derives from the member's k-th. The host accepts a collection only where the GPU
//! looked at the whole list and held what it collected, and no point it left out (a GPU sum
//! above the threshold, bounded with the error terms of a device that may flush subnormals)
//! can be within the member's reach, taken as the CPU's descent takes it from the collected
//! points' distances computed again on the CPU. Accepted rows are ranked by float64 keys as
//! on the CPU (`query::finish`); the others are answered by the CPU's descent. So the GPU's
//! arithmetic decides how much is collected, never the answer.

use std::ops::Range;

use rayon::prelude::*;

use super::build::TreeRef;
use super::query::{self, Best, Scratch};
use crate::error::{interrupted, Result};
use crate::gpu::{CoverSets, GpuEngine, TreeOnGpu, COVER_SET_MEMBERS};
use crate::lowdim::job::{PointRows, TreeJob};
use crate::plan::DeviceBudget;
use crate::refine::write_row;

/// Member slots a batch at most: enough work for the GPU between the host's turns.
const MAX_SLOTS: usize = 1 << 16;

/// Points a group at most: its members share one cover set, listed once by the host and
/// measured by the GPU `COVER_SET_MEMBERS` members at a time.
const GROUP_POINTS: usize = 128;

/// The tree's vectors on `gpu`, for queries of `k` neighbours.
pub(super) fn open<'e>(gpu: &'e GpuEngine, tree: &TreeRef<'_>, k: usize) -> Result<TreeOnGpu<'e>> {
    let space = tree.space.flushing_subnormals();
    gpu.tree_for_queries(&tree.vectors(), space.dims(), k, space.gpu_bounds())
}

/// One row of a block: its point and its place among the block's rows.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub point: u32,
    /// Its group (`groups`).
    pub group: u32,
    pub row: u32,
}

/// A row's answer: its k indices and distances.
type Slot<'o> = (&'o mut [u32], &'o mut [f32]);

/// A graph's queries of `tree` on the GPU that holds `on_gpu`, within that GPU's `budget`.
pub(super) struct CoverSetQueries<'a> {
    pub job: &'a TreeJob<'a>,
    pub tree: &'a TreeRef<'a>,
    pub on_gpu: &'a TreeOnGpu<'a>,
    pub budget: DeviceBudget,
}

impl CoverSetQueries<'_> {
    /// Answers the rows `entries` (in groups, a point's rows together) of a graph's block
    /// starting at row `first`, writing row `entries[i]`'s answer to `slots[i]`; returns the
    /// rows answered from the GPU's collections (the rest by the CPU's descent). The host lists
    /// the next chunk's cover sets while the GPU and the host's finish work on this one.
    pub(super) fn answer_block(
        &self,
        first: usize,
        entries: &[Entry],
        mut slots: &mut [Slot<'_>],
        report: &(dyn Fn(usize) + Sync),
    ) -> Result<usize> {
        let CoverSetQueries { job, tree, budget, .. } = *self;
        let k = job.k;
        // The groups' runs of entries, and chunks of groups whose rows fill a batch's member
        // slots (a point's rows share its slot, so rows count at least its slots).
        let mut groups: Vec<Range<usize>> = Vec::new();
        let mut start = 0;
        for i in 1..=entries.len() {
            if i == entries.len() || entries[i].group != entries[i - 1].group {
                groups.push(start..i);
                start = i;
            }
        }
        // A batch's arrays within half the budget, each within one binding.
        let DeviceBudget { budget, max_binding } = budget;
        let member_bytes = GpuEngine::cover_set_member_bytes(k);
        let widest_bytes = 8 * GpuEngine::cover_set_cap(k).max(k) as u64;
        let slots_a_batch =
            ((budget / 2 / member_bytes).min(max_binding / widest_bytes) as usize).clamp(COVER_SET_MEMBERS, MAX_SLOTS);
        let list_entries = (budget / 2).min(max_binding) as usize / 4;
        let mut chunks: Vec<Range<usize>> = Vec::new();
        let mut g = 0;
        while g < groups.len() {
            let (mut end, mut rows) = (g, 0);
            while end < groups.len() && (end == g || rows + groups[end].len() <= slots_a_batch) {
                rows += groups[end].len();
                end += 1;
            }
            chunks.push(g..end);
            g = end;
        }
        let list = |chunk: &Range<usize>| -> Vec<(Vec<u32>, Vec<u32>)> {
            groups[chunk.clone()]
                .par_iter()
                .map_init(Scratch::default, |scratch, range| cover_set(tree, k, &entries[range.clone()], scratch))
                .collect()
        };
        let (mut on_gpu_rows, mut done) = (0, 0);
        let mut lists = chunks.first().map(list).unwrap_or_default();
        for (c, chunk) in chunks.iter().enumerate() {
            if interrupted(&job.interrupt) {
                return Ok(on_gpu_rows);
            }
            let rows = groups[chunk.start].start..groups[chunk.end - 1].end;
            let (these, rest) = std::mem::take(&mut slots).split_at_mut(rows.len());
            slots = rest;
            let chunk_groups = &groups[chunk.clone()];
            let (answered, next) = rayon::join(
                || self.answer_chunk(list_entries, first, entries, chunk_groups, &lists, these),
                || chunks.get(c + 1).map(list).unwrap_or_default(),
            );
            on_gpu_rows += answered?;
            lists = next;
            done += rows.len();
            report(done);
            crate::trace::mark(|| format!("cover tree: {on_gpu_rows} of {done} rows answered from the GPU"));
        }
        Ok(on_gpu_rows)
    }

    /// Answers the rows of `groups` (runs of `entries`, the first at `slots[0]`) from their
    /// cover sets `lists`, in batches whose lists hold at most `list_entries` points (one group
    /// at least); returns the rows answered from the GPU's collections.
    fn answer_chunk(
        &self,
        list_entries: usize,
        first: usize,
        entries: &[Entry],
        groups: &[Range<usize>],
        lists: &[(Vec<u32>, Vec<u32>)],
        mut slots: &mut [Slot<'_>],
    ) -> Result<usize> {
        let CoverSetQueries { job, tree, on_gpu, .. } = *self;
        let k = job.k;
        let mut on_gpu_rows = 0;
        let mut g = 0;
        while g < groups.len() {
            let (mut end, mut total) = (g, 0);
            while end < groups.len() && (end == g || total + lists[end].1.len() <= list_entries) {
                total += lists[end].1.len();
                end += 1;
            }
            let (batch, batch_lists) = (&groups[g..end], &lists[g..end]);
            g = end;
            // A group's members COVER_SET_MEMBERS at a time, each part against the group's list.
            let (mut sets_groups, mut first_slots) = (Vec::new(), Vec::with_capacity(batch.len()));
            let (mut members, mut all_lists) = (Vec::new(), Vec::with_capacity(total));
            for (members_of, list) in batch_lists {
                first_slots.push(members.len());
                for part in members_of.chunks(COVER_SET_MEMBERS) {
                    sets_groups.push([
                        all_lists.len() as u32,
                        list.len() as u32,
                        members.len() as u32,
                        part.len() as u32,
                    ]);
                    members.extend_from_slice(part);
                }
                all_lists.extend_from_slice(list);
            }
            let found = on_gpu.run(&CoverSets { groups: &sets_groups, members: &members, lists: &all_lists })?;
            crate::trace::mark(|| {
                format!("cover tree: {} groups, {} members, {total} listed points", batch.len(), members.len())
            });
            // Each row's member slot: its group's first slot plus its point's place in the group.
            let rows = batch[0].start..batch[batch.len() - 1].end;
            let mut slot_of = Vec::with_capacity(rows.len());
            for (range, &first_slot) in batch.iter().zip(&first_slots) {
                let mut slot = first_slot;
                for i in range.clone() {
                    if i > range.start && entries[i].point != entries[i - 1].point {
                        slot += 1;
                    }
                    slot_of.push(slot);
                }
            }
            let (these, rest) = std::mem::take(&mut slots).split_at_mut(rows.len());
            slots = rest;
            let space = tree.space.flushing_subnormals();
            // Each member's list length, its own point left out (every member is in its list).
            let mut listed = vec![0u32; members.len()];
            for set in &sets_groups {
                listed[set[2] as usize..][..set[3] as usize].fill(set[1] - 1);
            }
            let accepted: Vec<bool> = these
                .par_iter_mut()
                .zip(&entries[rows.clone()])
                .zip(&slot_of)
                .map_init(
                    || (Best::default(), Vec::new(), Vec::new()),
                    |(best, points, list), ((slot, entry), &s)| {
                        let row = first + entry.row as usize;
                        best.start(job.exclude[row], 0.0);
                        // The member's own point, which the GPU leaves out: its other rows.
                        best.meet(tree, k, entry.point, 0.0, 0.0);
                        let [count, looked] = found.counts[s];
                        let count = count as usize;
                        // The collected points' distances again on the CPU: a GPU sum that came
                        // out too small (a driver's fault) must not narrow the reach.
                        let own = tree.vector(entry.point as usize);
                        for &[p, _] in &found.found[s * found.cap..][..count.min(found.cap)] {
                            let (lo, hi) = tree.space.bounds(tree.space.sq(own, tree.vector(p as usize)));
                            best.meet(tree, k, p, lo, hi);
                        }
                        let threshold = found.thresholds[s];
                        // Every list point looked at, every collected point held, and no point
                        // left out (a GPU sum above the threshold) within the member's reach.
                        let complete = looked == listed[s]
                            && count <= found.cap
                            && (threshold == f32::INFINITY || space.bounds(f64::from(threshold)).0 > best.reach());
                        if complete {
                            let answer = query::finish(job, tree, row, best, points, list);
                            write_row(job.metric, answer.iter().copied(), slot.0, slot.1);
                        }
                        complete
                    },
                )
                .collect();
            on_gpu_rows += accepted.iter().filter(|&&a| a).count();
            // Rows whose collection was not proven complete: the CPU's descent.
            let mut left: Vec<(usize, &mut Slot<'_>)> = these
                .iter_mut()
                .zip(&entries[rows.clone()])
                .zip(&accepted)
                .filter(|(_, &a)| !a)
                .map(|((slot, entry), _)| (first + entry.row as usize, slot))
                .collect();
            left.par_chunks_mut(query::BATCH).for_each_init(Scratch::default, |scratch, chunk| {
                let rows: Vec<usize> = chunk.iter().map(|c| c.0).collect();
                query::nearest(job, tree, &rows, scratch, |j, answer| {
                    let slot = &mut chunk[j].1;
                    write_row(job.metric, answer.iter().copied(), slot.0, slot.1);
                });
            });
        }
        Ok(on_gpu_rows)
    }
}

/// A group's member points (distinct, in order) and its cover set.
fn cover_set(tree: &TreeRef<'_>, k: usize, entries: &[Entry], scratch: &mut Scratch) -> (Vec<u32>, Vec<u32>) {
    let mut members: Vec<u32> = entries.iter().map(|e| e.point).collect();
    members.dedup();
    let centre = tree.vector(members[members.len() / 2] as usize);
    let space = &tree.space;
    let radius = members.iter().map(|&p| space.bounds(space.sq(centre, tree.vector(p as usize))).1).fold(0.0, f64::max);
    // One row more than k: a member's own row may be among the centre's nearest.
    let list = query::cover_set(tree, k + 1, centre, radius, scratch);
    (members, list)
}

/// The tree's points in groups of near points, each group's points together: a node heads a
/// group, and takes its children's subtrees whole, nearest level first, while the group
/// holds at most `GROUP_POINTS` points; a child that does not fit heads a group of its own.
/// Returns the points and, for each, its group.
pub(super) fn groups(tree: &TreeRef<'_>) -> (Vec<u32>, Vec<u32>) {
    let nodes = tree.nodes;
    // Children come after their parent in the layout: sizes from the last node back.
    let mut size = vec![1usize; nodes.len()];
    for n in (0..nodes.len()).rev() {
        let node = nodes[n];
        for c in node.first_child..node.first_child + node.children {
            size[n] += size[c as usize];
        }
    }
    let children = |n: u32| {
        let node = nodes[n as usize];
        node.first_child..node.first_child + node.children
    };
    let (mut order, mut group) = (Vec::with_capacity(nodes.len()), Vec::with_capacity(nodes.len()));
    let (mut heads, mut below) = (vec![0u32], Vec::new());
    let mut g = 0;
    while let Some(n) = heads.pop() {
        order.push(n);
        group.push(g);
        let mut points = 1;
        // A node's children were peeled from the highest level down: the last are nearest.
        for c in children(n).rev() {
            if points + size[c as usize] > GROUP_POINTS {
                heads.push(c);
                continue;
            }
            points += size[c as usize];
            below.push(c);
            while let Some(m) = below.pop() {
                order.push(m);
                group.push(g);
                below.extend(children(m));
            }
        }
        g += 1;
    }
    (order, group)
}

/// The rows of block `block` of a graph by the points of `order`, in that order, with the
/// groups of `group`.
pub(super) fn entries_of(tree: &TreeRef<'_>, order: &[u32], group: &[u32], block: std::ops::Range<u32>) -> Vec<Entry> {
    order
        .par_iter()
        .zip(group)
        .flat_map_iter(|(&p, &g)| {
            let (start, end) = (block.start, block.end);
            tree.rows_of(p as usize).iter().filter(move |&&r| start <= r && r < end).map(move |&r| Entry {
                point: p,
                group: g,
                row: r - start,
            })
        })
        .collect()
}
