//! Exact k nearest neighbours by a kd-tree on the CPU's threads (kiddo), for euclidean and
//! squared euclidean distances in a few dimensions.
//!
//! The answer is exact in float64: every key that decides a row is the one the exact finish
//! computes (`Metric::rank_key_f64` on the original f32 rows), and a row's neighbours are the
//! first k by (key, index), so that of rows tied at the k-th key the lowest are listed. The tree holds each distinct point once,
//! with the rows that share it listed by index, so that data where thousands of rows share a
//! coordinate costs no more than data where none do.

use std::num::NonZero;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiddo::{ImmutableKdTree, SquaredEuclidean};
use rayon::prelude::*;

use super::order::{slots_in_order, Curve};
use crate::data::MatrixRef;
use crate::error::{check_interrupt, interrupted, Error, Result};
use crate::metric::{sq_euclidean_f64_to, Metric};
use crate::refine::{write_row, NONE};

use super::job::{kth_row_key, rows_answer, Answers, PointRows, TreeJob};

/// Most dimensions the tree takes: each count is a tree type of its own.
pub(crate) const MAX_DIM: usize = 8;

/// Relative error allowed between kiddo's float64 squared distance and the exact finish's,
/// which may add the same terms in another order: far above the few units in the last place
/// that `MAX_DIM` terms can differ by.
const KEY_SLACK: f64 = 1e-12;

/// Query rows handed to a thread at a time, and between progress reports.
const ROWS_PER_TASK: usize = 2048;

/// Whether the kd-tree computes `metric` in `d` dimensions.
pub(crate) fn handles(metric: Metric, d: usize) -> bool {
    matches!(metric, Metric::Euclidean | Metric::SqEuclidean) && (1..=MAX_DIM).contains(&d)
}

/// Host memory a block of query rows takes beside its answers while it is answered along
/// the curve: the order (4 bytes a row) and each row's answer slots, twice while they are
/// put in that order (`order::slots_in_order`, 32 bytes a row each).
pub(crate) const ORDER_BYTES_PER_ROW: u64 = 4 + 2 * 32;

/// Host memory the kd-tree of `n` rows of `d` columns holds beside its input, in bytes:
/// the distinct points and the tree's copy of them in float64, the rows of each point, and
/// the sort that finds them.
pub(crate) fn tree_bytes(n: usize, d: usize) -> u64 {
    (n as u128 * (20 * d as u128 + 12)).min(u64::MAX as u128) as u64
}

/// Answers `job`, calling `report` with the number of query rows finished as they finish.
pub(crate) fn knn(job: &TreeJob<'_>, answers: Answers<'_>, report: &(dyn Fn(usize) + Sync)) -> Result<()> {
    let d = job.corpus.cols();
    if !handles(job.metric, d) {
        return Err(Error::arg(
            "algorithm",
            format!(
                "the kd-tree takes euclidean and sqeuclidean distances in 1 to {MAX_DIM} dimensions, not {} in {d}",
                job.metric
            ),
        ));
    }
    macro_rules! by_dim {
        ($($k:literal)*) => {
            match d {
                $($k => knn_in::<$k>(job, answers, report),)*
                _ => unreachable!("checked by `handles`"),
            }
        };
    }
    by_dim!(1 2 3 4 5 6 7 8)
}

/// The distinct points of a corpus, each with the rows that share it, in the order of a
/// curve over them.
pub(super) struct DistinctPoints<const K: usize> {
    pub(super) curve: Curve<K>,
    pub(super) points: Vec<[f64; K]>,
    /// Rows of point p: `rows[first[p]..first[p + 1]]`, ascending.
    rows: Vec<u32>,
    first: Vec<u32>,
}

impl<const K: usize> DistinctPoints<K> {
    pub(super) fn of(corpus: MatrixRef<'_>) -> Self {
        // -0.0 and +0.0 are one coordinate (their distance is 0): `+ 0.0` makes both +0.0.
        let coords = |i: usize| -> [f32; K] { std::array::from_fn(|c| corpus.row(i)[c] + 0.0) };
        let curve = Curve::over(corpus);
        let mut keyed: Vec<(u64, [u32; K], u32)> = (0..corpus.rows())
            .into_par_iter()
            .map(|i| (curve.key(corpus.row(i)), coords(i).map(f32::to_bits), i as u32))
            .collect();
        // Along the curve, then by coordinates, then row: equal points become runs, each in
        // row order.
        keyed.par_sort_unstable();
        let mut points = Vec::new();
        let mut first = Vec::new();
        for (at, (_, bits, _)) in keyed.iter().enumerate() {
            if at == 0 || keyed[at - 1].1 != *bits {
                points.push(bits.map(|b| f64::from(f32::from_bits(b))));
                first.push(at as u32);
            }
        }
        first.push(keyed.len() as u32);
        DistinctPoints { curve, points, rows: keyed.into_iter().map(|(_, _, row)| row).collect(), first }
    }

    /// Where each point's rows start in [`Self::rows`] (one more entry than points: the end).
    pub(super) fn first_rows(&self) -> &[u32] {
        &self.first
    }

    /// Every point's rows, one point after another (each ascending).
    pub(super) fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// The exact key (`Metric::rank_key_f64` of the metrics the tree takes) from `query` to
    /// point `p`, read from the points rather than the corpus's rows, which lie in input order.
    pub(super) fn key_to(&self, query: &[f32], p: usize) -> f64 {
        sq_euclidean_f64_to(query, &self.points[p])
    }

    /// Query rows `first..first + len` of `job` in the curve's order, as offsets from `first`.
    /// A graph's queries are the corpus rows, already in that order here: taken from the
    /// points' rows instead of sorted again.
    pub(super) fn query_order(&self, job: &TreeJob<'_>, first: usize, len: usize) -> Vec<u32> {
        if !std::ptr::eq(job.queries.as_slice(), job.corpus.as_slice()) {
            return self.curve.order(job.queries, first, len);
        }
        let block = first as u32..(first + len) as u32;
        self.rows.par_iter().filter(|r| block.contains(r)).map(|r| r - block.start).collect()
    }
}

impl<const K: usize> PointRows for DistinctPoints<K> {
    fn rows_of(&self, p: usize) -> &[u32] {
        &self.rows[self.first[p] as usize..self.first[p + 1] as usize]
    }
}

/// The kd-tree of a corpus's distinct points.
pub(super) fn tree_of<const K: usize>(distinct: &DistinctPoints<K>) -> Result<ImmutableKdTree<f64, K>> {
    ImmutableKdTree::new_from_slice_parallel(&distinct.points)
        .map_err(|e| Error::arg("algorithm", format!("the kd-tree cannot hold this corpus: {e}")))
}

fn knn_in<const K: usize>(job: &TreeJob<'_>, answers: Answers<'_>, report: &(dyn Fn(usize) + Sync)) -> Result<()> {
    let distinct = DistinctPoints::<K>::of(job.corpus);
    crate::trace::mark(|| format!("kd-tree: {} distinct points", distinct.points.len()));
    let tree = tree_of(&distinct)?;
    crate::trace::mark(|| "kd-tree: built".to_string());
    let done = AtomicUsize::new(0);
    answers.fill(job, |first, indices, distances| {
        let k = job.k;
        let order = distinct.query_order(job, first, indices.len() / k);
        let mut slots = slots_in_order(indices, distances, k, &order);
        slots.par_chunks_mut(ROWS_PER_TASK).zip(order.par_chunks(ROWS_PER_TASK)).for_each(|(slots, order)| {
            if interrupted(&job.interrupt) {
                return;
            }
            let mut scratch = Scratch::default();
            for ((ids, dists), &r) in slots.iter_mut().zip(order) {
                let answer = nearest(job, &distinct, &tree, first + r as usize, &mut scratch);
                write_row(job.metric, answer.iter().copied(), ids, dists);
            }
            report(done.fetch_add(order.len(), Ordering::Relaxed) + order.len());
        });
        // Rows of tasks skipped after an interrupt have no answer.
        check_interrupt(&job.interrupt)
    })
}

/// Buffers a thread reuses from row to row.
#[derive(Default)]
pub(super) struct Scratch {
    /// (key, distinct point) of the points the tree returned, ascending by key.
    pub(super) points: Vec<(f64, usize)>,
    /// (key, row) of the answer.
    pub(super) answer: Vec<(f64, u32)>,
}

/// The `k` nearest rows of query row `i`, ascending by (key, row).
pub(super) fn nearest<'s, const K: usize>(
    job: &TreeJob<'_>,
    distinct: &DistinctPoints<K>,
    tree: &ImmutableKdTree<f64, K>,
    i: usize,
    scratch: &'s mut Scratch,
) -> &'s [(f64, u32)] {
    let (k, excluded) = (job.k, job.exclude[i]);
    let query_row = job.queries.row(i);
    let query: [f64; K] = std::array::from_fn(|c| f64::from(query_row[c]));
    let key_of = |p: usize| distinct.key_to(query_row, p);
    let total = distinct.points.len();
    // Distinct points to ask for: enough for k rows plus one beyond, to show where the k-th
    // key ends, where no two rows share a point; more while the k-th key is not proven.
    let mut asked = (k + usize::from(excluded != NONE) + 1).min(total);
    let kth_key = loop {
        let found =
            tree.query(&query).nearest_n::<SquaredEuclidean<f64>>(NonZero::new(asked).expect("k >= 1")).execute();
        scratch.points.clear();
        scratch.points.extend(found.iter().map(|f| (key_of(f.item as usize), f.item as usize)));
        scratch.points.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let kth = kth_row_key(distinct, k, excluded, &scratch.points);
        // Every point the tree did not return is at least as far as the farthest it did,
        // by kiddo's keys: by the exact keys, beyond the k-th once that is below the farthest
        // by more than the two may differ.
        let farthest = scratch.points.last().map_or(0.0, |p| p.0);
        match kth {
            Some(kth) if asked == total || kth < farthest * (1.0 - 2.0 * KEY_SLACK) => break kth,
            // Fewer than k rows in all (not reached while k is at most the rows available).
            None if asked == total => break f64::INFINITY,
            _ => asked = (2 * asked).min(total),
        }
    };
    rows_answer(distinct, k, excluded, kth_key, &scratch.points, &mut scratch.answer)
}
