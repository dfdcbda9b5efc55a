//! Queries' k nearest rows in a cover tree, a batch of queries at a time: nodes visited
//! nearest bound first, a subtree dropped for a query once no point in it can come within
//! that query's k-th key.
//!
//! A node's subtree lies within its radius of its point, so no point below node p is
//! nearer to the query q than d(q, p) - radius(p); before computing d(q, c) for a child c,
//! the triangle through the parent, |d(q, p) - d(p, c)|, bounds it from the distances
//! already known. Candidates are ranked by their float64 keys; the bounds are those of
//! `space.rs`, so a point whose key could reach the k-th is never dropped, and points tied
//! at the k-th key are all kept for the rule of ties by index.
//!
//! The queries of a batch (neighbours of each other, in a graph) descend together: each
//! node's vector is read once for all the queries that still need it, while it is in cache,
//! rather than once a query from memory.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::build::Tree;
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
    popped: Vec<(Key, u32)>,
    points: Vec<(f64, usize)>,
    answer: Vec<(f64, u32)>,
}

/// The best points of one query as they are found.
#[derive(Default)]
struct Best {
    excluded: u32,
    /// (key, point) of the best points so far, the farthest on top.
    heap: BinaryHeap<(Key, u32)>,
    /// Rows (the excluded one left out) of the points in `heap`.
    rows: usize,
    /// At least the true distance of any point that may still enter the answer.
    reach: f64,
}

impl Best {
    fn start(&mut self, excluded: u32) {
        self.excluded = excluded;
        self.heap.clear();
        self.rows = 0;
        self.reach = f64::INFINITY;
    }

    fn rows_of(&self, tree: &Tree, p: u32) -> usize {
        let rows = tree.rows_of(p as usize);
        rows.len() - usize::from(rows.binary_search(&self.excluded).is_ok())
    }

    /// Takes point `p` at float64 key `key`, then drops the farthest points while the
    /// others hold k rows without them (points tied at one key leave together).
    fn offer(&mut self, tree: &Tree, k: usize, p: u32, key: f64, popped: &mut Vec<(Key, u32)>) {
        let rows = self.rows_of(tree, p);
        if rows == 0 || (self.rows >= k && self.heap.peek().is_some_and(|top| key > top.0 .0)) {
            return;
        }
        self.heap.push((Key(key), p));
        self.rows += rows;
        while let Some(&(top, q)) = self.heap.peek() {
            if self.rows - self.rows_of(tree, q) < k {
                break;
            }
            popped.clear();
            let mut leaving = 0;
            while let Some(&entry) = self.heap.peek().filter(|e| e.0 == top) {
                self.heap.pop();
                leaving += self.rows_of(tree, entry.1);
                popped.push(entry);
            }
            if self.rows - leaving < k {
                self.heap.extend(popped.drain(..));
                break;
            }
            self.rows -= leaving;
        }
        if self.rows >= k {
            self.reach = tree.space.key_reach(self.heap.peek().expect("k >= 1 rows").0 .0);
        }
    }
}

/// Answers query rows `rows` of `job` (at most [`BATCH`]), calling `answer(i, list)` with
/// the i-th row's k nearest rows, ascending by (key, row).
pub(super) fn nearest(
    job: &TreeJob<'_>,
    tree: &Tree,
    rows: &[usize],
    scratch: &mut Scratch,
    mut answer: impl FnMut(usize, &[(f64, u32)]),
) {
    debug_assert!(rows.len() <= BATCH);
    let Scratch { queries, open, near, need, best, popped, points, answer: list } = scratch;
    let (space, nodes, k) = (&tree.space, &tree.nodes, job.k);
    let d = space.dims();
    queries.resize(rows.len() * d, 0.0);
    best.resize_with(rows.len().max(best.len()), Best::default);
    for (j, &i) in rows.iter().enumerate() {
        space.place(job.queries.row(i), &mut queries[j * d..][..d]);
        best[j].start(job.exclude[i]);
    }
    open.clear();
    near.clear();
    // Query j meets point p at lower bound `lo`: its float64 key is taken where it may be
    // within reach.
    let mut meet = |best: &mut Best, j: usize, p: usize, lo: f64| {
        if lo <= best.reach {
            let key = job.metric.rank_key_f64(job.queries.row(rows[j]), job.corpus.row(tree.row_of(p)));
            best.offer(tree, k, p as u32, key, popped);
        }
    };
    // The root, for every query.
    let (root, mut least) = (nodes[0], f64::INFINITY);
    for j in 0..rows.len() {
        let (lo, hi) = space.bounds(space.sq(&queries[j * d..][..d], tree.vector(0)));
        meet(&mut best[j], j, 0, lo);
        if root.children > 0 && lo - root.radius <= best[j].reach {
            near.push(Near { query: j as u32, lo, hi });
            least = least.min(lo - root.radius);
        }
    }
    if !near.is_empty() {
        open.push(Reverse((Key(least), 0, 0, near.len() as u32)));
    }
    while let Some(Reverse((Key(bound), n, from, to))) = open.pop() {
        if best[..rows.len()].iter().all(|b| bound > b.reach) {
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
                    let (j, b) = (q.query as usize, &mut best[q.query as usize]);
                    let (lo, hi) = space.bounds(sq);
                    meet(b, j, c as usize, lo);
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
    for (j, b) in best[..rows.len()].iter_mut().enumerate() {
        points.clear();
        points.extend(b.heap.drain().map(|(Key(key), p)| (key, p as usize)));
        points.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let kth = kth_row_key(tree, k, b.excluded, points).unwrap_or(f64::INFINITY);
        answer(j, rows_answer(tree, k, b.excluded, kth, points, list));
    }
}
