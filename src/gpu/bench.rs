//! `knng bench --what select` and `--what distance`: one kernel alone.

use super::engine::GpuEngine;
use super::kernels::{
    bind_group, gemm_tiles, grid, DistanceParams, Job, ParamSlots, SelectParams, Step, AUX_NAMES, TILE_N,
};
use super::profile::GpuTimes;
use super::transfer::read_back;
use crate::error::{Error, Result};
use rayon::prelude::*;

/// `n` seeded uniform values in [0, 1) (xorshift: benchmarks need data, not statistics).
fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

impl GpuEngine {
    /// Runs the jobs untimed (the buffers' first use: zero-fill, driver allocation), then
    /// all of them again in one submission, as the engine submits its dispatches: wall seconds from
    /// recording to completion (with `--profile`, not the timestamps' read-back after it).
    fn time_jobs(&self, jobs: &[Job<'_>]) -> Result<f64> {
        let warm_up = self.submit(self.ctx.device.create_command_encoder(&Default::default()), jobs)?;
        self.completion(warm_up)?;
        self.take_profile();
        let started = std::time::Instant::now();
        let submitted = self.submit(self.ctx.device.create_command_encoder(&Default::default()), jobs)?;
        crate::trace::mark(|| format!("bench: {} jobs submitted", jobs.len()));
        let completed = self.completion(submitted)?;
        crate::trace::mark(|| "bench: completed".into());
        Ok((completed - started).as_secs_f64())
    }

    /// Times `select_rows` alone: the `k` smallest of each of `rows` rows of `cols` uniform
    /// random keys (every row its own), in tiles of equal size that each fit one binding (as a
    /// search's distance tiles must), after one untimed warm-up tile. Returns (wall seconds from the first timed
    /// submission to the last completion, GPU times from timestamps when profiling).
    pub fn bench_select(&self, rows: usize, cols: usize, k: usize, seed: u64) -> Result<(f64, Option<GpuTimes>)> {
        if k == 0 || k > cols {
            return Err(Error::arg("k", format!("k = {k} must be between 1 and the row length {cols}")));
        }
        // Each binding holds 4 bytes a key: the keys, and the auxiliary arrays' keys and indices.
        let row_bytes = cols as u64 * 4;
        // Dense rows start at whole vec4s, as distance tiles do.
        let stride = cols.next_multiple_of(4);
        let most_rows = (self.max_binding / row_bytes).min(rows as u64).min(65535) as usize;
        if most_rows == 0 {
            return Err(Error::TooLargeForDevice(format!("a row of {cols} keys does not fit one binding")));
        }
        // Tiles of equal size: a last tile of a few rows would run alone after the others, its
        // time that of one row's serial passes rather than the GPU's throughput.
        let tile_rows = rows.div_ceil(rows.div_ceil(most_rows));
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let tiles: Vec<(usize, usize)> =
            (0..rows).step_by(tile_rows).map(|r0| (r0, tile_rows.min(rows - r0))).collect();
        // Each row's keys from its own seed: some rows take more passes than others, and a
        // tile that repeated another's rows would repeat its slow ones too.
        let mut last_keys = Vec::new();
        let mut dist = Vec::with_capacity(tiles.len());
        for &(r0, r) in &tiles {
            let tile_keys: Vec<f32> = (r0..r0 + r)
                .into_par_iter()
                .flat_map_iter(|row| uniform(stride, seed ^ (row as u64).wrapping_mul(0xD1B54A32D192ED03)))
                .collect();
            let buffer = self.buffer("keys", (r * stride * 4) as u64, storage)?;
            self.ctx.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&tile_keys));
            last_keys = tile_keys;
            dist.push(buffer);
        }
        // Each tile selects into buffers of its own where they fit, so that no barrier orders
        // the tiles and the GPU runs them as the one dispatch the binding limit forbids; where
        // they do not fit, the tiles share one set and run in turn.
        let scratch = |tile: usize| -> Result<Vec<wgpu::Buffer>> {
            let mut set: Vec<wgpu::Buffer> = AUX_NAMES
                .into_iter()
                .map(|name| self.buffer(name, tile_rows as u64 * row_bytes, storage))
                .collect::<Result<_>>()?;
            set.push(self.buffer("selected", (tile_rows * k * 8) as u64, storage)?);
            set.push(self.buffer("failed", (tile_rows * 4) as u64, storage)?);
            // Bounds are written, shortlists unused (one tile, no merge).
            set.push(self.buffer("row state", (tile_rows * 8) as u64, storage)?);
            set.push(self.buffer("no shortlist lengths", 16, storage)?);
            set.push(self.buffer("no shortlist", 16, storage)?);
            self.ctx.wait()?;
            crate::trace::mark(|| format!("select bench: buffers of tile {tile}"));
            Ok(set)
        };
        let mut sets = vec![scratch(0)?];
        for tile in 1..tiles.len() {
            match scratch(tile) {
                Ok(set) => sets.push(set),
                Err(Error::OutOfMemory(_)) => break,
                Err(e) => return Err(e),
            }
        }
        let set_of = |tile: usize| &sets[tile % sets.len()];
        let mut params = ParamSlots::default();
        let mut groups = Vec::new();
        for &(_, r) in &tiles {
            let (gx, gy) = grid(r, self.max_groups);
            let offset = params.push(SelectParams {
                rows: r as u32,
                len: cols as u32,
                in_stride: stride as u32,
                need: k as u32,
                scratch_stride: cols as u32,
                out_stride: k as u32,
                dense: 1,
                groups_x: gx,
                ..Default::default()
            });
            groups.push((offset, (gx, gy)));
        }
        let uniform = self.upload_uniform(&params)?;
        let binds: Vec<wgpu::BindGroup> = dist
            .iter()
            .enumerate()
            .map(|(tile, keys)| {
                let storage: Vec<&wgpu::Buffer> = std::iter::once(keys).chain(set_of(tile)).collect();
                bind_group(&self.ctx.device, &self.kernels.select.rows.layout, &uniform, &storage)
            })
            .collect();
        let jobs: Vec<Job<'_>> = groups
            .iter()
            .zip(&binds)
            .map(|(&(offset, groups), bind)| Job { step: Step::SelectRows, offset, groups, bind })
            .collect();
        let wall = self.time_jobs(&jobs)?;
        // A benchmark of wrong answers would be worthless: check the flags of every set (the
        // last tile of each), and every row of the last tile, whose answers its set's output
        // holds, against a selection on the host.
        const FAILED: usize = AUX_NAMES.len() + 1;
        const SELECTED: usize = AUX_NAMES.len();
        for (at, set) in sets.iter().enumerate() {
            let last_tile = (at..tiles.len()).step_by(sets.len()).next_back().unwrap_or(at);
            let flags: Vec<u32> = read_back(self, &set[FAILED], Some(tiles[last_tile].1 * 4))?;
            let unfinished = flags.iter().filter(|&&f| f & 1 != 0).count();
            if unfinished > 0 {
                return Err(Error::Gpu(format!(
                    "select-only benchmark: {unfinished} of the {} rows from row {} did not finish within the \
                     pass limit (the search falls back to the host for such rows)",
                    flags.len(),
                    tiles[last_tile].0
                )));
            }
        }
        let selected: Vec<[u32; 2]> = read_back(self, &set_of(tiles.len() - 1)[SELECTED], None)?;
        let (last_r0, last_rows) = tiles[tiles.len() - 1];
        let wrong = (0..last_rows).into_par_iter().find_first(|&r| {
            let row = &last_keys[r * stride..r * stride + cols];
            let pairs = &selected[r * k..(r + 1) * k];
            // Each answer names a distinct column that holds its key...
            let mut ids: Vec<u32> = pairs.iter().map(|p| p[1]).collect();
            ids.sort_unstable();
            ids.dedup();
            let named =
                ids.len() == k && pairs.iter().all(|p| row.get(p[1] as usize).map(|v| v.to_bits()) == Some(p[0]));
            // ...and the keys are the k smallest (any of equal ones will do).
            let mut want = row.to_vec();
            want.select_nth_unstable_by(k - 1, f32::total_cmp);
            want.truncate(k);
            want.sort_by(f32::total_cmp);
            let mut got: Vec<f32> = pairs.iter().map(|p| f32::from_bits(p[0])).collect();
            got.sort_by(f32::total_cmp);
            !named || got != want
        });
        if let Some(r) = wrong {
            return Err(Error::Gpu(format!(
                "select-only benchmark: row {}'s selection differs from a host selection",
                last_r0 + r
            )));
        }
        Ok((wall, self.take_profile()))
    }

    /// Times `distance_tile` alone: the euclidean keys of `rows` query rows against `cols`
    /// corpus rows of dimension `d` (uniform random, prepared on the host), in column tiles
    /// that fit one binding, after one untimed warm-up tile, all in one submission; then checks
    /// the last tile's first row against float64. Returns (wall seconds of the timed
    /// submission, GPU times from timestamps when profiling).
    pub fn bench_distance(&self, rows: usize, cols: usize, d: usize, seed: u64) -> Result<(f64, Option<GpuTimes>)> {
        let dim4 = d.div_ceil(4);
        let prepared = |n: usize, seed: u64| {
            let mut v = uniform(n * dim4 * 4, seed);
            // Padding beyond d is zero, as the norms kernel leaves it.
            for row in v.chunks_mut(dim4 * 4) {
                row[d..].fill(0.0);
            }
            let norms: Vec<f32> = v.chunks(dim4 * 4).map(|r| r.iter().map(|x| x * x).sum()).collect();
            (v, norms)
        };
        let (q, q_norms) = prepared(rows, seed);
        let (c, c_norms) = prepared(cols, seed.wrapping_add(1));
        let row_bytes = (dim4 * 16) as u64;
        if rows as u64 * row_bytes > self.max_binding || cols as u64 * row_bytes > self.max_binding {
            return Err(Error::TooLargeForDevice(format!(
                "{rows} x {d} queries or {cols} x {d} corpus rows do not fit one binding"
            )));
        }
        // Equal column tiles of whole workgroup tiles, each under one binding.
        let max_cols = (self.max_binding / (rows as u64 * 4)) as usize / TILE_N as usize * TILE_N as usize;
        if max_cols == 0 {
            return Err(Error::TooLargeForDevice(format!("{rows} rows of keys do not fit one binding")));
        }
        let tile_cols = cols.div_ceil(cols.div_ceil(max_cols)).next_multiple_of(TILE_N as usize).min(max_cols);
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let queries = self.upload("queries", bytemuck::cast_slice(&q))?;
        let corpus = self.upload("corpus", bytemuck::cast_slice(&c))?;
        let q_norm_buf = self.upload("query norms", bytemuck::cast_slice(&q_norms))?;
        let c_norm_buf = self.upload("corpus norms", bytemuck::cast_slice(&c_norms))?;
        // No row to exclude and no bound: every key is stored, none appended to a list.
        let state: Vec<[u32; 2]> = vec![[u32::MAX, f32::INFINITY.to_bits()]; rows];
        let row_state = self.upload("row state", bytemuck::cast_slice(&state))?;
        let dist = self.buffer("distances", (rows * tile_cols * 4) as u64, storage)?;
        let list_len = self.buffer("list lengths", 16, storage)?;
        let lists = self.buffer("lists", 16, storage)?;
        let mut params = ParamSlots::default();
        let mut jobs_at = Vec::new();
        for c0 in (0..cols).step_by(tile_cols) {
            let c_rows = tile_cols.min(cols - c0);
            let (gx, gy) = grid(gemm_tiles(rows, c_rows), self.max_groups);
            let tile = DistanceParams {
                q_rows: rows as u32,
                c_rows: c_rows as u32,
                dim4: dim4 as u32,
                c_offset: c0 as u32,
                col_base: c0 as u32,
                out_stride: tile_cols as u32,
                groups_x: gx,
                ..Default::default()
            };
            jobs_at.push((params.push(tile), (gx, gy)));
        }
        let uniform_buf = self.upload_uniform(&params)?;
        let bind = bind_group(
            &self.ctx.device,
            &self.kernels.distance.layout,
            &uniform_buf,
            &[&queries, &corpus, &q_norm_buf, &c_norm_buf, &row_state, &dist, &list_len, &lists],
        );
        let jobs: Vec<Job<'_>> =
            jobs_at.iter().map(|&(offset, groups)| Job { step: Step::Distance, offset, groups, bind: &bind }).collect();
        let wall = self.time_jobs(&jobs)?;
        let profile = self.take_profile();
        // Check the last tile's first row against float64 on the host.
        let last = (cols - 1) / tile_cols * tile_cols;
        let got: Vec<f32> = read_back(self, &dist, Some(tile_cols * 4))?;
        let row = |m: &[f32], i: usize| m[i * dim4 * 4..i * dim4 * 4 + d].iter().map(|&x| x as f64).collect::<Vec<_>>();
        let q0 = row(&q, 0);
        for j in last..cols {
            let cj = row(&c, j);
            let want: f64 = q0.iter().zip(&cj).map(|(a, b)| (a - b) * (a - b)).sum();
            let scale = q0.iter().chain(&cj).map(|x| x * x).sum::<f64>();
            // Far above fp32's error of about d units of roundoff in |q|^2 + |c|^2.
            if (got[j - last] as f64 - want).abs() > 8.0 * d as f64 * f32::EPSILON as f64 * scale {
                return Err(Error::Gpu(format!(
                    "distance-only benchmark: key (0, {j}) is {} on the GPU, {want} in float64",
                    got[j - last]
                )));
            }
        }
        Ok((wall, profile))
    }
}

impl GpuEngine {
    /// Times the radix sort alone: `len` pairs of uniform random f32 keys in [-1, 1) and u32
    /// values, sorted by key (8 passes), after one untimed run on other keys. The result is
    /// checked against a stable sort on the host. Returns (wall seconds from submission to
    /// completion, GPU times when profiling).
    pub fn bench_sort(&self, len: usize, seed: u64) -> Result<(f64, Option<GpuTimes>)> {
        use super::sort::{Pairs, SortKey};
        let keys_of =
            |seed| -> Vec<u32> { uniform(len, seed).into_iter().map(|x| (2.0 * x - 1.0).to_bits()).collect() };
        let values: Vec<u32> = (0..len as u32).collect();
        let keys = keys_of(seed);
        let key_buffer = self.upload("sort keys", bytemuck::cast_slice(&keys_of(seed ^ 0xA5A5)))?;
        let value_buffer = self.upload("sort values", bytemuck::cast_slice(&values))?;
        let pairs = || Pairs { keys: &key_buffer, values: &value_buffer };
        let sort = self.plan_sort(pairs(), None, len, SortKey::Float)?;
        let jobs = sort.jobs();
        self.completion(self.submit(self.ctx.device.create_command_encoder(&Default::default()), &jobs)?)?;
        self.take_profile();
        self.write(&key_buffer, "sort keys", bytemuck::cast_slice(&keys))?;
        self.write(&value_buffer, "sort values", bytemuck::cast_slice(&values))?;
        self.ctx.wait()?;
        let started = std::time::Instant::now();
        let submitted = self.submit(self.ctx.device.create_command_encoder(&Default::default()), &jobs)?;
        let completed = self.completion(submitted)?;
        let wall = (completed - started).as_secs_f64();
        let gpu = self.take_profile();
        let order: Vec<u32> = read_back(self, &value_buffer, Some(len * 4))?;
        let mut expected = values;
        let key = |i: &u32| f32::from_bits(keys[*i as usize]);
        expected.par_sort_by(|a, b| key(a).total_cmp(&key(b)));
        if let Some(at) = (0..len).find(|&i| order[i] != expected[i]) {
            return Err(Error::Gpu(format!(
                "the radix sort put pair {} at position {at} of {len}, where a stable sort puts pair {}",
                order[at], expected[at]
            )));
        }
        Ok((wall, gpu))
    }
}
