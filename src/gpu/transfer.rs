//! Moving data: buffers created within the budget's error scope, uploads (large ones written on
//! every core), and read-backs through mapped staging buffers.

use std::sync::mpsc;

use rayon::prelude::*;
use wgpu::util::DeviceExt;

use super::engine::GpuEngine;
use super::kernels::ParamSlots;
use crate::error::{Error, Result};

/// Uploads larger than this are split into parts written by several cores, a group of one
/// part per core submitted at a time (2 MiB: eight groups at d=4096 n=16384, whose copies
/// overlap the writing of the next; 8 MiB parts gave two groups and no gain).
const UPLOAD_PART: usize = 2 << 20;

impl GpuEngine {
    pub(super) fn upload_uniform(&self, params: &ParamSlots) -> Result<wgpu::Buffer> {
        self.ctx.allocating(|| {
            self.ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: &params.bytes,
                usage: wgpu::BufferUsages::UNIFORM,
            })
        })
    }

    pub(super) fn upload(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        // wgpu refuses zero-sized bindings: `buffer` pads empty ones to one word.
        let buffer = self.buffer(label, bytes.len() as u64, usage)?;
        self.write(&buffer, label, bytes)?;
        Ok(buffer)
    }

    /// [`Self::upload`] written by the calling thread alone, for callers that run while the
    /// host's thread pool is busy with other work (the hybrid join's GPU thread), which
    /// `upload`'s parts would wait for.
    pub(super) fn upload_from_this_thread(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let buffer = self.buffer(label, bytes.len() as u64, usage)?;
        if !bytes.is_empty() {
            self.ctx.queue.write_buffer(&buffer, 0, bytes);
        }
        Ok(buffer)
    }

    /// Writes `bytes` at the start of `buffer`; the copy to the GPU runs before the next
    /// submission's work.
    pub(super) fn write(&self, buffer: &wgpu::Buffer, label: &str, bytes: &[u8]) -> Result<()> {
        self.write_at(buffer, 0, label, bytes)
    }

    /// Writes `bytes` at byte `offset` of `buffer`, as [`Self::write`].
    pub(super) fn write_at(&self, buffer: &wgpu::Buffer, offset: u64, label: &str, bytes: &[u8]) -> Result<()> {
        if bytes.len() <= UPLOAD_PART {
            if !bytes.is_empty() {
                self.ctx.queue.write_buffer(buffer, offset, bytes);
            }
            return Ok(());
        }
        // Large inputs: written part by part into wgpu's staging memory on every core (one
        // core writes mapped memory at a few GB/s), then copied on the GPU at the next
        // submission. Not through buffers mapped at creation: wgpu zero-fills those on the
        // creating thread first, which doubled the bytes written (d=4096: 268 MB). A group of
        // parts, one per core, is submitted as soon as it is written, so that its copy runs
        // while the next group is written.
        let group = rayon::current_num_threads().max(1) * UPLOAD_PART;
        for (g, bytes) in bytes.chunks(group).enumerate() {
            let written = bytes.par_chunks(UPLOAD_PART).enumerate().all(|(i, part)| {
                let size = wgpu::BufferSize::new(part.len() as u64).expect("parts are not empty");
                let at = offset + (g * group + i * UPLOAD_PART) as u64;
                match self.ctx.queue.write_buffer_with(buffer, at, size) {
                    Some(mut view) => {
                        view.copy_from_slice(part);
                        true
                    }
                    None => false,
                }
            });
            if !written {
                // The error was recorded by the device's handler; report it (usually out of memory).
                self.ctx.wait()?;
                return Err(Error::OutOfMemory(format!("staging memory for uploading {label}")));
            }
            self.ctx.queue.submit([]);
            crate::trace::mark(|| format!("{label}: {} MB written", (g * group + bytes.len()) >> 20));
        }
        Ok(())
    }

    pub(super) fn buffer(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        self.ctx.allocating(|| {
            self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: size.max(4).next_multiple_of(4),
                usage,
                mapped_at_creation: false,
            })
        })
    }
}

/// Waits for submitted work, maps `staging` and hands its bytes to `read`.
pub(super) fn map_and_read(gpu: &GpuEngine, staging: &wgpu::Buffer, read: impl FnOnce(&[u8])) -> Result<()> {
    map_ready(gpu, staging)?;
    read_mapped(staging, read)
}

/// Maps a buffer for reading, once the GPU work writing it is done.
pub(super) fn map_ready(gpu: &GpuEngine, staging: &wgpu::Buffer) -> Result<()> {
    Mapping::request(staging, None).wait(gpu)
}

/// A staging buffer's mapping for reading, requested right after the work that fills it was
/// submitted, so that the host can queue more work before it waits.
pub(super) struct Mapping {
    done: mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
    /// The submission that fills the buffer (`None`: whatever was submitted last).
    after: Option<wgpu::SubmissionIndex>,
}

impl Mapping {
    pub(super) fn request(staging: &wgpu::Buffer, after: Option<wgpu::SubmissionIndex>) -> Self {
        let (tx, done) = mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        Mapping { done, after }
    }

    /// Waits until the buffer is mapped, not for work submitted after it.
    pub(super) fn wait(self, gpu: &GpuEngine) -> Result<()> {
        match self.after {
            Some(index) => gpu.ctx.wait_for(index)?,
            None => gpu.ctx.wait()?,
        }
        let result = match self.done.try_recv() {
            Ok(r) => Ok(r),
            // The mapping's callback may wait for a later poll: wait for everything.
            Err(_) => gpu
                .ctx
                .wait()
                .and_then(|()| self.done.recv().map_err(|_| Error::Gpu("buffer mapping was abandoned".into()))),
        };
        result?.map_err(|e| Error::Gpu(format!("reading results back: {e}")))
    }
}

/// Reads a buffer mapped by [`map_ready`], then unmaps it.
pub(super) fn read_mapped(staging: &wgpu::Buffer, read: impl FnOnce(&[u8])) -> Result<()> {
    read_view(staging, read)?;
    staging.unmap();
    Ok(())
}

/// Reads a buffer mapped by [`map_ready`] and leaves it mapped. Safe on a thread beside the
/// one that polls the device: taking the view makes no driver call, whereas unmapping does,
/// and wgpu's GL backend gives up with a panic on a driver lock held for more than six
/// seconds by a wait for a long dispatch on another thread.
pub(super) fn read_view(staging: &wgpu::Buffer, read: impl FnOnce(&[u8])) -> Result<()> {
    let view = staging.get_mapped_range(..).map_err(|e| Error::Gpu(format!("reading results back: {e:?}")))?;
    read(&view);
    Ok(())
}

/// Copies the first `bytes` (default: all) of a buffer to the host.
pub(super) fn read_back<T: bytemuck::Pod>(gpu: &GpuEngine, src: &wgpu::Buffer, bytes: Option<usize>) -> Result<Vec<T>> {
    let size = bytes.map_or(src.size(), |b| (b as u64).next_multiple_of(4).min(src.size()));
    read_back_at(gpu, src, 0, size as usize)
}

/// Copies `bytes` of a buffer from byte `offset` (both multiples of 4) to the host.
pub(super) fn read_back_at<T: bytemuck::Pod>(
    gpu: &GpuEngine,
    src: &wgpu::Buffer,
    offset: u64,
    bytes: usize,
) -> Result<Vec<T>> {
    let size = bytes as u64;
    if size == 0 {
        return Ok(Vec::new());
    }
    let staging = gpu.buffer("staging", size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST)?;
    let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(src, offset, &staging, 0, size);
    gpu.ctx.queue.submit([encoder.finish()]);
    let mut values = Vec::new();
    map_and_read(gpu, &staging, |bytes| values = bytemuck::pod_collect_to_vec(bytes))?;
    Ok(values)
}
