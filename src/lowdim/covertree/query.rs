//! Queries' k nearest rows in a cover tree, a batch of queries at a time: nodes visited
//! nearest bound first, a subtree dropped for a query once no point in it can come within
//! that query's k-th key.
//!
//! A node's subtree lies within its radius of its point, so no point below node p is
//! nearer to the query q than d(q, p) - radius(p); before computing d(q, c) for a child c,
//! the triangle through the parent, |d(q, p) - d(p, c)|, bounds it from the distances
//! already known. The reach of a query comes from the k least upper bounds on distances met
//! so far, widened by `Space::reach_of` to every point whose float64 key could be among the
//! k least; the points met within reach get their float64 keys once the descent ends, so
//! that points tied at the k-th key are all there for the rule of ties by index.
//!
//! The queries of a batch (neighbours of each other, in a graph) descend together: each
//! node's vector is read once for all the queries that still need it, while it is in cache,
//! rather than once a query from memory.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::build::TreeRef;
use crate::lowdim::job::{kth_row_key, rows_answer, PointRows, TreeJob};

/// Queries that descend the tree together.
pub(super) const BATCH: usize = 32;

/// A float64 ordered by `total_cmp`, for the heaps.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Key(f64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A query's bounds on the distance to a node's point: (query in the batch, lo, hi).
#[derive(Clone, Copy)]
struct Near {
    query: u32,
    lo: f64,
    hi: f64,
}

/// A node to expand: (the least lower bound on its subtree's distances over the queries that
/// need it, node, where those queries' bounds lie in `Scratch::near`).
type Open = Reverse<(Key, u32, u32, u32)>;

/// Buffers a thread reuses from batch to batch.
#[derive(Default)]
pub(super) struct Scratch {
    /// The batch's tree vectors, `dims` values each.
    queries: Vec<f32>,
    open: BinaryHeap<Open>,
    near: Vec<Near>,
    /// The queries that need one child's distance.
    need: Vec<Near>,
    best: Vec<Best>,
    points: Vec<(f64, usize)>,
    answer: Vec<(f64, u32)>,
}

/// What one query has found: the points met within reach, and the least upper bounds that
/// set the reach.
#[derive(Default)]
pub(super) struct Best {
    excluded: u32,
    /// Added to the distances the reach is made of, and to the reach itself: for the centre
    /// of a ball of queries (`cover_set`), whose reach must hold for any query within
    /// `slack` of it.
    slack: f64,
    /// (upper bound, point) of the points with the least upper bounds on their distance,
    /// as many as hold k rows, the largest on top.
    heap: BinaryHeap<(Key, u32)>,
    /// Rows (the excluded one left out) of the points in `heap`.
    rows: usize,
    /// At least the true distance of any point whose float64 key may be among the k least:
    /// `Space::reach_of` the k-th least upper bound.
    reach: f64,
    /// (lower bound, point) of every point met while its lower bound was within reach.
    candidates: Vec<(f64, u32)>,
}

impl Best {
    pub(super) fn start(&mut self, excluded: u32, slack: f64) {
        self.excluded = excluded;
        self.slack = slack;
        self.heap.clear();
        self.rows = 0;
        self.reach = f64::INFINITY;
        self.candidates.clear();
    }

    fn rows_of(&self, tree: &TreeRef<'_>, p: u32) -> usize {
        let rows = tree.rows_of(p as usize);
        rows.len() - usize::from(rows.binary_search(&self.excluded).is_ok())
    }

    /// Meets point `p` at a true distance between `lo` and `hi`.
    pub(super) fn meet(&mut self, tree: &TreeRef<'_>, k: usize, p: u32, lo: f64, hi: f64) {
        let rows = self.rows_of(tree, p);
        if lo > self.reach || rows == 0 {
            return;
        }
        self.candidates.push((lo, p));
        if self.rows >= k && self.heap.peek().is_some_and(|top| hi >= top.0 .0) {
            return;
        }
        self.heap.push((Key(hi), p));
        self.rows += rows;
        while let Some(&(_, q)) = self.heap.peek() {
            let without = self.rows - self.rows_of(tree, q);
            if without < k {
                break;
            }
            self.heap.pop();
            self.rows = without;
        }
        if self.rows >= k {
            self.reach = tree.space.reach_of(self.heap.peek().expect("k >= 1 rows").0 .0 + self.slack) + self.slack;
            // Candidates that fell out of reach, dropped now and then.
            if self.candidates.len() > 4 * k + 64 {
                let reach = self.reach;
                self.candidates.retain(|c| c.0 <= reach);
            }
        }
    }

    /// At least the true distance of any point whose float64 key may be among the k least.
    pub(super) fn reach(&self) -> f64 {
        self.reach
    }
}

/// Answers query rows `rows` of `job` (at most [`BATCH`]), calling `answer(i, list)` with
/// the i-th row's k nearest rows, ascending by (key, row).
pub(super) fn nearest(
    job: &TreeJob<'_>,
    tree: &TreeRef<'_>,
    rows: &[usize],
    scratch: &mut Scratch,
    mut answer: impl FnMut(usize, &[(f64, u32)]),
) {
    debug_assert!(rows.len() <= BATCH);
    let d = tree.space.dims();
    scratch.queries.resize(rows.len() * d, 0.0);
    scratch.best.resize_with(rows.len().max(scratch.best.len()), Best::default);
    for (j, &i) in rows.iter().enumerate() {
        tree.space.place(job.queries.row(i), &mut scratch.queries[j * d..][..d]);
        scratch.best[j].start(job.exclude[i], 0.0);
    }
    descend(tree, job.k, rows.len(), scratch);
    let Scratch { best, points, answer: list, .. } = scratch;
    for (j, b) in best[..rows.len()].iter().enumerate() {
        answer(j, finish(job, tree, rows[j], b, points, list));
    }
}

/// The points of the tree that may be among the k nearest of any query within `radius` of
/// `centre` (a tree vector): every point within reach of the centre, its reach taken from k
/// rows, `radius` added to the distances it is made of and to itself. Returned ascending.
pub(super) fn cover_set(tree: &TreeRef<'_>, k: usize, centre: &[f32], radius: f64, scratch: &mut Scratch) -> Vec<u32> {
    scratch.queries.clear();
    scratch.queries.extend_from_slice(centre);
    scratch.best.resize_with(scratch.best.len().max(1), Best::default);
    scratch.best[0].start(crate::refine::NONE, radius);
    descend(tree, k, 1, scratch);
    let b = &scratch.best[0];
    // Each point is met once; ascending, the GPU reads the vectors in memory order.
    let mut set: Vec<u32> = b.candidates.iter().filter(|c| c.0 <= b.reach).map(|c| c.1).collect();
    set.sort_unstable();
    set
}

/// The float64 answer of query row `row` from what `b` found: the keys of its candidates
/// still within reach, ranked, ties by index.
pub(super) fn finish<'s>(
    job: &TreeJob<'_>,
    tree: &TreeRef<'_>,
    row: usize,
    b: &Best,
    points: &mut Vec<(f64, usize)>,
    list: &'s mut Vec<(f64, u32)>,
) -> &'s [(f64, u32)] {
    let k = job.k;
    let query_row = job.queries.row(row);
    points.clear();
    points.extend(
        b.candidates
            .iter()
            .filter(|c| c.0 <= b.reach)
            .map(|&(_, p)| (job.metric.rank_key_f64(query_row, tree.row_values(p as usize, job.corpus)), p as usize)),
    );
    points.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let kth = kth_row_key(tree, k, b.excluded, points).unwrap_or(f64::INFINITY);
    rows_answer(tree, k, b.excluded, kth, points, list)
}

/// Descends the tree for the first `count` queries of `scratch` (their vectors in
/// `scratch.queries`, their `Best` started), nearest bound first.
fn descend(tree: &TreeRef<'_>, k: usize, count: usize, scratch: &mut Scratch) {
    let Scratch { queries, open, near, need, best, .. } = scratch;
    let (space, nodes) = (&tree.space, &tree.nodes);
    let d = space.dims();
    open.clear();
    near.clear();
    // The root, for every query.
    let (root, mut least) = (nodes[0], f64::INFINITY);
    for j in 0..count {
        let (lo, hi) = space.bounds(space.sq(&queries[j * d..][..d], tree.vector(0)));
        best[j].meet(tree, k, 0, lo, hi);
        if root.children > 0 && lo - root.radius <= best[j].reach {
            near.push(Near { query: j as u32, lo, hi });
            least = least.min(lo - root.radius);
        }
    }
    if !near.is_empty() {
        open.push(Reverse((Key(least), 0, 0, near.len() as u32)));
    }
    while let Some(Reverse((Key(bound), n, from, to))) = open.pop() {
        if best[..count].iter().all(|b| bound > b.reach) {
            break;
        }
        let node = nodes[n as usize];
        for c in node.first_child..node.first_child + node.children {
            let child = nodes[c as usize];
            let vector = tree.vector(c as usize);
            let (start, mut least) = (near.len(), f64::INFINITY);
            // The queries that need the child's distance, four at a time.
            need.clear();
            need.extend(near[from as usize..to as usize].iter().copied().filter(|q| {
                let reach = best[q.query as usize].reach;
                let via_parent = (q.lo - child.parent_hi).max(child.parent_lo - q.hi);
                q.lo - node.radius <= reach && via_parent - child.radius <= reach
            }));
            for group in need.chunks(4) {
                let query = |i: usize| &queries[group[i.min(group.len() - 1)].query as usize * d..][..d];
                let sq = space.sq4(vector, [query(0), query(1), query(2), query(3)]);
                for (q, sq) in group.iter().zip(sq) {
                    let b = &mut best[q.query as usize];
                    let (lo, hi) = space.bounds(sq);
                    b.meet(tree, k, c, lo, hi);
                    if child.children > 0 && lo - child.radius <= b.reach {
                        near.push(Near { query: q.query, lo, hi });
                        least = least.min(lo - child.radius);
                    }
                }
            }
            if near.len() > start {
                open.push(Reverse((Key(least), c, start as u32, near.len() as u32)));
            }
        }
    }
}
