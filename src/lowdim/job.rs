//! What the CPU's tree engines (the kd-tree, the cover tree, and the kd-tree's end of the
//! hybrid join) are asked, and how their answers are handed back: one problem, its answers
//! whole or in blocks of query rows, and the rule that turns the keys of distinct points
//! into a row's answer, ties by index.

use crate::data::MatrixRef;
use crate::error::Result;
use crate::partition::RowSink;

/// One tree problem: the `k` nearest rows of `corpus` for every row of `queries`, row
/// `exclude[i]` of the corpus left out of query i's list (`refine::NONE`: none).
pub(crate) struct TreeJob<'a> {
    pub corpus: MatrixRef<'a>,
    pub queries: MatrixRef<'a>,
    pub exclude: &'a [u32],
    pub k: usize,
    pub metric: crate::metric::Metric,
    /// `Options::interrupt`: tasks of rows are skipped once it is set, and the job fails.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Where the answer of a [`TreeJob`] goes: arrays for every query row (k a row,
/// row-major), or blocks of `rows` query rows handed to `sink` in order as each is finished
/// (`sink(first_row, indices, distances)`), for answers too large to hold at once.
pub(crate) enum Answers<'o> {
    Whole { indices: &'o mut [u32], distances: &'o mut [f32] },
    Blocks { rows: usize, sink: &'o mut RowSink<'o> },
}

impl Answers<'_> {
    /// Calls `answer(first, indices, distances)` for the query rows of `job` from `first`
    /// on, as many as `indices` holds lists of k: once for every row, or block by block, each
    /// block handed to the sink once answered.
    pub(crate) fn fill(
        self,
        job: &TreeJob<'_>,
        mut answer: impl FnMut(usize, &mut [u32], &mut [f32]) -> Result<()>,
    ) -> Result<()> {
        match self {
            Answers::Whole { indices, distances } => answer(0, indices, distances),
            Answers::Blocks { rows, sink } => {
                let (nq, k, rows) = (job.queries.rows(), job.k, rows.max(1));
                let (mut indices, mut distances) = (vec![0u32; rows.min(nq) * k], vec![0f32; rows.min(nq) * k]);
                for first in (0..nq).step_by(rows) {
                    let len = rows.min(nq - first) * k;
                    answer(first, &mut indices[..len], &mut distances[..len])?;
                    sink(first, &mut indices[..len], &mut distances[..len])?;
                }
                Ok(())
            }
        }
    }
}

/// A corpus's distinct points, each standing for the rows that share it.
pub(super) trait PointRows {
    /// Rows of point `p`, ascending.
    fn rows_of(&self, p: usize) -> &[u32];
}

/// The k-th key over the rows of `points` ((key, point), ascending by key), row `excluded`
/// left out; `None` where they hold fewer than k rows.
pub(super) fn kth_row_key(distinct: &impl PointRows, k: usize, excluded: u32, points: &[(f64, usize)]) -> Option<f64> {
    let mut rows = 0;
    points.iter().find_map(|&(key, p)| {
        let of_p = distinct.rows_of(p);
        rows += of_p.len() - usize::from(of_p.binary_search(&excluded).is_ok());
        (rows >= k).then_some(key)
    })
}

/// The answer from `points` ((key, point), ascending by key, holding every point up to
/// `kth_key`), written to `answer` ascending by (key, row): every row of a point nearer than
/// the k-th key, and of the points at it the first rows by index, so that the k wanted among
/// those tied at the k-th key are the lowest.
pub(super) fn rows_answer<'s>(
    distinct: &impl PointRows,
    k: usize,
    excluded: u32,
    kth_key: f64,
    points: &[(f64, usize)],
    answer: &'s mut Vec<(f64, u32)>,
) -> &'s [(f64, u32)] {
    // Rows of point p in the answer: all but the excluded one (found by bisection, since a
    // point may have many rows).
    let rows_of = |p: usize| {
        let rows = distinct.rows_of(p);
        rows.len() - usize::from(rows.binary_search(&excluded).is_ok())
    };
    answer.clear();
    let before: usize = points.iter().take_while(|p| p.0 < kth_key).map(|&(_, p)| rows_of(p)).sum();
    for &(key, p) in points.iter().take_while(|p| p.0 <= kth_key) {
        let rows = distinct.rows_of(p).iter().filter(|&&row| row != excluded);
        let take = if key < kth_key { usize::MAX } else { k - before };
        answer.extend(rows.take(take).map(|&row| (key, row)));
    }
    answer.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    answer.truncate(k);
    answer
}
