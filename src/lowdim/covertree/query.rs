//! A query's k nearest rows in a cover tree: nodes visited nearest bound first, a subtree
//! dropped once no point in it can come within the k-th key.
//!
//! A node's subtree lies within its radius of its point, so no point below node p is
//! nearer to the query q than d(q, p) - radius(p); before computing d(q, c) for a child c,
//! the triangle through the parent, |d(q, p) - d(p, c)|, bounds it from the distances
//! already known. Candidates are ranked by their float64 keys; the bounds are those of
//! `space.rs`, so a point whose key could reach the k-th is never dropped, and points tied
//! at the k-th key are all kept for the rule of ties by index.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::build::Tree;
use crate::lowdim::job::{kth_row_key, rows_answer, PointRows, TreeJob};

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

/// A node to expand: (lower bound on its subtree's distances, node, bounds on the distance
/// from the query to its point).
type Open = Reverse<(Key, u32, Key, Key)>;

/// Buffers a thread reuses from query to query.
#[derive(Default)]
pub(super) struct Scratch {
    query: Vec<f32>,
    open: BinaryHeap<Open>,
    /// (key, point) of the best points so far, the farthest on top.
    best: BinaryHeap<(Key, u32)>,
    popped: Vec<(Key, u32)>,
    points: Vec<(f64, usize)>,
    answer: Vec<(f64, u32)>,
}

/// The best points of one query as they are found.
struct Best<'s, 't> {
    tree: &'t Tree,
    k: usize,
    excluded: u32,
    heap: &'s mut BinaryHeap<(Key, u32)>,
    popped: &'s mut Vec<(Key, u32)>,
    /// Rows (the excluded one left out) of the points in `heap`.
    rows: usize,
}

impl Best<'_, '_> {
    fn rows_of(&self, p: u32) -> usize {
        let rows = self.tree.rows_of(p as usize);
        rows.len() - usize::from(rows.binary_search(&self.excluded).is_ok())
    }

    /// At least the true distance of any point that may still enter the answer.
    fn reach(&self) -> f64 {
        match self.heap.peek() {
            Some(&(Key(key), _)) if self.rows >= self.k => self.tree.space.key_reach(key),
            _ => f64::INFINITY,
        }
    }

    /// Takes point `p` at float64 key `key`, then drops the farthest points while the
    /// others hold k rows without them (points tied at one key leave together).
    fn offer(&mut self, p: u32, key: f64) {
        let rows = self.rows_of(p);
        if rows == 0 || (self.rows >= self.k && self.heap.peek().is_some_and(|top| key > top.0 .0)) {
            return;
        }
        self.heap.push((Key(key), p));
        self.rows += rows;
        while let Some(&(top, q)) = self.heap.peek() {
            if self.rows - self.rows_of(q) < self.k {
                break;
            }
            self.popped.clear();
            let mut leaving = 0;
            while let Some(&entry) = self.heap.peek().filter(|e| e.0 == top) {
                self.heap.pop();
                leaving += self.rows_of(entry.1);
                self.popped.push(entry);
            }
            if self.rows - leaving < self.k {
                self.heap.extend(self.popped.drain(..));
                break;
            }
            self.rows -= leaving;
        }
    }
}

/// The `k` nearest rows of query row `i` of `job`, ascending by (key, row).
pub(super) fn nearest<'s>(job: &TreeJob<'_>, tree: &Tree, i: usize, scratch: &'s mut Scratch) -> &'s [(f64, u32)] {
    let Scratch { query, open, best, popped, points, answer } = scratch;
    let (space, nodes) = (&tree.space, &tree.nodes);
    let query_row = job.queries.row(i);
    query.resize(space.dims(), 0.0);
    space.place(query_row, query);
    best.clear();
    open.clear();
    let mut best = Best { tree, k: job.k, excluded: job.exclude[i], heap: best, popped, rows: 0 };
    // The exact key of point p, taken where its distance may be within reach.
    let consider = |best: &mut Best, p: usize, lo: f64| {
        if lo <= best.reach() {
            best.offer(p as u32, job.metric.rank_key_f64(query_row, job.corpus.row(tree.row_of(p))));
        }
    };
    let (lo, hi) = space.bounds(space.sq(query, tree.vector(0)));
    consider(&mut best, 0, lo);
    if nodes[0].children > 0 {
        open.push(Reverse((Key(lo - nodes[0].radius), 0, Key(lo), Key(hi))));
    }
    while let Some(Reverse((Key(bound), n, Key(q_lo), Key(q_hi)))) = open.pop() {
        if bound > best.reach() {
            break;
        }
        let node = nodes[n as usize];
        for c in node.first_child..node.first_child + node.children {
            let child = nodes[c as usize];
            let via_parent = (q_lo - child.parent_hi).max(child.parent_lo - q_hi);
            if via_parent - child.radius > best.reach() {
                continue;
            }
            let (lo, hi) = space.bounds(space.sq(query, tree.vector(c as usize)));
            consider(&mut best, c as usize, lo);
            if child.children > 0 && lo - child.radius <= best.reach() {
                open.push(Reverse((Key(lo - child.radius), c, Key(lo), Key(hi))));
            }
        }
    }
    let (k, excluded) = (best.k, best.excluded);
    points.clear();
    points.extend(best.heap.drain().map(|(Key(key), p)| (key, p as usize)));
    points.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let kth = kth_row_key(tree, k, excluded, points).unwrap_or(f64::INFINITY);
    rows_answer(tree, k, excluded, kth, points, answer)
}
