//! What every kernel binds: the parameter block, one 256-byte uniform slot per dispatch, at
//! binding 0, and storage buffers after it; and the 2-D grid of a dispatch.

use super::{
    CertifyParams, DistanceParams, NormsParams, RefineParams, ScanParams, SelectParams, SortParams, SortSelectParams,
};

/// Uniform slots are this far apart (the largest `min_uniform_buffer_offset_alignment`).
pub(in crate::gpu) const PARAM_SLOT: u64 = 256;

/// Bytes bound for each parameter block: the largest of them.
const PARAMS_SIZE: u64 = std::mem::size_of::<DistanceParams>() as u64;
const _: () = assert!(std::mem::size_of::<SelectParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<NormsParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<RefineParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<CertifyParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<SortParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<ScanParams>() as u64 <= PARAMS_SIZE);
const _: () = assert!(std::mem::size_of::<SortSelectParams>() as u64 <= PARAMS_SIZE);

/// Uniform parameters of one submission, one 256-byte slot per dispatch.
#[derive(Default)]
pub(in crate::gpu) struct ParamSlots {
    pub(in crate::gpu) bytes: Vec<u8>,
}

impl ParamSlots {
    pub(in crate::gpu) fn push<T: bytemuck::Pod>(&mut self, p: T) -> u32 {
        let offset = self.bytes.len();
        self.bytes.extend_from_slice(bytemuck::bytes_of(&p));
        self.bytes.resize(offset + PARAM_SLOT as usize, 0);
        offset as u32
    }
}

/// 2-D dispatch for `groups` workgroups: no dimension may exceed `max` (65535 on every
/// adapter wgpu exposes). Kernels recover the linear index as x + y * groups_x.
pub(in crate::gpu) fn grid(groups: usize, max: u32) -> (u32, u32) {
    let x = groups.clamp(1, max as usize);
    (x as u32, groups.div_ceil(x).max(1) as u32)
}

pub(in crate::gpu) fn bind_group(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    uniform: &wgpu::Buffer,
    storage: &[&wgpu::Buffer],
) -> wgpu::BindGroup {
    let whole: Vec<(&wgpu::Buffer, u64)> = storage.iter().map(|&b| (b, 0)).collect();
    bind_group_at(device, layout, uniform, &whole)
}

/// A bind group of storage buffers each bound from a byte offset to its end (per-row arrays
/// bound at a tile's first row; offsets are multiples of 256 bytes).
pub(in crate::gpu) fn bind_group_at(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    uniform: &wgpu::Buffer,
    storage: &[(&wgpu::Buffer, u64)],
) -> wgpu::BindGroup {
    let ranges: Vec<wgpu::BufferBinding<'_>> =
        storage.iter().map(|&(buffer, offset)| wgpu::BufferBinding { buffer, offset, size: None }).collect();
    bind_group_ranges(device, layout, uniform, &ranges)
}

/// A bind group of storage buffer ranges (offsets are multiples of 256 bytes).
pub(in crate::gpu) fn bind_group_ranges(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    uniform: &wgpu::Buffer,
    storage: &[wgpu::BufferBinding<'_>],
) -> wgpu::BindGroup {
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: uniform,
            offset: 0,
            size: std::num::NonZeroU64::new(PARAMS_SIZE),
        }),
    }];
    for (i, range) in storage.iter().enumerate() {
        debug_assert!(range.offset.is_multiple_of(256) && range.offset < range.buffer.size());
        entries.push(wgpu::BindGroupEntry {
            binding: i as u32 + 1,
            resource: wgpu::BindingResource::Buffer(range.clone()),
        });
    }
    device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout, entries: &entries })
}
