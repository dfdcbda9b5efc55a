//! The exact finish of a swept query tile on the GPU: float64 keys of its candidates, their
//! ranking and each row's certificate, and the copy of its results into a read-back buffer.

use super::copy_out::TileRead;
use super::tile_buffers::TileBuffers;
use super::{CorpusSession, QueryTile};
use crate::error::Result;
use crate::gpu::kernels::{
    bind_group_at, bind_group_ranges, exact_keys_dispatch, grid, refine_mode, reported_as, CertifyParams, Job,
    ParamSlots, RefineParams, Step, MAX_CERTIFY_KC,
};
use crate::gpu::transfer::Mapping;
use crate::refine::Certify;

impl CorpusSession<'_> {
    /// Sorts every row's list by index (`sort_by_index`), for exact keys shared by the two
    /// rows of a mutual pair (`TileKey::shares_mutual_keys`).
    pub(super) fn sort_lists_by_index(&self, kc: usize, b: &TileBuffers) -> Result<()> {
        let gpu = self.gpu;
        let (Some(cb), Some(kernels), Some((keys, _))) = (&b.certify, &gpu.kernels.certify, &b.exact) else {
            unreachable!("shared keys are planned only where rows are ranked on the GPU")
        };
        let rows = b.state_rows;
        let (gx, gy) = grid(rows, gpu.max_groups);
        let mut params = ParamSlots::default();
        let offset = params.push(CertifyParams {
            rows: rows as u32,
            kc: kc as u32,
            k: cb.k as u32,
            corpus_rows: self.corpus.rows() as u32,
            groups_x: gx,
            floor_zero: 0,
            reported_as: reported_as(self.metric),
            _pad: 0,
        });
        let whole = |buffer| wgpu::BufferBinding { buffer, offset: 0, size: None };
        let [ids, distances, status] = cb.bindings();
        let bind = bind_group_ranges(
            &gpu.ctx.device,
            &kernels.rows.layout,
            &b.uniform,
            &[
                whole(&b.candidates),
                whole(keys),
                whole(&b.row_state),
                whole(&cb.error_bounds),
                ids,
                distances,
                status,
                whole(&cb.run_stats),
            ],
        );
        gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
        let job = Job { step: Step::SortByIndex, offset, groups: (gx, gy), bind: &bind };
        gpu.submit(gpu.ctx.device.create_command_encoder(&Default::default()), &[job])?;
        Ok(())
    }

    /// Finishes one swept query tile: exact keys and certificates where the GPU computes them,
    /// then copies its results into `staging`, whose mapping for the host is requested. Ranked
    /// answers that the next query tile's sweep publishes (`published_later`) are left in GPU
    /// memory: only the failure flags are copied, and the mapping waits for that sweep.
    pub(super) fn finish(
        &self,
        tile: QueryTile,
        kc: usize,
        certify: Option<&Certify<'_>>,
        b: &TileBuffers,
        staging: &wgpu::Buffer,
        published_later: bool,
    ) -> Result<(TileRead, Option<Mapping>)> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let d = self.corpus.cols();
        let QueryTile { q0, rows, from_corpus, symmetric, bounded, .. } = tile;
        let base = if symmetric || bounded { q0 } else { 0 } as u64;
        let lists_at = base * kc as u64 * 8;
        let mutual = b.shared_keys;
        if let (Some((keys, _)), Some(first_raw), Some(refine)) =
            (&b.exact, self.raw_corpus.first(), &gpu.kernels.refine)
        {
            let mut encoder = device.create_command_encoder(&Default::default());
            // Each chunk of original rows beside its chunk of prepared rows.
            let raw_chunks: Vec<(&wgpu::Buffer, usize, usize)> =
                self.raw_corpus.iter().zip(&self.resident).map(|(raw, c)| (raw, c.first, c.first + c.rows)).collect();
            if from_corpus {
                let raw_row = (d * 4) as u64;
                for &(raw, first, end) in &raw_chunks {
                    let (lo, hi) = (q0.max(first), (q0 + rows).min(end));
                    if lo < hi {
                        encoder.copy_buffer_to_buffer(
                            raw,
                            (lo - first) as u64 * raw_row,
                            &b.raw_queries,
                            (lo - q0) as u64 * raw_row,
                            (hi - lo) as u64 * raw_row,
                        );
                    }
                }
            }
            let (step, groups, group) = exact_keys_dispatch(d, rows, kc);
            let (gx, gy) = grid(groups, gpu.max_groups);
            let mut params = ParamSlots::default();
            let refine_params = RefineParams {
                rows: rows as u32,
                kc: kc as u32,
                dim: d as u32,
                mode: refine_mode(self.metric),
                groups_x: gx,
                row_base: if mutual { q0 as u32 } else { 0 },
                mutual: mutual as u32,
                group: group as u32,
                norm_base: q0 as u32,
                first: 0,
                end: self.corpus.rows() as u32,
            };
            // Metrics other than cosine read no norms: the corpus rows stand in for them.
            let (query_norms, corpus_norms) = match &self.exact_norms {
                Some((corpus_norms, query_norms)) => (query_norms, corpus_norms),
                None => (first_raw, first_raw),
            };
            // Shared keys read other rows' lists and keys: every row's are bound.
            let binds: Vec<(wgpu::BindGroup, u32)> = raw_chunks
                .iter()
                .map(|&(raw, first, end)| {
                    let bind = bind_group_at(
                        device,
                        &refine.narrow.layout,
                        &b.uniform,
                        &[
                            (&b.raw_queries, 0),
                            (raw, 0),
                            (&b.candidates, if mutual { 0 } else { lists_at }),
                            (keys, 0),
                            (query_norms, 0),
                            (corpus_norms, 0),
                        ],
                    );
                    (bind, params.push(RefineParams { first: first as u32, end: end as u32, ..refine_params }))
                })
                .collect();
            let mut jobs: Vec<Job<'_>> =
                binds.iter().map(|(bind, offset)| Job { step, offset: *offset, groups: (gx, gy), bind }).collect();
            let bind = &binds[0].0;
            if mutual {
                debug_assert_eq!(raw_chunks.len(), 1, "shared keys are those of a symmetric sweep: one chunk");
                debug_assert!(
                    matches!(step, Step::RefineWide | Step::RefineWide4),
                    "shared keys need the wide kernels"
                );
                let (cx, cy) = grid((rows * kc).div_ceil(64), gpu.max_groups);
                let copy_offset = params.push(RefineParams { groups_x: cx, ..refine_params });
                jobs.push(Job { step: Step::CopyMutualKeys, offset: copy_offset, groups: (cx, cy), bind });
            }
            let keys_at = if mutual { base * kc as u64 * 8 } else { 0 };
            let certify_bind;
            if let (Some(cb), Some(kernel), Some(c)) = (&b.certify, &gpu.kernels.certify, certify) {
                gpu.ctx.queue.write_buffer(
                    &cb.error_bounds,
                    0,
                    bytemuck::cast_slice(&(c.error_bounds)()[q0..q0 + rows]),
                );
                let (gx, gy) = grid(rows, gpu.max_groups);
                let certify_params = CertifyParams {
                    rows: rows as u32,
                    kc: kc as u32,
                    k: cb.k as u32,
                    corpus_rows: self.corpus.rows() as u32,
                    groups_x: gx,
                    floor_zero: c.floor_zero as u32,
                    reported_as: reported_as(self.metric),
                    _pad: 0,
                };
                let offset = params.push(certify_params);
                let whole = |buffer, offset| wgpu::BufferBinding { buffer, offset, size: None };
                let [ids, distances, status] = cb.bindings();
                certify_bind = bind_group_ranges(
                    device,
                    &kernel.rows.layout,
                    &b.uniform,
                    &[
                        whole(&b.candidates, lists_at),
                        whole(keys, keys_at),
                        whole(&b.row_state, base * 8),
                        whole(&cb.error_bounds, 0),
                        ids,
                        distances,
                        status,
                        whole(&cb.run_stats, 0),
                    ],
                );
                if kc <= MAX_CERTIFY_KC {
                    jobs.push(Job { step: Step::Certify, offset, groups: (gx, gy), bind: &certify_bind });
                } else {
                    let (sx, sy) = grid(rows * kc.div_ceil(MAX_CERTIFY_KC), gpu.max_groups);
                    let sort_offset = params.push(CertifyParams { groups_x: sx, ..certify_params });
                    jobs.push(Job { step: Step::SortRuns, offset: sort_offset, groups: (sx, sy), bind: &certify_bind });
                    jobs.push(Job { step: Step::CertifyRuns, offset, groups: (gx, gy), bind: &certify_bind });
                }
            }
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            gpu.submit(encoder, &jobs)?;
            crate::trace::mark(|| format!("rows {q0}..{}: exact keys, ranking (submitted)", q0 + rows));
        }

        let started = std::time::Instant::now();
        let mut encoder = device.create_command_encoder(&Default::default());
        let flags_at = base * 4;
        let ranked = b.certify.as_ref().filter(|_| certify.is_some());
        let read = if let Some(cb) = ranked {
            // Only the ranked answers, the certificates and the failure flags come back.
            if !published_later {
                encoder.copy_buffer_to_buffer(&cb.answers, 0, staging, 0, cb.flags_at);
            }
            encoder.copy_buffer_to_buffer(&b.failed, flags_at, staging, cb.flags_at, (rows * 4) as u64);
            TileRead { q0, rows, kc, ranked: true }
        } else {
            // The running lists, the failure flags and the exact keys.
            let pair_bytes = (rows * kc * 8) as u64;
            encoder.copy_buffer_to_buffer(&b.candidates, lists_at, staging, 0, pair_bytes);
            encoder.copy_buffer_to_buffer(&b.failed, flags_at, staging, b.flags_at, (rows * 4) as u64);
            if let Some((keys, at)) = &b.exact {
                encoder.copy_buffer_to_buffer(keys, 0, staging, *at, pair_bytes);
            }
            TileRead { q0, rows, kc, ranked: false }
        };
        let index = gpu.ctx.queue.submit([encoder.finish()]);
        gpu.add_transfer_time(started);
        debug_assert!(!published_later || ranked.is_some(), "only ranked answers are published");
        Ok((read, (!published_later).then(|| Mapping::request(staging, Some(index)))))
    }
}
