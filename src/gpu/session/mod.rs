//! A corpus on the GPU and the candidate search against it: query tiles, distance tiles,
//! selection, merges, exact keys and certificates, and the buffers they reuse.
//!
//! `corpus` holds the corpus's buffers and their preparation; `tile_buffers` the buffers of a
//! round of candidates; `sweep` and `bounded` the sweeps of a query tile; `finish` its exact
//! keys, ranking and certificates; `copy_out` its results copied to the host. This module
//! drives them: the candidates of every query, tile by tile, with readers beside the GPU.

mod bounded;
mod copy_out;
mod corpus;
mod finish;
mod sweep;
mod tile_buffers;

use std::collections::VecDeque;

use copy_out::{TileOut, TileRead};
pub(super) use corpus::CorpusBuffers;
use corpus::PreparedRows;
use tile_buffers::TileSizes;
pub(super) use tile_buffers::{ColumnFilter, TileBuffers, TileKey};

use super::engine::GpuEngine;
use super::kernels::GROUPED_ROWS;
use super::transfer::Mapping;
use crate::data::{zeroed_answers, MatrixRef};
use crate::error::{check_interrupt, Result};
use crate::metric::Metric;
use crate::plan::{self, CorpusPlan, TilePlan};
use crate::prepare;
use crate::refine::{BackendRanked, Candidates, Certify, NONE};

/// Query tiles a round may be cut into so that it runs in the buffers already allocated
/// (`TileBuffers::new`); below this it allocates its own.
const MIN_REUSED_QUERY_ROWS: usize = 256;

/// Query tiles whose answers are copied out at once.
const READERS: usize = 2;

/// Share of a symmetric graph's progress reports given to the sweep, before any row is final.
const SWEEP_SHARE: f64 = 0.9;

pub(crate) struct CorpusSession<'a> {
    gpu: &'a GpuEngine,
    corpus: MatrixRef<'a>,
    metric: Metric,
    plan: CorpusPlan,
    shift: wgpu::Buffer,
    resident: Vec<PreparedRows>,
    /// The original corpus rows of each chunk of `resident`, for exact re-ranking on the GPU;
    /// empty where the host re-ranks.
    raw_corpus: Vec<wgpu::Buffer>,
    /// Cosine keys re-ranked on the GPU: the float64 norms of the corpus rows and of the
    /// current round's query rows (the same buffer when those are the corpus rows).
    exact_norms: Option<(wgpu::Buffer, wgpu::Buffer)>,
}

/// Rows `q0..q0 + rows` of the queries; `from_corpus` when they are the resident corpus
/// itself (a graph).
#[derive(Clone, Copy)]
struct QueryTile {
    q0: usize,
    rows: usize,
    from_corpus: bool,
    /// Part of a symmetric sweep (`TilePlan::symmetric`).
    symmetric: bool,
    /// Part of a bounded sweep (`TilePlan::bounded`): per-row arrays hold every row, as in a
    /// symmetric sweep.
    bounded: bool,
    /// The corpus rows the tile meets, `start..end`: every row in a plain sweep; in a
    /// symmetric sweep those up to the tile's last row; in a two-sided block the other side.
    columns: (usize, usize),
    /// Column rows below this index also take the tile's keys into their shortlists (rows
    /// that already have a bound from their own query tile); 0 for none.
    appends_below: usize,
}

/// How a round's query tiles meet the corpus.
#[derive(Clone, Copy, PartialEq)]
enum Sides<'b> {
    /// Each query tile meets the corpus rows its sweep plans.
    Whole,
    /// A two-sided block of a graph: the corpus rows `[I; J]` cut at `split`, each row meeting
    /// only the other side's rows.
    Two { split: usize },
    /// A plain sweep whose corpus rows also keep the keys under their `bounds`
    /// ([`CorpusSession::filtered_candidates`]); the query rows start with `query_bounds`
    /// where given.
    Filtered { filter: ColumnFilter, bounds: &'b [f32], query_bounds: Option<&'b [f32]>, column_kc: usize },
}

/// What a filtered search found for its corpus rows: per row, how many keys fell under its
/// bound (its list held `cap`), and the `kc` best of them, keys and query rows, in no
/// particular order, padded with +inf and `NONE`. A row whose count passes `cap` lost keys:
/// its list here is empty.
pub(crate) struct ColumnLists {
    pub cap: usize,
    pub kc: usize,
    pub counts: Vec<u32>,
    pub keys: Vec<f32>,
    pub ids: Vec<u32>,
}

impl ColumnLists {
    /// Whether row `r`'s keys under its bound overflowed its list.
    pub fn overflowed(&self, r: usize) -> bool {
        self.counts[r] as usize > self.cap
    }
}

impl CorpusSession<'_> {
    /// The kc best fp32 candidates of every query, tile by tile. `queries_are_corpus`: the
    /// queries are the corpus rows themselves, in order (a graph's first round).
    pub fn candidates(
        &mut self,
        queries: MatrixRef<'_>,
        queries_are_corpus: bool,
        exclude: &[u32],
        kc: usize,
        certify: Option<&Certify<'_>>,
        report: &(dyn Fn(usize) + Sync),
    ) -> Result<Candidates> {
        let (cands, _) = self.candidates_of(queries, queries_are_corpus, exclude, kc, certify, report, Sides::Whole)?;
        Ok(cands)
    }

    /// The kc best fp32 candidates of each row of `queries` (none of them corpus rows) among
    /// the corpus rows, and for each corpus row the keys of query rows below its bound
    /// (`bounds`, one a corpus row), the `column_kc` best of each: a pair of blocks of a
    /// graph searched one way, each key computed once for both its rows. `query_bounds`, where given, bound the queries'
    /// lists in the same way: each lists only its candidates under its bound (rows whose
    /// keys under it overflow a shortlist come back incomplete). `None` where the corpus rows'
    /// lists of `cap` pairs do not fit the device beside the search.
    pub fn filtered_candidates(
        &mut self,
        queries: MatrixRef<'_>,
        query_bounds: Option<&[f32]>,
        bounds: &[f32],
        cap: usize,
        kc: usize,
        column_kc: usize,
    ) -> Result<Option<(Candidates, ColumnLists)>> {
        debug_assert_eq!(bounds.len(), self.corpus.rows());
        debug_assert!(query_bounds.is_none_or(|b| b.len() == queries.rows()));
        let filter = ColumnFilter { rows: self.corpus.rows(), cap };
        if self.gpu.filtered_budget(filter).is_none() {
            return Ok(None);
        }
        let exclude = vec![NONE; queries.rows()];
        let sides = Sides::Filtered { filter, bounds, query_bounds, column_kc };
        let (cands, lists) = self.candidates_of(queries, false, &exclude, kc, None, &|_| {}, sides)?;
        Ok(Some((cands, lists.expect("a filtered search reads its column lists back"))))
    }

    /// The kc best fp32 candidates of each corpus row among the rows on the other side of
    /// `split` (ids into the corpus), each distance computed once for both of its rows: the
    /// corpus rows `[I; J]` swept as a symmetric sweep's blocks below the diagonal that pair
    /// I with J. `None` where that sweep does not fit the device (every row's state and the
    /// whole corpus resident) or does not pay (`plan::two_sided_pays`), the split is not
    /// aligned to its tiles, or a side has fewer than kc rows.
    pub fn two_sided_candidates(&mut self, split: usize, kc: usize) -> Result<Option<Candidates>> {
        let n = self.corpus.rows();
        if self.gpu.two_sided_tiles(n, split, self.corpus.cols(), kc).is_none() {
            return Ok(None);
        }
        let exclude = vec![NONE; n];
        let (cands, _) = self.candidates_of(self.corpus, true, &exclude, kc, None, &|_| {}, Sides::Two { split })?;
        Ok(Some(cands))
    }

    /// The tiles of a round of `nq` queries: the sweep that `plan::choose_sweep` picks, or
    /// those of a two-sided block, or a filtered search's ([`Self::filtered_plan`]).
    /// `sparse_pays`: whether sparse distance tiles still pay on this engine's data.
    fn sweep_plan(
        &self,
        nq: usize,
        kc: usize,
        from_corpus: bool,
        ranks: bool,
        sides: Sides,
        sparse_pays: bool,
    ) -> Result<TilePlan> {
        let gpu = self.gpu;
        match sides {
            Sides::Filtered { filter, query_bounds, .. } => {
                self.filtered_plan(nq, kc, filter, query_bounds, sparse_pays, gpu.tile_caps)
            }
            Sides::Whole => {
                let (d, corpus_rows, caps, dev) = (self.corpus.cols(), self.corpus.rows(), gpu.tile_caps, gpu.budget());
                let ask = plan::TileAsk { nq, d, kc, corpus: self.plan, corpus_rows, caps, dev };
                // A bounded sweep's rows are finished tile by tile on the GPU, ranked there.
                gpu.choose_sweep(ask, from_corpus, ranks)
            }
            Sides::Two { split } => gpu
                .two_sided_tiles(nq, split, self.corpus.cols(), kc)
                .ok_or_else(|| crate::error::Error::Gpu("a two-sided block that does not fit was swept".into())),
        }
    }

    /// The tiles of a filtered search within `caps`, in the budget its column lists leave:
    /// its query rows start with their bounds where every row has one and sparse tiles pay.
    fn filtered_plan(
        &self,
        nq: usize,
        kc: usize,
        filter: ColumnFilter,
        query_bounds: Option<&[f32]>,
        sparse_pays: bool,
        caps: plan::TileCaps,
    ) -> Result<TilePlan> {
        let dev = self
            .gpu
            .filtered_budget(filter)
            .ok_or_else(|| crate::error::Error::Gpu("a filtered search whose lists do not fit was swept".into()))?;
        let (d, n) = (self.corpus.cols(), self.corpus.rows());
        let ask = plan::TileAsk { nq, d, kc, corpus: self.plan, corpus_rows: n, caps, dev };
        match query_bounds.is_some_and(|b| b.iter().all(|b| b.is_finite())) && sparse_pays {
            true => plan::plan_bounded_queries(ask),
            false => plan::plan_tiles(ask).map(|t| TilePlan { sparse: t.sparse && sparse_pays, ..t }),
        }
    }

    /// The candidates of [`Self::candidates`] (`Sides::Whole`) or of
    /// [`Self::two_sided_candidates`].
    #[allow(clippy::too_many_arguments)]
    fn candidates_of(
        &mut self,
        queries: MatrixRef<'_>,
        queries_are_corpus: bool,
        exclude: &[u32],
        kc: usize,
        certify: Option<&Certify<'_>>,
        report: &(dyn Fn(usize) + Sync),
        sides: Sides,
    ) -> Result<(Candidates, Option<ColumnLists>)> {
        let gpu = self.gpu;
        let nq = queries.rows();
        let d = queries.cols();
        // A graph's queries are the resident corpus rows: copied on the GPU, not uploaded and
        // prepared again; and where all rows' state fits, swept in symmetric blocks.
        let from_corpus = self.plan.resident && queries_are_corpus;
        let gpu_exact = !self.raw_corpus.is_empty();
        // Ranking on the GPU needs its exact keys.
        let certify = certify.filter(|_| gpu_exact && gpu.kernels.certify.is_some());
        // Sparse distance tiles, where the plan takes them, while they pay on this data.
        let sparse_pays = gpu.sparse_tiles_pay();
        let checked = |t: TilePlan| TilePlan { sparse: t.sparse && sparse_pays, ..t };
        let (filter, query_bounds) = match sides {
            Sides::Filtered { filter, query_bounds, .. } => (Some(filter), query_bounds),
            _ => (None, None),
        };
        let tiles = checked(self.sweep_plan(nq, kc, from_corpus, certify.is_some(), sides, sparse_pays)?);
        debug_assert!(!matches!(sides, Sides::Two { .. }) || tiles.symmetric, "a two-sided block is a symmetric sweep");
        // The one-invocation kernel of rows under GROUPED_ROWS sums its own norms.
        if gpu_exact && self.metric == Metric::Cosine && gpu.kernels.refine.is_some() && d >= GROUPED_ROWS {
            let corpus_norms = match self.exact_norms.take() {
                Some((corpus_norms, _)) => corpus_norms,
                None => gpu.upload("corpus norms (f64)", bytemuck::cast_slice(&prepare::row_norms(self.corpus)))?,
            };
            let query_norms = if queries_are_corpus {
                corpus_norms.clone()
            } else {
                gpu.upload("query norms (f64)", bytemuck::cast_slice(&prepare::row_norms(queries)))?
            };
            self.exact_norms = Some((corpus_norms, query_norms));
        }
        let started = std::time::Instant::now();
        let certify_k = certify.map(|c| c.k);
        let key_of = |tiles: TilePlan| {
            let column_tiles = if self.plan.resident {
                self.resident.iter().map(|c| c.rows.div_ceil(tiles.column_tile)).sum::<usize>()
            } else {
                self.plan.chunk_rows.div_ceil(tiles.column_tile)
            };
            let sorts_columns = gpu.sort_select && tiles.symmetric;
            TileKey {
                corpus: (self.corpus.rows(), d),
                tiles,
                kc,
                column_tiles,
                gpu_exact,
                certify_k,
                sorts_columns,
                filter,
            }
        };
        let plan_with = |caps: plan::TileCaps| match sides {
            Sides::Filtered { filter, query_bounds, .. } => {
                self.filtered_plan(nq, kc, filter, query_bounds, sparse_pays, caps)
            }
            _ => plan::plan_tiles(plan::TileAsk {
                nq,
                d,
                kc,
                corpus: self.plan,
                corpus_rows: self.corpus.rows(),
                caps,
                dev: gpu.budget(),
            })
            .map(checked),
        };
        let mut key = key_of(tiles);
        let mut reused = true;
        let cached = gpu.tile_cache.lock().unwrap_or_else(|e| e.into_inner()).take();
        let buffers = match cached {
            Some((cached_key, buffers)) if cached_key == key => buffers,
            Some((_, earlier)) => {
                // A later round has fewer rows and longer lists: in query tiles small enough,
                // it runs in the buffers of the round before. Allocating (and first touching)
                // new ones costs far more than such a round (notes/exactness.md, "Later rounds
                // in the first round's buffers"). The set keeps the sizes it was made with, so
                // the next call of the first round's shape (symmetric sweeps included) finds it
                // as planned.
                let mut query_rows = tiles.query_rows;
                let fewest = query_rows.min(MIN_REUSED_QUERY_ROWS);
                let mut within = earlier.sizes.hold(&TileSizes::of(d, &key)).then_some(key);
                while within.is_none() && !tiles.symmetric && tiles.bounded.is_none() && query_rows >= fewest {
                    let Ok(capped) = plan_with(plan::TileCaps { query: query_rows, ..gpu.tile_caps }) else {
                        break;
                    };
                    let candidate = key_of(capped);
                    if earlier.sizes.hold(&TileSizes::of(d, &candidate)) {
                        within = Some(candidate);
                        break;
                    }
                    query_rows /= 2;
                }
                match within {
                    Some(within) => {
                        key = within;
                        TileBuffers::new(gpu, d, key, Some(&earlier))?
                    }
                    None => {
                        // Freed before the new set is allocated.
                        drop(earlier);
                        reused = false;
                        TileBuffers::new(gpu, d, key, None)?
                    }
                }
            }
            None => {
                reused = false;
                TileBuffers::new(gpu, d, key, None)?
            }
        };
        crate::trace::mark(|| {
            let how = if reused { "reused" } else { "allocated" };
            format!("tile buffers {how}: query tiles of {} rows, {kc} candidates", key.tiles.query_rows)
        });
        let tiles = key.tiles;
        let q = tiles.query_rows;
        // Ranked rows need only k answers each on the host. Every query tile overwrites its
        // rows of these arrays: zeroed pages cost nothing until then, where sentinels written
        // first took seconds at large k (notes/exactness.md).
        let lists = if certify.is_some() { 0 } else { nq * kc };
        let mut out = Candidates {
            exact: (gpu_exact && certify.is_none()).then(|| zeroed_answers(lists)),
            kc,
            keys: zeroed_answers(lists),
            ids: zeroed_answers(lists),
            failed: vec![false; nq],
            incomplete: if tiles.symmetric || tiles.bounded.is_some() || tiles.sparse {
                vec![false; nq]
            } else {
                Vec::new()
            },
            shortlisted: 0,
            buffers_allocated: !reused,
            published: 0,
            symmetric: tiles.symmetric,
            bounded: tiles.bounded.is_some(),
            sparse: tiles.sparse,
            shared_keys: buffers.shared_keys,
            ranked: certify.map(|c| {
                let (ids, distances) = c.answers.take(nq * c.k);
                BackendRanked { k: c.k, ids, distances, status: vec![1; nq] }
            }),
        };
        if let Some(p) = &gpu.profiler {
            p.times.lock().unwrap_or_else(|e| e.into_inner()).allocation += started.elapsed().as_secs_f64();
        }
        let tile_of = |q0: usize, end: usize, columns: (usize, usize), appends_below: usize| QueryTile {
            q0,
            rows: q.min(end - q0),
            from_corpus,
            symmetric: tiles.symmetric,
            bounded: tiles.bounded.is_some(),
            columns,
            appends_below,
        };
        let query_tiles: Vec<QueryTile> = match sides {
            Sides::Whole if tiles.symmetric => {
                (0..nq).step_by(q).map(|q0| tile_of(q0, nq, (0, (q0 + q).min(nq)), q0)).collect()
            }
            Sides::Whole | Sides::Filtered { .. } => {
                (0..nq).step_by(q).map(|q0| tile_of(q0, nq, (0, self.corpus.rows()), 0)).collect()
            }
            Sides::Two { split } => {
                // I's rows first meet J's first tiles (at least kc rows), which gives them a
                // bound; J's tiles then meet I, and those not met yet offer their keys to I's
                // rows' shortlists.
                let bounding = (nq - split).min(kc.div_ceil(q) * q);
                let i_tiles = (0..split).step_by(q).map(|q0| tile_of(q0, split, (split, split + bounding), 0));
                let j_tiles = (split..nq).step_by(q).map(|q0| {
                    let appends_below = if q0 < split + bounding { 0 } else { split };
                    tile_of(q0, nq, (0, split), appends_below)
                });
                i_tiles.chain(j_tiles).collect()
            }
        };
        if tiles.symmetric {
            // Every row's list takes keys from later tiles too: all tiles are swept before
            // any is finished.
            self.reset_rows(&buffers, exclude, None, kc)?;
            for tile in &query_tiles {
                check_interrupt(&gpu.interrupt)?;
                self.sweep(queries, *tile, &[], None, kc, tiles, &buffers, None)?;
                // No row is final before the last tile, but the sweep is most of the work
                // (tile I costs in proportion to its last row): progress counts it as 90%.
                let swept = (tile.q0 + tile.rows) as f64 / nq as f64;
                report((SWEEP_SHARE * swept * swept * nq as f64) as usize);
            }
            if buffers.shared_keys {
                self.sort_lists_by_index(kc, &buffers)?;
            }
        }
        if let Sides::Filtered { bounds, .. } = sides {
            self.start_column_lists(&buffers, bounds)?;
        }
        if tiles.bounded.is_some() {
            // Every row's bound and empty list before the first tile appends to later rows.
            self.reset_rows(&buffers, exclude, None, kc)?;
            self.sample_bounds(tiles, &buffers)?;
        }
        // What finishing a tile reports: its last row, or in a symmetric sweep the rest.
        let finished = |done: usize| match tiles.symmetric {
            true => ((SWEEP_SHARE + (1.0 - SWEEP_SHARE) * done as f64 / nq as f64) * nq as f64) as usize,
            false => done,
        };
        // Tile t's results go to staging buffer t % slots. With several, tile t is submitted
        // before the host reads an earlier tile's results, whose copy out of mapped memory then
        // runs on another thread beside the GPU; the host waits only for tiles `slots - 1`
        // behind the last one finished. Ranked answers of tile t - 1 reach their staging buffer
        // during tile t's sweep, which publishes them (`distance_publish.wgsl`); only the last
        // tile's are copied after its ranking. Each reader writes its tile's part of `out`
        // (`TileOut`), so that up to READERS tiles are copied out at once.
        let slots = buffers.staging.len();
        let publishes =
            gpu.kernels.publishes() && slots > 1 && !tiles.symmetric && certify.is_some() && buffers.certify.is_some();
        let mut parts: Vec<Option<TileOut<'_>>> =
            TileOut::split(&mut out, &query_tiles).into_iter().map(Some).collect();
        let shortlisted = std::thread::scope(|scope| -> Result<usize> {
            type Reader<'s> = std::thread::ScopedJoinHandle<'s, Result<(usize, usize)>>;
            // Tiles being read, oldest first, and their readers.
            let mut reading: VecDeque<(usize, Reader<'_>)> = VecDeque::new();
            // Finished tiles not yet being read, oldest first: the tile, its results, and their
            // mapping (requested once they are on their way: after the sweep that publishes them).
            let mut unread: VecDeque<(usize, TileRead, Option<Mapping>)> = VecDeque::new();
            let mut shortlisted = 0;
            let collect = |(t, reader): (usize, Reader<'_>), shortlisted: &mut usize| -> Result<()> {
                let (done, rows_shortlisted) = join(reader)?;
                // Unmapped here, on the thread that polls: readers make no driver calls.
                buffers.staging[t % slots].unmap();
                report(finished(done));
                *shortlisted += rows_shortlisted;
                Ok(())
            };
            let tile_ranked = certify.and_then(|c| c.tile_ranked);
            let start_reader = |(t, read, mapping): (usize, TileRead, Option<Mapping>), part| -> Result<_> {
                let staging = &buffers.staging[t % slots];
                let started = std::time::Instant::now();
                // Waited for here, not on the reader's thread: wgpu 30 cannot be polled from
                // two threads at once (an assertion in its poll fails).
                mapping.unwrap_or_else(|| Mapping::request(staging, None)).wait(gpu)?;
                gpu.add_transfer_time(started);
                crate::trace::mark(|| format!("rows {}..{} mapped", read.q0, read.q0 + read.rows));
                let b = &buffers;
                Ok(scope.spawn(move || {
                    let rows_shortlisted = read.copy_out(gpu, b, staging, part, tile_ranked)?;
                    crate::trace::mark(|| format!("rows {}..{} copied out", read.q0, read.q0 + read.rows));
                    Ok((read.q0 + read.rows, rows_shortlisted))
                }))
            };
            // Starts reading the oldest unread tiles no later than `upto`, while fewer than
            // READERS run.
            let start_oldest = |upto: usize,
                                reading: &mut VecDeque<(usize, _)>,
                                unread: &mut VecDeque<(usize, TileRead, Option<Mapping>)>,
                                parts: &mut Vec<Option<_>>|
             -> Result<()> {
                while reading.len() < READERS && unread.front().is_some_and(|&(t, _, _)| t <= upto) {
                    let tile = unread.pop_front().expect("the front tile was just seen");
                    let part = parts[tile.0].take().expect("each tile is read once");
                    reading.push_back((tile.0, start_reader(tile, part)?));
                }
                Ok(())
            };
            // Reads every finished tile up to `last`.
            let read_through = |last: usize,
                                reading: &mut VecDeque<(usize, _)>,
                                unread: &mut VecDeque<(usize, TileRead, Option<Mapping>)>,
                                parts: &mut Vec<Option<_>>,
                                shortlisted: &mut usize|
             -> Result<()> {
                loop {
                    start_oldest(last, reading, unread, parts)?;
                    match reading.front() {
                        Some(&(t, _)) if t <= last => {
                            let tile_reader = reading.pop_front().expect("the front reader was just seen");
                            collect(tile_reader, shortlisted)?;
                        }
                        _ => return Ok(()),
                    }
                }
            };
            for (t, &tile) in query_tiles.iter().enumerate() {
                check_interrupt(&gpu.interrupt)?;
                let QueryTile { q0, rows, .. } = tile;
                if !tiles.symmetric {
                    // Queued before the host reads earlier tiles, so that the GPU sweeps this
                    // tile meanwhile; it publishes the tile before, whose mapping then follows.
                    let unpublished = unread.back().filter(|(_, _, mapping)| mapping.is_none());
                    let publish = unpublished.map(|&(before, _, _)| &buffers.staging[before % slots]);
                    let index = match tiles.bounded {
                        Some(_) => self.sweep_bounded(tile, kc, tiles, &buffers, publish)?,
                        None => {
                            let exclude = &exclude[q0..q0 + rows];
                            let bounds = query_bounds.filter(|_| tiles.queries_bounded).map(|b| &b[q0..q0 + rows]);
                            self.sweep(queries, tile, exclude, bounds, kc, tiles, &buffers, publish)?
                        }
                    };
                    if let Some((before, _, mapping @ None)) = unread.back_mut() {
                        *mapping = Some(Mapping::request(&buffers.staging[*before % slots], Some(index)));
                    }
                }
                // The tile that last used this tile's staging buffer must have been read.
                // The reader of the tile `slots - 1` behind starts first, beside the one being
                // waited for: at large k the readers' copy-outs pace the loop (notes/select.md,
                // "Two readers at once").
                if let Some(behind) = (t + 1).checked_sub(slots) {
                    start_oldest(behind, &mut reading, &mut unread, &mut parts)?;
                }
                if let Some(last) = t.checked_sub(slots) {
                    read_through(last, &mut reading, &mut unread, &mut parts, &mut shortlisted)?;
                }
                let published_later = publishes && t + 1 < query_tiles.len();
                let staging = &buffers.staging[t % slots];
                let (read, mapping) = self.finish(tile, kc, certify, &buffers, staging, published_later)?;
                unread.push_back((t, read, mapping));
                // Start reading the tile `slots - 1` behind (with one read-back buffer, this
                // tile), whose results are ready or nearly: the host then waits on the GPU only
                // that far behind it.
                if let Some(behind) = (t + 1).checked_sub(slots) {
                    start_oldest(behind, &mut reading, &mut unread, &mut parts)?;
                }
            }
            read_through(usize::MAX, &mut reading, &mut unread, &mut parts, &mut shortlisted)?;
            Ok(shortlisted)
        })?;
        out.shortlisted = shortlisted;
        let column_lists = match sides {
            Sides::Filtered { column_kc, .. } => Some(self.read_column_lists(&buffers, column_kc)?),
            _ => None,
        };
        if tiles.sparse {
            gpu.record_sparse(nq, out.incomplete.iter().filter(|&&i| i).count());
        }
        // Every tile's answers but the last one's.
        out.published = if publishes { nq - query_tiles.last().map_or(0, |t| t.rows) } else { 0 };
        *gpu.tile_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, buffers));
        Ok((out, column_lists))
    }

    /// A filtered search's corpus rows: their bounds after the state rows, and empty lists.
    fn start_column_lists(&self, b: &TileBuffers, bounds: &[f32]) -> Result<()> {
        let (filter, first_list) = b.filter.expect("a filtered search's buffers have its lists");
        let state: Vec<[u32; 2]> = bounds.iter().map(|bound| [NONE, bound.to_bits()]).collect();
        self.gpu.write_at(&b.row_state, (b.state_rows * 8) as u64, "column bounds", bytemuck::cast_slice(&state))?;
        let mut encoder = self.gpu.ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(&b.shortlist_len, (first_list * 4) as u64, Some((filter.rows * 4) as u64));
        self.gpu.ctx.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// The corpus rows' lists of a filtered search, once every tile has run: their counts and
    /// pairs in one copy and one mapping, each list's `kc` best taken out of mapped memory.
    fn read_column_lists(&self, b: &TileBuffers, kc: usize) -> Result<ColumnLists> {
        let (filter, first_list) = b.filter.expect("a filtered search's buffers have its lists");
        let gpu = self.gpu;
        let (rows, cap) = (filter.rows, filter.cap);
        // Pairs start at a multiple of 8 bytes, after the counts.
        let counts_bytes = (rows * 4).next_multiple_of(8) as u64;
        let pairs_bytes = (rows * cap * 8) as u64;
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let mut kept = b.column_staging.lock().unwrap_or_else(|e| e.into_inner());
        if kept.as_ref().is_none_or(|s| s.size() < counts_bytes + pairs_bytes) {
            *kept = Some(gpu.buffer("column lists", counts_bytes + pairs_bytes, usage)?);
        }
        let staging = kept.as_ref().expect("made above");
        let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&b.shortlist_len, (first_list * 4) as u64, staging, 0, (rows * 4) as u64);
        let pairs_at = (first_list * cap * 8) as u64;
        encoder.copy_buffer_to_buffer(&b.shortlist, pairs_at, staging, counts_bytes, pairs_bytes);
        gpu.ctx.queue.submit([encoder.finish()]);
        // Fresh pages, faulted in by the threads that fill them.
        let mut keys: Vec<f32> = crate::data::zeroed_answers(rows * kc);
        let mut ids: Vec<u32> = crate::data::zeroed_answers(rows * kc);
        let mut counts = Vec::new();
        // Rows in parallel: a list holds about kc of its 2 kc pairs, and one thread reads
        // mapped memory at a fraction of the bus's speed.
        super::transfer::map_and_read(gpu, staging, |mapped| {
            use rayon::prelude::*;
            let (head, tail) = mapped.split_at(counts_bytes as usize);
            counts = bytemuck::pod_collect_to_vec(&head[..rows * 4]);
            let lists: &[[u32; 2]] = bytemuck::cast_slice(tail);
            let rows_out = keys.par_chunks_mut(kc).zip(ids.par_chunks_mut(kc));
            let rows_in = lists.par_chunks(cap).zip(&counts);
            rows_out.zip(rows_in).for_each_init(Vec::new, |longer, ((keys, ids), (list, &count))| {
                keys.fill(f32::INFINITY);
                ids.fill(NONE);
                let count = count as usize;
                let listed: &[[u32; 2]] = match count {
                    _ if count > cap => return,
                    _ if count <= kc => &list[..count],
                    _ => {
                        // The kc best by key, then row.
                        longer.clear();
                        longer.extend_from_slice(&list[..count]);
                        let order = |a: &[u32; 2], b: &[u32; 2]| {
                            f32::from_bits(a[0]).total_cmp(&f32::from_bits(b[0])).then(a[1].cmp(&b[1]))
                        };
                        longer.select_nth_unstable_by(kc - 1, order);
                        &longer[..kc]
                    }
                };
                for (slot, &[key, id]) in listed.iter().enumerate() {
                    (keys[slot], ids[slot]) = (f32::from_bits(key), id);
                }
            });
        })?;
        Ok(ColumnLists { cap, kc, counts, keys, ids })
    }
}

/// Waits for a query tile's reader thread.
fn join<T>(reader: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    reader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}
