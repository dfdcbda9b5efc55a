//! Exact k nearest neighbours by a cover tree on the CPU's threads: for data whose points
//! have few degrees of freedom however many columns they have (images of one object, spectra,
//! trajectories, cell states), where a tree's cost follows the intrinsic dimension.
//!
//! `build.rs` builds the tree over the corpus's distinct points (Sharma's CTVC), `query.rs`
//! answers a query by descending it, `space.rs` holds the vectors the tree measures
//! (the rows, or their unit forms for cosine and correlation) and the error bounds that keep
//! the pruning exact. As with the kd-tree, every key that decides a row is the float64 key
//! of `Metric::rank_key_f64` on the original rows, and ties go to the lower row index.

mod build;
mod query;
mod space;

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::job::{Answers, TreeJob};
use super::order::slots_in_order;
use crate::error::{check_interrupt, interrupted, Error, Result};
use crate::metric::Metric;
use crate::refine::write_row;

/// Query rows handed to a thread at a time, and between progress reports.
const ROWS_PER_TASK: usize = 256;

/// Whether the cover tree computes `metric`: the metrics that are, or order rows as, a
/// euclidean distance.
pub(crate) fn handles(metric: Metric) -> bool {
    metric != Metric::InnerProduct
}

/// Host memory the cover tree of `n` rows of `d` columns holds beside its input, in bytes:
/// two copies of the tree's vectors while they are put in node order, the rows of each
/// point and their sort, the nodes, and the sets of the construction.
pub(crate) fn tree_bytes(n: usize, d: usize) -> u64 {
    (n as u128 * (8 * d as u128 + 160)).min(u64::MAX as u128) as u64
}

/// Answers `job`, calling `report` with the number of query rows finished as they finish.
pub(crate) fn knn(job: &TreeJob<'_>, answers: Answers<'_>, report: &(dyn Fn(usize) + Sync)) -> Result<()> {
    if !handles(job.metric) {
        return Err(Error::arg("algorithm", format!("the cover tree does not take {} distances", job.metric)));
    }
    let Some(tree) = build::Tree::of(job)? else {
        return check_interrupt(&job.interrupt);
    };
    let graph = std::ptr::eq(job.queries.as_slice(), job.corpus.as_slice());
    let done = AtomicUsize::new(0);
    answers.fill(job, |first, indices, distances| {
        let k = job.k;
        let len = indices.len() / k;
        // A graph's rows are answered by the nodes of their points, so that consecutive
        // queries meet the same nodes; a search's in input order.
        let order: Vec<u32> = if graph {
            let block = first as u32..(first + len) as u32;
            tree.rows_in_node_order().par_iter().filter(|r| block.contains(r)).map(|r| r - block.start).collect()
        } else {
            (0..len as u32).collect()
        };
        let mut slots = slots_in_order(indices, distances, k, &order);
        slots.par_chunks_mut(ROWS_PER_TASK).zip(order.par_chunks(ROWS_PER_TASK)).for_each(|(slots, order)| {
            if interrupted(&job.interrupt) {
                return;
            }
            let mut scratch = query::Scratch::default();
            for ((ids, dists), &r) in slots.iter_mut().zip(order) {
                let answer = query::nearest(job, &tree, first + r as usize, &mut scratch);
                write_row(job.metric, answer.iter().copied(), ids, dists);
            }
            report(done.fetch_add(order.len(), Ordering::Relaxed) + order.len());
        });
        // Rows of tasks skipped after an interrupt have no answer.
        check_interrupt(&job.interrupt)
    })
}
