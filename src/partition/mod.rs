//! The partitioned graph: the distance matrix cut into P x P blocks, the blocks with I <= J
//! dealt to workers (GPU devices, or the host), each row's candidates merged across the
//! blocks that hold it, then the exact finish of `refine.rs` on the merged lists.
//!
//! A block's candidates are the `kc` best fp32 keys of its rows, computed with the whole
//! data's centring shift, so that keys of different blocks compare; every key outside a
//! row's merged list is at least the largest key inside it, which is what the certificate
//! needs. Rows left unproven go to later rounds with four times the candidates, searched
//! against every block.

mod blocks;
pub(crate) mod checkpoint;
mod lists;
mod workers;

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

pub(crate) use blocks::BlockPlan;
use blocks::Job;
use checkpoint::Checkpoint;
use lists::{Part, RowLists};

use crate::data::{Matrix, MatrixRef, Neighbors};
use crate::engine::{CandidateJob, Engine};
use crate::error::Result;
use crate::metric::Metric;
use crate::prepare;
use crate::refine::{self, write_row, Query, NONE};
use crate::search::{initial_candidates, Progress, RunStats};

/// A graph to build in blocks.
pub(crate) struct GraphTask<'a> {
    pub data: MatrixRef<'a>,
    /// The centring shift of the whole data (`prepare::validate_corpus`).
    pub shift: &'a [f32],
    pub k: usize,
    pub metric: Metric,
    /// Whether a row may be its own neighbour (`Options::include_self`).
    pub include_self: bool,
    pub plan: BlockPlan,
    /// `Options::symmetric_graphs`, passed to the CPU backend for diagonal blocks.
    pub symmetric: Option<bool>,
}

/// Builds the graph of `task` on `engines`. With a checkpoint, blocks it holds are not
/// computed again and every block computed is recorded in it.
pub(crate) fn graph(
    engines: &[&Engine],
    task: &GraphTask<'_>,
    checkpoint: Option<&Checkpoint>,
    progress: Option<&Progress>,
    resuming: &dyn Fn(usize, usize),
    stats: &mut RunStats,
) -> Result<Neighbors> {
    let started = std::time::Instant::now();
    let GraphTask { data, k, metric, include_self, .. } = *task;
    let (n, d) = (data.rows(), data.cols());
    let available = if include_self { n } else { n - 1 };
    let row_stats = prepare::row_stats(data, task.shift, metric);
    let corpus_max = row_stats.max();
    stats.prepare_seconds += started.elapsed().as_secs_f64();

    let (mut indices, mut distances) = (vec![0u32; n * k], vec![0f32; n * k]);
    let mut pending: Vec<usize> = (0..n).collect();
    let mut kc = initial_candidates(k);
    while !pending.is_empty() {
        stats.rounds += 1;
        if stats.rounds == 2 {
            stats.rows_widened = pending.len();
        }
        kc = kc.min(available).max(k);
        let clock = std::time::Instant::now();
        let cands = if stats.rounds == 1 {
            first_round(engines, task, kc, checkpoint, progress, resuming, stats)?
        } else {
            later_round(engines, task, kc, &pending)?
        };
        stats.candidate_seconds += clock.elapsed().as_secs_f64();
        if cands.exact.is_some() {
            stats.rows_reranked_on_gpu += pending.len();
        }

        let clock = std::time::Instant::now();
        let brute_forced = AtomicUsize::new(0);
        let overflowed = AtomicUsize::new(0);
        let mut slot_of = vec![NONE; n];
        for (slot, &i) in pending.iter().enumerate() {
            slot_of[i] = slot as u32;
        }
        pending = indices
            .par_chunks_mut(k)
            .zip(distances.par_chunks_mut(k))
            .enumerate()
            .filter(|(i, _)| slot_of[*i] != NONE)
            .filter_map(|(i, (row_ids, row_dists))| {
                let slot = slot_of[i] as usize;
                let exclude = if include_self { NONE } else { i as u32 };
                let q = Query { corpus: data, vector: data.row(i), metric, k, exclude };
                if cands.incomplete[slot] {
                    overflowed.fetch_add(1, Ordering::Relaxed);
                    return Some(i);
                }
                let brute_force = || {
                    brute_forced.fetch_add(1, Ordering::Relaxed);
                    refine::brute_force(q)
                };
                let ranked = if cands.failed[slot] {
                    brute_force()
                } else {
                    let range = slot * kc..(slot + 1) * kc;
                    let bound = prepare::key_error_bound(metric, d, row_stats.scale[i], corpus_max);
                    // A row not proven although its list covers every row: keys that
                    // overflowed f32 (`key_error_bound`). The host answers it.
                    let exact = cands.exact.as_ref().map(|e| &e[range.clone()]);
                    match refine::refine(q, &cands.keys[range.clone()], &cands.ids[range], exact, available, bound) {
                        Some(ranked) => ranked,
                        None if kc >= available => brute_force(),
                        None => return Some(i),
                    }
                };
                write_row(metric, ranked.into_iter(), row_ids, row_dists);
                None
            })
            .collect();
        stats.rows_brute_forced += brute_forced.into_inner();
        stats.rows_overflowed += overflowed.into_inner();
        stats.refine_seconds += clock.elapsed().as_secs_f64();
        kc = kc.saturating_mul(4);
    }
    Ok(Neighbors { indices, distances, queries: n, k })
}

/// Every block with I <= J, merged into each row's list of `kc`.
fn first_round(
    engines: &[&Engine],
    task: &GraphTask<'_>,
    kc: usize,
    checkpoint: Option<&Checkpoint>,
    progress: Option<&Progress>,
    resuming: &dyn Fn(usize, usize),
    stats: &mut RunStats,
) -> Result<crate::refine::Candidates> {
    let n = task.data.rows();
    let jobs = task.plan.graph_jobs();
    let mut lists = RowLists::new(n, kc);
    let mut todo: Vec<usize> = (0..jobs.len()).collect();
    if let Some(c) = checkpoint {
        let done = c.finished(&jobs, kc)?;
        stats.blocks_resumed = done.len();
        for (job, parts) in done {
            parts.iter().for_each(|p| lists.merge(p));
            todo.retain(|&j| j != job);
        }
    }
    stats.blocks = jobs.len();
    let total = jobs.len();
    resuming(total, stats.blocks_resumed);
    let mut finished = total - todo.len();
    let report = |finished: usize| {
        // Rows are final only once every block is merged and re-ranked: the blocks count for
        // 90% of the rows, like a symmetric sweep's.
        if let Some(p) = progress {
            p((n as u64 * 9 * finished as u64) / (10 * total as u64), n as u64);
        }
    };
    report(finished);
    let todo_jobs: Vec<Job> = todo.iter().map(|&j| jobs[j]).collect();
    let execute = |engine: &Engine, job: Job| block_lists(engine, task, kc, job);
    workers::run_jobs(engines, &todo_jobs, &execute, |i, parts: Vec<Part>| {
        if let Some(c) = checkpoint {
            c.record(todo_jobs[i], kc, &parts)?;
        }
        parts.iter().for_each(|p| lists.merge(p));
        finished += 1;
        report(finished);
        Ok(())
    })?;
    Ok(lists.into_candidates())
}

/// The rows of `pending` against every block, merged into lists of `kc` (slots in the
/// order of `pending`).
fn later_round(
    engines: &[&Engine],
    task: &GraphTask<'_>,
    kc: usize,
    pending: &[usize],
) -> Result<crate::refine::Candidates> {
    let d = task.data.cols();
    let mut rows = Vec::with_capacity(pending.len() * d);
    pending.iter().for_each(|&i| rows.extend_from_slice(task.data.row(i)));
    let queries = Matrix::new(rows, pending.len(), d)?;
    let mut lists = RowLists::new(pending.len(), kc);
    let execute = |engine: &Engine, job: Job| search_lists(engine, task, kc, job, queries.view(), pending);
    workers::run_jobs(engines, &task.plan.search_jobs(), &execute, |_, parts: Vec<Part>| {
        parts.iter().for_each(|p| lists.merge(p));
        Ok(())
    })?;
    Ok(lists.into_candidates())
}

/// A first-round job's lists: the rows of I among J and, off the diagonal, those of J among I.
fn block_lists(engine: &Engine, task: &GraphTask<'_>, kc: usize, job: Job) -> Result<Vec<Part>> {
    let plan = task.plan;
    let rows = |b: usize| {
        let r = plan.range(b);
        (r.start, task.data.slice_rows(r))
    };
    match job {
        Job::Diagonal(b) => {
            let (first, block) = rows(b);
            let exclude: Vec<u32> =
                if task.include_self { vec![NONE; block.rows()] } else { (0..block.rows() as u32).collect() };
            let available = block.rows() - usize::from(!task.include_self);
            Ok(vec![lists_of(engine, task, kc, block, block, true, &exclude, available, first, first)?])
        }
        Job::Pair(i, j) => {
            let ((first_i, block_i), (first_j, block_j)) = (rows(i), rows(j));
            let (of_i, of_j) = engine.pair_candidates(block_i, block_j, kc, task.shift, task.metric)?;
            Ok(vec![
                Part::from_candidates(first_i, of_i, first_j).padded(kc),
                Part::from_candidates(first_j, of_j, first_i).padded(kc),
            ])
        }
        Job::Search(_) => unreachable!("search jobs belong to later rounds"),
    }
}

/// A later round's job: the unproven rows among block J, in two calls so that every row of
/// one call has the same number of rows to choose from (the unproven rows inside J may not
/// list themselves).
fn search_lists(
    engine: &Engine,
    task: &GraphTask<'_>,
    kc: usize,
    job: Job,
    queries: MatrixRef<'_>,
    pending: &[usize],
) -> Result<Vec<Part>> {
    let Job::Search(b) = job else { unreachable!("first-round jobs belong to the first round") };
    let range = task.plan.range(b);
    let block = task.data.slice_rows(range.clone());
    let inside = |i: usize| !task.include_self && range.contains(&i);
    let mut parts = Vec::new();
    for within in [false, true] {
        let slots: Vec<usize> = (0..pending.len()).filter(|&s| inside(pending[s]) == within).collect();
        if slots.is_empty() {
            continue;
        }
        let d = queries.cols();
        let mut rows = Vec::with_capacity(slots.len() * d);
        slots.iter().for_each(|&s| rows.extend_from_slice(queries.row(s)));
        let sub = Matrix::new(rows, slots.len(), d)?;
        let exclude: Vec<u32> =
            slots.iter().map(|&s| if within { (pending[s] - range.start) as u32 } else { NONE }).collect();
        let available = block.rows() - usize::from(within);
        let mut part = lists_of(engine, task, kc, block, sub.view(), false, &exclude, available, 0, range.start)?;
        part.slots = Some(slots.iter().map(|&s| s as u32).collect());
        parts.push(part);
    }
    Ok(parts)
}

/// The lists of `queries` among `corpus`, padded to `kc`: each call asks for at most the
/// rows its queries may list (`available`), so that a padded list is a complete one.
#[allow(clippy::too_many_arguments)]
fn lists_of(
    engine: &Engine,
    task: &GraphTask<'_>,
    kc: usize,
    corpus: MatrixRef<'_>,
    queries: MatrixRef<'_>,
    queries_are_corpus: bool,
    exclude: &[u32],
    available: usize,
    first: usize,
    id_offset: usize,
) -> Result<Part> {
    let rows = queries.rows();
    let kc_call = kc.min(available);
    if kc_call == 0 {
        return Ok(Part::empty(first, rows, kc));
    }
    let job = CandidateJob {
        corpus,
        queries,
        queries_are_corpus,
        exclude,
        kc: kc_call,
        shift: task.shift,
        metric: task.metric,
        symmetric: task.symmetric,
    };
    let part = Part::from_candidates(first, engine.candidates(job, &|_| {})?, id_offset);
    Ok(part.padded(kc))
}
