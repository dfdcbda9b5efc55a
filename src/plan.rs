//! Tile planning for the GPU: a pure function of the problem size and the adapter's limits,
//! so it can be tested without a GPU.
//!
//! Every buffer must stay under the adapter's largest storage binding (128 MiB on lavapipe,
//! 2 GiB on NVIDIA) and all of them together under the memory budget.

use crate::error::{Error, Result};
use crate::search::Select;

/// Whether tiles' candidates are picked by the batch index sort rather than the quick
/// multi-select. `Auto` takes the quick multi-select: the sort selector has not won at any k
/// or tile shape measured (`notes/sort.md`).
pub(crate) fn sorts_tiles(select: Select) -> bool {
    match select {
        Select::Sort => true,
        Select::Quick | Select::Auto => false,
    }
}

/// What the planner needs to know about the device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceBudget {
    /// Largest storage buffer binding, in bytes (already capped by the largest buffer).
    pub max_binding: u64,
    /// Bytes the engine may allocate in all.
    pub budget: u64,
}

/// How a problem is cut into pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CorpusPlan {
    /// Corpus rows per prepared chunk (one binding each).
    pub chunk_rows: usize,
    /// Whether all chunks stay on the GPU for the whole search, or are streamed per query tile.
    pub resident: bool,
}

/// How each query tile is processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TilePlan {
    /// Query rows per tile (one submission per tile and corpus chunk).
    pub query_rows: usize,
    /// Corpus rows per distance tile.
    pub column_tile: usize,
    /// Row stride of the distance tile: `column_tile` rounded up to whole vec4s, which the
    /// distance kernel stores.
    pub dist_stride: usize,
    /// Row stride of the auxiliary select arrays: max(column tile, 2 kc).
    pub scratch_stride: usize,
    /// Pairs per row of the shortlist of keys under the row's bound (a few times kc: on data
    /// in random order a tile adds about kc / tiles-so-far of them); 0 when there are none.
    pub shortlist_cap: usize,
    /// Read-back buffers: 2 lets one query tile's results be copied out on the host while the
    /// next tile runs, 3 lets the host wait only for tiles two behind the GPU (whose answers the
    /// tile after them publishes); fewer under a budget where more would cost a quarter of
    /// the tile.
    pub read_backs: usize,
    /// A graph in symmetric blocks ([`plan_symmetric`]): every row's running list and bound
    /// stay on the GPU for the whole sweep (shortlists only while their tile is merged).
    pub symmetric: bool,
    /// A graph swept over the upper triangle under bounds from a sample ([`plan_bounded`]):
    /// every row's bound and list (of `shortlist_cap` pairs) stay on the GPU for the whole
    /// sweep.
    pub bounded: Option<BoundedSweep>,
    /// A plain sweep whose distance tiles were narrowed by the budget: after a query tile's
    /// first distance tile, the rest keep no dense keys. Each row's keys under its bound go
    /// only to its shortlist, a row whose shortlist overflows is marked incomplete (searched
    /// again by the caller), and each such tile is as wide as the columns already met
    /// ([`sparse_tile_width`]), so that its width is not bounded by memory.
    pub sparse: bool,
    /// The query rows start with bounds from the caller ([`plan_bounded_queries`]): every
    /// distance tile is sparse, the first too, and running lists start empty.
    pub queries_bounded: bool,
}

/// How a bounded sweep ([`plan_bounded`]) bounds its rows: each row's key of rank `rank`
/// among every `sample_step`-th corpus row (`sample_rows` of them). About `rank *
/// sample_step` rows fall under that bound, a few standard deviations more than the row's
/// kc candidates, and under the list's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BoundedSweep {
    pub sample_rows: usize,
    pub sample_step: usize,
    pub rank: usize,
}

/// Query tiles and column tiles of a symmetric sweep start at multiples of this many rows, so
/// that per-row arrays can be bound at a tile's first row (wgpu allows storage offsets in
/// multiples of 256 bytes at most; the narrowest per-row array has 4 bytes a row).
pub(crate) const ALIGN_ROWS: usize = 64;

/// Smallest query tile a symmetric sweep aims for when the budget allows larger ones: enough
/// distance workgroups to fill a large GPU.
const SYMMETRIC_TILE: usize = 1024;

/// Largest distance tile width: wide tiles amortise the per-tile merge of candidate lists.
pub(crate) const MAX_COLUMN_TILE: usize = 16384;

/// Narrowest distance tile a small budget trades for more query rows: below it the distance
/// and select dispatches of a tile are too small to fill a large GPU.
const MIN_COLUMN_TILE: usize = 1024;

/// Largest distance tile width where every tile is selected densely (lists longer than
/// [`DENSE_KC`]): a merge of two long lists costs about as much as the select of a tile, so
/// fewer, wider tiles save merges (notes/select.md, "Dense selects for long lists").
pub(crate) const MAX_DENSE_COLUMN_TILE: usize = 65536;

/// Fewest query rows that fill a large GPU (a workgroup each in the select): wide distance
/// tiles are taken only where they leave this many, or narrow ones leave no more.
const MIN_WIDE_QUERY_ROWS: usize = 1024;

/// Query rows a plan of sparse distance tiles aims for, narrowing its first, dense tile down
/// to [`MIN_COLUMN_TILE`] for them.
const MIN_SPARSE_QUERY_ROWS: usize = 4096;

/// Caps on tile sizes below what the budget allows (tests give small problems many tiles).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TileCaps {
    /// Corpus rows per distance tile.
    pub column: usize,
    /// Query rows per query tile.
    pub query: usize,
}

impl Default for TileCaps {
    fn default() -> Self {
        TileCaps { column: usize::MAX, query: MAX_QUERY_ROWS }
    }
}

/// Bytes of one prepared row: padded to a multiple of 4 floats for vec4 loads.
pub(crate) fn prepared_row_bytes(d: usize) -> u64 {
    (d.div_ceil(4) * 16) as u64
}

/// Splits the corpus into chunks that fit one binding; keeps them resident if they fit in
/// half the budget.
pub(crate) fn plan_corpus(n: usize, d: usize, dev: DeviceBudget) -> Result<CorpusPlan> {
    let row = prepared_row_bytes(d);
    let resident = n as u64 * row <= dev.budget / 2;
    // A resident corpus is one chunk where a binding holds it; a streamed one comes in chunks
    // of a quarter of the budget.
    let per_chunk = if resident { dev.max_binding } else { dev.max_binding.min(dev.budget / 4) };
    let chunk_rows = (per_chunk / row).min(n as u64) as usize;
    if chunk_rows == 0 {
        return Err(Error::TooLargeForDevice(format!(
            "one row of dimension {d} ({row} bytes) does not fit in a quarter of the GPU memory budget ({} bytes)",
            dev.budget
        )));
    }
    Ok(CorpusPlan { chunk_rows, resident })
}

/// What a round's query tiles are planned for: `nq` queries of dimension `d` needing `kc`
/// candidates each, against a corpus of `corpus_rows` rows laid out as `corpus`, within
/// `caps` and the device's budget `dev`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileAsk {
    pub nq: usize,
    pub d: usize,
    pub kc: usize,
    pub corpus: CorpusPlan,
    pub corpus_rows: usize,
    pub caps: TileCaps,
    pub dev: DeviceBudget,
}

/// Chooses the query tile for a round of plain query tiles against the corpus's chunks.
pub(crate) fn plan_tiles(ask: TileAsk) -> Result<TilePlan> {
    let TileAsk { nq, kc, corpus, caps, .. } = ask;
    let within = |widest: usize| {
        // Each query row holds a distance tile row and the select's arrays, 20 bytes a
        // column: under a small budget wide tiles leave too few query rows to fill the GPU,
        // and narrower ones trade width for rows. Distance tiles narrowed so are sparse after
        // the first, where rows keep shortlists.
        let mut column = caps.column.min(widest);
        let mut narrowed = false;
        loop {
            let plan = plan_tiles_within(TileAsk { caps: TileCaps { column, ..caps }, ..ask })
                .map(|t| TilePlan { sparse: narrowed && t.shortlist_cap > 0, ..t });
            // Once narrowed, only a query tile's first distance tile is dense: a narrower one
            // costs a tile more, where taller query tiles save dispatches on every tile.
            let want = if narrowed { MIN_SPARSE_QUERY_ROWS } else { MIN_WIDE_QUERY_ROWS };
            let short = plan.as_ref().map_or(true, |t| t.query_rows < nq.min(want));
            if !short || column.min(corpus.chunk_rows) / 2 < MIN_COLUMN_TILE {
                return plan;
            }
            column = column.min(corpus.chunk_rows) / 2;
            narrowed = true;
        }
    };
    let narrow = within(MAX_COLUMN_TILE);
    if kc <= DENSE_KC {
        return narrow;
    }
    // Wide tiles take 1.3 MB a query row at 65536 columns: under a small budget they would
    // leave query tiles too short to fill the GPU.
    match (within(MAX_DENSE_COLUMN_TILE), &narrow) {
        (Ok(wide), Ok(short)) if wide.query_rows < short.query_rows.min(MIN_WIDE_QUERY_ROWS) => narrow,
        (Ok(wide), _) => Ok(wide),
        (Err(_), _) => narrow,
    }
}

/// Whether sparse distance tiles pay on data where `overflowed` of the `rows` swept with them
/// so far overflowed their shortlists. Each such row is searched again with more candidates;
/// on data in random order almost none do, but rows stored in an order that correlates with
/// their position (sorted, or grouped by cluster) meet a loose bound from their first tile and
/// overflow in bulk, and then dense tiles, which fall back on the tile's keys, cost less.
pub(crate) fn sparse_tiles_pay(rows: u64, overflowed: u64) -> bool {
    overflowed * SPARSE_MOST_OVERFLOWED <= rows
}

/// Sparse distance tiles are left once more than one row in this many overflowed.
const SPARSE_MOST_OVERFLOWED: u64 = 16;

/// Width of a sparse distance tile ([`TilePlan::sparse`]) after `met` columns of a query
/// tile: as many again. On rows in random order a row's kc-th key among `met` columns then
/// has about kc keys under it in the tile, well within the shortlist's 2 kc + 64; tiles
/// double, so a chunk of c columns takes about log2(c / column_tile) of them.
pub(crate) fn sparse_tile_width(t: &TilePlan, met: usize) -> usize {
    if t.sparse && met > 0 {
        met.max(t.column_tile)
    } else {
        t.column_tile
    }
}

/// [`plan_tiles`] for distance tiles of at most `caps.column` columns.
fn plan_tiles_within(ask: TileAsk) -> Result<TilePlan> {
    let kc = ask.kc;
    let column_tile = ask.corpus.chunk_rows.min(ask.caps.column);
    let dist_stride = column_tile.next_multiple_of(4);
    let scratch_stride = column_tile.max(2 * kc);
    let fit = QueryRowFit { ask, dist_stride, scratch_stride, empty_lists: false };
    // A merge holds the running list and the shortlist in the auxiliary arrays. Shortlists
    // are an optimisation: for long lists, or under a budget so tight that they would halve
    // the query tile, every tile is selected densely instead.
    let mut shortlist_cap = (2 * kc + 64).min(scratch_stride - kc);
    let mut query_rows = fit.rows(shortlist_cap, 1);
    let dense_rows = fit.rows(0, 1);
    if kc > DENSE_KC || query_rows < dense_rows / 2 || query_rows == 0 {
        shortlist_cap = 0;
        query_rows = dense_rows;
    }
    let (query_rows, read_backs) = fit.with_read_backs(query_rows, shortlist_cap)?;
    Ok(TilePlan {
        query_rows,
        column_tile,
        dist_stride,
        scratch_stride,
        shortlist_cap,
        read_backs,
        symmetric: false,
        bounded: None,
        sparse: false,
        queries_bounded: false,
    })
}

/// Tiles of a search whose query rows start with bounds from the caller (a pair of blocks
/// searched one way, `CorpusSession::filtered_candidates`): every distance tile is sparse,
/// the first too, so neither a distance tile nor the select's auxiliary arrays hold a tile's
/// width, only a merge of the running list and a shortlist, and query tiles are several
/// times taller than [`plan_tiles`] makes them under the same budget. A row's bound is its
/// kc-th key among the rows it has met, at least a block's, so about kc keys of a block as
/// large fall under it: a first tile spans the whole chunk. A row whose shortlist overflows
/// is marked incomplete. Lists longer than [`DENSE_KC`] keep no shortlists: [`plan_tiles`].
pub(crate) fn plan_bounded_queries(ask: TileAsk) -> Result<TilePlan> {
    let kc = ask.kc;
    if kc > DENSE_KC {
        return plan_tiles(ask);
    }
    let shortlist_cap = 2 * kc + 64;
    // No kernel stores a sparse tile's keys; the distance and select kernels still bind it.
    let dist_stride = 4;
    let scratch_stride = kc + shortlist_cap;
    let fit = QueryRowFit { ask, dist_stride, scratch_stride, empty_lists: true };
    let (query_rows, read_backs) = fit.with_read_backs(fit.rows(shortlist_cap, 1), shortlist_cap)?;
    Ok(TilePlan {
        query_rows,
        column_tile: ask.corpus.chunk_rows.min(ask.caps.column),
        dist_stride,
        scratch_stride,
        shortlist_cap,
        read_backs,
        symmetric: false,
        bounded: None,
        sparse: true,
        queries_bounded: true,
    })
}

/// How many query rows of a plain sweep's tiles of the given strides fit the budget and the
/// binding limits.
struct QueryRowFit {
    ask: TileAsk,
    dist_stride: usize,
    scratch_stride: usize,
    /// Running lists of no candidates kept to start each query tile's from.
    empty_lists: bool,
}

impl QueryRowFit {
    fn per_query_row(&self, shortlist_cap: usize, read_backs: usize) -> u64 {
        let row = prepared_row_bytes(self.ask.d);
        let empty_list = if self.empty_lists { 8 * self.ask.kc as u64 } else { 0 };
        query_row_bytes(self.dist_stride, self.scratch_stride, self.ask.kc, shortlist_cap, read_backs, row, false)
            + empty_list
    }

    fn rows(&self, shortlist_cap: usize, read_backs: usize) -> usize {
        let (dev, row) = (self.ask.dev, prepared_row_bytes(self.ask.d));
        let corpus = self.ask.corpus;
        let corpus_bytes =
            if corpus.resident { self.ask.corpus_rows as u64 * row } else { 2 * corpus.chunk_rows as u64 * row };
        let free = dev.budget.saturating_sub(corpus_bytes);
        let limits = [
            free / self.per_query_row(shortlist_cap, read_backs),
            dev.max_binding / (4 * self.dist_stride as u64),
            dev.max_binding / (4 * self.scratch_stride as u64),
            dev.max_binding / (16 * self.ask.kc as u64),
            dev.max_binding / (8 * shortlist_cap.max(1) as u64),
            dev.max_binding / row,
            MAX_QUERY_ROWS.min(self.ask.caps.query) as u64,
            self.ask.nq as u64,
        ];
        limits.into_iter().min().unwrap_or(0) as usize
    }

    /// The most read-back buffers that leave three quarters of `query_rows` (planned with
    /// one), and the query rows they leave.
    fn with_read_backs(&self, query_rows: usize, shortlist_cap: usize) -> Result<(usize, usize)> {
        let (read_backs, rows) = [3, 2]
            .into_iter()
            .map(|read_backs| (read_backs, self.rows(shortlist_cap, read_backs)))
            .find(|&(_, rows)| rows >= query_rows - query_rows / 4 && rows > 0)
            .unwrap_or((1, query_rows));
        if rows == 0 {
            let (kc, dev) = (self.ask.kc, self.ask.dev);
            return Err(Error::TooLargeForDevice(format!(
                "{kc} candidates per query need {} bytes per query row, more than the GPU memory budget \
                 ({} bytes, largest binding {} bytes) allows; use a smaller k or the CPU backend",
                self.per_query_row(shortlist_cap, 1),
                dev.budget,
                dev.max_binding
            )));
        }
        Ok((rows, read_backs))
    }
}

/// Lists longer than this select every distance tile densely instead of keeping shortlists:
/// a later tile appends about kc / t keys a row, each an atomic slot taken in the GEMM's
/// epilogue, and at large kc that slowed the GEMM more than dense selects cost
/// (notes/select.md, "Dense selects for long lists").
pub(crate) const DENSE_KC: usize = 256;

/// One workgroup per query row in the select; a 2-D dispatch covers 65535^2, but tiles stay
/// moderate so that one submission stays short.
const MAX_QUERY_ROWS: usize = 65535;

/// GPU bytes per query row of a tile. `symmetric`: the running lists, bounds and shortlists
/// are counted per corpus row instead ([`plan_symmetric`]).
fn query_row_bytes(
    dist_stride: usize,
    scratch_stride: usize,
    kc: usize,
    shortlist_cap: usize,
    read_backs: usize,
    row: u64,
    symmetric: bool,
) -> u64 {
    let per_row_state = 8 * kc as u64 + 8 * shortlist_cap as u64 + 16; // running list, shortlist, state
    4 * dist_stride as u64                     // distance tile
        + 16 * scratch_stride as u64           // two auxiliary arrays of keys and indices
        + 3 * 8 * kc as u64                    // tile list, exact keys, ranked answers
        + read_backs as u64 * 16 * kc as u64   // read-back of lists and keys
        + 2 * row                              // raw and prepared query
        + 8                                    // norm, error bound
        + if symmetric { 0 } else { per_row_state }
}

/// Query tiles for a symmetric sweep of `n` rows of dimension `d` with `kc` candidates per
/// row, or `None` where the sweep does not pay. T tiles compute (T + 1) / 2T of the n x n
/// products (the GEMM, n d flops a row), but each row also merges its column-side shortlist
/// once per later tile (about kc work, and a dispatch slot, per row and tile), and rows are
/// read back only once every tile is swept, not behind the next tile's GEMM. Minimising
/// G (T + 1) / 2T + c n (T - 1) / 2 gives T = sqrt(G / c n), with G / c n proportional to
/// n d / kc; the constant and the thresholds come from measured graphs with the 4 GiB default
/// budget (`notes/distance.md`, "Symmetric blocks for graphs"). Under 2^37 products (n=32768
/// at d=128) the GEMM does not cover a tile's fixed costs.
fn symmetric_tiles(n: usize, d: usize, kc: usize) -> Option<usize> {
    let work = n as f64 * d as f64 / kc as f64;
    let products = n as f64 * n as f64 * d as f64;
    (work >= SYMMETRIC_MIN_WORK && products >= SYMMETRIC_MIN_PRODUCTS).then(|| symmetric_tile_count(n, d, kc))
}

/// The tile count of [`symmetric_tiles`], also where the sweep is not expected to pay.
fn symmetric_tile_count(n: usize, d: usize, kc: usize) -> usize {
    let work = n as f64 * d as f64 / kc as f64;
    ((work / 8192.0).sqrt().round() as usize).max(2)
}

/// Dimension from which exact keys are computed by a workgroup per candidate, and a
/// symmetric sweep's mutual pairs share them (every row's keys kept: 8 kc bytes a row).
pub(crate) const WIDE_ROWS: usize = 256;

/// n d / kc below which a symmetric sweep does not pay.
const SYMMETRIC_MIN_WORK: f64 = (1 << 15) as f64;
/// GEMM products (n^2 d) below which a symmetric sweep does not pay.
const SYMMETRIC_MIN_PRODUCTS: f64 = (1u64 << 37) as f64;

/// Plans a graph as symmetric blocks (Dashti, section 3.2): query tile I is compared with
/// corpus rows up to its own last row only, and each key of a block below the diagonal also
/// goes to the column row's shortlist, so every distance is computed once. Every row keeps
/// its running list and bound; shortlists are held only for the rows of the query tile and
/// the columns of the distance tile being merged. `None` when that does not fit (a single
/// query tile, a corpus not resident in one binding, per-row state for every corpus row over
/// the budget or a binding) or, unless `forced`, does not pay
/// ([`symmetric_tiles`]; also where the budget allows only far more tiles than that).
/// `sorts`: dense tiles' candidates come from the batch index sort, which also keeps each
/// tile's key order (for the column side from the same sort).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_symmetric(
    n: usize,
    d: usize,
    kc: usize,
    corpus: CorpusPlan,
    caps: TileCaps,
    dev: DeviceBudget,
    forced: bool,
    sorts: bool,
) -> Option<TilePlan> {
    let tiles = match symmetric_tiles(n, d, kc) {
        Some(tiles) => tiles,
        None if forced => symmetric_tile_count(n, d, kc),
        None => return None,
    };
    if !corpus.resident || corpus.chunk_rows < n {
        return None;
    }
    let shortlist_cap = 2 * kc + 64;
    let row = prepared_row_bytes(d);
    let shared_keys = if d >= WIDE_ROWS { 8 * kc as u64 } else { 0 };
    // Running list, exclusion and bound, flags.
    let per_row_state = 8 * kc as u64 + 16 + shared_keys;
    let shortlist_slot = 8 * shortlist_cap as u64 + 4;
    let free = dev.budget.checked_sub(n as u64 * (row + per_row_state))?;
    // The most query rows for distance tiles of `column_tile` columns, and the read-back
    // buffers that leave them.
    let query_tile = |column_tile: usize| {
        let dist_stride = column_tile.next_multiple_of(4);
        // A merge holds the running list and a whole shortlist in the auxiliary arrays.
        let scratch_stride = column_tile.max(kc + shortlist_cap);
        // The batch index sort keeps a tile's key order while it sorts by column.
        let kept_order = if sorts { 4 * scratch_stride as u64 } else { 0 };
        let free = free.saturating_sub(column_tile as u64 * shortlist_slot);
        let extra_per_row = kept_order + shortlist_slot;
        let tile = SweptTile { n, dist_stride, scratch_stride, kc, list_cap: shortlist_cap, row, extra_per_row, free };
        let single = tile.most_rows(1, caps, dev);
        let double = tile.most_rows(2, caps, dev);
        let (most, read_backs) = if double >= single - single / 4 && double > 0 { (double, 2) } else { (single, 1) };
        // The shortlist slots of the tile's rows and columns in one binding.
        let slots = (dev.max_binding / (8 * shortlist_cap as u64)) as usize;
        let most = most.min(slots.saturating_sub(column_tile) / ALIGN_ROWS * ALIGN_ROWS);
        (most, read_backs, dist_stride, scratch_stride)
    };
    let mut column_tile = corpus.chunk_rows.min(caps.column).min(MAX_COLUMN_TILE) / ALIGN_ROWS * ALIGN_ROWS;
    if column_tile == 0 {
        return None;
    }
    // Narrower distance tiles where the budget leaves wide ones short query tiles (see
    // `plan_tiles`).
    while query_tile(column_tile).0 < SYMMETRIC_TILE && column_tile / 2 >= MIN_COLUMN_TILE {
        column_tile = column_tile / 2 / ALIGN_ROWS * ALIGN_ROWS;
    }
    let (most, read_backs, dist_stride, scratch_stride) = query_tile(column_tile);
    let wanted = n.div_ceil(tiles).max(SYMMETRIC_TILE).next_multiple_of(ALIGN_ROWS);
    // Each tile also costs a submission, a wait and a finishing pass: far more tiles than
    // wanted lose what the sweep saves, a few times more still gain (notes/distance.md).
    if most == 0 || (!forced && n.div_ceil(most) > 4 * tiles) {
        return None;
    }
    // Tiles of equal size: no last tile of a few rows.
    let query_rows = n.div_ceil(n.div_ceil(wanted.min(most))).next_multiple_of(ALIGN_ROWS);
    (query_rows > 0 && query_rows < n).then_some(TilePlan {
        query_rows,
        column_tile,
        dist_stride,
        scratch_stride,
        shortlist_cap,
        read_backs,
        symmetric: true,
        bounded: None,
        sparse: false,
        queries_bounded: false,
    })
}

/// The query tile of a sweep that keeps every row's state (a symmetric or a bounded sweep).
struct SweptTile {
    n: usize,
    dist_stride: usize,
    scratch_stride: usize,
    kc: usize,
    /// Pairs per row of the shortlists (symmetric) or lists (bounded).
    list_cap: usize,
    /// Bytes of a prepared row.
    row: u64,
    /// Further bytes a query row: the batch index sort's key order, a symmetric sweep's
    /// shortlist slot.
    extra_per_row: u64,
    /// Budget left beside the corpus and every row's state.
    free: u64,
}

impl SweptTile {
    /// The most query rows a tile may have with `read_backs` read-back buffers, in whole
    /// ALIGN_ROWS: under the budget left, every buffer under a binding, and the running lists
    /// of every row and of the tile in one binding.
    fn most_rows(&self, read_backs: usize, caps: TileCaps, dev: DeviceBudget) -> usize {
        let per_query_row =
            query_row_bytes(self.dist_stride, self.scratch_stride, self.kc, self.list_cap, read_backs, self.row, true)
                + self.extra_per_row;
        let limits = [
            self.free / per_query_row,
            dev.max_binding / (4 * self.dist_stride as u64),
            dev.max_binding / (4 * self.scratch_stride as u64),
            dev.max_binding / self.row,
            MAX_QUERY_ROWS.min(caps.query) as u64,
        ];
        let mut rows = limits.into_iter().min().unwrap_or(0) as usize / ALIGN_ROWS * ALIGN_ROWS;
        while rows > 0 && (self.n + rows) as u64 * 8 * self.kc as u64 > dev.max_binding {
            rows -= ALIGN_ROWS;
        }
        rows
    }
}

/// Rows a bounded sweep's sample aims for, smallest first: the smallest whose lists fit the
/// short select. A smaller sample costs less GEMM and select but bounds rows less tightly,
/// so lists grow; 2048 rows measured faster than 4096 where their lists fit, and 1024 would
/// need lists over MAX_SHORT_SELECT (notes/select.md, "Two readers at once").
const SAMPLE_ROWS: [usize; 2] = [2048, 4096];

/// Standard deviations of a row's count under its bound between kc and the expected count
/// (a row under kc is searched again), and between the expected count and the list's length
/// (a row over it too).
const BOUND_BELOW_SIGMAS: f64 = 4.0;
const BOUND_ABOVE_SIGMAS: f64 = 5.0;

/// Fewest rows for which a bounded sweep is chosen unless forced: at n=65536 its GEMM is a
/// fifth of the graph's time that it saves (`notes/select.md`).
const BOUNDED_MIN_ROWS: usize = 32768;

/// Plans a graph with long lists (kc > [`DENSE_KC`]) as a sweep of the upper triangle under
/// sampled bounds: each row first gets a bound, its key of rank `rank` among a strided sample
/// of the corpus; query tile I then computes the dense block of its rows against the corpus
/// rows from its own first row on (the blocks I <= J, (T + 1) / 2T of the products), and a
/// filter appends each key under the row's bound to the row's list and, right of the diagonal
/// block, under the column row's bound to that row's list. Tile I's rows then have every key
/// under their bound (the columns before I came from earlier tiles), and are selected down to
/// kc, ranked and read back while later tiles run, as in a plain sweep. A row whose list
/// holds fewer than kc keys or overflowed is searched again. `None` where it does not fit (a
/// corpus not resident in one binding, lists for every row over the budget or a binding), or
/// unless `forced`, where lists are short or the graph small.
pub(crate) fn plan_bounded(
    n: usize,
    d: usize,
    kc: usize,
    corpus: CorpusPlan,
    caps: TileCaps,
    dev: DeviceBudget,
    forced: bool,
) -> Option<TilePlan> {
    if !forced && (kc <= DENSE_KC || n < BOUNDED_MIN_ROWS) {
        return None;
    }
    if !corpus.resident || corpus.chunk_rows < n {
        return None;
    }
    let (bounded, list_cap) = SAMPLE_ROWS
        .into_iter()
        .filter_map(|rows| bound_sample(n, kc, rows))
        .map(|b| (b, list_cap(kc, b)))
        .find(|&(_, cap)| cap <= MAX_SHORT_SELECT)?;
    let dist_stride = n.next_multiple_of(4);
    // Its selects hold a row in workgroup memory; the auxiliary arrays only serve a later
    // round in the same buffers.
    let scratch_stride = 2 * kc;
    let row = prepared_row_bytes(d);
    let per_row_state = 8 * (kc + list_cap) as u64 + 16;
    let fits = |bytes: u64| bytes <= dev.max_binding;
    if !fits(n as u64 * 8 * list_cap as u64) {
        return None;
    }
    let sample = bounded.sample_rows as u64 * (row + 4);
    let free = dev.budget.checked_sub(n as u64 * (row + per_row_state) + sample)?;
    let tile = SweptTile { n, dist_stride, scratch_stride, kc, list_cap, row, extra_per_row: 0, free };
    // The most read-back buffers that leave three quarters of the tile.
    let single = tile.most_rows(1, caps, dev);
    let (read_backs, most) = [3, 2, 1]
        .into_iter()
        .map(|read_backs| (read_backs, tile.most_rows(read_backs, caps, dev)))
        .find(|&(_, rows)| rows >= single - single / 4 && rows > 0)?;
    // Tiles of equal size, at most BOUNDED_TILE rows: the diagonal blocks, computed whole,
    // grow with the tile, and every tile's answers cross to the host behind the next one.
    let wanted = most.min(BOUNDED_TILE);
    let query_rows = n.div_ceil(n.div_ceil(wanted)).next_multiple_of(ALIGN_ROWS);
    (query_rows > 0 && query_rows <= most).then_some(TilePlan {
        query_rows,
        column_tile: n,
        dist_stride,
        scratch_stride,
        shortlist_cap: list_cap,
        read_backs,
        symmetric: false,
        bounded: Some(bounded),
        sparse: false,
        queries_bounded: false,
    })
}

/// Most keys a row of a bounded sweep's selects may hold (`MAX_LEN` in bounded_lists.wgsl,
/// which holds them in workgroup memory): its sample and its list are no longer.
pub(crate) const MAX_SHORT_SELECT: usize = 4096;

/// Largest query tile of a bounded sweep: fewer passes end in fewer partial waves, against
/// larger diagonal blocks computed whole (notes/select.md, "The filter's strips, the tiles and
/// the sample").
const BOUNDED_TILE: usize = 4096;

/// The sample (of about `aim` rows) and the bound's rank for `n` rows and `kc` candidates,
/// or `None` where the sample would be too small to bound kc.
fn bound_sample(n: usize, kc: usize, aim: usize) -> Option<BoundedSweep> {
    let sample_step = (n / aim).max(4);
    // Whole vec4s of keys a row (the dense select's stride).
    let sample_rows = (n / sample_step).min(MAX_SHORT_SELECT) / 4 * 4;
    let f = sample_step as f64;
    // Rank r whose expected count r f is BOUND_BELOW_SIGMAS deviations (f sqrt r) above kc.
    let z = BOUND_BELOW_SIGMAS;
    let root = (z + (z * z + 4.0 * kc as f64 / f).sqrt()) / 2.0;
    let rank = (root * root).ceil() as usize;
    (rank * 2 <= sample_rows).then_some(BoundedSweep { sample_rows, sample_step, rank })
}

/// Pairs a row's list holds in a bounded sweep: BOUND_ABOVE_SIGMAS deviations above the
/// expected count, in whole blocks of 64 (so that lists start at 256-byte offsets).
fn list_cap(kc: usize, b: BoundedSweep) -> usize {
    let f = b.sample_step as f64;
    let r = b.rank as f64;
    let expected = f * (r + BOUND_ABOVE_SIGMAS * r.sqrt());
    (expected.ceil() as usize).max(kc + 64).next_multiple_of(64)
}

/// What bears on how a round of candidates sweeps the corpus.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SweepAsk {
    /// The round's queries, corpus, caps and budget.
    pub tiles: TileAsk,
    /// The queries are the resident corpus rows themselves (a graph's first round), which a
    /// symmetric or bounded sweep needs.
    pub from_corpus: bool,
    /// The device ranks and certifies rows, which a bounded sweep needs.
    pub ranks: bool,
    /// `Options::symmetric_graphs` and `Options::bounded_sweeps`: `None` leaves the choice
    /// here, `Some` forces a sweep on (where it is possible) or off.
    pub symmetric: Option<bool>,
    pub bounded: Option<bool>,
    /// Dense tiles' candidates are picked by the batch index sort, which a bounded sweep
    /// (whose rows select from short lists, not dense tiles) would leave unused: it takes a
    /// bounded sweep only where one is forced.
    pub sorts: bool,
}

/// The one place that chooses a round's sweep, as the tiles it runs in: bounded (rows
/// finished tile by tile under sampled bounds) where lists are long, else symmetric (each
/// distance once for both rows) where all rows' state fits, else plain query tiles.
pub(crate) fn choose_sweep(a: SweepAsk) -> Result<TilePlan> {
    let SweepAsk { tiles, from_corpus, ranks, symmetric, bounded, sorts } = a;
    let TileAsk { nq, d, kc, corpus, caps, dev, .. } = tiles;
    let symmetric_plan = (from_corpus && symmetric != Some(false))
        .then(|| plan_symmetric(nq, d, kc, corpus, caps, dev, symmetric == Some(true), sorts))
        .flatten();
    let bounded_forced = bounded == Some(true);
    let bounded_wanted = bounded_forced || (symmetric_plan.is_none() && bounded.is_none() && !sorts);
    let bounded_plan = (from_corpus && ranks && bounded_wanted)
        .then(|| plan_bounded(nq, d, kc, corpus, caps, dev, bounded_forced))
        .flatten();
    match bounded_plan.or(symmetric_plan) {
        Some(tiles) => Ok(tiles),
        None => plan_tiles(tiles),
    }
}

/// Whether a two-sided block of `rows` rows split at `split` (a symmetric sweep over both
/// sides, `two_sided`) pays against two searches of one side's rows among the other's. It
/// computes half the keys, but holds every row's state on the device, which under a small
/// budget leaves it narrow dense tiles, where the searches' tiles are sparse and few: each
/// dispatch costs about as much as `KEYS_PER_DISPATCH` keys whatever its size, so the
/// choice counts both.
pub(crate) fn two_sided_pays(
    two_sided: &TilePlan,
    rows: usize,
    split: usize,
    d: usize,
    kc: usize,
    caps: TileCaps,
    dev: DeviceBudget,
) -> bool {
    let side = split.max(rows - split);
    let searches = plan_corpus(side, d, dev)
        .and_then(|corpus| plan_tiles(TileAsk { nq: side, d, kc, corpus, corpus_rows: side, caps, dev }));
    let Ok(plain) = searches else { return true };
    let keys = split as f64 * (rows - split) as f64;
    // The other side's rows against the split's, their keys appended to the split's rows;
    // the split's rows first meet a tile of the other's for their bounds.
    let bounding = kc.next_multiple_of(two_sided.query_rows);
    let once = dispatches(two_sided, rows - split, split, true) + dispatches(two_sided, split, bounding, false);
    let twice = dispatches(&plain, split, rows - split, false) + dispatches(&plain, rows - split, split, false);
    keys + once as f64 * KEYS_PER_DISPATCH <= 2.0 * keys + twice as f64 * KEYS_PER_DISPATCH
}

/// Pairs a corpus row's list holds in a filtered search of a pair of blocks
/// (`CorpusSession::filtered_candidates`). A row's bound is its kc-th key among the rows of
/// the blocks merged so far, so when the two blocks are alike about kc of the other block's
/// rows fall under it at first, fewer as the bounds tighten; a row past the cap is searched
/// again.
pub(crate) fn filtered_list_cap(kc: usize) -> usize {
    2 * kc
}

/// The budget a filtered search of `rows` corpus rows with lists of `cap` pairs plans its
/// tiles within: the device's, less the corpus rows' bounds, counts and lists. `None` where
/// those take more than a third of it, or their lists half a binding.
pub(crate) fn filtered_budget(dev: DeviceBudget, rows: usize, cap: usize) -> Option<DeviceBudget> {
    let lists = rows as u64 * cap as u64 * 8;
    let bytes = rows as u64 * (8 + 4) + lists;
    (bytes <= dev.budget / 3 && lists <= dev.max_binding / 2)
        .then_some(DeviceBudget { budget: dev.budget - bytes, ..dev })
}

/// Keys whose arithmetic costs about as much as one dispatch's fixed cost: on one H100, a
/// graph's keys take about 16 ps each and a small dispatch about 17 us (`notes/partition.md`).
const KEYS_PER_DISPATCH: f64 = 1e6;

/// Dispatches of a sweep of `rows` query rows against `cols` columns in `t`'s tiles: per
/// distance tile its GEMM and a select (the first, into the running lists) or a merge (the
/// select too where dense), and with `column_merges` the column rows' merges, a query
/// tile's rows at a time.
fn dispatches(t: &TilePlan, rows: usize, cols: usize, column_merges: bool) -> u64 {
    let mut per_query_tile = 0;
    let (mut met, mut first) = (0, true);
    while met < cols {
        let width = sparse_tile_width(t, met).min(cols - met);
        let sparse = t.sparse && !first;
        per_query_tile += match (first, sparse) {
            (true, _) | (false, true) => 2,
            (false, false) => 3,
        };
        if column_merges {
            per_query_tile += width.div_ceil(t.query_rows) as u64;
        }
        (met, first) = (met + width, false);
    }
    rows.div_ceil(t.query_rows.max(1)) as u64 * per_query_tile
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round of `n` queries against as many corpus rows of dimension `d`, `kc` candidates
    /// each, with no caps.
    fn square(n: usize, d: usize, kc: usize, dev: DeviceBudget) -> TileAsk {
        let corpus = plan_corpus(n, d, dev).unwrap();
        TileAsk { nq: n, d, kc, corpus, corpus_rows: n, caps: TileCaps::default(), dev }
    }

    const LAVAPIPE: DeviceBudget = DeviceBudget { max_binding: 128 << 20, budget: 1 << 30 };

    #[test]
    fn filtered_searches_leave_most_of_the_budget_to_their_tiles() {
        let dev = DeviceBudget { max_binding: 2 << 30, budget: 128 << 20 };
        let cap = filtered_list_cap(32);
        let left = filtered_budget(dev, 65536, cap).expect("lists of 65536 rows fit 128 MiB");
        assert_eq!(left.budget, dev.budget - 65536 * (12 + cap as u64 * 8));
        assert!(left.budget >= dev.budget * 2 / 3);
        assert!(filtered_budget(dev, 131072, cap).is_none(), "lists over a third of the budget");
        let narrow = DeviceBudget { max_binding: 16 << 20, budget: 1 << 30 };
        assert!(filtered_budget(narrow, 65536, cap).is_none(), "lists over half a binding");
    }

    #[test]
    fn bounded_query_rows_take_tall_tiles_of_sparse_keys_only() {
        // A pair of blocks of 65536 rows, d = 128, kc = 32 under 128 MiB less the column lists.
        let dev = filtered_budget(DeviceBudget { max_binding: 2 << 30, budget: 128 << 20 }, 65536, 64).unwrap();
        let plain = plan_tiles(square(65536, 128, 32, dev)).unwrap();
        let bounded = plan_bounded_queries(square(65536, 128, 32, dev)).unwrap();
        assert!(bounded.sparse && bounded.queries_bounded && !plain.queries_bounded, "{bounded:?}");
        // One tile spans the block; the auxiliary arrays hold a merge, not a tile.
        assert_eq!((bounded.column_tile, bounded.scratch_stride), (65536, 32 + bounded.shortlist_cap));
        assert!(bounded.query_rows >= 3 * plain.query_rows, "{bounded:?} against {plain:?}");
        let row = prepared_row_bytes(128);
        let per_row =
            query_row_bytes(bounded.dist_stride, bounded.scratch_stride, 32, 128, bounded.read_backs, row, false)
                + 8 * 32;
        assert!(65536 * row + bounded.query_rows as u64 * per_row <= dev.budget);
        // Lists too long for shortlists take the plain plan.
        let long = plan_bounded_queries(TileAsk { nq: 4096, ..square(65536, 128, 512, dev) }).unwrap();
        assert!(!long.queries_bounded && long.shortlist_cap == 0, "{long:?}");
    }

    #[test]
    fn every_buffer_stays_under_the_binding_limit() {
        for &(n, d, kc) in &[
            (1usize, 1usize, 1usize),
            (100_000, 128, 26),
            (1 << 20, 96, 40),
            (65536, 128, 1266),
            (16384, 4096, 656),
            (3_000_000, 3, 3_000_000),
        ] {
            let corpus = plan_corpus(n, d, LAVAPIPE).unwrap();
            assert!(corpus.chunk_rows as u64 * prepared_row_bytes(d) <= LAVAPIPE.max_binding);
            let t = match plan_tiles(square(n, d, kc, LAVAPIPE)) {
                Ok(t) => t,
                Err(e) => {
                    assert!(kc as u64 * 16 > LAVAPIPE.max_binding, "n={n} d={d} kc={kc}: {e}");
                    continue;
                }
            };
            let q = t.query_rows as u64;
            assert!(q >= 1 && q <= n as u64);
            assert!(q * t.dist_stride as u64 * 4 <= LAVAPIPE.max_binding);
            assert!(t.dist_stride >= t.column_tile && t.dist_stride.is_multiple_of(4));
            assert!(q * t.scratch_stride as u64 * 4 <= LAVAPIPE.max_binding);
            assert!(q * kc as u64 * 16 <= LAVAPIPE.max_binding);
            assert!(t.scratch_stride >= t.column_tile && t.scratch_stride >= 2 * kc);
            assert!(t.shortlist_cap == 0 || t.shortlist_cap >= kc);
            assert!(kc + t.shortlist_cap <= t.scratch_stride);
            assert!(q * t.shortlist_cap as u64 * 8 <= LAVAPIPE.max_binding);
        }
    }

    #[test]
    fn long_lists_take_wider_column_tiles() {
        let dev = DeviceBudget { max_binding: 2 << 30, budget: 4 << 30 };
        let columns = |n: usize, kc: usize, caps: TileCaps| {
            plan_tiles(TileAsk { caps, ..square(n, 128, kc, dev) }).unwrap().column_tile
        };
        assert_eq!(columns(262144, 26, TileCaps::default()), MAX_COLUMN_TILE);
        assert_eq!(columns(262144, 1250, TileCaps::default()), MAX_DENSE_COLUMN_TILE);
        assert_eq!(columns(40000, 1250, TileCaps::default()), 40000);
        assert_eq!(columns(262144, 1250, TileCaps { column: 384, ..TileCaps::default() }), 384);
        // A budget that leaves the widest tiles few query rows takes narrower ones.
        let small = DeviceBudget { max_binding: 128 << 20, budget: 1 << 30 };
        let plan = plan_tiles(square(262144, 128, 1250, small)).unwrap();
        assert!(plan.column_tile < MAX_DENSE_COLUMN_TILE && plan.query_rows >= MIN_WIDE_QUERY_ROWS, "{plan:?}");
        // So do short lists: 64 MiB leaves 16384 columns 151 query rows.
        let tight = DeviceBudget { max_binding: 64 << 20, budget: 64 << 20 };
        let plan = plan_tiles(square(32768, 128, 32, tight)).unwrap();
        assert!(plan.column_tile >= MIN_COLUMN_TILE && plan.query_rows >= MIN_WIDE_QUERY_ROWS, "{plan:?}");
        let tight = DeviceBudget { max_binding: 128 << 20, budget: 128 << 20 };
        let sym = plan_symmetric(
            32768,
            128,
            32,
            plan_corpus(32768, 128, tight).unwrap(),
            TileCaps::default(),
            tight,
            true,
            false,
        )
        .expect("a forced symmetric sweep of 32768 rows fits 128 MiB");
        assert!(sym.column_tile >= MIN_COLUMN_TILE && sym.query_rows >= SYMMETRIC_TILE, "{sym:?}");
        let corpus = plan_corpus(262144, 128, dev).unwrap();
        let sym = plan_symmetric(262144, 128, 26, corpus, TileCaps::default(), dev, false, false).unwrap();
        assert!(sym.column_tile <= MAX_COLUMN_TILE);
    }

    #[test]
    fn more_read_back_buffers_only_where_they_cost_little() {
        let plan = |n: usize, kc: usize, budget: u64| {
            let dev = DeviceBudget { max_binding: 128 << 20, budget };
            plan_tiles(square(n, 70, kc, dev)).unwrap()
        };
        assert_eq!(plan(65536, 1250, 1 << 30).read_backs, 3);
        // The 48 KiB budget of the GPU tests' smallest tiles, after two widenings of k = 20.
        let tight = plan(300, 300, 48 << 10);
        assert_eq!(tight.read_backs, 1);
        assert!(tight.query_rows >= 1);
    }

    #[test]
    fn symmetric_sweeps_align_their_tiles_and_fit_the_budget() {
        let h100 = DeviceBudget { max_binding: 2 << 30, budget: 16 << 30 };
        for &(n, d, kc, dev) in &[
            (262_144usize, 128usize, 26usize, h100),
            (1 << 20, 96, 32, h100),
            (1 << 21, 128, 32, DeviceBudget { max_binding: 2 << 30, budget: 4 << 30 }),
            (65536, 128, 1250, h100),
            (3000, 24, 125, DeviceBudget { max_binding: 128 << 20, budget: 64 << 20 }),
        ] {
            let corpus = plan_corpus(n, d, dev).unwrap();
            let t = plan_symmetric(n, d, kc, corpus, TileCaps::default(), dev, true, false)
                .unwrap_or_else(|| panic!("n={n} d={d} kc={kc}: no symmetric plan"));
            assert!(t.symmetric);
            assert!(t.query_rows.is_multiple_of(ALIGN_ROWS) && t.column_tile.is_multiple_of(ALIGN_ROWS));
            assert!(t.query_rows >= ALIGN_ROWS && t.query_rows < n);
            assert!(kc + t.shortlist_cap <= t.scratch_stride);
            assert!((n + t.query_rows) as u64 * kc as u64 * 8 <= dev.max_binding);
            let slot = 8 * t.shortlist_cap as u64 + 4;
            assert!((t.query_rows + t.column_tile) as u64 * (slot - 4) <= dev.max_binding);
            let state = n as u64 * (8 * kc as u64 + 16);
            let per_query_row = query_row_bytes(
                t.dist_stride,
                t.scratch_stride,
                kc,
                t.shortlist_cap,
                t.read_backs,
                prepared_row_bytes(d),
                true,
            ) + slot;
            let tiles = t.query_rows as u64 * per_query_row + t.column_tile as u64 * slot;
            assert!(n as u64 * prepared_row_bytes(d) + state + tiles <= dev.budget);
        }
        assert_eq!(symmetric_tiles(262_144, 128, 26), Some(13));
        assert_eq!(symmetric_tiles(1 << 20, 96, 32), Some(20));
        assert_eq!(symmetric_tiles(65536, 128, 80), Some(4));
        assert_eq!(symmetric_tiles(16384, 4096, 640), Some(4));
        assert_eq!(symmetric_tiles(65536, 128, 320), None);
        assert_eq!(symmetric_tiles(65536, 128, 1250), None);
        assert_eq!(symmetric_tiles(16384, 128, 32), None);
        let auto = |n: usize, d: usize, kc: usize, dev: DeviceBudget| {
            plan_symmetric(n, d, kc, plan_corpus(n, d, dev).unwrap(), TileCaps::default(), dev, false, false)
        };
        let h100 = DeviceBudget { max_binding: 2 << 30, budget: 16 << 30 };
        // 13 tiles wanted, and bindings of 2 GiB hold them; bindings of 1 GiB hold 16384 rows
        // of the auxiliary arrays (4 bytes a slot, 16384 columns).
        let tiles = |dev: DeviceBudget| auto(262_144, 128, 26, dev).map(|t| 262_144usize.div_ceil(t.query_rows));
        assert_eq!(tiles(h100), Some(13));
        assert_eq!(tiles(DeviceBudget { max_binding: 1 << 30, ..h100 }), Some(16));
        // Under 1 GiB the tiles would be far smaller than the sweep needs to pay.
        assert!(auto(262_144, 128, 26, DeviceBudget { max_binding: 2 << 30, budget: 1 << 30 }).is_none());
        // Not possible: one query tile, state over the budget, a streamed corpus.
        let forced = |n: usize, d: usize, kc: usize, dev: DeviceBudget| {
            plan_symmetric(n, d, kc, plan_corpus(n, d, dev).unwrap(), TileCaps::default(), dev, true, false)
        };
        assert!(forced(1000, 32, 26, h100).is_none());
        assert!(forced(65536, 128, 1250, DeviceBudget { max_binding: 2 << 30, budget: 512 << 20 }).is_none());
        assert!(forced(10_000_000, 128, 26, LAVAPIPE).is_none());
    }

    #[test]
    fn bounded_sweeps_bound_kc_and_fit_the_budget() {
        let default = DeviceBudget { max_binding: 2 << 30, budget: 4 << 30 };
        let bounded = |n: usize, d: usize, kc: usize, dev: DeviceBudget, forced: bool| {
            plan_bounded(n, d, kc, plan_corpus(n, d, dev).unwrap(), TileCaps::default(), dev, forced)
        };
        let t = bounded(65536, 128, 1024, default, false).expect("n=65536 k=1000 is swept under bounds");
        let b = t.bounded.unwrap();
        assert_eq!((b.sample_rows, b.sample_step), (2048, 32));
        // kc lies four deviations under the expected count, the list's length five above it.
        let f = b.sample_step as f64;
        let (expected, deviation) = (b.rank as f64 * f, f * (b.rank as f64).sqrt());
        assert!(expected - 4.0 * deviation >= 1024.0 && expected - 4.0 * deviation < 1024.0 + deviation);
        assert!(t.shortlist_cap as f64 >= expected + 5.0 * deviation && t.shortlist_cap.is_multiple_of(64));
        assert!(t.query_rows.is_multiple_of(ALIGN_ROWS) && t.query_rows <= BOUNDED_TILE);
        let per_query_row = query_row_bytes(
            t.dist_stride,
            t.scratch_stride,
            1024,
            t.shortlist_cap,
            t.read_backs,
            prepared_row_bytes(128),
            true,
        );
        let state = 65536 * (8 * (1024 + t.shortlist_cap) as u64 + 16);
        assert!(65536 * prepared_row_bytes(128) + state + t.query_rows as u64 * per_query_row <= default.budget);
        assert!(65536 * t.shortlist_cap as u64 * 8 <= default.max_binding);
        assert!(b.sample_rows.max(t.shortlist_cap) <= MAX_SHORT_SELECT && t.dist_stride >= 65536);
        // Short lists and small graphs keep the other sweeps unless forced; forced, a graph
        // too small to sample, a streamed corpus or lists over a binding get none.
        // Longer lists take the larger sample, whose bounds are tighter (k=1500 here).
        let long = bounded(65536, 128, 1875, default, false).expect("k=1500 fits lists of the larger sample");
        assert_eq!(long.bounded.unwrap().sample_rows, 4096);
        assert!(bounded(65536, 128, 2560, default, false).is_none());
        assert!(bounded(65536, 128, 26, default, false).is_none());
        assert!(bounded(16384, 128, 1024, default, false).is_none());
        assert!(bounded(3000, 24, 125, default, true).is_some());
        assert!(bounded(200, 24, 125, default, true).is_none());
        assert!(bounded(10_000_000, 128, 1024, LAVAPIPE, true).is_none());
        assert!(bounded(65536, 128, 1024, DeviceBudget { max_binding: 128 << 20, budget: 1 << 30 }, true).is_none());
    }

    #[test]
    fn each_round_takes_the_sweep_its_problem_and_the_options_allow() {
        let dev = DeviceBudget { max_binding: 2 << 30, budget: 16 << 30 };
        let ask = |nq: usize, kc: usize| SweepAsk {
            tiles: square(nq, 128, kc, dev),
            from_corpus: true,
            ranks: true,
            symmetric: None,
            bounded: None,
            sorts: false,
        };
        let kind = |t: TilePlan| match (t.symmetric, t.bounded.is_some()) {
            (true, _) => "symmetric",
            (_, true) => "bounded",
            _ => "plain",
        };
        let sweep = |a: SweepAsk| kind(choose_sweep(a).unwrap());
        // Short lists of a large graph: symmetric; long lists: bounded; small graphs: plain.
        assert_eq!(sweep(ask(262_144, 26)), "symmetric");
        assert_eq!(sweep(ask(65536, 1024)), "bounded");
        // The batch index sort selector keeps its dense tiles unless a bounded sweep is forced.
        assert_eq!(sweep(SweepAsk { sorts: true, ..ask(65536, 1024) }), "plain");
        assert_eq!(sweep(SweepAsk { sorts: true, bounded: Some(true), ..ask(65536, 1024) }), "bounded");
        assert_eq!(sweep(ask(16384, 26)), "plain");
        // Searches and devices that do not rank rows take neither.
        assert_eq!(sweep(SweepAsk { from_corpus: false, ..ask(262_144, 26) }), "plain");
        assert_eq!(sweep(SweepAsk { ranks: false, ..ask(65536, 1024) }), "plain");
        // The options force a sweep off, or on where it is possible.
        assert_eq!(sweep(SweepAsk { symmetric: Some(false), ..ask(262_144, 26) }), "plain");
        assert_eq!(sweep(SweepAsk { bounded: Some(false), ..ask(65536, 1024) }), "plain");
        assert_ne!(sweep(ask(16384, 1024)), "bounded");
        assert_eq!(sweep(SweepAsk { bounded: Some(true), ..ask(16384, 1024) }), "bounded");
        assert_eq!(sweep(SweepAsk { symmetric: Some(true), ..ask(16384, 26) }), "symmetric");
    }

    #[test]
    fn two_sided_blocks_only_where_their_tiles_pay() {
        let pays = |rows: usize, budget: u64| {
            let dev = DeviceBudget { max_binding: budget.min(2 << 30), budget };
            let caps = TileCaps { query: rows / 2, ..TileCaps::default() };
            let tiles = plan_symmetric(rows, 128, 32, plan_corpus(rows, 128, dev).unwrap(), caps, dev, true, false)?;
            Some(two_sided_pays(&tiles, rows, rows / 2, 128, 32, TileCaps::default(), dev))
        };
        // The default budget holds blocks of 2^19 rows a side with wide tiles.
        assert_eq!(pays(1 << 20, 4 << 30), Some(true));
        // 64 MiB holds the state of 32768 rows, but leaves their sweep tiles of a few hundred
        // rows, where two searches take over a thousand.
        // 64 MiB holds the state of both sides of blocks of 8192 or 16384 rows, but leaves
        // them dense tiles of a few hundred rows by 1024 columns, where two searches take
        // sparse tiles of over a thousand rows: two-sided they took 2.4 times as long.
        assert_eq!(pays(16384, 64 << 20), Some(false));
        assert_eq!(pays(32768, 64 << 20), Some(false));
        // 256 MiB leaves blocks of 65536 rows wide enough tiles.
        assert_eq!(pays(131072, 256 << 20), Some(true));
    }

    #[test]
    fn tiles_narrowed_by_the_budget_are_sparse_after_the_first() {
        let plan = |n: usize, kc: usize, budget: u64| {
            let dev = DeviceBudget { max_binding: budget.min(2 << 30), budget };
            plan_tiles(square(n, 128, kc, dev)).unwrap()
        };
        // A search of 32768 rows against as many under 64 MiB: sparse tiles after a first one
        // narrowed to 1024 columns for taller query tiles.
        let small = plan(32768, 32, 64 << 20);
        assert!(small.sparse && small.column_tile == MIN_COLUMN_TILE && small.shortlist_cap > 0, "{small:?}");
        let dev = DeviceBudget { max_binding: 64 << 20, budget: 64 << 20 };
        let caps = TileCaps { column: 2048, ..TileCaps::default() };
        let wider = plan_tiles_within(TileAsk { caps, ..square(32768, 128, 32, dev) }).unwrap();
        assert!(small.query_rows > wider.query_rows, "{small:?} against {wider:?}");
        // Sparse tiles double: 1024, 1024, 2048, ... cover the chunk in a handful.
        let mut widths = Vec::new();
        let mut met = 0;
        while met < 32768 {
            let w = sparse_tile_width(&small, met).min(32768 - met);
            widths.push(w);
            met += w;
        }
        assert_eq!(widths, [1024, 1024, 2048, 4096, 8192, 16384]);
        // The default budget's tiles are as wide as ever, and dense.
        let ample = plan(32768, 32, 4 << 30);
        assert!(!ample.sparse && ample.column_tile == MAX_COLUMN_TILE, "{ample:?}");
        assert_eq!(sparse_tile_width(&ample, 16384), MAX_COLUMN_TILE);
        // Lists too long for shortlists keep dense tiles.
        assert!(!plan(32768, 600, 64 << 20).sparse);
    }

    #[test]
    fn sparse_tiles_are_left_where_rows_overflow() {
        assert!(sparse_tiles_pay(0, 0));
        assert!(sparse_tiles_pay(4096, 256));
        assert!(!sparse_tiles_pay(4096, 257));
    }

    #[test]
    fn large_corpora_are_streamed() {
        let p = plan_corpus(10_000_000, 128, LAVAPIPE).unwrap();
        assert!(!p.resident);
        assert!(plan_corpus(10_000, 128, LAVAPIPE).unwrap().resident);
    }
}
