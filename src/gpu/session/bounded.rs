//! A graph with long lists swept over the upper triangle under bounds from a sample
//! (`plan::plan_bounded`): the sample's keys bound every row first; query tile I then
//! computes its dense block against the corpus rows from its own first row on, and the
//! two-sided filter (`filter_two_sided.wgsl`) appends each key under a row's bound to that
//! row's list, for the tile's rows and, right of the diagonal block, for the column rows of
//! later tiles. Tile I's lists are then complete: selected down to kc
//! (`bounded_lists.wgsl` around the dense select), ranked and read back as a plain sweep's.

use super::{distance_buffers, CorpusSession, QueryTile, TileBuffers};
use crate::error::Result;
use crate::gpu::{
    bind_group, grid, metric_modes, publishing_groups, DistanceParams, FilterParams, GatherParams, Job, ListParams,
    ParamSlots, SelectParams, Step, FILTER_STRIP, TILE_M, TILE_N,
};
use crate::plan::TilePlan;

/// Invocations a workgroup of `list_ids` (WG in bounded_lists.wgsl).
const LIST_IDS_WG: usize = 256;

impl CorpusSession<'_> {
    /// Gives every row its bound: the key of rank `rank` among the sample's rows, left in
    /// `row_state` by the dense select as a running list's largest key. Rows whose select
    /// did not finish keep +inf, overflow their lists and are searched again.
    pub(super) fn sample_bounds(&self, tiles: TilePlan, kc: usize, b: &TileBuffers) -> Result<()> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let sample = tiles.bounded.expect("a bounded sweep has a sample");
        let (n, d) = (self.corpus.rows(), self.corpus.cols());
        let corpus = &self.resident[0];
        let kernels = gpu.bounded_kernels()?;
        let rows_of_sample = gpu.prepared_rows(0, sample.sample_rows, d)?;

        let mut params = ParamSlots::default();
        let (gx, gy) = grid(sample.sample_rows, gpu.max_groups);
        let offset = params.push(GatherParams {
            rows: sample.sample_rows as u32,
            dim4: d.div_ceil(4) as u32,
            first: (sample.sample_step / 2) as u32,
            step: sample.sample_step as u32,
            groups_x: gx,
            ..Default::default()
        });
        let bind = bind_group(
            device,
            &kernels.gather.layout,
            &b.uniform,
            &[&corpus.vectors, &corpus.norms, &rows_of_sample.vectors, &rows_of_sample.norms],
        );
        gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
        let job = Job { step: Step::GatherRows, offset, groups: (gx, gy), bind: &bind };
        gpu.submit(device.create_command_encoder(&Default::default()), &[job])?;

        let distance_bind = bind_group(device, &gpu.distance.layout, &b.uniform, &distance_buffers(b, &rows_of_sample));
        let cols = sample.sample_rows;
        for q0 in (0..n).step_by(tiles.query_rows) {
            let rows = tiles.query_rows.min(n - q0);
            let mut params = ParamSlots::default();
            let gemm_tiles = rows.div_ceil(TILE_M as usize) * cols.div_ceil(TILE_N as usize);
            let (gx, gy) = grid(gemm_tiles, gpu.max_groups);
            // Column indices from n on: no row of the sample is masked as the query itself
            // (a row in the sample counts its own key, a bound one rank tighter).
            let offset = params.push(DistanceParams {
                q_rows: rows as u32,
                c_rows: cols as u32,
                dim4: d.div_ceil(4) as u32,
                col_base: n as u32,
                out_stride: cols as u32,
                mode: metric_modes(self.metric).1,
                groups_x: gx,
                row_base: q0 as u32,
                ..Default::default()
            });
            let distance = Job { step: Step::Distance, offset, groups: (gx, gy), bind: &distance_bind };
            let select_bind = self.select_bind(b, q0, kc, tiles.shortlist_cap);
            let (sx, sy) = grid(rows, gpu.max_groups);
            let offset = params.push(SelectParams {
                rows: rows as u32,
                len: cols as u32,
                in_stride: cols as u32,
                col_base: n as u32,
                need: sample.rank as u32,
                scratch_stride: tiles.scratch_stride as u32,
                out_stride: kc as u32,
                dense: 1,
                groups_x: sx,
                ..Default::default()
            });
            let select = Job { step: Step::SelectRows, offset, groups: (sx, sy), bind: &select_bind };
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            let mut encoder = device.create_command_encoder(&Default::default());
            self.copy_corpus_rows(&mut encoder, q0, rows, b);
            gpu.submit(encoder, &[distance, select])?;
        }
        // A select that did not finish flagged its row; the row's list says so instead.
        let mut encoder = device.create_command_encoder(&Default::default());
        encoder.clear_buffer(&b.failed, 0, None);
        gpu.ctx.queue.submit([encoder.finish()]);
        crate::trace::mark(|| format!("bounds of {n} rows from {cols} sampled (submitted)"));
        Ok(())
    }

    /// Query tile `tile` of a bounded sweep: its block from its own first row on, the filter
    /// into every row's list, and its rows' lists selected down to kc candidates (then
    /// finished by `finish` as any tile). `publish`: as in `sweep`, the read-back buffer into
    /// which the distance dispatch copies the previous tile's ranked answers.
    pub(super) fn sweep_bounded(
        &self,
        tile: QueryTile,
        kc: usize,
        tiles: TilePlan,
        b: &TileBuffers,
        publish: Option<&wgpu::Buffer>,
    ) -> Result<wgpu::SubmissionIndex> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let (n, d) = (self.corpus.rows(), self.corpus.cols());
        let QueryTile { q0, rows, .. } = tile;
        let cols = n - q0;
        let cap = tiles.shortlist_cap;
        let corpus = &self.resident[0];
        let kernels = gpu.bounded_kernels()?;
        let filter = gpu.filter_kernel()?;
        let mut params = ParamSlots::default();

        let published =
            publish.and_then(|read_back| Some((b.certify.as_ref()?, read_back, gpu.distance_publish.as_ref()?)));
        let gemm_tiles = rows.div_ceil(TILE_M as usize) * cols.div_ceil(TILE_N as usize);
        let distance_bind = match published {
            Some((cb, read_back, kernel)) => {
                let buffers = [distance_buffers(b, corpus).as_slice(), &[&cb.answers, read_back]].concat();
                bind_group(device, &kernel.layout, &b.uniform, &buffers)
            }
            None => bind_group(device, &gpu.distance.layout, &b.uniform, &distance_buffers(b, corpus)),
        };
        let (step, groups) = match published {
            Some(_) => (Step::DistancePublishing, publishing_groups(gemm_tiles)),
            None => (Step::Distance, gemm_tiles),
        };
        let (gx, gy) = grid(groups, gpu.max_groups);
        let offset = params.push(DistanceParams {
            q_rows: rows as u32,
            c_rows: cols as u32,
            dim4: d.div_ceil(4) as u32,
            c_offset: q0 as u32,
            col_base: q0 as u32,
            out_stride: tiles.dist_stride as u32,
            mode: metric_modes(self.metric).1,
            groups_x: gx,
            row_base: q0 as u32,
            // In whole vec4s: the layout's parts start at multiples of 256 bytes.
            publish_len: published.map_or(0, |(cb, _, _)| (cb.flags_at / 16) as u32),
            ..Default::default()
        });
        let mut jobs = vec![Job { step, offset, groups: (gx, gy), bind: &distance_bind }];

        // The diagonal block holds both (i, j) and (j, i): its keys go to their rows only.
        let filter_bind =
            bind_group(device, &filter.layout, &b.uniform, &[&b.dist, &b.row_state, &b.shortlist_len, &b.shortlist]);
        let strips = rows.div_ceil(FILTER_STRIP.0) * cols.div_ceil(FILTER_STRIP.1);
        let (fx, fy) = grid(strips, gpu.max_groups);
        let offset = params.push(FilterParams {
            rows: rows as u32,
            cols: cols as u32,
            stride: tiles.dist_stride as u32,
            row_base: q0 as u32,
            col_base: q0 as u32,
            column_begin: (q0 + rows) as u32,
            cap: cap as u32,
            groups_x: fx,
        });
        jobs.push(Job { step: Step::Filter, offset, groups: (fx, fy), bind: &filter_bind });

        // Positions reported from n on, so that none is taken for the query itself.
        let lists_bind = bind_group(
            device,
            &kernels.list_keys.layout,
            &b.uniform,
            &[&b.shortlist_len, &b.shortlist, &b.dist, &b.candidates, &b.failed],
        );
        let (rx, ry) = grid(rows, gpu.max_groups);
        let list = ListParams {
            rows: rows as u32,
            cap: cap as u32,
            need: kc as u32,
            row_base: q0 as u32,
            id_base: n as u32,
            groups_x: rx,
            ..Default::default()
        };
        let offset = params.push(list);
        jobs.push(Job { step: Step::ListKeys, offset, groups: (rx, ry), bind: &lists_bind });

        let select_bind = self.select_bind(b, q0, kc, cap);
        let offset = params.push(SelectParams {
            rows: rows as u32,
            len: cap as u32,
            in_stride: cap as u32,
            col_base: n as u32,
            need: kc as u32,
            scratch_stride: tiles.scratch_stride as u32,
            out_stride: kc as u32,
            dense: 1,
            groups_x: rx,
            ..Default::default()
        });
        jobs.push(Job { step: Step::SelectRows, offset, groups: (rx, ry), bind: &select_bind });

        let (ix, iy) = grid((rows * kc).div_ceil(LIST_IDS_WG), gpu.max_groups);
        let offset = params.push(ListParams { groups_x: ix, ..list });
        jobs.push(Job { step: Step::ListIds, offset, groups: (ix, iy), bind: &lists_bind });

        gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
        let mut encoder = device.create_command_encoder(&Default::default());
        self.copy_corpus_rows(&mut encoder, q0, rows, b);
        let submitted = gpu.submit(encoder, &jobs)?;
        crate::trace::mark(|| format!("rows {q0}..{} swept under their bounds (submitted)", q0 + rows));
        Ok(submitted.index)
    }
}
