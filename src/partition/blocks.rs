//! The P x P block partition of a graph's distance matrix (Dashti's thesis, chapter 3): row
//! ranges of equal size, and the blocks S(I, J) with I <= J that cover every pair once.

use std::ops::Range;

/// Rows cut into `count` ranges of `rows` each (the last may be shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockPlan {
    pub n: usize,
    pub rows: usize,
    pub count: usize,
}

/// One unit of work for a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Job {
    /// S(I, I): the rows of block I among themselves.
    Diagonal(usize),
    /// S(I, J), I < J: the rows of I among those of J and the rows of J among those of I.
    Pair(usize, usize),
}

impl Job {
    /// The blocks of rows whose lists the job brings.
    pub fn blocks(self) -> Vec<usize> {
        match self {
            Job::Diagonal(b) => vec![b],
            Job::Pair(i, j) => vec![i, j],
        }
    }
}

impl BlockPlan {
    /// `rows` per block, at least one; one block when `rows >= n`.
    pub fn new(n: usize, rows: usize) -> Self {
        let rows = rows.clamp(1, n.max(1));
        BlockPlan { n, rows, count: n.div_ceil(rows) }
    }

    /// The rows of block `b`.
    pub fn range(&self, b: usize) -> Range<usize> {
        b * self.rows..((b + 1) * self.rows).min(self.n)
    }

    /// Every block with I <= J once: the diagonal blocks S(I, I) first, which give every row
    /// a bound before any pair meets it (`Engine::pair_candidates`), then the pairs by rows,
    /// S(I, J) for J > I, so that the rows of block I are complete once the pairs of row I
    /// are.
    pub fn graph_jobs(&self) -> Vec<Job> {
        let pairs = |i| (i + 1..self.count).map(move |j| Job::Pair(i, j));
        (0..self.count).map(Job::Diagonal).chain((0..self.count).flat_map(pairs)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_jobs_cover_every_pair_of_rows_once() {
        for (n, rows) in [(1, 1), (10, 3), (10, 10), (10, 100), (64, 16), (1000, 7)] {
            let plan = BlockPlan::new(n, rows);
            let mut seen = vec![0u32; n * n];
            for job in plan.graph_jobs() {
                let (a, b) = match job {
                    Job::Diagonal(i) => (i, i),
                    Job::Pair(i, j) => {
                        assert!(i < j);
                        (i, j)
                    }
                };
                for x in plan.range(a) {
                    for y in plan.range(b) {
                        if a != b || x < y {
                            seen[x.min(y) * n + x.max(y)] += 1;
                        }
                    }
                }
            }
            for x in 0..n {
                for y in x + 1..n {
                    assert_eq!(seen[x * n + y], 1, "n={n} rows={rows}: pair ({x}, {y})");
                }
            }
            assert_eq!(plan.range(plan.count - 1).end, n);
        }
    }
}
