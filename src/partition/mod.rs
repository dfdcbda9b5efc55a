//! The partitioned graph: the distance matrix cut into P x P blocks, the blocks with I <= J
//! dealt to workers (GPU devices, or the host), each row's candidates merged across the
//! blocks that hold it, then the exact finish of `refine.rs` on the merged lists.
//!
//! A block's candidates are the `kc` best fp32 keys of its rows, computed with the whole
//! data's centring shift, so that keys of different blocks compare; every key outside a
//! row's merged list is at least the largest key inside it, which is what the certificate
//! needs.
//!
//! Rows are finished block by block: once every block that holds the rows of block I has
//! been merged, those rows are re-ranked, the ones left unproven are searched again against
//! every block with four times the candidates (jobs that run before the remaining blocks),
//! and block I's answers go to the caller's sink, in row order, and are dropped.

mod blocks;
pub(crate) mod checkpoint;
mod lists;
mod spill;
mod workers;

use std::path::PathBuf;
use std::sync::Arc;

use rayon::prelude::*;

pub(crate) use blocks::BlockPlan;
use blocks::Job;
use checkpoint::Checkpoint;
use lists::{Part, RowLists};
pub(crate) use spill::check_scratch;
use spill::Spill;

use crate::cluster::{self, Cluster};
use crate::data::{Matrix, MatrixRef};
use crate::engine::{CandidateJob, Engine, PairBounds, PairWay};
use crate::error::Error;
use crate::error::Result;
use crate::metric::Metric;
use crate::prepare::{self, RowStats};
use crate::refine::{self, write_row, Candidates, Query, Ranked, NONE};
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
    /// Blocks of rows whose merged lists may be held at once (`Strategy::Partitioned`).
    pub lists_in_memory: usize,
    /// Where the lists of other blocks are spilled; needed when `lists_in_memory` is below
    /// the number of blocks.
    pub scratch: Option<PathBuf>,
    /// The ranks sharing the graph, where there are several: this process computes its share
    /// of the jobs, and rank 0 alone hands rows to the sink (`cluster/`).
    pub cluster: Option<&'a dyn Cluster>,
}

/// Receives finished rows in order: the first row's number, then `rows x k` indices and
/// distances, which it may reorder in place.
pub(crate) type RowSink<'s> = dyn FnMut(usize, &mut [u32], &mut [f32]) -> Result<()> + 's;

/// Builds the graph of `task` on `engines`, handing its rows to `sink` as blocks of rows are
/// finished. With a checkpoint, blocks it holds are not computed again and every block
/// computed is recorded in it.
pub(crate) fn graph(
    engines: &[&Engine],
    task: &GraphTask<'_>,
    checkpoint: Option<&Checkpoint>,
    progress: Option<&Progress>,
    resuming: &dyn Fn(usize, usize),
    stats: &mut RunStats,
    sink: &mut RowSink<'_>,
) -> Result<()> {
    let started = std::time::Instant::now();
    let row_stats = prepare::row_stats(task.data, task.shift, task.metric);
    stats.prepare_seconds += started.elapsed().as_secs_f64();

    // A rank of a cluster computes every R-th job; the others' lists come in messages.
    let jobs: Vec<Job> = match task.cluster {
        None => task.plan.graph_jobs(),
        Some(c) => task
            .plan
            .graph_jobs()
            .into_iter()
            .enumerate()
            .filter(|&(j, _)| cluster::deals(j, c))
            .map(|(_, job)| job)
            .collect(),
    };
    let kc = initial_candidates_of(task.k, task.data.rows(), task.include_self);
    let bounds = RowBounds::new(task.data.rows());
    let mut run = Run::new(task, &row_stats, kc, &jobs, &bounds)?;
    run.spill = task.scratch.as_deref().map(|dir| Spill::new(dir, kc));
    let mut resumed = vec![false; jobs.len()];
    if let Some(c) = checkpoint {
        let done = c.finished(&jobs);
        stats.blocks_resumed = done.len();
        for job in done {
            run.block_done(jobs[job], c.load(jobs[job], kc)?)?;
            resumed[job] = true;
        }
    }
    let todo = jobs.iter().zip(&resumed).filter(|&(_, &done)| !done).map(|(&job, _)| job);
    stats.blocks = jobs.len();
    resuming(jobs.len(), stats.blocks_resumed);
    run.report(progress);
    run.emit(sink)?;
    let mut work: Vec<Work> = std::mem::take(&mut run.new_work);
    work.extend(todo.map(Work::Block));

    let execute = |engine: &Engine, work: &Work| {
        let done = match work {
            Work::Block(job) => block_lists(engine, task, kc, *job, &bounds),
            Work::Search { batch, against } => Ok((search_lists(engine, task, batch, *against)?, None)),
        };
        crate::trace::mark(|| match work {
            Work::Block(job) => format!("block {job:?} computed"),
            Work::Search { batch, against } => {
                format!("{} rows of block {} searched in {against}", batch.rows.len(), batch.block)
            }
        });
        done
    };
    let mut on_done = |run: &mut Run<'_>,
                       stats: &mut RunStats,
                       work: Work,
                       (parts, way): (Vec<Part>, Option<PairWay>),
                       more: &mut Vec<Work>| {
        stats.pair_blocks_once += usize::from(way == Some(PairWay::TwoSided));
        stats.pair_blocks_one_way += usize::from(way == Some(PairWay::OneWay));
        match work {
            Work::Block(job) => {
                if let Some(c) = checkpoint {
                    c.record(job, kc, &parts)?;
                }
                run.block_done(job, parts)?;
            }
            Work::Search { batch, .. } => run.search_done(&batch, parts),
        }
        more.append(&mut run.new_work);
        run.report(progress);
        if task.cluster.is_none() {
            run.emit(sink)?;
        }
        crate::trace::mark(|| "merged".into());
        Ok(())
    };
    workers::run_jobs(engines, work, &execute, |work, result, more| on_done(&mut run, stats, work, result, more))?;
    if let Some(c) = task.cluster {
        // Every block of rows to its owner, which finishes it (later rounds on its own
        // devices), then every finished block to rank 0, in order.
        run.exchange_lists(c)?;
        let work = std::mem::take(&mut run.new_work);
        workers::run_jobs(engines, work, &execute, |work, result, more| on_done(&mut run, stats, work, result, more))?;
        run.gather_rows(c, sink)?;
    }
    assert_eq!(run.next_to_emit, task.plan.count, "every block of rows is finished once its jobs are");
    let counted = run.stats;
    stats.rounds = counted.rounds;
    stats.rows_widened = counted.rows_widened;
    stats.rows_brute_forced = counted.rows_brute_forced;
    stats.rows_overflowed = counted.rows_overflowed;
    stats.rows_reranked_on_gpu = counted.rows_reranked_on_gpu;
    stats.refine_seconds = counted.refine_seconds;
    stats.bytes_spilled = run.spill.as_ref().map_or(0, |s| s.written);
    stats.bytes_sent = run.stats.bytes_sent;
    stats.candidate_seconds = started.elapsed().as_secs_f64() - stats.prepare_seconds - stats.refine_seconds;
    Ok(())
}

/// Candidates a row's first-round lists hold in a graph of `n` rows with `k` neighbours.
pub(crate) fn initial_candidates_of(k: usize, n: usize, include_self: bool) -> usize {
    initial_candidates(k).min(n.saturating_sub(usize::from(!include_self))).max(k)
}

impl GraphTask<'_> {
    /// The rows each row may list.
    fn available(&self) -> usize {
        self.data.rows() - usize::from(!self.include_self)
    }
}

/// Each row's bound, as f32 bits: at or above the largest key the row's first-round list can
/// end with, from the lists of `kc` candidates merged for it so far; +inf until one is.
/// Pairs read the bounds of their rows as they start (`Engine::pair_candidates`), while
/// merges lower them: a bound read before a merge is higher, still a bound.
struct RowBounds(Vec<std::sync::atomic::AtomicU32>);

impl RowBounds {
    fn new(rows: usize) -> Self {
        RowBounds((0..rows).map(|_| f32::INFINITY.to_bits().into()).collect())
    }

    /// Lowers row `row`'s bound to `key` where that is lower.
    fn lower(&self, row: usize, key: f32) {
        let _ = self.0[row].fetch_update(Relaxed, Relaxed, |now| (key < f32::from_bits(now)).then_some(key.to_bits()));
    }

    /// The bounds of `rows`, each raised to the next float, so that a key equal to a row's
    /// largest is kept: a row's list then does not depend on the order of the merges.
    fn of(&self, rows: std::ops::Range<usize>) -> Vec<f32> {
        self.0[rows].iter().map(|b| next_up(f32::from_bits(b.load(Relaxed)))).collect()
    }
}

use std::sync::atomic::Ordering::Relaxed;

/// The least float above `x` (+inf and NaN stay as they are).
fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    let bits = x.to_bits();
    let up = match x {
        0.0 => 1, // either zero: the least positive subnormal
        x if x > 0.0 => bits + 1,
        _ => bits - 1,
    };
    f32::from_bits(up)
}

/// A unit of work for a worker.
enum Work {
    /// A block of the first round.
    Block(Job),
    /// Unproven rows of one block of rows, searched among the rows of block `against`.
    Search { batch: Arc<Batch>, against: usize },
}

/// Rows of one block of rows searched again with more candidates.
struct Batch {
    block: usize,
    /// The rows, in the whole data.
    rows: Vec<usize>,
    /// Their vectors.
    queries: Matrix,
    kc: usize,
}

/// What is known of one block of rows.
#[derive(Default)]
struct RowBlock {
    /// First-round jobs holding these rows that have not been merged yet.
    jobs_left: usize,
    /// The first round's merged lists, until it is complete.
    lists: Option<RowLists>,
    /// The rows' answers (`rows x k`), once the first round is complete.
    answers: Option<(Vec<u32>, Vec<f32>)>,
    /// A later round in flight: its lists, jobs left, and round number.
    search: Option<(RowLists, usize, usize)>,
    /// Every row proven and answered.
    done: bool,
}

/// The state of a partitioned graph between blocks.
struct Run<'a> {
    task: &'a GraphTask<'a>,
    row_stats: &'a RowStats,
    corpus_max: f64,
    kc: usize,
    blocks: Vec<RowBlock>,
    jobs_total: usize,
    jobs_done: usize,
    /// Jobs the last step created, for the workers.
    new_work: Vec<Work>,
    /// The lowest block of rows whose first round is not complete: blocks from it on hold
    /// their lists in memory while they are fewer than `task.lists_in_memory`.
    first_unfinished: usize,
    spill: Option<Spill>,
    next_to_emit: usize,
    stats: RunStats,
    /// Threads of their own for merges and exact finishes, beside the workers: in the shared
    /// pool a merge held up the readers that copy a GPU's tiles out, and the GPU waited.
    host: rayon::ThreadPool,
    bounds: &'a RowBounds,
}

/// The merges and exact finishes take one thread in this many.
const HOST_SHARE: usize = 4;

impl<'a> Run<'a> {
    fn new(
        task: &'a GraphTask<'a>,
        row_stats: &'a RowStats,
        kc: usize,
        jobs: &[Job],
        bounds: &'a RowBounds,
    ) -> Result<Self> {
        let count = task.plan.count;
        // Every block of rows is held by its diagonal block and by a pair with each other
        // (of which a rank of a cluster computes its share).
        let mut blocks: Vec<RowBlock> = (0..count).map(|_| RowBlock::default()).collect();
        for job in jobs {
            for b in job.blocks() {
                blocks[b].jobs_left += 1;
            }
        }
        let jobs_total = jobs.len();
        let corpus_max = row_stats.max();
        let stats = RunStats { rounds: 1, ..RunStats::default() };
        let host = rayon::ThreadPoolBuilder::new()
            .num_threads((rayon::current_num_threads() / HOST_SHARE).max(1))
            .thread_name(|i| format!("knng-merge-{i}"))
            .build()
            .map_err(|e| crate::error::Error::Gpu(format!("cannot start the merging threads: {e}")))?;
        Ok(Run {
            task,
            row_stats,
            corpus_max,
            kc,
            blocks,
            jobs_total,
            jobs_done: 0,
            new_work: Vec::new(),
            first_unfinished: 0,
            spill: None,
            next_to_emit: 0,
            stats,
            host,
            bounds,
        })
    }

    /// Merges the lists of a first-round block, or spills those of blocks of rows that are
    /// not to be held yet, and finishes the blocks of rows it completes.
    fn block_done(&mut self, job: Job, parts: Vec<Part>) -> Result<()> {
        let plan = self.task.plan;
        for mut part in parts {
            let b = part.first / plan.rows;
            part.first -= plan.range(b).start;
            let held = self.blocks[b].lists.is_some() || b < self.first_unfinished + self.task.lists_in_memory;
            let first = plan.range(b).start + part.first;
            let bounds = self.bounds;
            match (&mut self.spill, held) {
                (Some(spill), false) => {
                    spill.put(b, &part)?;
                    (0..part.rows).for_each(|r| bounds.lower(first + r, part.worst_key(r)));
                }
                _ => {
                    let rows = plan.range(b).len();
                    let lists = self.blocks[b].lists.get_or_insert_with(|| RowLists::new(rows, self.kc));
                    self.host.install(|| lists.merge(&part));
                    (0..part.rows).for_each(|r| bounds.lower(first + r, lists.worst_key(part.first + r)));
                }
            }
        }
        for b in job.blocks() {
            self.blocks[b].jobs_left -= 1;
            // A rank of a cluster holds only its share of the lists until they are exchanged.
            if self.blocks[b].jobs_left == 0 && self.task.cluster.is_none() {
                self.first_round_done(b)?;
            }
        }
        while self.blocks.get(self.first_unfinished).is_some_and(|b| b.jobs_left == 0) {
            self.first_unfinished += 1;
        }
        self.jobs_done += 1;
        Ok(())
    }

    fn first_round_done(&mut self, b: usize) -> Result<()> {
        let rows = self.task.plan.range(b).len();
        let lists = self.take_lists(b)?.unwrap_or_else(|| RowLists::new(rows, self.kc));
        self.finish_first_round(b, lists);
        Ok(())
    }

    /// The lists of block of rows `b` merged so far, in memory and spilled; `None` where no
    /// job has brought any.
    fn take_lists(&mut self, b: usize) -> Result<Option<RowLists>> {
        let rows = self.task.plan.range(b).len();
        let mut lists = self.blocks[b].lists.take();
        if let Some(spill) = &mut self.spill {
            let kc = self.kc;
            spill.take(b, |part| {
                let lists = lists.get_or_insert_with(|| RowLists::new(rows, kc));
                self.host.install(|| lists.merge(&part))
            })?;
        }
        Ok(lists)
    }

    /// Re-ranks the rows of block `b` from their complete first-round lists, and queues the
    /// unproven ones for a later round.
    fn finish_first_round(&mut self, b: usize, lists: RowLists) {
        let range = self.task.plan.range(b);
        let k = self.task.k;
        let mut answers = (vec![0u32; range.len() * k], vec![0f32; range.len() * k]);
        let rows: Vec<usize> = range.clone().collect();
        let pending = self.finish_rows(&rows, &lists.into_candidates(), range.start, &mut answers);
        self.blocks[b].answers = Some(answers);
        self.next_round(b, pending, self.kc, 1);
    }

    /// Sends this rank's lists of every block of rows to the block's owner, and merges what
    /// the other ranks send for the blocks it owns, then finishes those. Blocks go in order,
    /// and a rank sends only to the owner of the block at hand, so that no two ranks wait for
    /// each other.
    fn exchange_lists(&mut self, c: &dyn Cluster) -> Result<()> {
        let (rank, ranks) = (c.rank(), c.size());
        for b in 0..self.task.plan.count {
            let owner = cluster::owner(b, ranks);
            let lists = self.take_lists(b)?;
            if owner != rank {
                let mut bytes = Vec::new();
                if let Some(lists) = lists {
                    lists.into_part().encode(&mut bytes);
                }
                c.send(owner, &bytes)?;
                self.stats.bytes_sent += bytes.len() as u64;
                continue;
            }
            let rows = self.task.plan.range(b).len();
            let mut lists = lists.unwrap_or_else(|| RowLists::new(rows, self.kc));
            for from in (0..ranks).filter(|&r| r != rank) {
                let bytes = c.receive(from)?;
                if bytes.is_empty() {
                    continue;
                }
                let part = decode_lists(&bytes, self.kc, rows)
                    .map_err(|why| Error::Cluster(format!("lists of block {b} from rank {from}: {why}")))?;
                self.host.install(|| lists.merge(&part));
            }
            self.finish_first_round(b, lists);
        }
        Ok(())
    }

    /// Hands every block of rows to `sink` on rank 0, in order: rank 0's own, and those that
    /// their owners send it.
    fn gather_rows(&mut self, c: &dyn Cluster, sink: &mut RowSink<'_>) -> Result<()> {
        let (rank, ranks, k) = (c.rank(), c.size(), self.task.k);
        for b in 0..self.task.plan.count {
            let owner = cluster::owner(b, ranks);
            let range = self.task.plan.range(b);
            if owner == rank {
                let (mut indices, mut distances) = self.blocks[b].answers.take().expect("an owned block is finished");
                if rank == 0 {
                    sink(range.start, &mut indices, &mut distances)?;
                } else {
                    let mut bytes = Vec::with_capacity(indices.len() * 8);
                    bytes.extend_from_slice(bytemuck::cast_slice(&indices));
                    bytes.extend_from_slice(bytemuck::cast_slice(&distances));
                    c.send(0, &bytes)?;
                    self.stats.bytes_sent += bytes.len() as u64;
                }
            } else if rank == 0 {
                let bytes = c.receive(owner)?;
                let values = range.len() * k;
                if bytes.len() != values * 8 {
                    return Err(Error::Cluster(format!(
                        "rows of block {b} from rank {owner}: {} bytes where {} were due",
                        bytes.len(),
                        values * 8
                    )));
                }
                let mut indices: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes[..values * 4]);
                let mut distances: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[values * 4..]);
                sink(range.start, &mut indices, &mut distances)?;
            }
            self.next_to_emit += 1;
        }
        Ok(())
    }

    /// Merges the lists of a later round's job, and finishes its rows once every block is in.
    fn search_done(&mut self, batch: &Batch, parts: Vec<Part>) {
        let b = batch.block;
        let (lists, left, round) = self.blocks[b].search.as_mut().expect("a search runs for this block");
        self.host.install(|| parts.iter().for_each(|p| lists.merge(p)));
        *left -= 1;
        if *left > 0 {
            return;
        }
        let round = *round;
        let (lists, _, _) = self.blocks[b].search.take().expect("checked above");
        let first = self.task.plan.range(b).start;
        let mut answers = self.blocks[b].answers.take().expect("a later round follows the first");
        let pending = self.finish_rows(&batch.rows, &lists.into_candidates(), first, &mut answers);
        self.blocks[b].answers = Some(answers);
        self.next_round(b, pending, batch.kc, round);
    }

    /// Queues the rows of block `b` left unproven after round `round` (lists of `kc`) for a
    /// search with four times the candidates, or marks the block done.
    fn next_round(&mut self, b: usize, pending: Vec<usize>, kc: usize, round: usize) {
        if pending.is_empty() {
            self.blocks[b].done = true;
            return;
        }
        if round == 1 {
            self.stats.rows_widened += pending.len();
        }
        self.stats.rounds = self.stats.rounds.max(round + 1);
        let kc = kc.saturating_mul(4).min(self.task.available()).max(self.task.k);
        let d = self.task.data.cols();
        let mut vectors = Vec::with_capacity(pending.len() * d);
        pending.iter().for_each(|&i| vectors.extend_from_slice(self.task.data.row(i)));
        let queries = Matrix::new(vectors, pending.len(), d).expect("gathered rows have the right length");
        let count = self.task.plan.count;
        self.blocks[b].search = Some((RowLists::new(pending.len(), kc), count, round + 1));
        let batch = Arc::new(Batch { block: b, rows: pending, queries, kc });
        self.new_work.extend((0..count).map(|against| Work::Search { batch: batch.clone(), against }));
    }

    /// Re-ranks `rows` (slot s of `cands` holds the candidates of `rows[s]`) exactly and
    /// writes the answers of those proven into `answers`, the rows of a block starting at
    /// `first`; returns the rows left unproven.
    fn finish_rows(
        &mut self,
        rows: &[usize],
        cands: &Candidates,
        first: usize,
        answers: &mut (Vec<u32>, Vec<f32>),
    ) -> Vec<usize> {
        let clock = std::time::Instant::now();
        let GraphTask { data, k, metric, include_self, .. } = *self.task;
        let (d, kc, available) = (data.cols(), cands.kc, self.task.available());
        if cands.exact.is_some() {
            self.stats.rows_reranked_on_gpu += rows.len();
        }
        let row_stats = self.row_stats;
        let corpus_max = self.corpus_max;
        let finish = || {
            rows.par_iter()
                .enumerate()
                .map(|(slot, &i)| {
                    let exclude = if include_self { NONE } else { i as u32 };
                    let q = Query { corpus: data, vector: data.row(i), metric, k, exclude };
                    if cands.incomplete[slot] {
                        return Outcome::Overflowed;
                    }
                    if cands.failed[slot] {
                        return Outcome::BruteForced(refine::brute_force(q));
                    }
                    let range = slot * kc..(slot + 1) * kc;
                    let bound = prepare::key_error_bound(metric, d, row_stats.scale[i], corpus_max);
                    // A row not proven although its list covers every row: keys that overflowed
                    // f32 (`key_error_bound`). The host answers it.
                    let exact = cands.exact.as_ref().map(|e| &e[range.clone()]);
                    match refine::refine(q, &cands.keys[range.clone()], &cands.ids[range], exact, available, bound) {
                        Some(ranked) => Outcome::Proven(ranked),
                        None if kc >= available => Outcome::BruteForced(refine::brute_force(q)),
                        None => Outcome::Unproven,
                    }
                })
                .collect::<Vec<Outcome>>()
        };
        // Once the last first-round job is in, no worker copies tiles out, and nothing else
        // runs beside these finishes: they take every thread.
        let outcomes = match self.jobs_done + 1 >= self.jobs_total {
            true => finish(),
            false => self.host.install(finish),
        };
        let mut pending = Vec::new();
        for (&i, outcome) in rows.iter().zip(outcomes) {
            let at = (i - first) * k..(i - first + 1) * k;
            let ranked = match outcome {
                Outcome::Proven(ranked) => ranked,
                Outcome::BruteForced(ranked) => {
                    self.stats.rows_brute_forced += 1;
                    ranked
                }
                Outcome::Overflowed => {
                    self.stats.rows_overflowed += 1;
                    pending.push(i);
                    continue;
                }
                Outcome::Unproven => {
                    pending.push(i);
                    continue;
                }
            };
            write_row(metric, ranked.into_iter(), &mut answers.0[at.clone()], &mut answers.1[at]);
        }
        self.stats.refine_seconds += clock.elapsed().as_secs_f64();
        pending
    }

    /// Hands the finished blocks of rows that come next in order to `sink`, and drops them.
    fn emit(&mut self, sink: &mut RowSink<'_>) -> Result<()> {
        while self.blocks.get(self.next_to_emit).is_some_and(|b| b.done) {
            let b = self.next_to_emit;
            let (mut indices, mut distances) = self.blocks[b].answers.take().expect("a finished block has answers");
            sink(self.task.plan.range(b).start, &mut indices, &mut distances)?;
            self.next_to_emit += 1;
        }
        Ok(())
    }

    fn report(&self, progress: Option<&Progress>) {
        // Rows are final only once every block is merged and re-ranked: the blocks count for
        // 90% of the rows, like a symmetric sweep's.
        if let Some(p) = progress {
            let n = self.task.data.rows() as u64;
            p((n * 9 * self.jobs_done as u64) / (10 * self.jobs_total.max(1) as u64), n);
        }
    }
}

/// Lists of a whole block of `rows` rows that [`Part::encode`] wrote into `bytes`.
fn decode_lists(bytes: &[u8], kc: usize, rows: usize) -> std::result::Result<Part, String> {
    let mut at = 0;
    let mut take = |len: usize| {
        let piece = bytes.get(at..at + len).ok_or("the message ends early")?;
        at += len;
        Ok(piece)
    };
    let part = Part::decode(kc, &mut take)?;
    if part.first != 0 || part.rows != rows || at != bytes.len() {
        return Err(format!("lists of rows {}..{} in {} bytes", part.first, part.first + part.rows, bytes.len()));
    }
    Ok(part)
}

/// What the exact finish made of one row's candidates.
enum Outcome {
    Proven(Ranked),
    /// Answered by the float64 brute force (the backend failed the row, or its list held every
    /// row and still proved nothing).
    BruteForced(Ranked),
    /// Its list may have missed keys: searched again.
    Overflowed,
    /// The certificate failed: searched again with more candidates.
    Unproven,
}
/// A first-round job's lists: the rows of I among J and, off the diagonal, those of J among I;
/// and how an off-diagonal block computed them.
fn block_lists(
    engine: &Engine,
    task: &GraphTask<'_>,
    kc: usize,
    job: Job,
    bounds: &RowBounds,
) -> Result<(Vec<Part>, Option<PairWay>)> {
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
            Ok((vec![lists_of(engine, task, kc, block, block, true, &exclude, available, first, first)?], None))
        }
        Job::Pair(i, j) => {
            let ((first_i, block_i), (first_j, block_j)) = (rows(i), rows(j));
            let (bounds_i, bounds_j) = (bounds.of(plan.range(i)), bounds.of(plan.range(j)));
            let bounds = PairBounds { i: &bounds_i, j: &bounds_j };
            let pair = engine.pair_candidates(block_i, block_j, kc, task.shift, task.metric, Some(bounds))?;
            let parts = vec![
                Part::from_candidates(first_i, pair.of_i, first_j).padded(kc),
                Part::from_candidates(first_j, pair.of_j, first_i).padded(kc),
            ];
            crate::trace::mark(|| "pair: parts".into());
            Ok((parts, Some(pair.way)))
        }
    }
}

/// A later round's job: the unproven rows of one block of rows among the rows of block
/// `against`, which they may not list themselves from.
fn search_lists(engine: &Engine, task: &GraphTask<'_>, batch: &Batch, against: usize) -> Result<Vec<Part>> {
    let range = task.plan.range(against);
    let block = task.data.slice_rows(range.clone());
    let within = !task.include_self && against == batch.block;
    let exclude: Vec<u32> = batch.rows.iter().map(|&i| if within { (i - range.start) as u32 } else { NONE }).collect();
    let available = block.rows() - usize::from(within);
    let queries = batch.queries.view();
    Ok(vec![lists_of(engine, task, batch.kc, block, queries, false, &exclude, available, 0, range.start)?])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_only_fall_and_are_read_just_above() {
        assert_eq!(next_up(1.0), 1.0 + f32::EPSILON);
        assert_eq!(next_up(-1.0), -1.0 + f32::EPSILON / 2.0);
        assert!(next_up(0.0) > 0.0 && next_up(-0.0) == next_up(0.0));
        assert_eq!(next_up(f32::INFINITY), f32::INFINITY);
        assert_eq!(next_up(f32::MAX), f32::INFINITY);
        let bounds = RowBounds::new(3);
        bounds.lower(1, 2.0);
        bounds.lower(1, 3.0);
        bounds.lower(2, -0.5);
        let read = bounds.of(0..3);
        assert_eq!(read[0], f32::INFINITY);
        assert_eq!(read[1], next_up(2.0));
        assert_eq!(read[2], next_up(-0.5));
        assert!(read[1] > 2.0 && read[2] > -0.5);
    }
}
