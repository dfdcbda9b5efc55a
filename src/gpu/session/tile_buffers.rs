//! The buffers of a round of candidates: what they depend on (`TileKey`), their sizes, and a
//! set made anew or from an earlier round's where that one holds it.

use super::corpus::PreparedRows;
use crate::error::Result;
use crate::gpu::engine::GpuEngine;
use crate::gpu::kernels::{AUX_NAMES, MAX_CERTIFY_KC, PARAM_SLOT};
use crate::gpu::sort::RadixSort;
use crate::plan::{TilePlan, WIDE_ROWS};

/// What the buffers of a round of candidates depend on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::gpu) struct TileKey {
    pub(super) corpus: (usize, usize),
    pub(super) tiles: TilePlan,
    pub(super) kc: usize,
    pub(super) column_tiles: usize,
    pub(super) gpu_exact: bool,
    /// k, when rows are ranked and certified on the GPU.
    pub(super) certify_k: Option<usize>,
    /// The batch index sort selector gives a symmetric sweep's column side too, which keeps
    /// a tile's key order (`TileBuffers::key_order`).
    pub(super) sorts_columns: bool,
    /// A search whose corpus rows keep lists of the keys under their bounds too
    /// (`CorpusSession::filtered_candidates`).
    pub(super) filter: Option<ColumnFilter>,
}

/// The corpus side of a filtered search: each of its `rows` rows has a bound in the row
/// state (from index `TileKey::state_rows` on) and a list of `cap` pairs in the shortlists,
/// after the query rows' slots, kept for the whole search.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::gpu) struct ColumnFilter {
    pub(in crate::gpu) rows: usize,
    pub(in crate::gpu) cap: usize,
}

impl ColumnFilter {
    /// The list index of the first corpus row, which indexes both the shortlists' lengths
    /// (one a slot) and their pairs (in lists of `cap` pairs): past the `slots` query slots'
    /// lengths, and past their pairs, `slot_cap` each.
    pub(super) fn first_list(&self, slots: usize, slot_cap: usize) -> usize {
        (slots * slot_cap).div_ceil(self.cap).max(slots)
    }
}

impl TileKey {
    /// Rows of the per-row state: the query tile's, or every corpus row's in a symmetric or a
    /// bounded sweep.
    fn state_rows(&self) -> usize {
        if self.tiles.symmetric || self.tiles.bounded.is_some() {
            self.corpus.0
        } else {
            self.tiles.query_rows
        }
    }

    /// Shortlists: in a symmetric sweep, slots for a query tile's rows and a distance tile's
    /// columns (a shortlist is emptied when its tile's keys are merged); otherwise one a row
    /// of the state (a bounded sweep's lists are kept across tiles).
    fn shortlist_rows(&self) -> usize {
        if self.tiles.symmetric {
            self.tiles.query_rows + self.tiles.column_tile
        } else {
            self.state_rows()
        }
    }

    /// Whether a symmetric sweep computes each mutual pair's exact key once (`mutual` in
    /// refine.wgsl): where every row's lists stay on the GPU, are ranked there, fit one sort
    /// (`MAX_CERTIFY_KC`), and are long enough for the exact keys to dominate (`WIDE_ROWS`).
    /// Graphs of long rows list most of their pairs in both rows (notes/exactness.md).
    fn shares_mutual_keys(&self) -> bool {
        self.tiles.symmetric
            && self.gpu_exact
            && self.certify_k.is_some()
            && self.kc <= MAX_CERTIFY_KC
            && self.corpus.1 >= WIDE_ROWS
    }
}

/// Ranked answers of one query tile, laid out as in the read-back buffer.
pub(super) struct CertifyBuffers {
    pub(super) k: usize,
    pub(super) error_bounds: wgpu::Buffer,
    /// Ids from 0, reported (f32) distances from `distances_at` (not keys: a third fewer
    /// bytes to read back), certificates from `status_at`; the read-back buffer has the
    /// failure flags after them, at `flags_at`. One layout in both, so that the answers go
    /// to the host as one flat copy: published by the next query tile's distance kernel
    /// (`distance_publish.wgsl`) or copied after the ranking.
    pub(super) answers: wgpu::Buffer,
    /// Per row and run of `MAX_CERTIFY_KC` slots, for longer lists (`sort_runs`).
    pub(super) run_stats: wgpu::Buffer,
    pub(super) distances_at: u64,
    pub(super) status_at: u64,
    pub(super) flags_at: u64,
}

impl CertifyBuffers {
    /// The ranking kernels' bindings of the ids, distances and certificates.
    pub(super) fn bindings(&self) -> [wgpu::BufferBinding<'_>; 3] {
        let part = |from: u64, to: u64| wgpu::BufferBinding {
            buffer: &self.answers,
            offset: from,
            size: std::num::NonZeroU64::new(to - from),
        };
        [part(0, self.distances_at), part(self.distances_at, self.status_at), part(self.status_at, self.flags_at)]
    }
}

/// Buffers of one round of candidates, reused by every query tile.
pub(in crate::gpu) struct TileBuffers {
    pub(super) raw_queries: wgpu::Buffer,
    pub(super) queries: PreparedRows,
    /// Per row: (corpus index to exclude, shortlist bound). This and the other per-row arrays
    /// (`failed`, the running lists at the start of `candidates`) hold `state_rows` rows: a
    /// query tile's, or in a symmetric or bounded sweep every corpus row's, bound from the
    /// tile's first row.
    pub(super) row_state: wgpu::Buffer,
    pub(super) state_rows: usize,
    pub(super) failed: wgpu::Buffer,
    pub(super) dist: wgpu::Buffer,
    /// The select's two auxiliary arrays, keys and indices apart, in binding order (a's keys,
    /// a's indices, b's keys, b's indices; select.wgsl).
    pub(super) aux: [wgpu::Buffer; 4],
    /// A tile's key-sorted positions, kept while the batch index sort selector sorts them by
    /// column, for its sort by row (`sort_select.wgsl`).
    pub(super) key_order: Option<wgpu::Buffer>,
    pub(super) candidates: wgpu::Buffer,
    /// Lengths and pairs of the shortlists (`TileKey::shortlist_rows`): in a bounded sweep,
    /// each row's list of every key under its bound.
    pub(super) shortlist_len: wgpu::Buffer,
    pub(super) shortlist: wgpu::Buffer,
    /// A filtered search's corpus side, and the index of its first row's list.
    pub(super) filter: Option<(ColumnFilter, usize)>,
    pub(super) uniform: wgpu::Buffer,
    /// Read-back of the running lists, then (at `flags_at`) the failure flags; two where the
    /// budget allows (`TilePlan::read_backs`), so that one query tile's results are copied out
    /// on the host while the next tile runs.
    pub(super) staging: Vec<wgpu::Buffer>,
    pub(super) flags_at: u64,
    /// Exact keys of the candidates (with GPU re-ranking), and where they go in `staging`.
    pub(super) exact: Option<(wgpu::Buffer, u64)>,
    /// Mutual pairs share their exact keys (`TileKey::shares_mutual_keys`): `exact` holds
    /// every state row's keys, not a tile's.
    pub(super) shared_keys: bool,
    /// Ranked answers, when rows are certified on the GPU.
    pub(super) certify: Option<CertifyBuffers>,
    /// What each buffer holds (for a set reused by a later key, the sizes it was made with).
    pub(super) sizes: TileSizes,
    /// The batch index sort selector's sorts of a tile, by its (rows, columns), planned in
    /// `aux` on first use and kept while these buffers are (`CorpusSession::tile_sorts`).
    pub(super) tile_sorts: std::sync::Mutex<Vec<KeptTileSorts>>,
    /// A query tile's running lists of no candidates, copied before a tile whose rows start
    /// with bounds (`CorpusSession::reset_rows`); made on first use.
    pub(super) empty_lists: std::sync::Mutex<Option<wgpu::Buffer>>,
    /// The read-back of a filtered search's column lists (`CorpusSession::read_column_lists`);
    /// made on first use.
    pub(super) column_staging: std::sync::Mutex<Option<wgpu::Buffer>>,
}

/// A tile's shape and its sorts.
pub(super) type KeptTileSorts = ((usize, usize), std::sync::Arc<TileSorts>);

/// The batch index sort selector's sorts of one tile shape: by key, then, keeping that order,
/// by row and (in a symmetric sweep) by column.
pub(super) struct TileSorts {
    pub(super) by_key: RadixSort,
    pub(super) by_row: RadixSort,
    pub(super) by_column: Option<RadixSort>,
}

/// Bytes of each buffer of a set of tile buffers, from its key (`TileBuffers::new`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct TileSizes {
    raw_queries: u64,
    query_vectors: u64,
    query_norms: u64,
    row_state: u64,
    failed: u64,
    dist: u64,
    /// Each of the auxiliary arrays' four buffers (keys and indices of each).
    aux: u64,
    /// `TileBuffers::key_order`; 0: none.
    key_order: u64,
    candidates: u64,
    shortlist_len: u64,
    shortlist: u64,
    uniform: u64,
    /// Each read-back buffer, and how many there are.
    staging: u64,
    read_backs: usize,
    exact: Option<u64>,
    certify: Option<CertifySizes>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct CertifySizes {
    error_bounds: u64,
    /// Ids, distances and certificates (`CertifyBuffers::answers`).
    answers: u64,
    run_stats: u64,
}

impl TileSizes {
    pub(super) fn of(d: usize, key: &TileKey) -> Self {
        let TileKey { tiles, kc, column_tiles, gpu_exact, certify_k, sorts_columns, .. } = *key;
        let q = tiles.query_rows;
        let state_rows = key.state_rows();
        // Parameter slots per distance tile: distance, select (two for the batch index sort
        // selector, three with its column side), merge, and the merges of the column rows'
        // shortlists (a query tile's rows at a time). A bounded sweep's tile takes three:
        // distance, filter, select.
        let slots_per_tile =
            4 + usize::from(sorts_columns) + if tiles.symmetric { tiles.column_tile.div_ceil(q) } else { 0 };
        let certify = certify_k.map(|k| CertifySizes {
            error_bounds: (q * 8) as u64,
            answers: CertifyLayout::new(q, k).flags_at,
            run_stats: (q * kc.div_ceil(MAX_CERTIFY_KC) * 8) as u64,
        });
        let candidate_staging =
            (q * kc * 8 + q * 4).next_multiple_of(8) as u64 + if gpu_exact { (q * kc * 8) as u64 } else { 0 };
        let certify_staging = certify_k.map_or(0, |k| CertifyLayout::new(q, k).flags_at + (q * 4) as u64);
        // Shared keys are read across tiles: every row's are kept.
        let key_rows = if key.shares_mutual_keys() { state_rows } else { q };
        // A filtered search's corpus rows: a bound each after the state rows, a list each
        // after the query slots.
        let (filter_state, shortlist_len, shortlist) = match key.filter {
            Some(f) => {
                let lists = f.first_list(key.shortlist_rows(), tiles.shortlist_cap) + f.rows;
                (f.rows, lists, lists * f.cap)
            }
            None => (0, key.shortlist_rows(), key.shortlist_rows() * tiles.shortlist_cap),
        };
        TileSizes {
            raw_queries: (q * d * 4) as u64,
            query_vectors: (q * d.div_ceil(4) * 16) as u64,
            query_norms: (q * 4) as u64,
            row_state: ((state_rows + filter_state) * 8) as u64,
            failed: (state_rows * 4) as u64,
            dist: (q * tiles.dist_stride * 4) as u64,
            aux: (q * tiles.scratch_stride * 4) as u64,
            key_order: if sorts_columns { (q * tiles.scratch_stride * 4) as u64 } else { 0 },
            candidates: ((state_rows + q) * kc * 8) as u64,
            shortlist_len: (shortlist_len * 4) as u64,
            shortlist: (shortlist * 8).max(8) as u64,
            uniform: (1 + (slots_per_tile * column_tiles) as u64) * PARAM_SLOT,
            staging: candidate_staging.max(certify_staging),
            read_backs: tiles.read_backs,
            exact: gpu_exact.then_some((key_rows * kc * 8) as u64),
            certify,
        }
    }

    /// Whether buffers of these sizes can serve a set of `want`'s: each at least as large
    /// and used the same way, and as many read-back buffers (up to two).
    pub(super) fn hold(&self, want: &TileSizes) -> bool {
        let certify = match (&self.certify, &want.certify) {
            (Some(c), Some(w)) => {
                c.error_bounds >= w.error_bounds && c.answers >= w.answers && c.run_stats >= w.run_stats
            }
            (None, None) => true,
            _ => false,
        };
        let exact = match (self.exact, want.exact) {
            (Some(c), Some(w)) => c >= w,
            (None, None) => true,
            _ => false,
        };
        let sizes = self.plain_sizes().into_iter().zip(want.plain_sizes()).all(|(have, need)| have >= need);
        // A third read-back buffer only gives the host slack: two serve a set that wants three
        // (a symmetric sweep's set, with two, serves its later rounds).
        certify && exact && sizes && self.read_backs >= want.read_backs.min(2)
    }

    /// The sizes of the buffers every set has.
    fn plain_sizes(&self) -> [u64; 13] {
        [
            self.raw_queries,
            self.query_vectors,
            self.query_norms,
            self.row_state,
            self.failed,
            self.dist,
            self.aux,
            self.key_order,
            self.candidates,
            self.shortlist_len,
            self.shortlist,
            self.uniform,
            self.staging,
        ]
    }
}

/// Where the ranked answers of a query tile of `q` rows go in its read-back buffer.
struct CertifyLayout {
    distances_at: u64,
    status_at: u64,
    flags_at: u64,
}

impl CertifyLayout {
    fn new(q: usize, k: usize) -> Self {
        // Each part is bound as storage: offsets of whole 256-byte blocks. The flags start at
        // one too, so that a copy of the answers in whole vec4s stops short of them.
        let distances_at = (q * k * 4).next_multiple_of(256) as u64;
        let status_at = distances_at + (q * k * 4).next_multiple_of(256) as u64;
        CertifyLayout { distances_at, status_at, flags_at: status_at + (q * 4).next_multiple_of(256) as u64 }
    }
}

impl TileBuffers {
    /// The buffers for `key`: those of `earlier` where it holds them all (a later round of
    /// fewer rows then runs in the memory of the first instead of freeing it and allocating
    /// more), else new ones.
    pub(super) fn new(gpu: &GpuEngine, d: usize, key: TileKey, earlier: Option<&TileBuffers>) -> Result<Self> {
        let TileKey { tiles, kc, certify_k, .. } = key;
        let q = tiles.query_rows;
        let want = TileSizes::of(d, &key);
        let earlier = earlier.filter(|e| e.sizes.hold(&want));
        // A reused set keeps the sizes it was made with, for the next comparison.
        let sizes = earlier.map_or(want, |e| e.sizes);
        let buffer = |old: Option<&wgpu::Buffer>, label: &str, size: u64, usage: wgpu::BufferUsages| match old {
            Some(b) => Ok(b.clone()),
            None => gpu.buffer(label, size, usage),
        };
        let storage = wgpu::BufferUsages::STORAGE;
        let copy = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let certify = match (certify_k, want.certify) {
            (Some(k), Some(c)) => {
                let old = earlier.and_then(|e| e.certify.as_ref());
                let CertifyLayout { distances_at, status_at, flags_at } = CertifyLayout::new(q, k);
                Some(CertifyBuffers {
                    k,
                    error_bounds: buffer(old.map(|o| &o.error_bounds), "error bounds", c.error_bounds, storage | copy)?,
                    answers: buffer(old.map(|o| &o.answers), "ranked answers", c.answers, storage | copy)?,
                    run_stats: buffer(old.map(|o| &o.run_stats), "run statistics", c.run_stats, storage)?,
                    distances_at,
                    status_at,
                    flags_at,
                })
            }
            _ => None,
        };
        let mut read_back_usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        if want.certify.is_some() && gpu.kernels.publishes() {
            read_back_usage |= storage;
        }
        // Every read-back buffer of a reused set is kept: a second one lets the host copy out
        // one tile while the next runs.
        let staging = match earlier {
            Some(e) => e.staging.clone(),
            None => (0..want.read_backs)
                .map(|_| gpu.buffer("read-back", want.staging, read_back_usage))
                .collect::<Result<_>>()?,
        };
        let old = |field: fn(&TileBuffers) -> &wgpu::Buffer| earlier.map(field);
        Ok(TileBuffers {
            certify,
            raw_queries: buffer(old(|e| &e.raw_queries), "queries", want.raw_queries, storage | copy)?,
            queries: PreparedRows {
                first: 0,
                rows: q,
                vectors: buffer(old(|e| &e.queries.vectors), "query rows", want.query_vectors, storage | copy)?,
                norms: buffer(old(|e| &e.queries.norms), "query norms", want.query_norms, storage | copy)?,
            },
            row_state: buffer(old(|e| &e.row_state), "row state", want.row_state, storage | copy)?,
            failed: buffer(old(|e| &e.failed), "failed", want.failed, storage | copy)?,
            dist: buffer(old(|e| &e.dist), "distances", want.dist, storage)?,
            aux: [
                buffer(old(|e| &e.aux[0]), AUX_NAMES[0], want.aux, storage)?,
                buffer(old(|e| &e.aux[1]), AUX_NAMES[1], want.aux, storage)?,
                buffer(old(|e| &e.aux[2]), AUX_NAMES[2], want.aux, storage)?,
                buffer(old(|e| &e.aux[3]), AUX_NAMES[3], want.aux, storage)?,
            ],
            key_order: match want.key_order {
                0 => None,
                bytes => Some(buffer(earlier.and_then(|e| e.key_order.as_ref()), "key order", bytes, storage)?),
            },
            candidates: buffer(old(|e| &e.candidates), "candidates", want.candidates, storage | copy)?,
            shortlist_len: buffer(old(|e| &e.shortlist_len), "shortlist lengths", want.shortlist_len, storage | copy)?,
            shortlist: buffer(old(|e| &e.shortlist), "shortlists", want.shortlist, storage | copy)?,
            state_rows: key.state_rows(),
            filter: key.filter.map(|f| (f, f.first_list(key.shortlist_rows(), tiles.shortlist_cap))),
            uniform: buffer(
                old(|e| &e.uniform),
                "params",
                want.uniform,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            )?,
            staging,
            flags_at: (q * kc * 8) as u64,
            exact: match want.exact {
                Some(bytes) => {
                    let old = earlier.and_then(|e| e.exact.as_ref()).map(|(b, _)| b);
                    let keys = buffer(old, "exact keys", bytes, storage | copy)?;
                    Some((keys, (q * kc * 8 + q * 4).next_multiple_of(8) as u64))
                }
                None => None,
            },
            shared_keys: key.shares_mutual_keys(),
            sizes,
            tile_sorts: Default::default(),
            empty_lists: Default::default(),
            column_staging: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_lists_start_past_every_query_slot() {
        // Lists longer than the query slots' shortlists: past the slots' pairs in few lists,
        // but the lengths of all 64 slots come first.
        let long = ColumnFilter { rows: 56, cap: 318 };
        assert_eq!(long.first_list(64, 176), 64);
        // Shorter lists: past the slots' pairs.
        let short = ColumnFilter { rows: 65536, cap: 64 };
        assert_eq!(short.first_list(8885, 128), 8885 * 2);
    }
}
