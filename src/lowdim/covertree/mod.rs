//! Exact k nearest neighbours by a cover tree, built on the CPU's threads or on a GPU and
//! queried on the CPU's threads (a graph's queries also on a GPU): for data whose points
//! have few degrees of freedom however many columns they have (images of one object, spectra,
//! trajectories, cell states), where a tree's cost follows the intrinsic dimension.
//!
//! `build.rs` builds the tree over the corpus's distinct points (Sharma's CTVC), `query.rs`
//! answers a query by descending it, `gpu_query.rs` a graph's groups of near points against
//! their cover sets on a GPU, `space.rs` holds the vectors the tree measures
//! (the rows, or their unit forms for cosine and correlation) and the error bounds that keep
//! the pruning exact. As with the kd-tree, every key that decides a row is the float64 key
//! of `Metric::rank_key_f64` on the original rows, and ties go to the lower row index.

mod build;
mod gpu_query;
mod intrinsic;
mod query;
mod space;

pub(crate) use build::{Builder, Node, Parts, Tree, TreeRef};
pub(crate) use intrinsic::intrinsic_dimension;

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::job::{Answers, TreeJob};
use super::order::slots_in_order;
use crate::error::{check_interrupt, interrupted, Error, Result};
use crate::metric::Metric;
use crate::refine::write_row;

/// Query rows handed to a thread at a time, and between progress reports: batches of
/// queries that descend the tree together.
const ROWS_PER_TASK: usize = 8 * query::BATCH;

/// Whether a tree under `metric` reads its points from the corpus rows, so that an index
/// holds them once.
pub(crate) fn places_rows_as_given(metric: Metric) -> bool {
    space::Space::places_rows_as_given(metric)
}

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

/// A tree and where it was built.
pub(crate) struct BuiltTree {
    pub tree: Tree,
    pub on_gpu: bool,
    /// Why a build asked of a GPU ran on the CPU instead.
    pub gpu_error: Option<Error>,
}

/// The cover tree of `job.corpus`, built where `on` says (on the CPU where a GPU's build
/// fails); `None` where the job was interrupted.
pub(crate) fn build(job: &TreeJob<'_>, on: Builder<'_>) -> Result<Option<BuiltTree>> {
    if !handles(job.metric) {
        return Err(Error::arg("algorithm", format!("the cover tree does not take {} distances", job.metric)));
    }
    let mut gpu_error = None;
    if let Builder::Gpu(_) = on {
        match Tree::of(job, on) {
            Ok(tree) => return Ok(tree.map(|tree| BuiltTree { tree, on_gpu: true, gpu_error: None })),
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            Err(e) => gpu_error = Some(e),
        }
    }
    Ok(Tree::of(job, Builder::Cpu)?.map(|tree| BuiltTree { tree, on_gpu: false, gpu_error }))
}

/// How [`knn`] went: where its tree was built (`None`: it was given one), and how many
/// query rows the GPU answered.
pub(crate) struct KnnRun {
    pub built: Option<(bool, Option<Error>)>,
    pub rows_queried_on_gpu: usize,
    /// Why queries asked of a GPU ran on the CPU instead.
    pub gpu_query_error: Option<Error>,
}

/// Answers `job`, calling `report` with the number of query rows finished as they finish:
/// in `tree` (a tree of `job.corpus` under `job.metric`), or in a tree built for the job
/// where `on` says. A graph's queries run on `gpu_queries` where given (on the CPU where
/// that GPU fails).
pub(crate) fn knn(
    job: &TreeJob<'_>,
    tree: Option<TreeRef<'_>>,
    on: Builder<'_>,
    gpu_queries: Option<&crate::gpu::GpuEngine>,
    answers: Answers<'_>,
    report: &(dyn Fn(usize) + Sync),
) -> Result<KnnRun> {
    let built;
    let mut run = KnnRun { built: None, rows_queried_on_gpu: 0, gpu_query_error: None };
    let mut tree = match tree {
        Some(tree) => tree,
        None => match build(job, on)? {
            Some(b) => {
                run.built = Some((b.on_gpu, b.gpu_error));
                built = b.tree;
                built.view()
            }
            None => return check_interrupt(&job.interrupt).map(|()| run),
        },
    };
    let graph = std::ptr::eq(job.queries.as_slice(), job.corpus.as_slice());
    if !graph {
        tree.space = tree.space.with_rows_of(job.queries);
    }
    let mut on_gpu = match gpu_queries {
        Some(gpu) if graph => match gpu_query::open(gpu, &tree, job.k) {
            Ok(on_gpu) => {
                crate::trace::mark(|| "cover tree: vectors on the GPU".to_string());
                Some((gpu, on_gpu, gpu_query::groups(&tree)))
            }
            Err(e) => {
                run.gpu_query_error = Some(e);
                None
            }
        },
        _ => None,
    };
    let done = AtomicUsize::new(0);
    answers.fill(job, |first, indices, distances| {
        let k = job.k;
        let len = indices.len() / k;
        if let Some((gpu, tree_on_gpu, (points, groups))) = &on_gpu {
            let entries = gpu_query::entries_of(&tree, points, groups, first as u32..(first + len) as u32);
            let order: Vec<u32> = entries.iter().map(|e| e.row).collect();
            let mut slots = slots_in_order(indices, distances, k, &order);
            crate::trace::mark(|| {
                format!("cover tree: {} rows in {} groups", entries.len(), groups.last().map_or(0, |g| g + 1))
            });
            let base = done.load(Ordering::Relaxed);
            let block_report = |rows: usize| report(base + rows);
            let queries = gpu_query::CoverSetQueries { job, tree: &tree, on_gpu: tree_on_gpu, budget: gpu.budget() };
            match queries.answer_block(first, &entries, &mut slots, &block_report) {
                Ok(rows) => {
                    run.rows_queried_on_gpu += rows;
                    done.fetch_add(len, Ordering::Relaxed);
                    return check_interrupt(&job.interrupt);
                }
                // This block and the rest on the CPU.
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => run.gpu_query_error = Some(e),
            }
        }
        on_gpu = None;
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
            let mut rows = Vec::with_capacity(query::BATCH);
            for (slots, order) in slots.chunks_mut(query::BATCH).zip(order.chunks(query::BATCH)) {
                rows.clear();
                rows.extend(order.iter().map(|&r| first + r as usize));
                query::nearest(job, &tree, &rows, &mut scratch, |j, answer| {
                    let (ids, dists) = &mut slots[j];
                    write_row(job.metric, answer.iter().copied(), ids, dists);
                });
            }
            report(done.fetch_add(order.len(), Ordering::Relaxed) + order.len());
        });
        // Rows of tasks skipped after an interrupt have no answer.
        check_interrupt(&job.interrupt)
    })?;
    Ok(run)
}

/// Uniform values in [0, 1) from a xorshift generator, for the unit tests (which take no
/// RNG dependency, as elsewhere in the crate).
#[cfg(test)]
fn uniform(seed: u64) -> impl FnMut() -> f32 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::MatrixRef;

    /// Points on a 2-manifold in 64 columns, more than the table's cases hold, as a graph
    /// and as a search: every row's answer is the float64 brute force's.
    #[test]
    fn answers_equal_a_float64_brute_force() {
        let (n, d, k) = (2000, 64, 10);
        let mut uniform = uniform(0x9E3779B97F4A7C15);
        let maps: Vec<(usize, f32, f32)> =
            (0..d).map(|_| ((uniform() * 2.0) as usize % 2, 0.5 + 2.5 * uniform(), 6.3 * uniform())).collect();
        let mut values = Vec::with_capacity(n * d);
        for _ in 0..n {
            let angles = [6.3 * uniform(), 6.3 * uniform()];
            values.extend(maps.iter().map(|&(a, f, phase)| (f * angles[a] + phase).sin()));
        }
        let corpus = MatrixRef::new(&values, n, d).unwrap();
        let queries = MatrixRef::new(&values[..300 * d], 300, d).unwrap();
        for metric in [Metric::Euclidean, Metric::Cosine] {
            for (queries, graph) in [(corpus, true), (queries, false)] {
                let nq = queries.rows();
                let exclude: Vec<u32> = if graph { (0..n as u32).collect() } else { vec![crate::refine::NONE; nq] };
                let job = TreeJob { corpus, queries, exclude: &exclude, k, metric, interrupt: None };
                let (mut indices, mut distances) = (vec![0u32; nq * k], vec![0f32; nq * k]);
                knn(
                    &job,
                    None,
                    Builder::Cpu,
                    None,
                    Answers::Whole { indices: &mut indices, distances: &mut distances },
                    &|_| {},
                )
                .unwrap();
                for i in 0..nq {
                    let mut all: Vec<(f64, u32)> = (0..n)
                        .filter(|&j| !graph || j != i)
                        .map(|j| (metric.rank_key_f64(queries.row(i), corpus.row(j)), j as u32))
                        .collect();
                    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    let expected: Vec<u32> = all[..k].iter().map(|e| e.1).collect();
                    assert_eq!(&indices[i * k..][..k], &expected[..], "{metric}, graph {graph}: row {i}");
                }
            }
        }
    }
}
