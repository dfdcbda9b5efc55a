//! The sweeps of a query tile against the corpus: distance tiles, selects and merges into the
//! running lists, plain or (a graph's rows against themselves) in symmetric blocks. The
//! bounded sweep is in `bounded`.

use super::corpus::PreparedRows;
use super::tile_buffers::{TileBuffers, TileSorts};
use super::{CorpusSession, QueryTile};
use crate::data::MatrixRef;
use crate::error::Result;
use crate::gpu::kernels::{
    bind_group, bind_group_at, gemm_tiles, grid, metric_modes, publishing_groups, DistanceParams, Job, NormsParams,
    ParamSlots, SelectParams, SortSelectParams, Step, WIDE_MERGE_KC,
};
use crate::gpu::sort::{Pairs, SortKey};
use crate::plan::{self, TilePlan};
use crate::refine::NONE;
use std::sync::Arc;

/// Tile shapes whose sorts a set of tile buffers keeps planned (`CorpusSession::tile_sorts`).
const MAX_KEPT_TILE_SORTS: usize = 8;

impl CorpusSession<'_> {
    /// Starts the per-row state (of a query tile, or of every row in a symmetric sweep):
    /// each row's exclusion and no bound yet, no flags, empty shortlists. Rows given `bounds`
    /// (a plan of [`TilePlan::queries_bounded`]) start with them and with empty running
    /// lists of `kc` pairs.
    pub(super) fn reset_rows(&self, b: &TileBuffers, exclude: &[u32], bounds: Option<&[f32]>, kc: usize) -> Result<()> {
        let gpu = self.gpu;
        let started = std::time::Instant::now();
        let row_state: Vec<[u32; 2]> = match bounds {
            Some(bounds) => exclude.iter().zip(bounds).map(|(&e, bound)| [e, bound.to_bits()]).collect(),
            None => exclude.iter().map(|&e| [e, f32::INFINITY.to_bits()]).collect(),
        };
        gpu.ctx.queue.write_buffer(&b.row_state, 0, bytemuck::cast_slice(&row_state));
        let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
        if bounds.is_some() {
            let bytes = (exclude.len() * kc * 8) as u64;
            let mut empty = b.empty_lists.lock().unwrap_or_else(|e| e.into_inner());
            if empty.as_ref().is_none_or(|e| e.size() < bytes) {
                let lists = vec![[f32::INFINITY.to_bits(), NONE]; exclude.len() * kc];
                let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
                let buffer = gpu.buffer("empty lists", bytes, usage)?;
                gpu.write(&buffer, "empty lists", bytemuck::cast_slice(&lists))?;
                *empty = Some(buffer);
            }
            let empty = empty.as_ref().expect("made above");
            encoder.copy_buffer_to_buffer(empty, 0, &b.candidates, 0, bytes);
        }
        encoder.clear_buffer(&b.failed, 0, None);
        // A filtered search's corpus rows keep their lists from tile to tile.
        let slots = b.filter.map(|(_, first_list)| (first_list * 4) as u64);
        encoder.clear_buffer(&b.shortlist_len, 0, slots);
        gpu.ctx.queue.submit([encoder.finish()]);
        gpu.add_transfer_time(started);
        Ok(())
    }

    /// The select kernels' bind group with the per-row arrays bound from state row `base`,
    /// and the shortlists from slot `lists` (see `TileBuffers::shortlist`).
    fn select_bind(
        &self,
        b: &TileBuffers,
        base: usize,
        lists: usize,
        kc: usize,
        shortlist_cap: usize,
    ) -> wgpu::BindGroup {
        let gpu = self.gpu;
        let (base, lists) = (base as u64, lists as u64);
        bind_group_at(
            &gpu.ctx.device,
            &gpu.kernels.select.rows.layout,
            &b.uniform,
            &[
                (&b.dist, 0),
                (&b.aux[0], 0),
                (&b.aux[1], 0),
                (&b.aux[2], 0),
                (&b.aux[3], 0),
                (&b.candidates, base * kc as u64 * 8),
                (&b.failed, base * 4),
                (&b.row_state, base * 8),
                (&b.shortlist_len, lists * 4),
                (&b.shortlist, lists * shortlist_cap as u64 * 8),
            ],
        )
    }

    /// Runs one query tile's distance tiles, selections and merges on the GPU. In a
    /// symmetric sweep the tile meets the corpus rows up to its own last row, and the column
    /// rows of earlier tiles merge what it appended to their shortlists. `exclude`: the
    /// tile's rows' exclusions, when its per-row state is set here (not in a symmetric
    /// sweep, which sets every row's at once). `publish`: the read-back buffer into which its
    /// first distance dispatch copies the ranked answers of the query tile before
    /// (`distance_publish.wgsl`). Returns the submission that does so. `bounds`: the tile's
    /// rows' starting bounds, in a plan of [`TilePlan::queries_bounded`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sweep(
        &self,
        queries: MatrixRef<'_>,
        tile: QueryTile,
        exclude: &[u32],
        bounds: Option<&[f32]>,
        kc: usize,
        tiles: TilePlan,
        b: &TileBuffers,
        publish: Option<&wgpu::Buffer>,
    ) -> Result<wgpu::SubmissionIndex> {
        let gpu = self.gpu;
        let device = &gpu.ctx.device;
        let d = queries.cols();
        let QueryTile { q0, rows, from_corpus, symmetric, columns, appends_below, .. } = tile;
        let base = if symmetric { q0 } else { 0 };
        let cap = tiles.shortlist_cap;
        if !symmetric {
            if !from_corpus {
                let started = std::time::Instant::now();
                let tile = &queries.as_slice()[q0 * d..(q0 + rows) * d];
                gpu.write(&b.raw_queries, "queries", bytemuck::cast_slice(tile))?;
                gpu.add_transfer_time(started);
            }
            debug_assert_eq!(bounds.is_some(), tiles.queries_bounded, "bounded query rows come with their bounds");
            self.reset_rows(b, exclude, bounds, kc)?;
        }

        // The query rows' shortlists are the first slots; a symmetric sweep's column rows'
        // follow them, one a column of the tile.
        let select_bind = self.select_bind(b, base, 0, kc, cap);
        let column_lists = tiles.query_rows;
        let norms_bind = bind_group(
            device,
            &gpu.kernels.norms.layout,
            &b.uniform,
            &[&b.raw_queries, &self.shift, &b.queries.vectors, &b.queries.norms],
        );
        debug_assert!(
            publish.is_none() || b.certify.is_some() && gpu.kernels.distance_publish.is_some(),
            "published answers are ranked ones"
        );
        let distance_bind = |chunk: &PreparedRows| {
            bind_group(device, &gpu.kernels.distance.layout, &b.uniform, &distance_buffers(b, chunk))
        };
        // A symmetric sweep stops at the tile's last row: later rows meet this tile as columns.
        let (columns_start, columns_end) = columns;
        // Column rows that merge this tile's keys (those with a bound: the rows of earlier
        // tiles), a query tile's worth at a time (the auxiliary arrays hold that many rows):
        // (first row, rows, its shortlist slot).
        let column_merges = |c0: usize, cols: usize| -> Vec<(usize, usize, usize)> {
            let end = (c0 + cols).min(appends_below);
            let merge = |r0: usize| (r0, tiles.query_rows.min(end - r0), column_lists + r0 - c0);
            (c0..end).step_by(tiles.query_rows).map(merge).collect()
        };

        // A resident corpus goes in one submission; a streamed one a chunk at a time.
        let starts: Vec<usize> = (0..self.corpus.rows()).step_by(self.plan.chunk_rows).collect();
        let batches: Vec<Vec<usize>> = if self.plan.resident {
            vec![(0..starts.len()).collect()]
        } else {
            (0..starts.len()).map(|i| vec![i]).collect()
        };
        let mut first_tile = true;
        // A query tile's first distance tile is dense, giving its rows their bounds, unless
        // they start with bounds.
        let dense_first = !tiles.queries_bounded;
        // Columns the query tile has met, which size its sparse distance tiles.
        let mut met = 0;
        let mut publishing = None;
        for (batch_no, batch) in batches.iter().enumerate() {
            let streamed: Vec<PreparedRows> = if self.plan.resident {
                Vec::new()
            } else {
                batch
                    .iter()
                    .map(|&c| {
                        let rows = self.plan.chunk_rows.min(self.corpus.rows() - starts[c]);
                        let chunk = gpu.prepared_rows(starts[c], rows, d)?;
                        self.prepare_chunk(&chunk, None, false)?;
                        Ok(chunk)
                    })
                    .collect::<Result<_>>()?
            };
            let chunks: Vec<&PreparedRows> = if self.plan.resident {
                batch.iter().map(|&c| &self.resident[c]).collect()
            } else {
                streamed.iter().collect()
            };
            let distance_binds: Vec<wgpu::BindGroup> = chunks.iter().map(|c| distance_bind(c)).collect();
            // Only the sweep's first distance tile publishes.
            let publishing_bind =
                publish.filter(|_| first_tile).and_then(|read_back| self.publishing(b, chunks[0], read_back));
            // Distance tiles of each chunk: (first row in the chunk, rows).
            let mut column_tiles: Vec<Vec<(usize, usize)>> = Vec::with_capacity(chunks.len());
            for chunk in &chunks {
                let start = columns_start.saturating_sub(chunk.first);
                let end = chunk.rows.min(columns_end.saturating_sub(chunk.first));
                let mut cts = Vec::new();
                let mut c0 = start;
                while c0 < end {
                    let cols = plan::sparse_tile_width(&tiles, met).min(end - c0);
                    cts.push((c0, cols));
                    (c0, met) = (c0 + cols, met + cols);
                }
                column_tiles.push(cts);
            }
            let column_binds: Vec<wgpu::BindGroup> = chunks
                .iter()
                .zip(&column_tiles)
                .flat_map(|(chunk, cts)| cts.iter().flat_map(|&(c0, cols)| column_merges(chunk.first + c0, cols)))
                .map(|(r0, _, lists)| self.select_bind(b, r0, lists, kc, cap))
                .collect();
            let mut column_binds = column_binds.iter();
            // The batch index sort's two sorts for each width of dense tile in this batch (of a
            // sparse sweep, only its first tile is dense).
            let sorted_tiles: Vec<(usize, Arc<TileSorts>)> = if gpu.sort_select {
                let tiles_here = column_tiles.iter().flatten().enumerate();
                let dense = tiles_here.filter(|&(i, _)| !tiles.sparse || (dense_first && first_tile && i == 0));
                let mut widths: Vec<usize> = dense.map(|(_, &(_, cols))| cols).collect();
                widths.sort_unstable();
                widths.dedup();
                widths.into_iter().map(|cols| Ok((cols, self.tile_sorts(b, rows, cols)?))).collect::<Result<_>>()?
            } else {
                Vec::new()
            };
            let sort_select_bind = gpu.sort_select.then(|| self.sort_select_bind(b, base, kc)).transpose()?;
            let sort_columns_bind = b.key_order.as_ref().map(|order| self.sort_columns_bind(b, order)).transpose()?;

            let mut params = ParamSlots::default();
            let mut jobs = Vec::new();
            if batch_no == 0 && !from_corpus {
                let (gx, gy) = grid(rows, gpu.max_groups);
                let offset = params.push(NormsParams::new(rows, d, self.metric, gx));
                jobs.push(Job { step: Step::Norms, offset, groups: (gx, gy), bind: &norms_bind });
            }
            // Long lists merge with a workgroup per row; short ones with a subgroup each.
            let per_subgroup =
                gpu.kernels.select.rows_per_subgroup_group(&gpu.ctx.info).filter(|_| kc <= WIDE_MERGE_KC);
            let merge_step = if per_subgroup.is_some() { Step::Merge } else { Step::MergeWide };
            let merge_groups = |rows: usize| match per_subgroup {
                Some(per_group) => (grid(rows.div_ceil(per_group as usize), gpu.max_groups), per_group),
                None => (grid(rows, gpu.max_groups), 0),
            };
            for ((chunk, dbind), cts) in chunks.iter().zip(&distance_binds).zip(&column_tiles) {
                for &(c0, cols) in cts {
                    let col_base = (chunk.first + c0) as u32;
                    // From the second tile on (or the first, for rows that start with a
                    // bound), rows have a bound and keys under it go to their shortlists; a
                    // sparse tile keeps nothing else.
                    let dense_tile = first_tile && dense_first;
                    let shortlist_cap = if dense_tile { 0 } else { cap as u32 };
                    let sparse = tiles.sparse && !dense_tile;
                    let sorts = sorted_tiles.iter().find(|(width, _)| *width == cols).map(|(_, sorts)| sorts);
                    // A sorted dense tile gives its column side from its own sort.
                    let sorted_columns = !sparse
                        && (col_base as usize) < appends_below
                        && sort_columns_bind.is_some()
                        && sorts.is_some_and(|s| s.by_column.is_some());
                    let tile_count = gemm_tiles(rows, cols);
                    let publishing = publishing_bind.as_ref().filter(|_| first_tile).map(|(bind, _)| bind);
                    let groups = if publishing.is_some() { publishing_groups(tile_count) } else { tile_count };
                    let (gx, gy) = grid(groups, gpu.max_groups);
                    let offset = params.push(DistanceParams {
                        q_rows: rows as u32,
                        c_rows: cols as u32,
                        dim4: d.div_ceil(4) as u32,
                        c_offset: c0 as u32,
                        col_base,
                        out_stride: if sparse { 0 } else { tiles.dist_stride as u32 },
                        mode: metric_modes(self.metric).1,
                        groups_x: gx,
                        shortlist_cap,
                        row_base: base as u32,
                        column_end: match b.filter {
                            Some(_) => self.corpus.rows() as u32,
                            None if sorted_columns => col_base,
                            None => appends_below as u32,
                        },
                        column_cap: b.filter.map_or(cap, |(f, _)| f.cap) as u32,
                        column_lists: match b.filter {
                            Some((_, first_list)) => (first_list + col_base as usize) as u32,
                            None => column_lists as u32,
                        },
                        column_state: if b.filter.is_some() { b.state_rows as u32 } else { 0 },
                        query_first: q0 as u32,
                        publish_len: publishing_bind.as_ref().filter(|_| first_tile).map_or(0, |&(_, len)| len),
                    });
                    let job = match publishing {
                        Some(bind) => Job { step: Step::DistancePublishing, offset, groups: (gx, gy), bind },
                        None => Job { step: Step::Distance, offset, groups: (gx, gy), bind: dbind },
                    };
                    jobs.push(job);
                    let (sx, sy) = grid(rows, gpu.max_groups);
                    // Running lists of all state rows first, then the latest tile's lists.
                    let tile_region = ((b.state_rows - base) * kc) as u32;
                    let select = SelectParams {
                        rows: rows as u32,
                        need: kc as u32,
                        scratch_stride: tiles.scratch_stride as u32,
                        out_stride: kc as u32,
                        groups_x: sx,
                        shortlist_cap,
                        ..Default::default()
                    };
                    // The tile's kc best: straight into the running lists for the first tile,
                    // else into the tile region; a sparse tile has only its shortlists.
                    let out_offset = if dense_tile { 0 } else { tile_region };
                    match (sparse, sorts, &sort_select_bind) {
                        (true, _, _) => {}
                        (false, Some(sorts), Some(bind)) => {
                            let pairs = grid((rows * cols).div_ceil(256), gpu.max_groups);
                            let take = SortSelectParams {
                                rows: rows as u32,
                                cols: cols as u32,
                                in_stride: tiles.dist_stride as u32,
                                col_base,
                                need: kc as u32,
                                out_stride: kc as u32,
                                out_offset,
                                groups_x: sx,
                                row_base: base as u32,
                                column_end: appends_below as u32,
                                column_cap: cap as u32,
                                column_lists: column_lists as u32,
                            };
                            let offset = params.push(SortSelectParams { groups_x: pairs.0, ..take });
                            jobs.push(Job { step: Step::SortSelectPairs, offset, groups: pairs, bind });
                            jobs.extend(sorts.by_key.jobs());
                            match (&sorts.by_column, &sort_columns_bind) {
                                (Some(by_column), Some(columns)) if sorted_columns => {
                                    let (cx, cy) = grid(cols, gpu.max_groups);
                                    let take_offset = params.push(SortSelectParams { groups_x: cx, ..take });
                                    let step = Step::SortSelectColumnKeys;
                                    jobs.push(Job { step, offset, groups: pairs, bind: columns });
                                    jobs.extend(by_column.jobs());
                                    let step = Step::SortSelectTakeColumns;
                                    jobs.push(Job { step, offset: take_offset, groups: (cx, cy), bind: columns });
                                    let step = Step::SortSelectOrderRowKeys;
                                    jobs.push(Job { step, offset, groups: pairs, bind: columns });
                                }
                                _ => jobs.push(Job { step: Step::SortSelectRowKeys, offset, groups: pairs, bind }),
                            }
                            jobs.extend(sorts.by_row.jobs());
                            let offset = params.push(take);
                            jobs.push(Job { step: Step::SortSelectTake, offset, groups: (sx, sy), bind });
                        }
                        (false, _, _) => {
                            let offset = params.push(SelectParams {
                                len: cols as u32,
                                in_stride: tiles.dist_stride as u32,
                                col_base,
                                out_offset,
                                dense: 1,
                                ..select
                            });
                            jobs.push(Job { step: Step::SelectRows, offset, groups: (sx, sy), bind: &select_bind });
                        }
                    }
                    // Merge: the kc best of the running list and the tile's list, or of a
                    // sparse tile's shortlist (an overflowed one marks its row incomplete).
                    let merge = SelectParams { len: 2 * kc as u32, in_stride: tile_region, ..select };
                    if !dense_tile {
                        let ((mx, my), per_group) = merge_groups(rows);
                        let in_stride = if sparse { NONE } else { tile_region };
                        let offset =
                            params.push(SelectParams { groups_x: mx, rows_per_group: per_group, in_stride, ..merge });
                        jobs.push(Job { step: merge_step, offset, groups: (mx, my), bind: &select_bind });
                    }
                    // The column rows' shortlists, with no tile list to fall back on.
                    for (_, merge_rows, _) in column_merges(col_base as usize, cols) {
                        let ((mx, my), per_group) = merge_groups(merge_rows);
                        let offset = params.push(SelectParams {
                            rows: merge_rows as u32,
                            in_stride: NONE,
                            shortlist_cap: cap as u32,
                            groups_x: mx,
                            rows_per_group: per_group,
                            ..merge
                        });
                        let bind = column_binds.next().expect("a bind group per column merge");
                        jobs.push(Job { step: merge_step, offset, groups: (mx, my), bind });
                    }
                    first_tile = false;
                }
            }
            gpu.ctx.queue.write_buffer(&b.uniform, 0, &params.bytes);
            let mut encoder = device.create_command_encoder(&Default::default());
            if batch_no == 0 && from_corpus {
                self.copy_corpus_rows(&mut encoder, q0, rows, b);
            }
            let submitted = gpu.submit(encoder, &jobs)?;
            crate::trace::mark(|| format!("rows {q0}..{} swept against chunk {batch_no} (submitted)", q0 + rows));
            publishing.get_or_insert(submitted.index.clone());
            if !self.plan.resident {
                // A streamed chunk is freed when its tiles have run: one in memory at a time.
                gpu.completion(submitted)?;
            }
        }
        publishing.ok_or_else(|| crate::error::Error::Gpu("a corpus of no rows has nothing to sweep".into()))
    }

    /// The batch index sort's sorts of a dense tile of `rows` x `cols` keys, in the select's
    /// auxiliary arrays: the keys with their positions, then, keeping that order, the
    /// positions by row, and (where `b` keeps a key order: a symmetric sweep) by column.
    /// Planned once per tile shape and set of buffers.
    fn tile_sorts(&self, b: &TileBuffers, rows: usize, cols: usize) -> Result<Arc<TileSorts>> {
        let mut kept = b.tile_sorts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, sorts)) = kept.iter().find(|(shape, _)| *shape == (rows, cols)) {
            return Ok(sorts.clone());
        }
        let gpu = self.gpu;
        let pairs = || Pairs { keys: &b.aux[0], values: &b.aux[1] };
        let scratch = || Some(Pairs { keys: &b.aux[2], values: &b.aux[3] });
        let bits = |values: usize| usize::BITS - (values.max(2) - 1).leading_zeros();
        let by_column = match b.key_order {
            Some(_) => Some(gpu.plan_sort(pairs(), scratch(), rows * cols, SortKey::Bits(bits(cols)))?),
            None => None,
        };
        let sorts = Arc::new(TileSorts {
            by_key: gpu.plan_sort(pairs(), scratch(), rows * cols, SortKey::Float)?,
            by_row: gpu.plan_sort(pairs(), scratch(), rows * cols, SortKey::Bits(bits(rows)))?,
            by_column,
        });
        // A sweep meets a few tile shapes (full, last, sparse widths); more are not kept.
        if kept.len() == MAX_KEPT_TILE_SORTS {
            kept.remove(0);
        }
        kept.push(((rows, cols), sorts.clone()));
        Ok(sorts)
    }

    /// The column side's bind group of the batch index sort selector: every row's state and
    /// shortlist, bound from row 0, and the kept key order.
    fn sort_columns_bind(&self, b: &TileBuffers, key_order: &wgpu::Buffer) -> Result<wgpu::BindGroup> {
        let gpu = self.gpu;
        let kernels = gpu.kernels.sort_select_kernels(&gpu.ctx)?;
        Ok(bind_group(
            &gpu.ctx.device,
            &kernels.columns.layout,
            &b.uniform,
            &[&b.dist, &b.aux[0], &b.aux[1], &b.candidates, &b.row_state, key_order, &b.shortlist_len, &b.shortlist],
        ))
    }

    /// The batch index sort selector's bind group with the per-row arrays bound from state
    /// row `base` (as [`Self::select_bind`]).
    fn sort_select_bind(&self, b: &TileBuffers, base: usize, kc: usize) -> Result<wgpu::BindGroup> {
        let gpu = self.gpu;
        let kernels = gpu.kernels.sort_select_kernels(&gpu.ctx)?;
        let base = base as u64;
        Ok(bind_group_at(
            &gpu.ctx.device,
            &kernels.pairs.layout,
            &b.uniform,
            &[
                (&b.dist, 0),
                (&b.aux[0], 0),
                (&b.aux[1], 0),
                (&b.candidates, base * kc as u64 * 8),
                (&b.row_state, base * 8),
            ],
        ))
    }

    /// The publishing distance kernel's bind group against `chunk`, with the ranked answers it
    /// copies into `read_back` (`distance_publish.wgsl`), and how many vec4s it copies; `None`
    /// where answers are not ranked on the GPU or the adapter cannot publish.
    pub(super) fn publishing(
        &self,
        b: &TileBuffers,
        chunk: &PreparedRows,
        read_back: &wgpu::Buffer,
    ) -> Option<(wgpu::BindGroup, u32)> {
        let gpu = self.gpu;
        let (cb, kernel) = (b.certify.as_ref()?, gpu.kernels.distance_publish.as_ref()?);
        let buffers = [distance_buffers(b, chunk).as_slice(), &[&cb.answers, read_back]].concat();
        // In whole vec4s: the layout's parts start at multiples of 256 bytes.
        Some((bind_group(&gpu.ctx.device, &kernel.layout, &b.uniform, &buffers), (cb.flags_at / 16) as u32))
    }
}

/// The distance kernel's storage buffers for query tile buffers `b` against `chunk`.
pub(super) fn distance_buffers<'a>(b: &'a TileBuffers, chunk: &'a PreparedRows) -> [&'a wgpu::Buffer; 8] {
    [
        &b.queries.vectors,
        &chunk.vectors,
        &b.queries.norms,
        &chunk.norms,
        &b.row_state,
        &b.dist,
        &b.shortlist_len,
        &b.shortlist,
    ]
}
