//! A graph with long lists swept over the upper triangle under bounds from a sample
//! (`plan::plan_bounded`): the sample's keys bound every row first; query tile I then
//! computes its dense block against the corpus rows from its own first row on, and the
//! two-sided filter (`filter_two_sided.wgsl`) appends each key under a row's bound to that
//! row's list, for the tile's rows and, right of the diagonal block, for the column rows of
//! later tiles. Tile I's lists are then complete: selected down to kc by a select in
//! workgroup memory (`bounded_lists.wgsl`), ranked and read back as a plain sweep's tiles are.

use super::sweep::distance_buffers;
use super::tile_buffers::TileBuffers;
use super::{CorpusSession, QueryTile};
use crate::error::Result;
use crate::gpu::kernels::{
    bind_group, bind_group_at, gemm_tiles, grid, metric_modes, publishing_groups, DistanceParams, FilterParams,
    GatherParams, Job, ParamSlots, ShortSelectParams, Step, FILTER_STRIP, SHORT_SELECT_LISTS, SHORT_SELECT_SAMPLE,
};
use crate::plan::{self, TilePlan};

/// Rows of a chunk of the sample's queries, bound at the chunk's first row: its vectors' and
/// norms' offsets are then whole multiples of 256 bytes.
const QUERY_ALIGN: usize = 64;

impl CorpusSession<'_> {
    /// Gives every row its bound: its key of rank `rank` against the sample's rows, into
    /// `row_state` (`select_short` in bounded_lists.wgsl).
    pub(super) fn sample_bounds(&self, tiles: TilePlan, b: &TileBuffers) -> Result<()> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let sample = tiles.bounded.expect("a bounded sweep has a sample");
        let (n, d) = (self.corpus.rows(), self.corpus.cols());
        let corpus = &self.resident[0];
        let kernels = gpu.kernels.bounded_kernels(&gpu.ctx)?;
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

        // Every row against the sample in as few dispatches as the dense tile's buffer allows
        // (one at n=65536: 65536 x 2048 keys in its 1 GB), the queries read straight from the
        // resident corpus: in the sweep's query tiles, each GEMM (4096 x 2048 at n=65536) and
        // select would be too small to fill the GPU, and each a submission of its own.
        let select_bind = self.short_select_bind(b);
        let cols = sample.sample_rows;
        let held = (b.dist.size() / 4 / cols as u64) as usize;
        // Chunks after the first are bound at their first row: offsets of whole 256 bytes.
        let chunk = if held >= n { n } else { (held / QUERY_ALIGN * QUERY_ALIGN).max(QUERY_ALIGN) };
        debug_assert!(chunk * cols <= (b.dist.size() / 4) as usize, "the dense tile holds the sample's keys");
        let row_bytes = plan::prepared_row_bytes(d);
        for q0 in (0..n).step_by(chunk) {
            let rows = chunk.min(n - q0);
            let mut buffers: Vec<(&wgpu::Buffer, u64)> = distance_buffers(b, &rows_of_sample).map(|b| (b, 0)).to_vec();
            buffers[0] = (&corpus.vectors, q0 as u64 * row_bytes);
            buffers[2] = (&corpus.norms, q0 as u64 * 4);
            let distance_bind = bind_group_at(device, &gpu.kernels.distance.layout, &b.uniform, &buffers);
            let mut params = ParamSlots::default();
            let tile_count = gemm_tiles(rows, cols);
            let (gx, gy) = grid(tile_count, gpu.max_groups);
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
            let (sx, sy) = grid(rows, gpu.max_groups);
            let offset = params.push(ShortSelectParams {
                rows: rows as u32,
                cap: cols as u32,
                need: sample.rank as u32,
                row_base: q0 as u32,
                mode: SHORT_SELECT_SAMPLE,
                groups_x: sx,
                key_stride: cols as u32,
                ..Default::default()
            });
            let select = Job { step: Step::SelectShort, offset, groups: (sx, sy), bind: &select_bind };
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            gpu.submit(device.create_command_encoder(&Default::default()), &[distance, select])?;
        }
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
        let filter = gpu.kernels.filter_kernel(&gpu.ctx)?;
        let mut params = ParamSlots::default();

        let tile_count = gemm_tiles(rows, cols);
        let (distance_bind, step, groups, publish_len) = match publish
            .and_then(|read_back| self.publishing(b, corpus, read_back))
        {
            Some((bind, len)) => (bind, Step::DistancePublishing, publishing_groups(tile_count), len),
            None => {
                let bind = bind_group(device, &gpu.kernels.distance.layout, &b.uniform, &distance_buffers(b, corpus));
                (bind, Step::Distance, tile_count, 0)
            }
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
            publish_len,
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

        let select_bind = self.short_select_bind(b);
        let (sx, sy) = grid(rows, gpu.max_groups);
        let offset = params.push(ShortSelectParams {
            rows: rows as u32,
            cap: cap as u32,
            need: kc as u32,
            row_base: q0 as u32,
            mode: SHORT_SELECT_LISTS,
            groups_x: sx,
            ..Default::default()
        });
        jobs.push(Job { step: Step::SelectShort, offset, groups: (sx, sy), bind: &select_bind });

        gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
        let mut encoder = device.create_command_encoder(&Default::default());
        self.copy_corpus_rows(&mut encoder, q0, rows, b);
        let submitted = gpu.submit(encoder, &jobs)?;
        crate::trace::mark(|| format!("rows {q0}..{} swept under their bounds (submitted)", q0 + rows));
        Ok(submitted.index)
    }

    /// The short select's bindings: every row's list, the distance tile (the sample's keys),
    /// every row's candidates, flags and state.
    fn short_select_bind(&self, b: &TileBuffers) -> wgpu::BindGroup {
        let gpu = self.gpu;
        let kernel = &gpu.kernels.built_bounded().short_select;
        bind_group(
            &gpu.ctx.device,
            &kernel.layout,
            &b.uniform,
            &[&b.shortlist_len, &b.shortlist, &b.dist, &b.candidates, &b.failed, &b.row_state],
        )
    }
}
