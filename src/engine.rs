//! The backends behind one interface: what a search round and a block of the partitioned
//! graph ask of a CPU or a GPU.

use crate::cpu::CpuEngine;
use crate::data::MatrixRef;
use crate::error::{check_interrupt, Error, Result};
use crate::gpu::GpuEngine;
use crate::metric::Metric;
use crate::plan::ALIGN_ROWS;
use crate::refine::{Candidates, NONE};

/// One backend: the host's cores, or one GPU device.
pub(crate) enum Engine {
    Cpu(CpuEngine),
    Gpu(Box<GpuEngine>),
}

impl Engine {
    /// What runs the work, e.g. `gpu: NVIDIA H200 (Vulkan, subgroup select, size 32)`.
    pub fn description(&self) -> String {
        match self {
            Engine::Cpu(c) => c.description(),
            Engine::Gpu(g) => g.description(),
        }
    }

    /// Forgets what earlier calls learned of their data (whether sparse distance tiles paid
    /// on it): a new graph or search starts.
    pub fn start_call(&self) {
        if let Engine::Gpu(g) = self {
            g.forget_data();
        }
    }

    /// Whether a whole graph of `rows x cols` data is ranked on this engine's device, rows
    /// reaching the host as answers tile by tile (`Strategy::SingleOnDisk`).
    pub fn ranks_graph_on_device(&self, rows: usize, cols: usize) -> bool {
        match self {
            Engine::Cpu(_) => false,
            Engine::Gpu(g) => g.ranks_graph_on_device(rows, cols),
        }
    }

    /// The most rows of a graph's block, fewer than `rows`, that this engine ranks on its
    /// device where it cannot rank all `rows x cols` (`None`: it can, or it ranks none, or
    /// it is the CPU).
    pub fn device_block_rows(&self, rows: usize, cols: usize) -> Option<usize> {
        let ranks = |r: usize| self.ranks_graph_on_device(r, cols);
        if rows == 0 || ranks(rows) || !ranks(1) {
            return None;
        }
        // Ranking fits fewer rows whenever it fits more: the largest that fits, by bisection.
        let (mut fits, mut too_many) = (1, rows);
        while too_many - fits > 1 {
            let mid = fits + (too_many - fits) / 2;
            if ranks(mid) {
                fits = mid;
            } else {
                too_many = mid;
            }
        }
        Some(fits)
    }

    /// The most rows of a block, in whole tiles and at most `rows`, for which this engine
    /// computes a pair of such blocks two-sided on its device with `kc` candidates a row
    /// (`None`: the CPU, which does at any size, or a device on which no such pair fits, or
    /// the largest that fits does not pay).
    pub fn two_sided_block_rows(&self, rows: usize, cols: usize, kc: usize) -> Option<usize> {
        let Engine::Gpu(g) = self else { return None };
        if rows == 0 || cols == 0 {
            return None;
        }
        let pair = |tiles: usize| (2 * tiles * ALIGN_ROWS, tiles * ALIGN_ROWS);
        // Small pairs may not pay where larger ones do: the bisection asks only what fits.
        let fits = |tiles: usize| {
            let (rows, split) = pair(tiles);
            g.two_sided_fit(rows, split, cols, kc).is_some()
        };
        let (mut fits_tiles, mut too_many) = (kc.div_ceil(ALIGN_ROWS).max(1), rows.div_ceil(ALIGN_ROWS).max(1) + 1);
        if !fits(fits_tiles) {
            return None;
        }
        // More rows fit no better: the largest that fits, by bisection.
        while too_many - fits_tiles > 1 {
            let mid = fits_tiles + (too_many - fits_tiles) / 2;
            if fits(mid) {
                fits_tiles = mid;
            } else {
                too_many = mid;
            }
        }
        let (pair_rows, split) = pair(fits_tiles);
        g.two_sided_tiles(pair_rows, split, cols, kc)?;
        Some((fits_tiles * ALIGN_ROWS).min(rows))
    }

    /// Whether this engine's sweep of a whole graph of `rows x cols` data with `kc`
    /// candidates a row computes every key twice, once for each of its rows (a GPU on which
    /// a symmetric sweep of the data does not fit; the CPU sweeps symmetric blocks at any
    /// size).
    pub fn graph_sweep_computes_keys_twice(&self, rows: usize, cols: usize, kc: usize) -> bool {
        match self {
            Engine::Cpu(_) => false,
            Engine::Gpu(g) => g.graph_sweep_computes_keys_twice(rows, cols, kc),
        }
    }

    /// The `kc` best fp32 candidates of each row of `queries` among the rows of `corpus`,
    /// prepared with the whole data's `shift`, so that keys of different corpora compare.
    /// `queries_are_corpus`: the queries are the corpus rows themselves, in order, which a
    /// backend may sweep in symmetric blocks. Ids are rows of `corpus`.
    pub fn candidates(&self, job: CandidateJob<'_>, report: &(dyn Fn(usize) + Sync)) -> Result<Candidates> {
        let CandidateJob { corpus, queries, queries_are_corpus, exclude, kc, shift, metric, symmetric } = job;
        match self {
            Engine::Cpu(c) => {
                check_interrupt(&c.interrupt)?;
                let mut session = c.open(corpus, shift, metric, symmetric);
                let cands = session.candidates(queries, queries_are_corpus, exclude, kc, report);
                // Blocks skipped after an interrupt leave the lists partial.
                check_interrupt(&c.interrupt)?;
                Ok(cands)
            }
            Engine::Gpu(g) => retry_smaller(g, || {
                let mut session = g.open(corpus, shift, metric)?;
                session.candidates(queries, queries_are_corpus, exclude, kc, None, report)
            }),
        }
    }
}

impl Engine {
    /// The two sides of an off-diagonal block of a graph: the `kc` best candidates of each row
    /// of `i` among the rows of `j` (ids rows of `j`), and of each row of `j` among those of
    /// `i` (ids rows of `i`), and how. Each key is computed once for both its rows in a
    /// two-sided block: both backends do so where both blocks have at least `kc` rows, and
    /// the GPU where the block fits its sweep. Given `bounds`, the GPU instead searches the
    /// rows of `i` among those of `j`, listing for each row of `i` the keys under its bound
    /// and keeping those under `j`'s bounds for `j`'s rows: where every row has a bound and
    /// that pays (`GpuEngine::one_way_pairs_pay`), and where the block does not fit a
    /// two-sided sweep. Otherwise the two sides are two searches. A side listed from the keys
    /// under its bounds may list fewer than `kc`.
    pub fn pair_candidates(
        &self,
        i: MatrixRef<'_>,
        j: MatrixRef<'_>,
        kc: usize,
        shift: &[f32],
        metric: Metric,
        bounds: Option<PairBounds<'_>>,
    ) -> Result<PairCandidates> {
        // Decided before the blocks are copied and a GPU session uploads them.
        let one_way_first = match (self, &bounds) {
            (Engine::Gpu(g), Some(b)) => {
                b.i.iter().chain(b.j).all(|b| b.is_finite()) && g.one_way_pairs_pay(j.rows(), kc)
            }
            _ => false,
        };
        let two_sided = !one_way_first
            && kc <= i.rows().min(j.rows())
            && match self {
                Engine::Cpu(_) => true,
                Engine::Gpu(g) => g.two_sided_tiles(i.rows() + j.rows(), i.rows(), i.cols(), kc).is_some(),
            };
        if two_sided {
            let mut both = Vec::with_capacity(i.as_slice().len() + j.as_slice().len());
            both.extend_from_slice(i.as_slice());
            both.extend_from_slice(j.as_slice());
            let both = MatrixRef::new(&both, i.rows() + j.rows(), i.cols())?;
            crate::trace::mark(|| format!("pair: {} + {} rows copied", i.rows(), j.rows()));
            let once = match self {
                Engine::Cpu(c) => {
                    let cands = c.open(both, shift, metric, None).two_sided_candidates(i.rows(), kc);
                    check_interrupt(&c.interrupt)?;
                    Some(cands)
                }
                Engine::Gpu(g) => retry_smaller(g, || {
                    let mut session = g.open(both, shift, metric)?;
                    crate::trace::mark(|| "pair: opened".into());
                    session.two_sided_candidates(i.rows(), kc)
                })?,
            };
            crate::trace::mark(|| "pair: swept".into());
            if let Some(cands) = once {
                let (of_i, of_j) = split_sides(cands, i.rows());
                crate::trace::mark(|| "pair: split".into());
                return Ok(PairCandidates { of_i, of_j, way: PairWay::TwoSided });
            }
        }
        if let (Engine::Gpu(g), Some(bounds)) = (self, bounds) {
            let cap = crate::plan::filtered_list_cap(kc);
            let found = retry_smaller(g, || {
                // The rows of j list theirs without float64 keys, which the merged lists
                // of every row they meet then lack: those of i are not computed either.
                let mut session = g.open_without_exact(j, shift, metric)?;
                session.filtered_candidates(i, Some(bounds.i), bounds.j, cap, kc.min(j.rows()), kc.min(i.rows()))
            })?;
            crate::trace::mark(|| "pair: searched one way".into());
            if let Some((mut of_i, lists)) = found {
                // Rows of i whose keys under their bounds overflowed a shortlist.
                let overflowed: Vec<usize> = (0..i.rows()).filter(|&r| of_i.incomplete.get(r) == Some(&true)).collect();
                let kc_i = of_i.kc;
                self.search_again(&overflowed, i, j, kc_i, &mut of_i.keys, &mut of_i.ids, shift, metric)?;
                of_i.incomplete.iter_mut().for_each(|incomplete| *incomplete = false);
                let of_j = self.column_candidates(i, j, lists, shift, metric)?;
                crate::trace::mark(|| {
                    format!("pair: columns listed, {} rows of j searched again", of_j.failed.len() - of_j.shortlisted)
                });
                return Ok(PairCandidates { of_i, of_j, way: PairWay::OneWay });
            }
        }
        let side = |queries, corpus| self.search_among(queries, corpus, kc, shift, metric);
        Ok(PairCandidates { of_i: side(i, j)?, of_j: side(j, i)?, way: PairWay::TwoSearches })
    }

    /// The `kc` best candidates (at most every row) of each row of `queries` among the rows
    /// of `corpus`, another block: nothing excluded.
    fn search_among(
        &self,
        queries: MatrixRef<'_>,
        corpus: MatrixRef<'_>,
        kc: usize,
        shift: &[f32],
        metric: Metric,
    ) -> Result<Candidates> {
        let exclude = vec![NONE; queries.rows()];
        let job = CandidateJob {
            corpus,
            queries,
            queries_are_corpus: false,
            exclude: &exclude,
            kc: kc.min(corpus.rows()),
            shift,
            metric,
            symmetric: None,
        };
        self.candidates(job, &|_| {})
    }
}

impl Engine {
    /// Lists `rows` of `block` again from a search among the rows of `among`: their `kc`
    /// best candidates (at most the rows of `among`) into `keys` and `ids`, `kc` a row.
    #[allow(clippy::too_many_arguments)]
    fn search_again(
        &self,
        rows: &[usize],
        block: MatrixRef<'_>,
        among: MatrixRef<'_>,
        kc: usize,
        keys: &mut [f32],
        ids: &mut [u32],
        shift: &[f32],
        metric: Metric,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut vectors = Vec::with_capacity(rows.len() * block.cols());
        rows.iter().for_each(|&r| vectors.extend_from_slice(block.row(r)));
        let queries = MatrixRef::new(&vectors, rows.len(), block.cols())?;
        debug_assert!(kc <= among.rows(), "the search's lists are as long as these");
        let found = self.search_among(queries, among, kc, shift, metric)?;
        for (slot, &r) in rows.iter().enumerate() {
            keys[r * kc..(r + 1) * kc].copy_from_slice(&found.keys[slot * kc..(slot + 1) * kc]);
            ids[r * kc..(r + 1) * kc].copy_from_slice(&found.ids[slot * kc..(slot + 1) * kc]);
        }
        Ok(())
    }

    /// The candidates of the rows of `j` among those of `i` from a filtered search's column
    /// lists: each row's best pairs of those under its bound; a row whose list overflowed is
    /// searched among the rows of `i` instead.
    fn column_candidates(
        &self,
        i: MatrixRef<'_>,
        j: MatrixRef<'_>,
        lists: crate::gpu::ColumnLists,
        shift: &[f32],
        metric: Metric,
    ) -> Result<Candidates> {
        let (rows, kc) = (j.rows(), lists.kc);
        let overflowed: Vec<usize> = (0..rows).filter(|&r| lists.overflowed(r)).collect();
        let (mut keys, mut ids) = (lists.keys, lists.ids);
        self.search_again(&overflowed, j, i, kc, &mut keys, &mut ids, shift, metric)?;
        Ok(Candidates { shortlisted: rows - overflowed.len(), ..Candidates::from_lists(kc, keys, ids, None) })
    }
}

/// Bounds of the rows of a pair of blocks (`Engine::pair_candidates`): for each row, a key at
/// or above the largest its final list can hold.
#[derive(Clone, Copy)]
pub(crate) struct PairBounds<'a> {
    pub i: &'a [f32],
    pub j: &'a [f32],
}

/// What [`Engine::pair_candidates`] found.
pub(crate) struct PairCandidates {
    /// The rows of `i` among those of `j`.
    pub of_i: Candidates,
    /// The rows of `j` among those of `i`.
    pub of_j: Candidates,
    pub way: PairWay,
}

/// How the two sides of an off-diagonal block were computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PairWay {
    /// One symmetric sweep over the rows of both blocks: each key once, for both its rows.
    TwoSided,
    /// The rows of `i` searched among those of `j`, the rows of `j` keeping the keys under
    /// their bounds: each key once.
    OneWay,
    /// Two searches: each key twice.
    TwoSearches,
}

/// Candidates of the rows `[i; j]` of a two-sided block, ids into `[i; j]`, as those of `i`
/// (ids rows of `j`) and those of `j` (ids rows of `i`).
fn split_sides(mut cands: Candidates, split: usize) -> (Candidates, Candidates) {
    let kc = cands.kc;
    let j_keys = cands.keys.split_off(split * kc);
    let j_ids = cands.ids.split_off(split * kc);
    for id in cands.ids.iter_mut().filter(|id| **id != NONE) {
        *id -= split as u32;
    }
    let j_exact = cands.exact.as_mut().map(|exact| exact.split_off(split * kc));
    let j_failed = cands.failed.split_off(split);
    let j_incomplete = if cands.incomplete.is_empty() { Vec::new() } else { cands.incomplete.split_off(split) };
    let j_side = Candidates {
        keys: j_keys,
        ids: j_ids,
        exact: j_exact,
        failed: j_failed,
        incomplete: j_incomplete,
        ranked: None,
        ..cands
    };
    (Candidates { ranked: None, ..cands }, j_side)
}

/// What [`Engine::candidates`] computes.
#[derive(Clone, Copy)]
pub(crate) struct CandidateJob<'a> {
    pub corpus: MatrixRef<'a>,
    pub queries: MatrixRef<'a>,
    pub queries_are_corpus: bool,
    /// Per query, a corpus row it may not list (itself) or `NONE`.
    pub exclude: &'a [u32],
    pub kc: usize,
    pub shift: &'a [f32],
    pub metric: Metric,
    /// `Options::symmetric_graphs`, for the CPU backend.
    pub symmetric: Option<bool>,
}

/// Runs `f`, and after each GPU out-of-memory error halves the memory budget and runs it
/// again, until it succeeds or the budget is too small to try.
pub(crate) fn retry_smaller<T>(gpu: &GpuEngine, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    loop {
        match f() {
            Err(Error::OutOfMemory(_)) if gpu.shrink_budget() => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::{Backend, Options};
    use rand::{Rng, SeedableRng};

    /// Each row's float64 squared distances to the rows of `other`, ascending, with ids.
    fn reference(row: &[f32], other: MatrixRef<'_>) -> Vec<(f64, u32)> {
        let mut keys: Vec<(f64, u32)> = (0..other.rows())
            .map(|j| {
                let key = row.iter().zip(other.row(j)).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum();
                (key, j as u32)
            })
            .collect();
        keys.sort_by(|a, b| a.0.total_cmp(&b.0));
        keys
    }

    /// Rows of each side whose list is the kc nearest rows of the other side (where the
    /// kc-th and the next distance differ: the fp32 keys may order near-ties either way).
    fn assert_sides_exact(engine: &Engine, i: MatrixRef<'_>, j: MatrixRef<'_>, kc: usize) -> bool {
        assert_sides_exact_within(engine, i, j, kc, None).0 == PairWay::TwoSided
    }

    /// [`assert_sides_exact`], the rows bounded by `bounds`; how the pair was computed, and
    /// how many rows of `j` and of `i` took their lists from the keys under their bounds.
    fn assert_sides_exact_within(
        engine: &Engine,
        i: MatrixRef<'_>,
        j: MatrixRef<'_>,
        kc: usize,
        bounds: Option<PairBounds<'_>>,
    ) -> (PairWay, usize, usize) {
        let shift = vec![0.0; i.cols()];
        let pair = engine.pair_candidates(i, j, kc, &shift, Metric::SqEuclidean, bounds).unwrap();
        let label = engine.description();
        for (rows, other, cands) in [(i, j, &pair.of_i), (j, i, &pair.of_j)] {
            // A side searched among fewer than kc rows lists them all.
            let kc = kc.min(other.rows());
            assert_eq!((cands.kc, cands.failed.len()), (kc, rows.rows()), "{label}");
            let mut checked = 0;
            for r in 0..rows.rows() {
                assert!(!cands.failed[r] && cands.incomplete.get(r) != Some(&true), "{label}: row {r} not finished");
                let want = reference(rows.row(r), other);
                if want.get(kc).is_some_and(|next| next.0 - want[kc - 1].0 < 1e-4 * next.0) {
                    continue;
                }
                let mut got: Vec<u32> = cands.ids[r * kc..(r + 1) * kc].to_vec();
                let mut best: Vec<u32> = want[..kc].iter().map(|&(_, id)| id).collect();
                got.sort_unstable();
                best.sort_unstable();
                assert_eq!(got, best, "{label}: row {r} of {} against {}", rows.rows(), other.rows());
                checked += 1;
            }
            assert!(checked * 10 >= rows.rows() * 9, "{label}: only {checked} rows checked");
        }
        (pair.way, pair.of_j.shortlisted, pair.of_i.shortlisted)
    }

    /// The largest two-sided pair is found by what fits, although the smallest pairs, mostly
    /// fixed costs, do not pay against two searches.
    #[test]
    fn two_sided_blocks_are_the_largest_that_fit_where_small_ones_do_not_pay() {
        let options = Options { backend: Backend::Gpu, ..Options::default() };
        let g = GpuEngine::new(&options.gpu_settings(), false)
            .unwrap_or_else(|e| panic!("GPU test without a usable GPU adapter: {e}"));
        let (rows, cols, kc) = (1 << 20, 128, 32);
        let pair = |tiles: usize| (2 * tiles * ALIGN_ROWS, tiles * ALIGN_ROWS);
        let fits = |tiles: usize| g.two_sided_fit(pair(tiles).0, pair(tiles).1, cols, kc).is_some();
        let (smallest, _) = pair(1);
        assert!(
            g.two_sided_tiles(smallest, smallest / 2, cols, kc).is_none(),
            "{}: a pair of one tile paid",
            g.description()
        );
        let most = (1..=rows / ALIGN_ROWS).rev().find(|&t| fits(t)).expect("some pair fits");
        assert!(fits(1) && most > 1);
        let engine = Engine::Gpu(Box::new(g));
        assert_eq!(engine.two_sided_block_rows(rows, cols, kc), Some(most * ALIGN_ROWS), "{}", engine.description());
    }

    #[test]
    fn two_sided_blocks_give_each_side_its_nearest_rows() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let data: Vec<f32> = (0..(192 + 320) * 12).map(|_| rng.random_range(-1.0..1.0)).collect();
        let (i, j) = data.split_at(192 * 12);
        let (i, j) = (MatrixRef::new(i, 192, 12).unwrap(), MatrixRef::new(j, 320, 12).unwrap());
        let cpu = Engine::Cpu(CpuEngine::new(false));
        assert!(assert_sides_exact(&cpu, i, j, 24), "the CPU computed the block as two searches");
        // A block with a side shorter than kc is two searches.
        assert!(!assert_sides_exact(&cpu, i.slice_rows(0..20), j, 24));
        for no_subgroups in [false, true] {
            // Two-sided wherever it fits: blocks this small cost less as two searches.
            let options = Options {
                backend: Backend::Gpu,
                no_subgroups,
                max_query_tile: Some(64),
                symmetric_graphs: Some(true),
                ..Options::default()
            };
            let gpu = GpuEngine::new(&options.gpu_settings(), false)
                .unwrap_or_else(|e| panic!("GPU test without a usable GPU adapter: {e}"));
            let gpu = Engine::Gpu(Box::new(gpu));
            // Query tiles of 64 rows: I's rows take their bounds from J's first tile, and J's
            // later tiles offer their keys to I's rows' shortlists.
            assert!(assert_sides_exact(&gpu, i, j, 24), "{}: the block was two searches", gpu.description());
            assert!(assert_sides_exact(&gpu, j.slice_rows(0..256), i, 40), "{}", gpu.description());
            // A split not on a tile boundary is two searches.
            assert!(!assert_sides_exact(&gpu, i.slice_rows(0..100), j, 24), "{}", gpu.description());
        }
    }

    /// A pair computed one way: each side's rows take their lists from the keys under their
    /// bounds, or, where those overflow their shortlists or lists, from a search among the
    /// other side's rows.
    #[test]
    fn pairs_computed_one_way_give_each_side_its_nearest_rows() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let data: Vec<f32> = (0..(300 + 256) * 12).map(|_| rng.random_range(-1.0..1.0)).collect();
        let (i, j) = data.split_at(300 * 12);
        let (i, j) = (MatrixRef::new(i, 300, 12).unwrap(), MatrixRef::new(j, 256, 12).unwrap());
        let kc = 24;
        // Each row bounded just above its kc-th key among the other side's rows: its list
        // comes from the keys under it alone. Bounded by its 150th, more keys than a query
        // row's shortlist holds (2 kc + 64) fall under it; with no bound, every row of j
        // overflows its list, and the rows of i take a dense first tile for their bounds.
        let bound_at = |rows: MatrixRef<'_>, other, rank: usize| -> Vec<f32> {
            (0..rows.rows()).map(|r| (reference(rows.row(r), other)[rank].0 * 1.001) as f32).collect()
        };
        let (tight_i, loose_i, tight_j) = (bound_at(i, j, kc - 1), bound_at(i, j, 150), bound_at(j, i, kc - 1));
        let (none_i, none_j) = (vec![f32::INFINITY; i.rows()], vec![f32::INFINITY; j.rows()]);
        for no_subgroups in [false, true] {
            // Query tiles of 64 rows; blocks this small are not computed two-sided.
            let options =
                Options { backend: Backend::Gpu, no_subgroups, max_query_tile: Some(64), ..Options::default() };
            let gpu = GpuEngine::new(&options.gpu_settings(), false)
                .unwrap_or_else(|e| panic!("GPU test without a usable GPU adapter: {e}"));
            let gpu = Engine::Gpu(Box::new(gpu));
            let cases = [
                (&tight_i, &tight_j, (j.rows(), i.rows())),
                (&loose_i, &tight_j, (j.rows(), 0)),
                (&none_i, &none_j, (0, 0)),
            ];
            for (bounds_i, bounds_j, listed) in cases {
                let bounds = PairBounds { i: bounds_i, j: bounds_j };
                let (way, listed_j, listed_i) = assert_sides_exact_within(&gpu, i, j, kc, Some(bounds));
                assert_eq!((way, (listed_j, listed_i)), (PairWay::OneWay, listed), "{}", gpu.description());
            }
            // Given bounds for every row, the pair goes one way unless two-sided pairs are
            // forced; a pair two-sided is exact with bounds too.
            // (Not after the rows with no bound, which all overflowed: sparse tiles no longer
            // pay on this data until a new call starts.)
            let Engine::Gpu(g) = &gpu else { unreachable!() };
            assert!(!g.one_way_pairs_pay(j.rows(), kc));
            gpu.start_call();
            assert!(g.one_way_pairs_pay(j.rows(), kc) && !g.one_way_pairs_pay(1 << 30, kc));
            let forced = Options { symmetric_graphs: Some(true), ..options };
            let forced = GpuEngine::new(&forced.gpu_settings(), false).unwrap();
            assert!(!forced.one_way_pairs_pay(j.rows(), kc));
            let forced = Engine::Gpu(Box::new(forced));
            let bounds = PairBounds { i: &tight_i[..256], j: &tight_j };
            let i_tiles = i.slice_rows(0..256);
            assert_eq!(assert_sides_exact_within(&forced, i_tiles, j, kc, Some(bounds)).0, PairWay::TwoSided);
            // The CPU computes the pair two-sided whatever the bounds.
            let cpu = Engine::Cpu(CpuEngine::new(false));
            let bounds = PairBounds { i: &tight_i, j: &tight_j };
            assert_eq!(assert_sides_exact_within(&cpu, i, j, kc, Some(bounds)).0, PairWay::TwoSided);
        }
    }
}
