//! What the host's copy-out of ranked answers costs, without a GPU: a graph's answers (ids
//! and distances, `k` a row) copied tile by tile into arrays fresh from the system, as the
//! reader threads of a GPU run copy them out of mapped memory (`notes/exactness.md`). Each
//! way of getting the arrays' pages mapped is timed over every tile back to back, the whole
//! time the host needs to keep up with the GPU.
//!
//! ```text
//! cargo run --release --example answer_pages -- [rows k tile_rows]
//! ```

use rayon::prelude::*;
use std::time::Instant;

#[cfg(target_os = "linux")]
const HUGE_PAGES: libc::c_int = libc::MADV_HUGEPAGE;
#[cfg(not(target_os = "linux"))]
const HUGE_PAGES: i32 = 0;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let (rows, k, tile) = match args[..] {
        [rows, k, tile] => (rows, k, tile),
        _ => (65536, 1000, 3008),
    };
    // The tile's answers as they sit in mapped memory: ids, then distances.
    let source_ids: Vec<u32> = (0..tile * k).map(|i| (i * 7919 % rows) as u32).collect();
    let source_distances: Vec<f32> = (0..tile * k).map(|i| (i % k) as f32 * 0.5).collect();
    println!("{rows} rows, k={k}, tiles of {tile} rows: {} MB of answers", (rows * k * 8) >> 20);
    for (name, huge, ahead, chunk_rows) in [
        ("2 MiB advice (as shipped)", true, 0, 1),
        ("no advice", false, 0, 1),
        ("2 MiB advice, rows in chunks of 64", true, 0, 64),
        ("2 MiB advice, pages mapped ahead by 1 thread", true, 1, 1),
        ("2 MiB advice, pages mapped ahead by 2 threads", true, 2, 1),
        ("no advice, pages mapped ahead by 2 threads", false, 2, 1),
        ("2 MiB advice, all pages mapped first on every core", true, usize::MAX, 1),
    ] {
        for round in 0..2 {
            let started = Instant::now();
            let mut ids: Vec<u32> = bytemuck::zeroed_vec(rows * k);
            let mut distances: Vec<f32> = bytemuck::zeroed_vec(rows * k);
            if huge {
                advise(&ids, HUGE_PAGES);
                advise(&distances, HUGE_PAGES);
            }
            let mut first = 0.0;
            if ahead == usize::MAX {
                ids.par_chunks_mut(1 << 18).for_each(|c| c[0] = 0);
                distances.par_chunks_mut(1 << 18).for_each(|c| c[0] = 0.0);
                first = started.elapsed().as_secs_f64() * 1e3;
            }
            let tiles: Vec<usize> = (0..rows).step_by(tile).collect();
            let mut slowest: f64 = 0.0;
            std::thread::scope(|scope| {
                if ahead > 0 && ahead != usize::MAX {
                    let (ids_at, distances_at) = (ids.as_ptr() as usize, distances.as_ptr() as usize);
                    for t in 0..ahead {
                        let tiles = &tiles;
                        scope.spawn(move || {
                            for &q0 in tiles.iter().skip(t).step_by(ahead) {
                                let len = tile.min(rows - q0) * k * 4;
                                populate(ids_at + q0 * k * 4, len);
                                populate(distances_at + q0 * k * 4, len);
                            }
                        });
                    }
                }
                for &q0 in &tiles {
                    let n = tile.min(rows - q0);
                    let copied = Instant::now();
                    let (ids, distances) = (&mut ids[q0 * k..(q0 + n) * k], &mut distances[q0 * k..(q0 + n) * k]);
                    ids.par_chunks_mut(k * chunk_rows)
                        .zip(distances.par_chunks_mut(k * chunk_rows))
                        .zip(source_ids.par_chunks(k * chunk_rows).zip(source_distances.par_chunks(k * chunk_rows)))
                        .for_each(|((ids, distances), (from_ids, from_distances))| {
                            for ((ids, distances), (from_ids, from_distances)) in ids
                                .chunks_mut(k)
                                .zip(distances.chunks_mut(k))
                                .zip(from_ids.chunks(k).zip(from_distances.chunks(k)))
                            {
                                ids.copy_from_slice(from_ids);
                                distances.copy_from_slice(from_distances);
                            }
                        });
                    slowest = slowest.max(copied.elapsed().as_secs_f64() * 1e3);
                }
            });
            let total = started.elapsed().as_secs_f64() * 1e3;
            println!(
                "{name}, round {round}: {total:.1} ms in all ({first:.1} before the first tile), slowest tile {slowest:.2} ms"
            );
            std::hint::black_box((&ids, &distances));
        }
    }
}

#[cfg(target_os = "linux")]
fn advise<T>(memory: &[T], advice: libc::c_int) {
    let start = (memory.as_ptr() as usize).next_multiple_of(4096);
    let end = (memory.as_ptr() as usize + std::mem::size_of_val(memory)) / 4096 * 4096;
    // SAFETY: advice on whole pages of an allocation this function's caller owns.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
}

#[cfg(target_os = "linux")]
fn populate(addr: usize, len: usize) {
    let start = addr.next_multiple_of(4096);
    let end = (addr + len) / 4096 * 4096;
    if end > start {
        // SAFETY: whole pages inside an allocation that outlives the scope; contents unchanged.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) };
    }
}

// Elsewhere the pages are mapped by the copies themselves, whatever the variant.
#[cfg(not(target_os = "linux"))]
fn advise<T>(_: &[T], _: i32) {}

#[cfg(not(target_os = "linux"))]
fn populate(_: usize, _: usize) {}
