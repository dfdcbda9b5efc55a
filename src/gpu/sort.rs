//! The radix sort driven: a stable sort of (u32 key, u32 value) pairs in device buffers by the
//! low bits of their keys, recorded as jobs that a caller submits with its own (the batch
//! index sort selector, the low-dimensional grid's cell ids). `notes/sort.md` says which
//! design it follows and why.
//!
//! Passes go back and forth between the caller's buffers and scratch buffers; a sort whose
//! key needs an odd number of digit passes takes one more that moves every pair as it is
//! (digit mask 0), so that the sorted pairs always end where they started.
//!
//! A sort by a secondary key that keeps the order of a first sort (a segmented sort: sort by
//! key, then by segment id) is two sorts, the second by the segment id's bits only.

use super::engine::GpuEngine;
use super::kernels::{
    bind_group, grid, Job, ParamSlots, ScanParams, SortParams, Step, DIGIT_BITS, FLOAT_IN, FLOAT_OUT, SCAN_BLOCK,
    SORT_TILE,
};
use crate::error::{Error, Result};

/// The keys and values a sort reads and leaves sorted: two device buffers of `len` u32s.
pub(in crate::gpu) struct Pairs<'b> {
    pub(in crate::gpu) keys: &'b wgpu::Buffer,
    pub(in crate::gpu) values: &'b wgpu::Buffer,
}

/// What a sort sorts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::gpu) enum SortKey {
    /// The low `bits` bits of u32 keys (1 to 32; bits above them are ignored).
    Bits(u32),
    /// f32 keys (bit patterns in the key buffer), in float order; NaN must not occur. -0.0
    /// sorts as +0.0 and is written back as +0.0.
    Float,
}

/// One planned sort: its parameters and bind groups, and the buffers it allocated.
pub(in crate::gpu) struct RadixSort {
    groups: (u32, u32),
    /// Per level of the counts' prefix sum: its parameter slot and workgroups.
    levels: Vec<(u32, (u32, u32))>,
    /// Per pass: its parameter slot.
    pass_params: Vec<u32>,
    /// Bind groups of passes from the caller's buffers to the scratch, and back.
    forth: wgpu::BindGroup,
    back: wgpu::BindGroup,
    /// One bind group per level of the prefix sum: the level, the level above.
    scan_binds: Vec<wgpu::BindGroup>,
    len: usize,
    _buffers: Vec<wgpu::Buffer>,
}

/// The key's bits, and the passes that sort by them: an even number.
fn key_bits(key: SortKey) -> (u32, u32) {
    let bits = match key {
        SortKey::Bits(bits) => bits.min(32),
        SortKey::Float => 32,
    };
    (bits, bits.div_ceil(DIGIT_BITS).next_multiple_of(2))
}

/// Where two sequences first differ, for a readable failure.
#[cfg(test)]
fn first_difference(got: &[u32], want: &[u32]) -> Option<String> {
    let at = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i))?;
    Some(format!("position {at} of {}: {:?} where {:?} was expected", want.len(), got.get(at), want.get(at)))
}

impl GpuEngine {
    /// Plans a stable sort of the first `len` pairs of `pairs` by `key`, through `scratch`
    /// (as large; allocated here where `None`). Its jobs ([`RadixSort::jobs`]) leave the
    /// sorted pairs in `pairs`.
    pub(in crate::gpu) fn plan_sort(
        &self,
        pairs: Pairs<'_>,
        scratch: Option<Pairs<'_>>,
        len: usize,
        key: SortKey,
    ) -> Result<RadixSort> {
        let kernels = self.kernels.sort_kernels(&self.ctx)?;
        let bytes = len as u64 * 4;
        let room = [pairs.keys, pairs.values].into_iter().chain(scratch.iter().flat_map(|s| [s.keys, s.values]));
        let room = room.map(wgpu::Buffer::size).fold(self.max_binding, u64::min);
        if bytes > room {
            return Err(Error::TooLargeForDevice(format!(
                "sorting {len} pairs: their keys take {bytes} bytes, and the sort's buffers hold {room}"
            )));
        }
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let tiles = len.div_ceil(SORT_TILE).max(1);
        let groups = grid(tiles, self.max_groups);
        let counts = tiles << DIGIT_BITS;
        let mut buffers = Vec::new();
        let (scratch_keys, scratch_values) = match scratch {
            Some(s) => (s.keys, s.values),
            None => {
                buffers.push(self.buffer("sort scratch keys", bytes, storage)?);
                buffers.push(self.buffer("sort scratch values", bytes, storage)?);
                (&buffers[0], &buffers[1])
            }
        };
        let offsets = self.buffer("sort digit offsets", counts as u64 * 4, storage)?;
        // The prefix sum's levels: the counts, then each level's block totals until one block.
        let mut level_lens = vec![counts];
        while *level_lens.last().expect("not empty") > SCAN_BLOCK {
            level_lens.push(level_lens.last().expect("not empty").div_ceil(SCAN_BLOCK));
        }
        let mut level_buffers = Vec::with_capacity(level_lens.len());
        for &n in &level_lens[1..] {
            level_buffers.push(self.buffer("sort block totals", n as u64 * 4, storage)?);
        }
        let top_total = self.buffer("sort total", 4, storage)?;
        let (key_bits, passes) = key_bits(key);
        let mut params = ParamSlots::default();
        let pass_params = (0..passes)
            .map(|pass| {
                let mut flags = 0;
                if key == SortKey::Float && pass == 0 {
                    flags |= FLOAT_IN;
                }
                if key == SortKey::Float && pass + 1 == passes {
                    flags |= FLOAT_OUT;
                }
                params.push(SortParams {
                    len: len as u32,
                    shift: pass * DIGIT_BITS,
                    tiles: tiles as u32,
                    groups_x: groups.0,
                    flags,
                    digit_mask: (1 << key_bits.saturating_sub(pass * DIGIT_BITS).min(DIGIT_BITS)) - 1,
                    _pad: [0; 2],
                })
            })
            .collect();
        let levels = level_lens
            .iter()
            .map(|&n| {
                let blocks = n.div_ceil(SCAN_BLOCK);
                let level_groups = grid(blocks, self.max_groups);
                let offset =
                    params.push(ScanParams { len: n as u32, blocks: blocks as u32, groups_x: level_groups.0, _pad: 0 });
                (offset, level_groups)
            })
            .collect();
        let uniform = self.upload_uniform(&params)?;
        let device = &self.ctx.device;
        let layout = &kernels.count.layout;
        let forth =
            bind_group(device, layout, &uniform, &[pairs.keys, pairs.values, scratch_keys, scratch_values, &offsets]);
        let back =
            bind_group(device, layout, &uniform, &[scratch_keys, scratch_values, pairs.keys, pairs.values, &offsets]);
        let data = std::iter::once(&offsets).chain(&level_buffers);
        let above = level_buffers.iter().chain(std::iter::once(&top_total));
        let scan_binds = data
            .zip(above)
            .map(|(data, sums)| bind_group(device, &kernels.scan.layout, &uniform, &[data, sums]))
            .collect();
        let scan_binds = scan_binds;
        buffers.extend([offsets, top_total, uniform]);
        buffers.extend(level_buffers);
        Ok(RadixSort { groups, levels, pass_params, forth, back, scan_binds, len, _buffers: buffers })
    }

    /// Sorts `keys` and `values` (as many) on the device and returns them sorted.
    #[cfg(test)]
    pub(in crate::gpu) fn sort_pairs(
        &self,
        keys: &[u32],
        values: &[u32],
        key: SortKey,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        assert_eq!(keys.len(), values.len(), "a value per key");
        let len = keys.len();
        use super::transfer::read_back;
        if len == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let key_buffer = self.upload("sort keys", bytemuck::cast_slice(keys))?;
        let value_buffer = self.upload("sort values", bytemuck::cast_slice(values))?;
        let sort = self.plan_sort(Pairs { keys: &key_buffer, values: &value_buffer }, None, len, key)?;
        let encoder = self.ctx.device.create_command_encoder(&Default::default());
        let submitted = self.submit(encoder, &sort.jobs())?;
        self.completion(submitted)?;
        let keys = read_back(self, &key_buffer, Some(len * 4))?;
        let values = read_back(self, &value_buffer, Some(len * 4))?;
        self.ctx.wait()?;
        Ok((keys, values))
    }
}

impl RadixSort {
    /// The dispatches of the whole sort, in order.
    pub(in crate::gpu) fn jobs(&self) -> Vec<Job<'_>> {
        let mut jobs = Vec::new();
        if self.len == 0 {
            return jobs;
        }
        for (pass, &offset) in self.pass_params.iter().enumerate() {
            let bind = if pass % 2 == 0 { &self.forth } else { &self.back };
            jobs.push(Job { step: Step::SortCount, offset, groups: self.groups, bind });
            for (level, &(offset, groups)) in self.levels.iter().enumerate() {
                jobs.push(Job { step: Step::ScanBlocks, offset, groups, bind: &self.scan_binds[level] });
            }
            for (level, &(offset, groups)) in self.levels.iter().enumerate().rev().skip(1) {
                jobs.push(Job { step: Step::ScanAddOffsets, offset, groups, bind: &self.scan_binds[level] });
            }
            jobs.push(Job { step: Step::SortScatter, offset, groups: self.groups, bind });
        }
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuSettings;

    /// A GPU engine on the test adapter (`KNNG_TEST_ADAPTER`), or a failed test; `None` only
    /// for a declared skip of the subgroup path (`KNNG_ALLOW_NO_SUBGROUPS=1`).
    fn engine(no_subgroups: bool) -> Option<GpuEngine> {
        let settings = GpuSettings::for_tests(no_subgroups, 7);
        let gpu = GpuEngine::new(&settings, false).unwrap_or_else(|e| panic!("GPU test without a usable adapter: {e}"));
        if !no_subgroups && !gpu.ctx.subgroups {
            if std::env::var("KNNG_ALLOW_NO_SUBGROUPS").as_deref() == Ok("1") {
                eprintln!("SKIPPED: {} has no subgroup operations", gpu.description());
                return None;
            }
            panic!("the adapter has no subgroup operations: {}", gpu.description());
        }
        assert_eq!(gpu.ctx.subgroups, !no_subgroups, "{}", gpu.description());
        eprintln!("running on {}", gpu.description());
        Some(gpu)
    }

    /// xorshift64: test data, seeded.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Float keys of every kind the sort must order: (name, keys).
    fn float_cases() -> Vec<(&'static str, Vec<f32>)> {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        // Lengths that are no multiple of a tile (1024), of a scan block, or of 4.
        let lengths = [1usize, 3, 1023, 1025, 4099, 70_001];
        let mut cases = Vec::new();
        for &n in &lengths {
            let random: Vec<f32> = (0..n).map(|_| f32::from_bits((rng.next() >> 32) as u32 & 0xff7f_ffff)).collect();
            let random: Vec<f32> = random.into_iter().map(|x| if x.is_nan() { 1.5 } else { x }).collect();
            cases.push(("random bits", random));
            let uniform: Vec<f32> = (0..n).map(|_| (rng.next() >> 40) as f32 / (1u64 << 24) as f32).collect();
            let mut sorted = uniform.clone();
            sorted.sort_by(f32::total_cmp);
            cases.push(("reversed", sorted.iter().rev().copied().collect()));
            cases.push(("sorted", sorted));
            cases.push(("all equal", vec![0.25; n]));
            cases.push(("few distinct", (0..n).map(|_| (rng.next() % 5) as f32 - 2.0).collect()));
            cases.push(("negative", uniform.iter().map(|x| -x * 1e3).collect()));
            let tiny = [
                0.0f32,
                -0.0,
                f32::from_bits(1),
                -f32::from_bits(1),
                f32::from_bits(0x007f_ffff),
                f32::MIN_POSITIVE,
                -f32::MIN_POSITIVE,
            ];
            cases.push((
                "denormal and signed zeros",
                (0..n).map(|_| tiny[(rng.next() % tiny.len() as u64) as usize]).collect(),
            ));
            cases.push((
                "infinities",
                (0..n).map(|i| [f32::INFINITY, f32::NEG_INFINITY, 1.0, f32::MAX, f32::MIN][i % 5]).collect(),
            ));
        }
        cases
    }

    fn check_floats(gpu: &GpuEngine) {
        for (name, keys) in float_cases() {
            let values: Vec<u32> = (0..keys.len() as u32).collect();
            let bits: Vec<u32> = keys.iter().map(|x| x.to_bits()).collect();
            let (sorted, order) = gpu.sort_pairs(&bits, &values, SortKey::Float).unwrap();
            // Rust's stable sort: equal floats (-0.0 and +0.0 too) keep their order.
            let mut expected: Vec<u32> = values.clone();
            expected.sort_by(|&a, &b| keys[a as usize].partial_cmp(&keys[b as usize]).expect("no NaN"));
            let n = keys.len();
            assert_eq!(first_difference(&order, &expected), None, "{name}, {n} keys: the values' order");
            let want: Vec<u32> =
                expected.iter().map(|&i| if keys[i as usize] == 0.0 { 0 } else { bits[i as usize] }).collect();
            assert_eq!(first_difference(&sorted, &want), None, "{name}, {n} keys: the keys written back");
        }
    }

    fn check_bits(gpu: &GpuEngine) {
        let mut rng = Rng(7);
        for (n, bits) in [(5000usize, 32u32), (4097, 13), (1, 1), (2050, 1), (33_333, 17), (0, 32)] {
            let keys: Vec<u32> = (0..n).map(|_| rng.next() as u32).collect();
            let values: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
            let (sorted, order) = gpu.sort_pairs(&keys, &values, SortKey::Bits(bits)).unwrap();
            let mask = if bits == 32 { u32::MAX } else { (1 << bits) - 1 };
            let mut expected: Vec<usize> = (0..n).collect();
            expected.sort_by_key(|&i| keys[i] & mask);
            let want_order: Vec<u32> = expected.iter().map(|&i| values[i]).collect();
            let want_keys: Vec<u32> = expected.iter().map(|&i| keys[i]).collect();
            assert_eq!(first_difference(&order, &want_order), None, "{n} keys by {bits} bits: the values' order");
            assert_eq!(first_difference(&sorted, &want_keys), None, "{n} keys by {bits} bits: the keys");
        }
    }

    #[test]
    fn subgroup_sort_matches_a_stable_host_sort() {
        if let Some(gpu) = engine(false) {
            check_floats(&gpu);
            check_bits(&gpu);
        }
    }

    #[test]
    fn workgroup_sort_matches_a_stable_host_sort() {
        let gpu = engine(true).expect("no subgroups asked for");
        check_floats(&gpu);
        check_bits(&gpu);
    }
}
