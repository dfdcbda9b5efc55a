//! What each fuzz target does with its bytes, shared by the targets (`fuzz/fuzz_targets/*.rs`)
//! and the replay test (`tests/fuzz_replay.rs`), which both include this file with
//! `#[path = ...] mod harness;`, so that a checked-in input replays through the very code
//! that fuzzed it. It uses only knng's public API and std.
//!
//! The file targets write the input to a scratch file (in `/dev/shm` when there is one) with
//! an extension of their format family, read it with `knng::io::read_matrix` and with
//! `knng::io::MatrixFile` (whole and a sub-range of rows), remove it, and check that the two
//! ways agree. The `index` target loads the input as an index file and, where it loads,
//! searches it. Any `Ok` or `Err` is fine; a panic (here an assertion) is a bug.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Every target, in the order `fuzz/run.sh` runs them.
pub const TARGETS: &[&str] = &["npy", "vecs", "bin", "text", "hdf5_layout", "index"];

/// The extensions of each file target's format family.
pub fn extensions(target: &str) -> Option<&'static [&'static str]> {
    Some(match target {
        "npy" => &["npy"],
        "vecs" => &["fvecs", "bvecs", "ivecs"],
        "bin" => &["fbin", "u8bin", "i8bin", "ibin"],
        "text" => &["csv", "tsv"],
        _ => return None,
    })
}

/// Splits an input into the extension and the file's bytes: a family of one extension takes
/// the input whole, a larger one picks with the first byte (modulo the family's size).
pub fn split<'a>(exts: &[&'static str], data: &'a [u8]) -> Option<(&'static str, &'a [u8])> {
    if exts.len() == 1 {
        return Some((exts[0], data));
    }
    let (&pick, rest) = data.split_first()?;
    Some((exts[pick as usize % exts.len()], rest))
}

/// What reading a file gave: `Ok((rows, cols))` or the error's message.
pub type Outcome = Result<(usize, usize), String>;

fn scratch_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let base = if shm.is_dir() { shm } else { std::env::temp_dir() };
        let dir = base.join("knng-fuzz");
        std::fs::create_dir_all(&dir).expect("the scratch directory can be created");
        dir
    })
}

/// Removes the scratch file even when a check below panics.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the file target `target` on `data`; `None` when the input is too short to pick an
/// extension (nothing is read then).
pub fn run_file_target(target: &str, data: &[u8]) -> Option<Outcome> {
    let exts = extensions(target).unwrap_or_else(|| panic!("{target} is not a file target"));
    let (ext, bytes) = split(exts, data)?;
    Some(read_bytes_as(ext, bytes))
}

/// Writes `bytes` to a fresh scratch file `*.ext`, reads it every way, removes it.
pub fn read_bytes_as(ext: &str, bytes: &[u8]) -> Outcome {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = format!("in-{}-{}.{ext}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let scratch = Scratch(scratch_dir().join(&name));
    std::fs::write(&scratch.0, bytes).expect("the scratch file can be written");
    let spec = scratch.0.to_str().expect("the scratch path is UTF-8");
    check_reads(spec, &name)
}

fn bits(m: &knng::Matrix) -> Vec<u32> {
    m.as_slice().iter().map(|v| v.to_bits()).collect()
}

/// Reads `spec` with `read_matrix` and with `MatrixFile`, and checks that they agree.
fn check_reads(spec: &str, name: &str) -> Outcome {
    let whole = knng::io::read_matrix(spec);
    if let Err(e) = &whole {
        let msg = e.to_string();
        assert!(msg.contains(name), "the error does not name the file {name}: {msg}");
    }
    let file = match knng::io::MatrixFile::open(spec) {
        Ok(file) => file,
        Err(e) => {
            // `read_matrix` is `open` then `read_rows(0..rows)`.
            assert!(whole.is_err(), "read_matrix succeeded but MatrixFile::open failed: {e}");
            return Err(whole.unwrap_err().to_string());
        }
    };
    let (rows, cols) = (file.rows(), file.cols());
    assert!(rows > 0 && cols > 0, "an opened file has {rows} rows x {cols} columns");
    let all = file.read_rows(0..rows);
    match (&whole, &all) {
        (Ok(a), Ok(b)) => {
            assert_eq!((a.rows(), a.cols()), (rows, cols));
            assert_eq!((b.rows(), b.cols()), (rows, cols));
            assert!(bits(a) == bits(b), "read_matrix and read_rows(0..{rows}) differ");
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "read_matrix gave {:?} but MatrixFile::read_rows(0..{rows}) gave {:?}",
            a.as_ref().map(|m| (m.rows(), m.cols())),
            b.as_ref().map(|m| (m.rows(), m.cols())),
        ),
    }
    // A sub-range: what it holds must be the same rows of the whole.
    let (start, end) = (rows / 3, rows - rows / 4);
    let part = file.read_rows(start..end);
    if let Ok(all) = &all {
        let part = part.unwrap_or_else(|e| panic!("rows {start}..{end} fail although all rows read: {e}"));
        assert_eq!((part.rows(), part.cols()), (end - start, cols));
        let want = &bits(all)[start * cols..end * cols];
        assert!(bits(&part) == want, "rows {start}..{end} differ from the same rows of the whole");
    }
    let empty = file.read_rows(rows..rows).expect("an empty range of rows reads");
    assert_eq!((empty.rows(), empty.cols()), (0, cols));
    assert!(file.read_rows(rows..rows + 1).is_err(), "a row past the end was read");
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = file.read_rows(1..0);
    assert!(backwards.is_err(), "a backwards range was read");
    match whole {
        Ok(m) => Ok((m.rows(), m.cols())),
        Err(e) => Err(e.to_string()),
    }
}

/// The arguments of `knng::io::check_hdf5_layout`, decoded from fuzz bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub shape: Vec<u64>,
    pub max_shape: Option<Vec<u64>>,
    pub chunk: Option<Vec<u64>>,
    pub elem_size: u64,
}

/// Reads bytes front to back; past the end every byte is 0.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// A tag byte, then by its low two bits: 0, the value is the tag's other six bits
    /// (0..=63); 1, 2 or 3, a little-endian u16, u32 or u64 follows.
    fn value(&mut self) -> u64 {
        let tag = self.byte();
        let width = match tag & 3 {
            0 => return (tag >> 2) as u64,
            1 => 2,
            2 => 4,
            _ => 8,
        };
        (0..width).fold(0u64, |v, i| v | (self.byte() as u64) << (8 * i))
    }

    fn values(&mut self, n: usize) -> Vec<u64> {
        (0..n).map(|_| self.value()).collect()
    }
}

/// Decodes: byte 0, the rank (modulo 9, so 0..=8); byte 1, flags: bit 0 maximum dimensions
/// given, bit 1 chunk sizes given, bit 2 the maximum dimensions' count is the next byte
/// (modulo 9) instead of the rank, bit 3 the same for the chunk sizes; then the element size,
/// the shape, the maximum dimensions and the chunk sizes, each number as [`Bytes::value`]
/// reads it. A short input reads as if padded with zeros.
pub fn decode_layout(data: &[u8]) -> Layout {
    let mut b = Bytes(data);
    let rank = (b.byte() % 9) as usize;
    let flags = b.byte();
    let max_len = if flags & 4 != 0 { (b.byte() % 9) as usize } else { rank };
    let chunk_len = if flags & 8 != 0 { (b.byte() % 9) as usize } else { rank };
    let elem_size = b.value();
    let shape = b.values(rank);
    let max_shape = (flags & 1 != 0).then(|| b.values(max_len));
    let chunk = (flags & 2 != 0).then(|| b.values(chunk_len));
    Layout { shape, max_shape, chunk, elem_size }
}

/// Runs the `hdf5_layout` target: the check must be a pure function of its arguments.
pub fn run_hdf5_layout(data: &[u8]) -> Result<(), String> {
    let l = decode_layout(data);
    let check = || knng::io::check_hdf5_layout(&l.shape, l.max_shape.as_deref(), l.chunk.as_deref(), l.elem_size);
    let first = check().map_err(|e| e.to_string());
    let again = check().map_err(|e| e.to_string());
    assert_eq!(first, again, "check_hdf5_layout is not a function of its arguments: {l:?}");
    if let Err(msg) = &first {
        assert!(!msg.is_empty(), "an empty error for {l:?}");
    }
    first
}

/// Runs the `index` target: the bytes loaded as an index file (`knng::Index::from_bytes`);
/// where they load, its first rows searched in it on the CPU, whose answer must be as many
/// rows of k neighbours in range. `Ok((rows, cols))` of the index, or the error's message.
/// Built with `--cfg fuzzing`, the loader skips the arrays' checksums, so that the fuzzer
/// reaches the checks of the cover tree's structure and the search behind them.
pub fn run_index(data: &[u8]) -> Outcome {
    static KNN: OnceLock<knng::Knn> = OnceLock::new();
    let index = knng::Index::from_bytes(data).map_err(|e| e.to_string())?;
    let (rows, cols) = index.shape();
    assert!(rows > 0 && cols > 0, "an index of {rows} rows x {cols} columns loaded");
    let values = index.corpus();
    assert_eq!(values.len(), rows * cols, "corpus values of an index of {rows} x {cols}");
    let corpus = knng::MatrixRef::new(&values, rows, cols).expect("an index's rows make a matrix");
    let knn = KNN.get_or_init(|| {
        let options = knng::Options { backend: knng::Backend::Cpu, ..knng::Options::default() };
        knng::Knn::new(options).expect("the CPU backend opens")
    });
    let queries = corpus.slice_rows(0..rows.min(4));
    let k = rows.min(3);
    match knn.search_index(&index, queries, k) {
        Ok(found) => {
            assert_eq!((found.queries, found.k), (queries.rows(), k));
            assert!(found.indices.iter().all(|&i| (i as usize) < rows), "an index out of range: {found:?}");
        }
        Err(e) => assert!(!e.to_string().is_empty(), "an empty error"),
    }
    Ok((rows, cols))
}
