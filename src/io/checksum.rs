//! Checksums of large arrays: xxh3 of 16 MiB pieces, hashed in parallel, then of their
//! hashes, so that checking a file of many gigabytes takes the threads' memory bandwidth
//! rather than one core's.

use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

const PIECE: usize = 16 << 20;

/// The checksum of `bytes`.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let hashes: Vec<u64> = bytes.par_chunks(PIECE).map(xxh3_64).collect();
    xxh3_64(bytemuck::cast_slice(&hashes))
}
