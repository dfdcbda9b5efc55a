//! How fast the host reads GPU results out of mapped memory: a diagnostic for the copy-out of
//! query tiles' answers (`notes/exactness.md`).
//!
//! Fills a device buffer, copies it into read-back buffers of two kinds (`MAP_READ | COPY_DST`,
//! and with `MAPPABLE_PRIMARY_BUFFERS` also `| STORAGE`, the kind the distance kernel publishes
//! answers into), maps each and times copies out of it: one thread, every core, and with
//! streaming loads (x86-64), each after a fresh GPU copy so that no read finds the data cached.
//!
//! ```text
//! cargo run --release --example readback_speed -- [MiB]
//! ```

use rayon::prelude::*;
use std::time::Instant;

/// A way to copy mapped memory out.
type CopyOut = fn(&mut [u8], &[u8]);

fn main() {
    let mib: usize = std::env::args().nth(1).map_or(24, |a| a.parse().expect("size in MiB"));
    let bytes = mib << 20;
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .expect("an adapter");
    let mappable = adapter.features().contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_features: if mappable { wgpu::Features::MAPPABLE_PRIMARY_BUFFERS } else { wgpu::Features::empty() },
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .expect("a device");
    println!(
        "{} ({:?}), {mib} MiB, {} threads",
        adapter.get_info().name,
        adapter.get_info().backend,
        rayon::current_num_threads()
    );
    let source = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("source"),
        size: bytes as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let words: Vec<u32> = (0..bytes as u32 / 4).map(|i| i.wrapping_mul(2654435761)).collect();
    queue.write_buffer(&source, 0, bytemuck::cast_slice(&words));
    let mut kinds = vec![("MAP_READ | COPY_DST", wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST)];
    if mappable {
        kinds.push((
            "MAP_READ | COPY_DST | STORAGE",
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::STORAGE,
        ));
    }
    // Destination touched once, so that page faults are not timed.
    let mut dst = vec![0u8; bytes];
    dst.iter_mut().step_by(4096).for_each(|b| *b = 1);
    for (name, usage) in kinds {
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(name),
            size: bytes as u64,
            usage,
            mapped_at_creation: false,
        });
        let methods: Vec<(&str, CopyOut)> = vec![
            ("one thread", |d, s| d.copy_from_slice(s)),
            ("every core, 64 KiB chunks", |d, s| {
                d.par_chunks_mut(1 << 16).zip(s.par_chunks(1 << 16)).for_each(|(d, s)| d.copy_from_slice(s))
            }),
            ("one thread, streaming loads", streaming_copy),
            ("every core, streaming loads", |d, s| {
                d.par_chunks_mut(1 << 16).zip(s.par_chunks(1 << 16)).for_each(|(d, s)| streaming_copy(d, s))
            }),
        ];
        for (method, copy) in methods {
            let mut times = Vec::new();
            for _ in 0..5 {
                let mut encoder = device.create_command_encoder(&Default::default());
                encoder.copy_buffer_to_buffer(&source, 0, &staging, 0, bytes as u64);
                queue.submit([encoder.finish()]);
                staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("mapping"));
                device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
                {
                    let view = staging.get_mapped_range(..).expect("mapped range");
                    let started = Instant::now();
                    copy(&mut dst, &view);
                    times.push(started.elapsed().as_secs_f64());
                    assert!(dst == bytemuck::cast_slice::<u32, u8>(&words), "copy differs");
                }
                staging.unmap();
            }
            times.sort_by(f64::total_cmp);
            let best = times[0];
            let median = times[times.len() / 2];
            println!(
                "{name:32} {method:30} best {:7.3} ms ({:6.1} GB/s), median {:7.3} ms",
                best * 1e3,
                bytes as f64 / best / 1e9,
                median * 1e3
            );
        }
    }
}

/// Copies with non-temporal 16-byte loads, the way to read write-combined memory; a plain copy
/// elsewhere.
fn streaming_copy(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.1") {
        // SAFETY: the feature was just detected.
        unsafe { streaming_copy_sse41(dst, src) };
        return;
    }
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
unsafe fn streaming_copy_sse41(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_storeu_si128, _mm_stream_load_si128};
    let (head, body, _) = unsafe { src.align_to::<__m128i>() };
    dst[..head.len()].copy_from_slice(head);
    let out = &mut dst[head.len()..];
    for (i, v) in body.iter().enumerate() {
        // SAFETY: `v` is aligned and in `src`; the store is unaligned and within `out`.
        unsafe {
            let value = _mm_stream_load_si128(v as *const __m128i as *mut __m128i);
            _mm_storeu_si128(out[i * 16..].as_mut_ptr() as *mut __m128i, value);
        }
    }
    let done = head.len() + body.len() * 16;
    dst[done..].copy_from_slice(&src[done..]);
}
