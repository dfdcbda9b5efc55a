//! The hybrid join (Gowanlock's HybridKNN-Join): the GPU grid and the CPU's kd-tree answer
//! one problem's query rows together, from the two ends of one queue (section 4.5).
//!
//! The GPU takes large batches from the front, half of what is left each time, so that its
//! batches shrink as the queue does; the CPU's threads take one small batch at a time from
//! the back, and both stop where they meet; the queue runs along the points' curve
//! (`order.rs`). A query whose grid candidates do not prove its answer
//! (`grid::outside_bound`; decided on the GPU where it has f64, `grid_prove.wgsl`) is answered
//! by the kd-tree where it stands, and where more than a quarter of a batch fails, the GPU
//! rebuilds its grid wider before its next batch (section 4.4's re-index).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::grid::{self, GridPlan, SAMPLE_ROWS};
use super::job::{kth_row_key, rows_answer, Answers, PointRows, TreeJob};
use super::kdtree::{self, nearest, DistinctPoints, Scratch};
use super::order::slots_in_order;
use crate::error::{check_interrupt, interrupted, Result};
use crate::gpu::{
    GpuEngine, GpuGrid, GridAnswers, GridProven, GridRows, GRID_FAILED, GRID_MAX_DIMS, GRID_PROVEN, GRID_PROVE_MAX_KC,
    GRID_UNANSWERED,
};
use crate::refine::{write_row, NONE};
use crate::MatrixRef;
use kiddo::ImmutableKdTree;

/// Query rows a batch of the CPU's takes, and the GPU's batches are made of.
const BATCH_ROWS: usize = 1024;

/// What the GPU did in a hybrid run.
#[derive(Clone, Debug, Default)]
pub(crate) struct HybridReport {
    /// Query rows the GPU took, and of them those whose grid candidates proved the answer.
    pub gpu_rows: usize,
    pub gpu_proven: usize,
    /// Of `gpu_proven`, the rows ranked and proven on the GPU itself (adapters with
    /// SHADER_F64, k up to 128); the host proved the others from their candidates.
    pub gpu_proven_on_gpu: usize,
    /// Why the GPU stopped taking rows, where it failed (the kd-tree answered the rest).
    pub gpu_error: Option<String>,
    /// Times the grid was rebuilt wider because more than a quarter of a batch failed.
    pub grid_rebuilds: usize,
    /// Query rows the GPU took and could not answer (`GRID_FAILED`); the kd-tree answered
    /// them.
    pub gpu_rows_unanswered: usize,
}

/// Most re-indexes a run makes, each to cells 1.5x as wide (a query then meets 1.5^d times
/// the points); failures beyond them go to the kd-tree.
const MOST_REBUILDS: usize = 4;

/// Whether the hybrid join computes `metric` in `d` dimensions.
pub(crate) fn handles(metric: crate::metric::Metric, d: usize) -> bool {
    kdtree::handles(metric, d) && d <= GRID_MAX_DIMS
}

/// Answers `job` with the GPU grid and the kd-tree together, calling `report` with the number
/// of query rows finished as they finish.
pub(crate) fn knn(
    job: &TreeJob<'_>,
    gpu: &GpuEngine,
    answers: Answers<'_>,
    report: &(dyn Fn(usize) + Sync),
) -> Result<HybridReport> {
    let d = job.corpus.cols();
    if !handles(job.metric, d) {
        return Err(crate::error::Error::arg(
            "algorithm",
            format!(
                "the hybrid join takes euclidean and sqeuclidean distances in 1 to {GRID_MAX_DIMS} dimensions, not {} in {d}",
                job.metric
            ),
        ));
    }
    macro_rules! by_dim {
        ($($k:literal)*) => {
            match d {
                $($k => knn_in::<$k>(job, gpu, answers, report, 1.0),)*
                _ => unreachable!("checked by `handles`"),
            }
        };
    }
    by_dim!(1 2 3 4 5 6)
}

/// Heap slots a query keeps on the GPU: k rows lie among the first k + 1 distinct points
/// (one may be the query's own row, left out), and one more shows where the k-th ends.
fn grid_slots(k: usize) -> usize {
    k + 2
}

/// [`knn`] in `K` dimensions, its first grid's cells `width_scale` times as wide as planned
/// (tests make it too fine to see it rebuilt).
fn knn_in<const K: usize>(
    job: &TreeJob<'_>,
    gpu: &GpuEngine,
    answers: Answers<'_>,
    report: &(dyn Fn(usize) + Sync),
    width_scale: f64,
) -> Result<HybridReport> {
    let distinct = DistinctPoints::<K>::of(job.corpus);
    crate::trace::mark(|| format!("hybrid: {} distinct points", distinct.points.len()));
    let nq = job.queries.rows();
    let samples = SAMPLE_ROWS.min(nq);
    let sampled: Vec<[f64; K]> = (0..samples)
        .map(|s| {
            let row = job.queries.row(s * nq / samples);
            std::array::from_fn(|j| f64::from(row[j]))
        })
        .collect();
    let mut run = HybridReport::default();
    // Planned without the kd-tree, which the CPU's threads build while the GPU answers its
    // first batch.
    let estimated = grid::estimated_kth_keys(&sampled, &distinct.points, &|p| distinct.rows_of(p).len(), job.k);
    let plan = grid::plan(&distinct.points, estimated.iter().map(|key| key * width_scale * width_scale).collect());
    let points: Vec<f32> = distinct.points.iter().flatten().map(|&x| x as f32).collect();
    crate::trace::mark(|| format!("hybrid: grid planned: {:?}", plan.as_ref().map(|p| &p.cells.sides)));
    let built = match plan {
        Some(plan) => match gpu.build_grid(&points, K, &plan.cells) {
            Ok(grid) => Some(GpuSide {
                current: Mutex::new(Current { grid, plan: Arc::new(plan), generation: 0 }),
                gpu,
                points: &points,
                rows: proof_rows(gpu, &distinct, job.k),
            }),
            Err(e) => {
                run.gpu_error = Some(e.to_string());
                None
            }
        },
        None => None,
    };
    crate::trace::mark(|| "hybrid: grid built on the GPU".to_string());
    let shared = Shared {
        job,
        distinct: &distinct,
        tree: OnceLock::new(),
        grid: built,
        failed_generation: AtomicUsize::new(usize::MAX),
    };
    let done = AtomicUsize::new(0);
    let mut answer_rows = |first: usize, indices: &mut [u32], distances: &mut [f32]| -> Result<()> {
        let outcome = shared.answer(first, indices, distances, &|rows| {
            report(done.fetch_add(rows, Ordering::Relaxed) + rows);
        })?;
        // Rows left after an interrupt have no answer.
        check_interrupt(&job.interrupt)?;
        run.gpu_rows += outcome.gpu_rows;
        run.gpu_proven += outcome.gpu_proven;
        run.gpu_proven_on_gpu += outcome.gpu_proven_on_gpu;
        run.grid_rebuilds += outcome.grid_rebuilds;
        run.gpu_rows_unanswered += outcome.gpu_rows_unanswered;
        run.gpu_error = run.gpu_error.take().or(outcome.gpu_error);
        Ok(())
    };
    answers.fill(job, &mut answer_rows)?;
    Ok(run)
}

/// What both ends of the queue read.
struct Shared<'a, const K: usize> {
    job: &'a TreeJob<'a>,
    distinct: &'a DistinctPoints<K>,
    /// Built by a task of the first call of [`Shared::answer`], while the GPU answers its
    /// first batches and the CPU's threads copy the answers the GPU proved.
    tree: OnceLock<ImmutableKdTree<f64, K>>,
    grid: Option<GpuSide<'a>>,
    /// The generation of a grid more than a quarter of whose batch failed (`usize::MAX`:
    /// none), for the GPU's end to rebuild it wider.
    failed_generation: AtomicUsize,
}

/// The GPU's grid, which only the GPU's end of the queue uses, and what rebuilds it.
struct GpuSide<'a> {
    current: Mutex<Current<'a>>,
    gpu: &'a GpuEngine,
    /// The distinct points in f32, as the grid holds them.
    points: &'a [f32],
    /// Each point's rows, where the GPU proves its answers itself.
    rows: Option<GridRows>,
}

impl GpuSide<'_> {
    /// Most rows a GPU batch of `grid` takes of `rows` query rows at `k`: what the grid holds
    /// (proven on the GPU where this side proves), and at most a sixteenth of the rows (at
    /// least 64 CPU batches). The CPU's threads cannot take rows the GPU holds, so a batch
    /// the GPU answers slowly (dense cells that hold many points each) would leave them idle
    /// while it runs.
    fn batch_rows(&self, grid: &GpuGrid<'_>, k: usize, rows: usize) -> usize {
        let proven_k = self.rows.as_ref().map(|_| k);
        grid.query_rows(grid_slots(k), proven_k).min(rows.div_ceil(16).max(64 * BATCH_ROWS))
    }
}

/// Each point's rows on the GPU, where it can rank and prove answers of k itself; `None`
/// leaves the proofs to the host (no SHADER_F64, k past what the kernel holds, or the rows
/// not placed: the host's proofs give the same answers).
fn proof_rows<const K: usize>(gpu: &GpuEngine, distinct: &DistinctPoints<K>, k: usize) -> Option<GridRows> {
    if grid_slots(k) > GRID_PROVE_MAX_KC {
        return None;
    }
    gpu.grid_rows(distinct.first_rows(), distinct.rows())
        .inspect_err(|e| crate::trace::mark(|| format!("hybrid: proofs left to the host: {e}")))
        .ok()
        .flatten()
}

/// A GPU batch's answers: candidates for the host to prove, or answers the GPU proved.
enum Found {
    Candidates(GridAnswers),
    Proven(GridProven),
}

impl Found {
    /// Queries the GPU could not answer.
    fn failed(&self) -> usize {
        match self {
            Found::Candidates(found) => found.failed,
            Found::Proven(found) => found.failed,
        }
    }

    /// Whether the GPU answered query `slot` (proven or not).
    fn answered(&self, slot: usize) -> bool {
        match self {
            Found::Candidates(found) => found.seen[slot] != GRID_FAILED,
            Found::Proven(found) => found.status[slot] != GRID_UNANSWERED,
        }
    }
}

/// Why the kd-tree's build failed, once it has.
type TreeFailure = Mutex<Option<crate::error::Error>>;

fn failed(tree_failed: &TreeFailure) -> bool {
    tree_failed.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

/// A CPU thread with nothing to take: runs a job of the pool's (a part of the kd-tree's
/// build) if one is waiting, else sleeps a moment.
fn idle() {
    if rayon::yield_now() != Some(rayon::Yield::Executed) {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// What the CPU's end of the queue reads and counts ([`Shared::take_batches`]).
struct TakeBatches<'a, 's, 'o> {
    first: usize,
    order: &'a [u32],
    queue: &'a Mutex<(usize, usize)>,
    answered: &'a Mutex<Vec<Answered>>,
    gpu_done: &'a AtomicBool,
    outs: &'a [BatchOut<'s, 'o>],
    tree_failed: &'a TreeFailure,
    proven: &'a AtomicUsize,
    proven_on_gpu: &'a AtomicUsize,
    finished: &'a (dyn Fn(usize) + Sync),
}

/// Marks the GPU's end of the queue done when dropped.
struct Done<'a>(&'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What [`Shared::finish`] did with a batch's grid answers: rows proven, and of them those
/// proven on the GPU.
#[derive(Default)]
struct Proofs {
    proven: usize,
    on_gpu: usize,
}

/// The grid the GPU queries now: its plan and how many grids came before it.
struct Current<'a> {
    grid: GpuGrid<'a>,
    plan: Arc<GridPlan>,
    generation: usize,
}

/// A batch the GPU took: its index, the grid's answers (none where the GPU failed), the
/// queue position of their first slot, and the grid's plan and generation.
type Answered = (usize, Option<Arc<Found>>, usize, Arc<GridPlan>, usize);

/// A query row's answer slots (k indices, k distances).
type Slot<'o> = (&'o mut [u32], &'o mut [f32]);

/// One batch's answer slots, claimed by whichever end takes the batch.
type BatchOut<'s, 'o> = Mutex<Option<&'s mut [Slot<'o>]>>;

impl<const K: usize> Shared<'_, K> {
    /// The kd-tree over the distinct points, built on the first call.
    fn tree(&self) -> Result<&ImmutableKdTree<f64, K>> {
        if let Some(tree) = self.tree.get() {
            return Ok(tree);
        }
        let tree = kdtree::tree_of(self.distinct)?;
        crate::trace::mark(|| "hybrid: kd-tree built".to_string());
        Ok(self.tree.get_or_init(|| tree))
    }

    /// Answers query rows `first..` into `indices` and `distances` (k a row): the GPU from the
    /// front, the CPU's threads from the back.
    fn answer(
        &self,
        first: usize,
        indices: &mut [u32],
        distances: &mut [f32],
        finished: &(dyn Fn(usize) + Sync),
    ) -> Result<HybridReport> {
        let k = self.job.k;
        let rows = indices.len() / k;
        // The queue: the rows along the points' curve, their answer slots in that order.
        let order = self.distinct.query_order(self.job, first, rows);
        // Batches not yet taken: front..back.
        let queue = Mutex::new((0usize, rows.div_ceil(BATCH_ROWS)));
        // Batches the GPU answered, for the CPU's threads to prove (first) or finish.
        let answered: Mutex<Vec<Answered>> = Mutex::new(Vec::new());
        let gpu_done = AtomicBool::new(self.grid.is_none());
        let proven = AtomicUsize::new(0);
        let proven_on_gpu = AtomicUsize::new(0);
        let mut report = HybridReport::default();
        // The GPU's first batch is taken before the CPU's threads start, so that it is large.
        let first_batch = self.grid.as_ref().and_then(|side| {
            let current = side.current.lock().unwrap_or_else(|e| e.into_inner());
            take_front(&queue, side.batch_rows(&current.grid, k, order.len()))
        });
        std::thread::scope(|threads| {
            if let Some(side) = &self.grid {
                let (queue, answered, gpu_done, report, order) = (&queue, &answered, &gpu_done, &mut report, &order);
                threads.spawn(move || {
                    // Set even if the GPU's end panics, so that the CPU's threads finish and the
                    // panic reaches the caller instead of leaving them waiting.
                    let _done = Done(gpu_done);
                    *report = self.gpu_end(side, first, order, first_batch, queue, answered);
                });
            }
            // The kd-tree is built on the pool while this thread lays out the answers' slots in
            // the queue's order; the CPU's threads then copy the GPU's proven answers at once,
            // and wait for the tree (helping to build it) only for rows it must answer.
            let tree_failed: TreeFailure = Mutex::new(None);
            let tree_failed = &tree_failed;
            rayon::scope(|build| {
                build.spawn(|_| {
                    if let Err(e) = self.tree() {
                        // The GPU stops after its batch in flight.
                        let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
                        q.1 = q.0;
                        *tree_failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    }
                });
                let mut slots = slots_in_order(indices, distances, k, &order);
                let outs: Vec<BatchOut<'_, '_>> = slots.chunks_mut(BATCH_ROWS).map(|b| Mutex::new(Some(b))).collect();
                self.take_batches(TakeBatches {
                    first,
                    order: &order,
                    queue: &queue,
                    answered: &answered,
                    gpu_done: &gpu_done,
                    outs: &outs,
                    tree_failed,
                    proven: &proven,
                    proven_on_gpu: &proven_on_gpu,
                    finished,
                });
            });
            let failure = tree_failed.lock().unwrap_or_else(|e| e.into_inner()).take();
            failure.map_or(Ok(()), Err)
        })?;
        crate::trace::mark(|| "hybrid: every row answered".to_string());
        report.gpu_proven = proven.into_inner();
        report.gpu_proven_on_gpu = proven_on_gpu.into_inner();
        Ok(report)
    }

    /// The CPU's end of the queue, on every thread of the pool: the GPU's answered batches
    /// first (their proven rows copied, the others answered by the kd-tree), else, once the
    /// tree is built, batches from the back; until both ends have met and the GPU is done.
    fn take_batches(&self, end: TakeBatches<'_, '_, '_>) {
        rayon::scope(|s| {
            for _ in 0..rayon::current_num_threads() {
                s.spawn(|_| self.take_on_this_thread(&end));
            }
        });
    }

    /// One thread's part of [`Shared::take_batches`].
    fn take_on_this_thread(&self, end: &TakeBatches<'_, '_, '_>) {
        let TakeBatches { first, order, queue, answered, gpu_done, outs, tree_failed, .. } = *end;
        let mut scratch = Scratch::default();
        loop {
            if interrupted(&self.job.interrupt) {
                break;
            }
            let checked = answered.lock().unwrap_or_else(|e| e.into_inner()).pop();
            if let Some((batch, found, start, plan, generation)) = checked {
                let slots = claim(&outs[batch]);
                let from = batch * BATCH_ROWS;
                let gpu_failed = found.is_none();
                let found = found.as_deref().map(|f| (&*plan, f, from - start));
                let rows = &order[from..from + slots.len()];
                let proofs = self.finish(tree_failed, found, first, rows, slots, &mut scratch);
                end.proven.fetch_add(proofs.proven, Ordering::Relaxed);
                end.proven_on_gpu.fetch_add(proofs.on_gpu, Ordering::Relaxed);
                // Rows the grid did not answer say nothing of its cells' width.
                let answered_here =
                    found.map_or(0, |(_, f, at)| (at..at + rows.len()).filter(|&s| f.answered(s)).count());
                if !gpu_failed && 4 * (answered_here - proofs.proven) > answered_here {
                    self.failed_generation.store(generation, Ordering::Relaxed);
                }
                (end.finished)(rows.len());
            } else if let Some(batch) = self.tree.get().and_then(|_| take_back(queue)) {
                let slots = claim(&outs[batch]);
                let rows = &order[batch * BATCH_ROWS..batch * BATCH_ROWS + slots.len()];
                self.finish(tree_failed, None, first, rows, slots, &mut scratch);
                (end.finished)(rows.len());
            } else if failed(tree_failed)
                || (self.tree.get().is_some()
                    && gpu_done.load(Ordering::Acquire)
                    && answered.lock().unwrap_or_else(|e| e.into_inner()).is_empty())
            {
                break;
            } else {
                idle();
            }
        }
    }

    /// The kd-tree once built, this thread helping to build it meanwhile; `None` where its
    /// build failed.
    fn built_tree(&self, tree_failed: &TreeFailure) -> Option<&ImmutableKdTree<f64, K>> {
        loop {
            if let Some(tree) = self.tree.get() {
                return Some(tree);
            }
            if failed(tree_failed) {
                return None;
            }
            idle();
        }
    }

    /// The GPU's end of the queue: `first_batch`, then batches from the front, each half of
    /// what is left (at most `GpuSide::batch_rows`), until the ends meet or the GPU fails.
    /// Each batch's answers go to `answered` (none where the GPU failed).
    fn gpu_end(
        &self,
        side: &GpuSide<'_>,
        first: usize,
        order: &[u32],
        first_batch: Option<(usize, usize)>,
        queue: &Mutex<(usize, usize)>,
        answered: &Mutex<Vec<Answered>>,
    ) -> HybridReport {
        let (k, kc) = (self.job.k, grid_slots(self.job.k));
        let mut report = HybridReport::default();
        let mut current = side.current.lock().unwrap_or_else(|e| e.into_inner());
        let mut claimed = first_batch;
        while let Some((from, count)) =
            claimed.take().or_else(|| take_front(queue, side.batch_rows(&current.grid, k, order.len())))
        {
            if interrupted(&self.job.interrupt) {
                break;
            }
            if self.failed_generation.load(Ordering::Relaxed) == current.generation
                && current.generation < MOST_REBUILDS
            {
                match self.rebuild(side, &mut current) {
                    Ok(rebuilt) => report.grid_rebuilds += usize::from(rebuilt),
                    Err(e) => {
                        report.gpu_error = Some(e.to_string());
                        // The batch goes back to the queue's front for the CPU's threads.
                        queue.lock().unwrap_or_else(|e| e.into_inner()).0 = from;
                        break;
                    }
                }
            }
            let start = from * BATCH_ROWS;
            let end = ((from + count) * BATCH_ROWS).min(order.len());
            let coords = gather_rows(self.job.queries, first, &order[start..end]);
            crate::trace::mark(|| format!("hybrid: GPU batch of {} rows from position {start}", end - start));
            let answers = match &side.rows {
                Some(rows) => {
                    let excluded: Vec<u32> =
                        order[start..end].iter().map(|&r| self.job.exclude[first + r as usize]).collect();
                    let proof = current.plan.proof(rows, &excluded, k);
                    current.grid.query_proven(&coords, kc, &proof).map(Found::Proven)
                }
                None => current.grid.query(&coords, kc).map(Found::Candidates),
            };
            let found = match answers {
                Ok(found) => {
                    report.gpu_rows_unanswered += found.failed();
                    Some(Arc::new(found))
                }
                Err(e) => {
                    report.gpu_error = Some(e.to_string());
                    None
                }
            };
            crate::trace::mark(|| format!("hybrid: GPU batch of {} rows answered", end - start));
            report.gpu_rows += end - start;
            let failed = found.is_none();
            answered.lock().unwrap_or_else(|e| e.into_inner()).extend(
                (from..from + count).map(|b| (b, found.clone(), start, current.plan.clone(), current.generation)),
            );
            if failed {
                break;
            }
        }
        report
    }

    /// Replaces the grid with one of wider cells (section 4.4's re-index); false where no
    /// wider grid is possible and the grid stays.
    fn rebuild<'g>(&self, side: &GpuSide<'g>, current: &mut Current<'g>) -> Result<bool> {
        current.generation += 1;
        let Some(plan) = grid::widened(&self.distinct.points, &current.plan, grid::WIDENING) else {
            return Ok(false);
        };
        current.grid = side.gpu.build_grid(side.points, K, &plan.cells)?;
        crate::trace::mark(|| format!("hybrid: grid rebuilt wider: {:?}", plan.cells.sides));
        current.plan = Arc::new(plan);
        Ok(true)
    }

    /// Answers query rows `first + rows[j]` into `slots[j]`: from the grid's answers `found`
    /// (with its plan, and the slot of `rows[0]` in them) where they prove a row, else by the
    /// kd-tree, waited for if not yet built (rows are left unanswered where its build failed:
    /// the run fails).
    fn finish(
        &self,
        tree_failed: &TreeFailure,
        found: Option<(&GridPlan, &Found, usize)>,
        first: usize,
        rows: &[u32],
        slots: &mut [Slot<'_>],
        scratch: &mut Scratch,
    ) -> Proofs {
        let (k, metric) = (self.job.k, self.job.metric);
        let mut proofs = Proofs::default();
        for (j, ((ids, dists), &r)) in slots.iter_mut().zip(rows).enumerate() {
            let i = first + r as usize;
            let answer = match found {
                Some((_, Found::Proven(found), at)) if found.status[at + j] == GRID_PROVEN => {
                    let slot = at + j;
                    let (keys, rows) = (&found.keys[slot * found.k..][..k], &found.rows[slot * found.kc..][..k]);
                    write_row(metric, keys.iter().copied().zip(rows.iter().copied()), ids, dists);
                    proofs.proven += 1;
                    proofs.on_gpu += 1;
                    continue;
                }
                Some((plan, Found::Candidates(found), at)) if self.prove(plan, found, at + j, i, scratch) => {
                    proofs.proven += 1;
                    let excluded = self.job.exclude[i];
                    let kth = kth_row_key(self.distinct, k, excluded, &scratch.points).expect("proven");
                    rows_answer(self.distinct, k, excluded, kth, &scratch.points, &mut scratch.answer)
                }
                _ => match self.built_tree(tree_failed) {
                    Some(tree) => nearest(self.job, self.distinct, tree, i, scratch),
                    None => continue,
                },
            };
            write_row(metric, answer.iter().copied(), ids, dists);
        }
        proofs
    }

    /// Whether query row `i`'s grid candidates (at `slot` of `found`) prove its answer; they
    /// are left in `scratch.points`, ascending by exact key.
    fn prove(&self, plan: &GridPlan, found: &GridAnswers, slot: usize, i: usize, scratch: &mut Scratch) -> bool {
        let job = self.job;
        let kc = found.kc;
        let query = job.queries.row(i);
        let key_of = |p: usize| self.distinct.key_to(query, p);
        let heap = slot * kc..(slot + 1) * kc;
        scratch.points.clear();
        let mut largest = f32::NEG_INFINITY;
        for (&p, &key) in found.points[heap.clone()].iter().zip(&found.keys[heap]) {
            if p != NONE {
                scratch.points.push((key_of(p as usize), p as usize));
                largest = largest.max(key);
            }
        }
        scratch.points.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let bound = grid::outside_bound(plan, found.seen[slot], kc, largest);
        kth_row_key(self.distinct, job.k, job.exclude[i], &scratch.points).is_some_and(|kth| kth < bound)
    }
}

/// Threads that gather a GPU batch's coordinates: the rows are scattered in memory, so one
/// thread waits on a cache miss a row. Threads of their own, beside the busy thread pool.
const GATHER_THREADS: usize = 4;

/// The coordinates of rows `first + r` for each `r` of `rows`, one row after another.
fn gather_rows(queries: MatrixRef<'_>, first: usize, rows: &[u32]) -> Vec<f32> {
    let d = queries.cols();
    let mut coords = vec![0f32; rows.len() * d];
    let part = rows.len().div_ceil(GATHER_THREADS).max(1);
    std::thread::scope(|scope| {
        for (out, rows) in coords.chunks_mut(part * d).zip(rows.chunks(part)) {
            scope.spawn(move || {
                for (out, &r) in out.chunks_exact_mut(d).zip(rows) {
                    out.copy_from_slice(queries.row(first + r as usize));
                }
            });
        }
    });
    coords
}

/// The GPU's next batches from the front of the queue: half of what is left, at most
/// `most_rows` rows; (first batch, batches), if any is left.
fn take_front(queue: &Mutex<(usize, usize)>, most_rows: usize) -> Option<(usize, usize)> {
    let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
    let left = q.1 - q.0;
    (left > 0).then(|| {
        let take = left.div_ceil(2).min((most_rows / BATCH_ROWS).max(1));
        q.0 += take;
        (q.0 - take, take)
    })
}

/// The next batch from the back of the queue, if any is left.
fn take_back(queue: &Mutex<(usize, usize)>) -> Option<usize> {
    let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
    (q.1 > q.0).then(|| {
        q.1 -= 1;
        q.1
    })
}

/// The answer arrays of a batch its taker now owns.
fn claim<'s, 'o>(out: &BatchOut<'s, 'o>) -> &'s mut [Slot<'o>] {
    out.lock().unwrap_or_else(|e| e.into_inner()).take().expect("each batch is taken once")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::MatrixRef;
    use crate::metric::Metric;

    fn test_gpu(memory_budget: Option<u64>) -> GpuEngine {
        let settings = crate::search::Options {
            adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
            no_subgroups: true,
            memory_budget,
            ..Default::default()
        }
        .gpu_settings();
        GpuEngine::new(&settings, false).unwrap_or_else(|e| panic!("GPU test without a usable adapter: {e}"))
    }

    /// `n` points in the unit square, the first `crowded` of them in a square 1/64 as wide at
    /// its corner (the start of the points' curve, which the GPU's end of the queue takes).
    fn points(n: usize, crowded: usize) -> Vec<f32> {
        let mut state = 7u64;
        (0..2 * n)
            .map(|i| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let x = (state >> 40) as f32 / (1u64 << 24) as f32;
                if i < 2 * crowded {
                    x / 64.0
                } else {
                    x
                }
            })
            .collect()
    }

    /// The hybrid's graph of `coords` with grid cells `width_scale` times as wide as planned,
    /// checked against the kd-tree's byte for byte.
    fn hybrid_against_tree(gpu: &GpuEngine, coords: &[f32], k: usize, width_scale: f64) -> HybridReport {
        let n = coords.len() / 2;
        let data = MatrixRef::new(coords, n, 2).unwrap();
        let exclude: Vec<u32> = (0..n as u32).collect();
        let job =
            TreeJob { corpus: data, queries: data, exclude: &exclude, k, metric: Metric::SqEuclidean, interrupt: None };
        let (mut ids, mut dists) = (vec![0u32; n * k], vec![0f32; n * k]);
        // Threads of its own: the CPU's end takes and checks batches beside the GPU, which
        // other tests' work in the shared pool would hold up, leaving the GPU every batch.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let run = pool
            .install(|| {
                let answers = Answers::Whole { indices: &mut ids, distances: &mut dists };
                knn_in::<2>(&job, gpu, answers, &|_| {}, width_scale)
            })
            .unwrap();
        assert!(run.gpu_error.is_none(), "{:?}", run.gpu_error);
        let (mut tree_ids, mut tree_dists) = (vec![0u32; n * k], vec![0f32; n * k]);
        kdtree::knn(&job, Answers::Whole { indices: &mut tree_ids, distances: &mut tree_dists }, &|_| {}).unwrap();
        assert!(ids == tree_ids && dists == tree_dists, "the hybrid's answer differs from the kd-tree's");
        // Where the adapter has f64 the GPU proves rows itself (k here is at most 128).
        assert_eq!(run.gpu_proven_on_gpu > 0, gpu.description().contains("f64"), "{run:?}");
        run
    }

    /// A lattice of points each shared by three rows (rows of one point far apart): every
    /// query's k-th key is tied between several points, their rows interleave by index, and the
    /// query's own row is one of its point's three. The GPU's ranking must pick the rows the
    /// host's does.
    #[test]
    fn ties_across_shared_points_are_ranked_as_the_host_ranks_them() {
        let side = 40;
        let lattice: Vec<[f32; 2]> = (0..side * side).map(|i| [(i % side) as f32, (i / side) as f32]).collect();
        let coords: Vec<f32> = (0..3).flat_map(|_| lattice.iter().flatten().copied()).collect();
        for k in [4, 7, 20] {
            let run = hybrid_against_tree(&test_gpu(None), &coords, k, 1.0);
            assert!(run.gpu_proven > 0, "{run:?}");
        }
    }

    /// A grid planned far too fine fails most of its first batch and is rebuilt wider; the
    /// answer stays the kd-tree's.
    #[test]
    fn a_grid_too_fine_is_rebuilt_wider() {
        // Small GPU batches (a few thousand rows), so that the GPU comes back for more after
        // the CPU's threads have proven its first.
        let gpu = test_gpu(Some(1 << 20));
        // llvmpipe compiles a kernel at its first dispatch: done here, so that the GPU's first
        // batch below comes back while the CPU's threads still have rows to take.
        hybrid_against_tree(&gpu, &points(1 << 12, 0), 5, 1.0);
        let run = hybrid_against_tree(&gpu, &points(1 << 19, 0), 5, 0.4);
        assert!(run.grid_rebuilds >= 1 && run.gpu_proven > 0, "{run:?}");
    }

    /// A crowded quarter of the points, with cells sized for the rest: each crowded query walks
    /// thousands of points, past what llvmpipe lets one invocation's loops run (its rows must
    /// then be reported unanswered, not proven from a heap that missed points); the answer is
    /// exact either way.
    #[test]
    fn crowded_queries_are_answered_exactly() {
        let n = 1 << 16;
        let run = hybrid_against_tree(&test_gpu(None), &points(n, n / 4), 5, 1.0);
        assert!(run.gpu_rows >= n / 2 && run.gpu_proven > 0, "{run:?}");
    }
}
