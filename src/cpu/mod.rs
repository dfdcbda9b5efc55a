//! The exact CPU backend: fp32 distance blocks from a blocked GEMM (`gemm`), a
//! bounded candidate list per query, rayon across query blocks. Its candidates go through the
//! same float64 re-ranking and certificate as the GPU's, so its answers are exact too.
//!
//! A graph's rows are both queries and corpus, and the distance of (i, j) is that of (j, i):
//! such a sweep computes each pair of row blocks once and offers every key to both rows'
//! lists (Dashti's symmetric blocks), about half the arithmetic of a plain sweep.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use wide::f32x16;

use rayon::prelude::*;

use crate::data::MatrixRef;
use crate::error::interrupted;
use crate::metric::Metric;
use crate::prepare::prepare_row;
use crate::refine::{Candidates, NONE};

/// Query rows per task, at most: large blocks amortise packing each corpus block in the GEMM
/// (measured on 2 cores, n=50000 d=128: 64 rows 6.2 s, 512 rows 4.4 s, 1024 rows 4.2 s).
const QUERY_BLOCK: usize = 1024;
/// Corpus rows per GEMM call.
const CORPUS_BLOCK: usize = 2048;
/// Rows per block of a symmetric sweep: the query block's size, for the same amortised
/// packing; a pair of blocks is one task.
const SYMMETRIC_BLOCK: usize = 1024;
/// A symmetric sweep holds every row's list at once (up to 2 kc pairs each) where a plain
/// sweep holds one block's: graphs whose lists would take more than this sweep plainly.
const SYMMETRIC_LISTS_MAX_BYTES: usize = 4 << 30;
/// Longer lists sweep plainly: their pushes, not the GEMM, take most of the time, and the
/// symmetric sweep's tasks then wait for each other's locks (n=20000, 2 cores: kc=125 0.37
/// against 0.47 s, kc=375 even at d=128 and slower at d=32, kc=1250 0.93 against 0.79 s).
const SYMMETRIC_MAX_KC: usize = 256;

pub(crate) struct CpuEngine {
    /// Rows' candidates are cut by a full sort rather than a selection.
    sorts: bool,
    /// `Options::interrupt`.
    pub(crate) interrupt: Option<Arc<AtomicBool>>,
}

impl CpuEngine {
    /// `sorts`: each row's candidates are cut to its best by sorting them all (the batch
    /// index sort's counterpart on the CPU) rather than by a selection.
    pub fn new(sorts: bool) -> Self {
        CpuEngine { sorts, interrupt: None }
    }

    /// Blocks of work are skipped once `flag` is set (`Options::interrupt`); the caller then
    /// discards the partial lists.
    pub fn interruptible(mut self, flag: &Option<Arc<AtomicBool>>) -> Self {
        self.interrupt = flag.clone();
        self
    }

    pub fn description(&self) -> String {
        let select = if self.sorts { ", sort select" } else { "" };
        format!("cpu: {} threads{select}", rayon::current_num_threads())
    }

    /// `symmetric`: whether graphs are swept in symmetric blocks (`None`: for lists of up to
    /// [`SYMMETRIC_MAX_KC`] that fit [`SYMMETRIC_LISTS_MAX_BYTES`]).
    pub fn open<'a>(
        &self,
        corpus: MatrixRef<'a>,
        shift: &[f32],
        metric: Metric,
        symmetric: Option<bool>,
    ) -> CorpusSession<'a> {
        let (prepared, norms) = prepare_all(corpus, shift, metric);
        let interrupt = self.interrupt.clone();
        CorpusSession {
            corpus,
            shift: shift.to_vec(),
            metric,
            prepared,
            norms,
            symmetric,
            sorts: self.sorts,
            interrupt,
        }
    }
}

/// The corpus prepared once for every round of candidates.
pub(crate) struct CorpusSession<'a> {
    corpus: MatrixRef<'a>,
    shift: Vec<f32>,
    metric: Metric,
    prepared: Vec<f32>,
    norms: Vec<f32>,
    symmetric: Option<bool>,
    /// Rows' candidates are cut by sorting ([`CpuEngine::new`]).
    sorts: bool,
    /// [`CpuEngine::interruptible`].
    interrupt: Option<Arc<AtomicBool>>,
}

fn prepare_all(m: MatrixRef<'_>, shift: &[f32], metric: Metric) -> (Vec<f32>, Vec<f32>) {
    let d = m.cols();
    let mut prepared = vec![0.0f32; m.rows() * d];
    prepared.par_chunks_mut(d).enumerate().for_each(|(i, out)| prepare_row(m.row(i), shift, metric, out));
    let norms =
        prepared.par_chunks(d).map(|r| r.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() as f32).collect();
    (prepared, norms)
}

/// The kc smallest keys seen so far, kept in a buffer of up to 2 kc that is cut back to kc
/// when full, so each push is amortised O(1).
struct BestKeys {
    items: Vec<(f32, u32)>,
    kc: usize,
    threshold: f32,
    /// Cut by a stable sort of every key kept rather than a selection.
    sorts: bool,
}

impl BestKeys {
    fn new(kc: usize, sorts: bool) -> Self {
        BestKeys { items: Vec::with_capacity(2 * kc), kc, threshold: f32::INFINITY, sorts }
    }

    #[inline]
    fn push(&mut self, key: f32, id: u32) {
        if key < self.threshold || self.items.len() < self.kc {
            self.items.push((key, id));
            if self.items.len() == 2 * self.kc {
                self.cut();
            }
        }
    }

    /// A key `k` with `k >= limit()` would not be kept: NaN (which nothing passes that test
    /// against) until the list holds kc keys, when every key is kept.
    #[inline]
    fn limit(&self) -> f32 {
        if self.items.len() < self.kc {
            f32::NAN
        } else {
            self.threshold
        }
    }

    fn cut(&mut self) {
        if self.items.len() > self.kc {
            if self.sorts {
                self.items.sort_by(|a, b| a.0.total_cmp(&b.0));
            } else {
                self.items.select_nth_unstable_by(self.kc - 1, |a, b| a.0.total_cmp(&b.0));
            }
            self.items.truncate(self.kc);
        }
        if self.items.len() == self.kc {
            self.threshold = self.items.iter().map(|e| e.0).fold(f32::NEG_INFINITY, f32::max);
        }
    }

    /// Cuts the list to its kc smallest keys and writes them to `keys` and `ids` (kc slots;
    /// slots past the list keep their padding).
    fn write(mut self, keys: &mut [f32], ids: &mut [u32]) {
        self.cut();
        for (slot, (key, id)) in self.items.into_iter().enumerate() {
            keys[slot] = key;
            ids[slot] = id;
        }
    }
}

/// Lists of the column rows of a symmetric block, and each one's [`BestKeys::limit`].
struct ColumnLists<'b> {
    lists: &'b mut [BestKeys],
    limits: &'b mut [f32],
}

/// Keys tested at a time by [`offer_row`].
const LANES: usize = 16;

/// One row of a distance block as ranking keys: key j is `scale * dots[j] + base`, plus
/// `norms[j]` for the euclidean family (`key_form`).
struct KeyRow<'r> {
    dots: &'r [f32],
    scale: f32,
    base: f32,
    norms: Option<&'r [f32]>,
}

impl KeyRow<'_> {
    #[inline(always)]
    fn key(&self, j: usize) -> f32 {
        self.scale * self.dots[j] + self.norms.map_or(self.base, |n| self.base + n[j])
    }

    /// Keys `start..start + LANES`, computed as `key` does, lane by lane.
    #[inline(always)]
    fn lanes(&self, start: usize) -> f32x16 {
        let dots = f32x16::from(lanes_of(self.dots, start));
        let base = f32x16::splat(self.base);
        let scale = f32x16::splat(self.scale);
        match self.norms {
            Some(norms) => scale * dots + (base + f32x16::from(lanes_of(norms, start))),
            None => scale * dots + base,
        }
    }
}

/// `values[start..start + LANES]` as an array.
#[inline(always)]
fn lanes_of(values: &[f32], start: usize) -> [f32; LANES] {
    values[start..start + LANES].try_into().expect("LANES values")
}

/// Which keys a list may keep whose limit is `limits`, as bits: `!(key >= limit)`, so that a
/// NaN limit (a list not yet full) and NaN keys pass.
#[inline(always)]
fn lanes_below(keys: f32x16, limits: f32x16) -> u32 {
    !keys.simd_ge(limits).to_bitmask() & ((1 << LANES) - 1)
}

/// Offers the keys of one row `qi` of a distance block, for columns `c0..c0 + cols`, to the
/// row's list, and with `columns` each key also to its column row's list (the transposed
/// pair of a symmetric block). Most keys are above the lists' limits once they are full: keys
/// are tested `LANES` at a time, without a branch per key, and only the keys that pass are
/// offered. Limits only fall as lists fill, so a key that fails its test would not be kept
/// later in the group either; `BestKeys::push` tests again those that pass.
#[inline]
fn offer_row(
    row: &mut BestKeys,
    qi: usize,
    mut columns: Option<&mut ColumnLists<'_>>,
    keys: &KeyRow<'_>,
    c0: usize,
    cols: usize,
    exclude: &[u32],
) {
    let offer_to_row = |row: &mut BestKeys, j: usize, key: f32| {
        let id = (c0 + j) as u32;
        if id != exclude[qi] {
            row.push(key, id);
        }
    };
    let offer_to_column = |c: &mut ColumnLists<'_>, j: usize, key: f32| {
        if qi as u32 != exclude[c0 + j] {
            c.lists[j].push(key, qi as u32);
            c.limits[j] = c.lists[j].limit();
        }
    };
    let whole = cols - cols % LANES;
    for start in (0..whole).step_by(LANES) {
        let lanes = keys.lanes(start);
        let mut to_row = lanes_below(lanes, f32x16::splat(row.limit()));
        let mut to_columns = match columns.as_deref() {
            Some(c) => lanes_below(lanes, f32x16::from(lanes_of(c.limits, start))),
            None => 0,
        };
        if to_row | to_columns == 0 {
            continue;
        }
        let lanes = lanes.to_array();
        while to_row != 0 {
            let t = to_row.trailing_zeros() as usize;
            to_row &= to_row - 1;
            offer_to_row(row, start + t, lanes[t]);
        }
        if let Some(c) = columns.as_deref_mut() {
            while to_columns != 0 {
                let t = to_columns.trailing_zeros() as usize;
                to_columns &= to_columns - 1;
                offer_to_column(c, start + t, lanes[t]);
            }
        }
    }
    for j in whole..cols {
        let key = keys.key(j);
        offer_to_row(row, j, key);
        if let Some(c) = columns.as_deref_mut() {
            offer_to_column(c, j, key);
        }
    }
}

/// How a metric's dot products become ascending ranking keys: `scale * dot + base`, where
/// base is the two rows' norms summed for the euclidean family (`None` here), else
/// `Some(constant)` (1 for cosine and correlation, 0 for inner product).
fn key_form(metric: Metric) -> (f32, Option<f32>) {
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => (-2.0, None),
        Metric::Cosine | Metric::Correlation => (-1.0, Some(1.0)),
        Metric::InnerProduct => (-1.0, Some(0.0)),
    }
}

/// `dots` (rows x cols, row-major) = A B^T for `a` (rows x d) and `b` (cols x d), row-major.
fn dot_block(dots: &mut [f32], a: &[f32], b: &[f32], rows: usize, cols: usize, d: usize) {
    assert!(dots.len() >= rows * cols && a.len() >= rows * d && b.len() >= cols * d);
    // SAFETY: the assertion above keeps every access within the slices for the strides given.
    unsafe {
        gemm::gemm(
            rows,
            cols,
            d,
            dots.as_mut_ptr(),
            1,
            cols as isize,
            false,
            a.as_ptr(),
            1,
            d as isize,
            b.as_ptr(),
            d as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// `rows` cut into blocks of [`SYMMETRIC_BLOCK`]: (first row, rows) each.
fn spans(rows: std::ops::Range<usize>) -> Vec<(usize, usize)> {
    rows.clone().step_by(SYMMETRIC_BLOCK).map(|r0| (r0, SYMMETRIC_BLOCK.min(rows.end - r0))).collect()
}

/// Candidate lists of `kc` slots a row, from the engine.
fn candidates_of(kc: usize, keys: Vec<f32>, ids: Vec<u32>, symmetric: bool) -> Candidates {
    Candidates { symmetric, ..Candidates::from_lists(kc, keys, ids, None) }
}

impl CorpusSession<'_> {
    /// The `kc` smallest keys of each query row. `all_rows`: the queries are the corpus rows
    /// themselves, in order (a graph's first round), which a symmetric sweep can use.
    pub fn candidates(
        &mut self,
        queries: MatrixRef<'_>,
        all_rows: bool,
        exclude: &[u32],
        kc: usize,
        report: &(dyn Fn(usize) + Sync),
    ) -> Candidates {
        let n = self.corpus.rows();
        // A task holds two blocks' lists while it offers keys: with fewer than two blocks a
        // thread, threads would wait for each other's blocks (notes/exactness.md).
        let blocks_per_thread = n.div_ceil(SYMMETRIC_BLOCK) / rayon::current_num_threads();
        let worth_it =
            kc <= SYMMETRIC_MAX_KC && n.saturating_mul(16 * kc) <= SYMMETRIC_LISTS_MAX_BYTES && blocks_per_thread >= 2;
        // One block is its own transpose: nothing to share.
        if all_rows && n > SYMMETRIC_BLOCK && self.symmetric.unwrap_or(worth_it) {
            return self.symmetric_candidates(exclude, kc, report);
        }
        let d = self.corpus.cols();
        let nq = queries.rows();
        let (q_prepared, q_norms) = prepare_all(queries, &self.shift, self.metric);
        let mut keys = vec![f32::INFINITY; nq * kc];
        let mut ids = vec![NONE; nq * kc];
        let done = AtomicUsize::new(0);
        let (scale, constant) = key_form(self.metric);
        let (prepared, norms) = (&self.prepared, &self.norms);

        // Enough blocks to keep every thread busy, each as large as that allows.
        let block = (nq / (4 * rayon::current_num_threads())).clamp(16, QUERY_BLOCK);
        keys.par_chunks_mut(block * kc).zip(ids.par_chunks_mut(block * kc)).enumerate().for_each(
            |(b, (key_block, id_block))| {
                if interrupted(&self.interrupt) {
                    return;
                }
                let q0 = b * block;
                let rows = (nq - q0).min(block);
                let mut best: Vec<BestKeys> = (0..rows).map(|_| BestKeys::new(kc, self.sorts)).collect();
                let mut dots = vec![0.0f32; rows * CORPUS_BLOCK];
                for c0 in (0..n).step_by(CORPUS_BLOCK) {
                    let cols = (n - c0).min(CORPUS_BLOCK);
                    dot_block(&mut dots, &q_prepared[q0 * d..], &prepared[c0 * d..], rows, cols, d);
                    let norm_block = &norms[c0..c0 + cols];
                    for (r, top) in best.iter_mut().enumerate() {
                        let qi = q0 + r;
                        let keys = KeyRow {
                            dots: &dots[r * cols..(r + 1) * cols],
                            scale,
                            base: constant.unwrap_or(q_norms[qi]),
                            norms: constant.is_none().then_some(norm_block),
                        };
                        offer_row(top, qi, None, &keys, c0, cols, exclude);
                    }
                }
                for (r, top) in best.into_iter().enumerate() {
                    top.write(&mut key_block[r * kc..(r + 1) * kc], &mut id_block[r * kc..(r + 1) * kc]);
                }
                report(done.fetch_add(rows, Ordering::Relaxed) + rows);
            },
        );
        candidates_of(kc, keys, ids, false)
    }

    /// A graph's candidates from each pair of row blocks computed once: block (a, b), a < b,
    /// offers row i of a the key of (i, j) and row j of b the same key as that of (j, i); the
    /// norms commute, so it is bitwise the key a plain sweep computes for either row.
    fn symmetric_candidates(&self, exclude: &[u32], kc: usize, report: &(dyn Fn(usize) + Sync)) -> Candidates {
        let spans = spans(0..self.corpus.rows());
        let pairs: Vec<(usize, usize)> = (0..spans.len()).flat_map(|a| (a..spans.len()).map(move |b| (a, b))).collect();
        self.block_pairs(&spans, &pairs, exclude, kc, report)
    }

    /// The two sides of a block of the partitioned graph, both from one distance block: the
    /// corpus holds the rows of I (`..split`) then those of J, and each row of I lists rows
    /// of J while each row of J lists rows of I.
    pub fn two_sided_candidates(&self, split: usize, kc: usize) -> Candidates {
        let spans: Vec<(usize, usize)> = spans(0..split).into_iter().chain(spans(split..self.corpus.rows())).collect();
        let first_of_j = spans.iter().position(|&(r0, _)| r0 >= split).unwrap_or(spans.len());
        let pairs: Vec<(usize, usize)> =
            (0..first_of_j).flat_map(|a| (first_of_j..spans.len()).map(move |b| (a, b))).collect();
        let exclude = vec![NONE; self.corpus.rows()];
        self.block_pairs(&spans, &pairs, &exclude, kc, &|_| {})
    }

    /// Candidates of every row from the distance blocks of `pairs` of row `spans` (first row,
    /// rows), each computed once and offered to the rows of both its blocks. A pair's task
    /// locks both blocks' lists (lower block first) while it offers its keys.
    fn block_pairs(
        &self,
        spans: &[(usize, usize)],
        pairs: &[(usize, usize)],
        exclude: &[u32],
        kc: usize,
        report: &(dyn Fn(usize) + Sync),
    ) -> Candidates {
        let d = self.corpus.cols();
        let n = self.corpus.rows();
        let (prepared, norms) = (&self.prepared, &self.norms);
        let (scale, constant) = key_form(self.metric);
        struct Block {
            lists: Vec<BestKeys>,
            limits: Vec<f32>,
        }
        let lists: Vec<Mutex<Block>> = spans
            .iter()
            .map(|&(_, rows)| {
                Mutex::new(Block {
                    lists: (0..rows).map(|_| BestKeys::new(kc, self.sorts)).collect(),
                    limits: vec![f32::NAN; rows],
                })
            })
            .collect();
        let done = AtomicUsize::new(0);
        let lock = |b: usize| lists[b].lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        pairs.par_iter().for_each_init(
            || vec![0.0f32; SYMMETRIC_BLOCK * SYMMETRIC_BLOCK],
            |dots, &(a, b)| {
                if interrupted(&self.interrupt) {
                    return;
                }
                let ((r0, rows), (c0, cols)) = (spans[a], spans[b]);
                dot_block(dots, &prepared[r0 * d..], &prepared[c0 * d..], rows, cols, d);
                let key_row = |r: usize| KeyRow {
                    dots: &dots[r * cols..(r + 1) * cols],
                    scale,
                    base: constant.unwrap_or(norms[r0 + r]),
                    norms: constant.is_none().then_some(&norms[c0..c0 + cols]),
                };
                let mut row_block = lock(a);
                let mut column_block = (a != b).then(|| lock(b));
                let mut columns =
                    column_block.as_deref_mut().map(|Block { lists, limits }| ColumnLists { lists, limits });
                for (r, top) in row_block.lists.iter_mut().enumerate() {
                    offer_row(top, r0 + r, columns.as_mut(), &key_row(r), c0, cols, exclude);
                }
                drop(column_block);
                drop(row_block);
                // Rows are finished only when every pair is: the sweep reports up to 90%.
                let pairs_done = done.fetch_add(1, Ordering::Relaxed) + 1;
                report(pairs_done * n / pairs.len() * 9 / 10);
            },
        );
        let mut keys = vec![f32::INFINITY; n * kc];
        let mut ids = vec![NONE; n * kc];
        let mut key_blocks = Vec::new();
        let mut id_blocks = Vec::new();
        let (mut key_rest, mut id_rest) = (&mut keys[..], &mut ids[..]);
        for &(_, rows) in spans {
            let (k, kr) = key_rest.split_at_mut(rows * kc);
            let (i, ir) = id_rest.split_at_mut(rows * kc);
            key_blocks.push(k);
            id_blocks.push(i);
            (key_rest, id_rest) = (kr, ir);
        }
        key_blocks.into_par_iter().zip(id_blocks).zip(lists).for_each(|((key_block, id_block), block)| {
            let block = block.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
            for (r, top) in block.lists.into_iter().enumerate() {
                top.write(&mut key_block[r * kc..(r + 1) * kc], &mut id_block[r * kc..(r + 1) * kc]);
            }
        });
        report(n);
        candidates_of(kc, keys, ids, true)
    }
}
