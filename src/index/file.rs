//! The index file: a header that says what the index is and where its arrays lie, then the
//! arrays, each at an offset aligned for its values so that a mapped file is used in place.
//!
//! All numbers are little-endian. The header is [`Header`] as laid out in memory: the magic
//! `KNNGINDX`, the format version, a byte-order mark, the knng version that wrote it, what
//! the index holds (algorithm, metric, rows, columns, distinct points, the centring error of
//! correlation rows), then offset, length and xxh3 checksum of each array, and last the
//! header's own checksum. Arrays follow in order, separated by zero bytes and followed by
//! none. A file whose format is not [`FORMAT`], whose sizes disagree, whose padding is not
//! zero, or whose header or arrays fail their checksums is refused with a message that says
//! which.

use std::io::Write;
use std::path::Path;

use bytemuck::{Pod, Zeroable};

use crate::error::Result;
use crate::io::checksum;
use crate::lowdim::covertree::{self, Node, Parts, TreeRef};
use crate::metric::Metric;
use crate::search::Algorithm;

const MAGIC: [u8; 8] = *b"KNNGINDX";

/// The version of the layout this build writes and reads; raised whenever it changes.
pub(crate) const FORMAT: u32 = 2;

/// Written as a u32: reads as this value only where the reader's byte order is the writer's.
const BYTE_ORDER: u32 = 0x0102_0304;

/// Arrays start at multiples of this, for every value type and for cache lines.
const ALIGN: u64 = 64;

/// The arrays, in file order: the corpus rows (f32), then a cover tree's nodes, tree vectors
/// (f32), rows in node order (u32) and each point's first row (u32); the tree's are empty in
/// a brute-force index. A euclidean cover tree's points are the corpus rows themselves: its
/// index holds no tree vectors, and its corpus rows in node order (the order of `rows`).
const ARRAYS: [&str; 5] = ["corpus", "nodes", "vectors", "rows", "first"];

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Section {
    offset: u64,
    bytes: u64,
    checksum: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Header {
    magic: [u8; 8],
    format: u32,
    byte_order: u32,
    /// `knng VERSION`, zero-padded.
    writer: [u8; 32],
    algorithm: u32,
    metric: u32,
    rows: u64,
    cols: u64,
    points: u64,
    centring: f64,
    sections: [Section; 5],
    /// xxh3 of the header's bytes before this field.
    checksum: u64,
}

const HEADER_BYTES: usize = std::mem::size_of::<Header>();

impl Header {
    fn sum(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&bytemuck::bytes_of(self)[..HEADER_BYTES - 8])
    }
}

fn algorithm_code(a: Algorithm) -> u32 {
    match a {
        Algorithm::CoverTree => 1,
        _ => 0,
    }
}

fn metric_code(m: Metric) -> u32 {
    Metric::ALL.iter().position(|&x| x == m).expect("every metric is in ALL") as u32
}

/// What an index holds, with its arrays borrowed from wherever they lie.
pub(crate) struct Contents<'a> {
    pub algorithm: Algorithm,
    pub metric: Metric,
    pub rows: usize,
    pub cols: usize,
    /// In node order where a cover tree reads its points from them (see `ARRAYS`).
    pub corpus: &'a [f32],
    /// The cover tree, in a cover-tree index.
    pub tree: Option<Parts<'a>>,
}

/// Writes `contents` to `dest`, whole or not at all.
pub(crate) fn write(dest: &Path, contents: &Contents<'_>) -> Result<()> {
    let tree = contents.tree.as_ref();
    let arrays: [&[u8]; 5] = [
        bytemuck::cast_slice(contents.corpus),
        tree.map_or(&[][..], |t| bytemuck::cast_slice(t.nodes)),
        tree.map_or(&[][..], |t| bytemuck::cast_slice(t.vectors)),
        tree.map_or(&[][..], |t| bytemuck::cast_slice(t.rows)),
        tree.map_or(&[][..], |t| bytemuck::cast_slice(t.first)),
    ];
    let mut header = Header::zeroed();
    header.magic = MAGIC;
    header.format = FORMAT;
    header.byte_order = BYTE_ORDER;
    let writer = format!("knng {}", env!("CARGO_PKG_VERSION"));
    let len = writer.len().min(header.writer.len());
    header.writer[..len].copy_from_slice(&writer.as_bytes()[..len]);
    header.algorithm = algorithm_code(contents.algorithm);
    header.metric = metric_code(contents.metric);
    header.rows = contents.rows as u64;
    header.cols = contents.cols as u64;
    header.points = tree.map_or(0, |t| t.nodes.len() as u64);
    header.centring = tree.map_or(0.0, |t| t.centring);
    let mut at = (HEADER_BYTES as u64).next_multiple_of(ALIGN);
    for (section, array) in header.sections.iter_mut().zip(arrays) {
        *section = Section { offset: at, bytes: array.len() as u64, checksum: checksum(array) };
        at = (at + array.len() as u64).next_multiple_of(ALIGN);
    }
    header.checksum = header.sum();
    crate::io::write_whole(dest, |out| {
        let mut written = 0u64;
        let mut put = |out: &mut crate::io::Sink, bytes: &[u8], at: u64| {
            out.write_all(&vec![0u8; (at - written) as usize])?;
            out.write_all(bytes)?;
            written = at + bytes.len() as u64;
            Ok::<(), std::io::Error>(())
        };
        put(out, bytemuck::bytes_of(&header), 0)?;
        for (section, array) in header.sections.iter().zip(arrays) {
            put(out, array, section.offset)?;
        }
        Ok(())
    })
}

/// Whether `bytes` begin as an index file does.
pub(crate) fn is_index(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// The contents of the index file `bytes` (aligned to 8 bytes at least); errors say what
/// is wrong, for a message that names the file. `verify`: also check each array's checksum
/// and the cover tree's structure, once, when the file is first read.
pub(crate) fn read(bytes: &[u8], verify: bool) -> std::result::Result<Contents<'_>, String> {
    if bytes.is_empty() {
        return Err("file is empty".into());
    }
    if !is_index(bytes) {
        return Err("not a knng index (no KNNGINDX at its start)".into());
    }
    if bytes.len() < HEADER_BYTES {
        return Err(format!("truncated: {} bytes, shorter than an index header", bytes.len()));
    }
    let header: Header = bytemuck::pod_read_unaligned(&bytes[..HEADER_BYTES]);
    let writer = String::from_utf8_lossy(&header.writer).trim_end_matches('\0').to_string();
    if header.byte_order != BYTE_ORDER && header.byte_order.swap_bytes() == BYTE_ORDER {
        return Err(format!("written by {writer} on a machine of the other byte order; build the index here"));
    }
    if header.format != FORMAT {
        return Err(format!(
            "index format {} (written by {writer}); this knng {} reads format {FORMAT}: build the index again",
            header.format,
            env!("CARGO_PKG_VERSION"),
        ));
    }
    if header.checksum != header.sum() || header.byte_order != BYTE_ORDER {
        return Err("the header fails its checksum: the file is corrupt".into());
    }
    if header.rows == 0 || header.cols == 0 {
        return Err(format!("it holds {} x {} rows", header.rows, header.cols));
    }
    let algorithm = match header.algorithm {
        0 => Algorithm::Brute,
        1 => Algorithm::CoverTree,
        a => return Err(format!("unknown algorithm code {a}")),
    };
    let metric = *Metric::ALL.get(header.metric as usize).ok_or(format!("unknown metric code {}", header.metric))?;
    let (rows, cols, points) = (header.rows, header.cols, header.points);
    let tree = algorithm == Algorithm::CoverTree;
    let placed = if tree && !covertree::places_rows_as_given(metric) { points } else { 0 };
    // Values each array must hold, and their size.
    let lens: [(Option<u64>, u64); 5] = [
        (rows.checked_mul(cols), 4),
        (Some(if tree { points } else { 0 }), std::mem::size_of::<Node>() as u64),
        (placed.checked_mul(cols), 4),
        (Some(if tree { rows } else { 0 }), 4),
        (if tree { points.checked_add(1) } else { Some(0) }, 4),
    ];
    let mut arrays: [&[u8]; 5] = [&[]; 5];
    for (((name, section), (len, size)), array) in ARRAYS.iter().zip(&header.sections).zip(lens).zip(&mut arrays) {
        let expected = len.and_then(|l| l.checked_mul(size));
        if expected != Some(section.bytes) {
            return Err(format!("its {name} array has {} bytes for {rows} x {cols} rows", section.bytes));
        }
        let end = section.offset.checked_add(section.bytes).filter(|&e| e <= bytes.len() as u64);
        let Some(end) = end else {
            return Err(format!(
                "truncated: {} bytes, but its {name} array ends at byte {}",
                bytes.len(),
                u128::from(section.offset) + u128::from(section.bytes)
            ));
        };
        if section.offset % ALIGN != 0 || section.offset < HEADER_BYTES as u64 {
            return Err(format!("its {name} array lies at byte {}", section.offset));
        }
        *array = &bytes[section.offset as usize..end as usize];
        // A fuzzer cannot forge checksums: without them it reaches the checks that follow.
        if verify && cfg!(not(fuzzing)) && checksum(array) != section.checksum {
            return Err(format!("its {name} array fails its checksum: the file is corrupt"));
        }
    }
    if verify {
        // Every byte is the header's or an array's, or padding that is zero: no change to
        // a file goes unseen.
        let mut at = HEADER_BYTES as u64;
        for (name, section) in ARRAYS.iter().zip(&header.sections) {
            if section.offset < at || bytes[at as usize..section.offset as usize].iter().any(|&b| b != 0) {
                return Err(format!("the bytes before its {name} array are not zero padding: the file is corrupt"));
            }
            at = section.offset + section.bytes;
        }
        if bytes.len() as u64 != at {
            return Err(format!("{} bytes follow its last array: the file is corrupt", bytes.len() as u64 - at));
        }
    }
    let (rows, cols) = (usize::try_from(rows).map_err(|e| e.to_string())?, cols as usize);
    let corpus: &[f32] = cast(arrays[0])?;
    let tree = if tree {
        let parts = Parts {
            metric,
            dims: cols,
            centring: header.centring,
            nodes: cast(arrays[1])?,
            vectors: cast(arrays[2])?,
            rows: cast(arrays[3])?,
            first: cast(arrays[4])?,
        };
        if verify {
            TreeRef::check(&parts, rows).map_err(|e| format!("its cover tree is not whole: {e}"))?;
        }
        Some(parts)
    } else {
        None
    };
    Ok(Contents { algorithm, metric, rows, cols, corpus, tree })
}

fn cast<T: Pod>(bytes: &[u8]) -> std::result::Result<&[T], String> {
    bytemuck::try_cast_slice(bytes).map_err(|e| format!("an array is not aligned in memory: {e}"))
}
