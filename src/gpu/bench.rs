//! `knng bench --what select`: the selection kernel alone.

use super::{bind_group, grid, read_back, GpuEngine, GpuTimes, Job, ParamSlots, SelectParams, Step};
use crate::error::{Error, Result};

impl GpuEngine {
    /// Times `select_rows` alone: the `k` smallest of each of `rows` rows of `cols` uniform
    /// random keys, as on one distance tile, after one untimed warm-up tile. Returns (wall
    /// seconds from the first timed submission to the last completion, GPU times from
    /// timestamps when profiling).
    pub fn bench_select(&self, rows: usize, cols: usize, k: usize, seed: u64) -> Result<(f64, Option<GpuTimes>)> {
        if k == 0 || k > cols {
            return Err(Error::arg("k", format!("k = {k} must be between 1 and the row length {cols}")));
        }
        let row_bytes = cols as u64 * 8;
        // Dense rows start at whole vec4s, as distance tiles do.
        let stride = cols.next_multiple_of(4);
        let tile_rows = (self.max_binding / row_bytes).min(rows as u64).min(65535) as usize;
        if tile_rows == 0 {
            return Err(Error::TooLargeForDevice(format!("a row of {cols} keys does not fit one binding")));
        }
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        let keys: Vec<f32> = (0..tile_rows * stride)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect();
        let dist = self.buffer("keys", (tile_rows * stride * 4) as u64, storage)?;
        self.ctx.queue.write_buffer(&dist, 0, bytemuck::cast_slice(&keys));
        let aux_a = self.buffer("aux a", tile_rows as u64 * row_bytes, storage)?;
        let aux_b = self.buffer("aux b", tile_rows as u64 * row_bytes, storage)?;
        let out = self.buffer("selected", (tile_rows * k * 8) as u64, storage)?;
        let failed = self.buffer("failed", (tile_rows * 4) as u64, storage)?;
        // Bounds are written, shortlists unused (one tile, no merge).
        let row_state = self.buffer("row state", (tile_rows * 8) as u64, storage)?;
        let no_shortlist_len = self.buffer("no shortlist lengths", 16, storage)?;
        let no_shortlist = self.buffer("no shortlist", 16, storage)?;
        self.ctx.wait()?;
        // All tiles go in one submission, as the engine submits its dispatches; one untimed
        // tile runs first: the buffers' first use (zero-fill, driver allocation) would
        // otherwise be timed as selection.
        let mut params = ParamSlots::default();
        let mut groups = Vec::new();
        for r0 in (0..rows).step_by(tile_rows) {
            let r = tile_rows.min(rows - r0);
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
        let bind = bind_group(
            &self.ctx.device,
            &self.select.layout,
            &uniform,
            &[&dist, &aux_a, &aux_b, &out, &failed, &row_state, &no_shortlist_len, &no_shortlist],
        );
        let jobs: Vec<Job<'_>> = groups
            .iter()
            .map(|&(offset, groups)| Job { step: Step::SelectRows, offset, groups, bind: &bind })
            .collect();
        self.submit(self.ctx.device.create_command_encoder(&Default::default()), &jobs[..1])?;
        self.take_profile();
        let started = std::time::Instant::now();
        self.submit(self.ctx.device.create_command_encoder(&Default::default()), &jobs)?;
        let wall = started.elapsed().as_secs_f64();
        // A benchmark of wrong answers would be worthless: check the flags, and the first
        // row of the last tile against a sort on the host.
        let flags: Vec<u32> = read_back(self, &failed, None)?;
        let selected: Vec<[u32; 2]> = read_back(self, &out, Some(k * 8))?;
        let mut want = keys[..cols].to_vec();
        want.sort_by(f32::total_cmp);
        let mut got: Vec<f32> = selected.iter().map(|p| f32::from_bits(p[0])).collect();
        got.sort_by(f32::total_cmp);
        let unfinished = flags.iter().filter(|&&f| f & 1 != 0).count();
        if unfinished > 0 {
            return Err(Error::Gpu(format!(
                "select-only benchmark: {unfinished} of the last {} rows did not finish within the pass limit \
                 (the search falls back to the host for such rows)",
                flags.len()
            )));
        }
        if got != want[..k] {
            return Err(Error::Gpu("select-only benchmark: the selection differs from a host sort".into()));
        }
        Ok((wall, self.take_profile()))
    }
}
