//! A query tile's results copied out of its mapped read-back buffer into its part of the
//! candidates, on every core, and ranked rows handed over as they arrive (`tile_ranked`).

use rayon::prelude::*;

use super::tile_buffers::TileBuffers;
use super::QueryTile;
use crate::data::stream_copy;
use crate::error::Result;
use crate::gpu::engine::GpuEngine;
use crate::gpu::transfer::read_view;
use crate::refine::{found, order_ties_by_index, Candidates, TileRanked};

thread_local! {
    /// A row of ranked answers whose ties are being ordered by index, per reader thread.
    static TIED_ROW: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A query tile's results in a mapped staging buffer, to be copied into the candidates.
pub(super) struct TileRead {
    pub(super) q0: usize,
    pub(super) rows: usize,
    pub(super) kc: usize,
    /// Ranked answers (`CertifyBuffers`), else running lists and exact keys.
    pub(super) ranked: bool,
}

impl TileRead {
    /// Copies the tile's results out of `staging` into its part of the candidates, then hands
    /// ranked rows to `tile_ranked`; the thread that polls the device unmaps `staging`
    /// afterwards. Returns how many of its rows took a shortlist.
    pub(super) fn copy_out(
        &self,
        gpu: &GpuEngine,
        b: &TileBuffers,
        staging: &wgpu::Buffer,
        mut out: TileOut<'_>,
        tile_ranked: Option<&TileRanked<'_>>,
    ) -> Result<usize> {
        let started = std::time::Instant::now();
        let TileRead { rows, kc, ranked, .. } = *self;
        let mut shortlisted = 0;
        read_view(staging, |bytes| {
            let at = |offset: u64, len: usize| &bytes[offset as usize..offset as usize + len];
            let flags_at = match (&b.certify, out.ranked.as_mut()) {
                (Some(cb), Some((out_ids, out_distances, out_status))) if ranked => {
                    // Straight into the output's form, on every core: the GPU reported the
                    // distances; rows of one distance are listed by index here.
                    let k = cb.k;
                    let ids: &[u32] = bytemuck::cast_slice(at(0, rows * k * 4));
                    let distances: &[f32] = bytemuck::cast_slice(at(cb.distances_at, rows * k * 4));
                    out_status.copy_from_slice(bytemuck::cast_slice(at(cb.status_at, rows * 4)));
                    out_ids
                        .par_chunks_mut(k)
                        .zip(out_distances.par_chunks_mut(k))
                        .zip(ids.par_chunks(k).zip(distances.par_chunks(k)))
                        .zip(out_status.par_iter())
                        .for_each(|(((out_ids, out_dists), (ids, distances)), &status)| {
                            let m = found(status, k).unwrap_or(0);
                            let (ids, distances) = (&ids[..m], &distances[..m]);
                            // Rows with equal distances are ordered in a buffer of the thread's
                            // own: the streaming stores leave the output out of the cache.
                            if distances.windows(2).any(|w| w[0].to_bits() == w[1].to_bits()) {
                                TIED_ROW.with_borrow_mut(|row| {
                                    row.clear();
                                    row.extend_from_slice(ids);
                                    order_ties_by_index(row, distances);
                                    stream_copy(&mut out_ids[..m], row);
                                });
                            } else {
                                stream_copy(&mut out_ids[..m], ids);
                            }
                            stream_copy(&mut out_dists[..m], distances);
                        });
                    cb.flags_at
                }
                _ => {
                    let pairs: &[[u32; 2]] = bytemuck::cast_slice(at(0, rows * kc * 8));
                    // Mapped memory is uncached on some systems: unpack it once, on every core.
                    pairs.par_iter().zip(out.keys.par_iter_mut()).zip(out.ids.par_iter_mut()).for_each(
                        |((pair, key), id)| {
                            *key = f32::from_bits(pair[0]);
                            *id = pair[1];
                        },
                    );
                    if let (Some((_, keys_at)), Some(exact)) = (&b.exact, out.exact) {
                        parallel_copy(exact, bytemuck::cast_slice(at(*keys_at, rows * kc * 8)));
                    }
                    b.flags_at
                }
            };
            // Bit 0: unfinished; bit 1: took a shortlist; bit 2: a column-side shortlist
            // overflowed (symmetric sweep) or a list came out short or overflowed (bounded).
            let flags: &[u32] = bytemuck::cast_slice(at(flags_at, rows * 4));
            for (i, &flag) in flags.iter().enumerate() {
                out.failed[i] = flag & 1 != 0;
                shortlisted += (flag >> 1 & 1) as usize;
            }
            if let Some(incomplete) = out.incomplete {
                for (incomplete, &flag) in incomplete.iter_mut().zip(flags) {
                    *incomplete = flag & 4 != 0;
                }
            }
        })?;
        gpu.add_transfer_time(started);
        if let (Some(hand_over), Some((ids, distances, _)), true) = (tile_ranked, out.ranked.as_mut(), ranked) {
            hand_over(self.q0, ids, distances)?;
        }
        Ok(shortlisted)
    }
}

/// A query tile's part of the candidates: what its reader writes, so that readers of
/// different tiles can run at once.
pub(super) struct TileOut<'a> {
    /// Ranked answers: ids and distances (k a row), statuses.
    ranked: Option<(&'a mut [u32], &'a mut [f32], &'a mut [u32])>,
    /// Otherwise the running lists' keys and ids (kc a row) and, from the GPU, exact keys.
    keys: &'a mut [f32],
    ids: &'a mut [u32],
    exact: Option<&'a mut [f64]>,
    failed: &'a mut [bool],
    /// Where the candidates track rows that may have missed keys.
    incomplete: Option<&'a mut [bool]>,
}

impl<'a> TileOut<'a> {
    /// `out` cut at the tiles' boundaries, tile by tile.
    pub(super) fn split(out: &'a mut Candidates, tiles: &[QueryTile]) -> Vec<TileOut<'a>> {
        fn cut<'s, T>(rest: &mut &'s mut [T], len: usize) -> &'s mut [T] {
            let (part, later) = std::mem::take(rest).split_at_mut(len);
            *rest = later;
            part
        }
        let kc = out.kc;
        let (mut keys, mut ids, mut failed) = (&mut out.keys[..], &mut out.ids[..], &mut out.failed[..]);
        let mut exact = out.exact.as_deref_mut();
        let mut incomplete = (!out.incomplete.is_empty()).then_some(&mut out.incomplete[..]);
        let mut ranked = out.ranked.as_mut().map(|r| (r.k, &mut r.ids[..], &mut r.distances[..], &mut r.status[..]));
        tiles
            .iter()
            .map(|t| {
                // Ranked rounds keep no lists on the host.
                let lists = if keys.is_empty() { 0 } else { t.rows * kc };
                TileOut {
                    ranked: ranked.as_mut().map(|(k, ids, distances, status)| {
                        (cut(ids, t.rows * *k), cut(distances, t.rows * *k), cut(status, t.rows))
                    }),
                    keys: cut(&mut keys, lists),
                    ids: cut(&mut ids, lists),
                    exact: exact.as_mut().map(|exact| cut(exact, lists)),
                    failed: cut(&mut failed, t.rows),
                    incomplete: incomplete.as_mut().map(|incomplete| cut(incomplete, t.rows)),
                }
            })
            .collect()
    }
}

/// Copies out of mapped memory on every core: a single core reads uncached mapped memory too
/// slowly to keep up with the GPU (notes/exactness.md).
fn parallel_copy<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) {
    dst.par_chunks_mut(1 << 16).zip(src.par_chunks(1 << 16)).for_each(|(d, s)| d.copy_from_slice(s));
}
