//! Reading vector files and writing neighbour lists.
//!
//! Inputs are chosen by extension:
//!
//! | extension | layout |
//! |---|---|
//! | `.npy` | NumPy array, 2-D (or more: trailing axes are flattened); any float or integer dtype, either byte order, C or Fortran order |
//! | `.fvecs` `.bvecs` `.ivecs` | TEXMEX: per vector an `i32` dimension then that many `f32` / `u8` / `i32` values |
//! | `.fbin` `.u8bin` `.i8bin` `.ibin` | big-ann-benchmarks: `u32` rows, `u32` columns, then the values (`f32` / `u8` / `i8` / `i32`) |
//! | `.csv` `.tsv` | one vector per line; a first line that is not all numbers is a header |
//! | `.hdf5` `.h5` | ann-benchmarks layout: dataset `train`, or another with `FILE.hdf5:NAME` (needs the `hdf5` feature) |
//!
//! Binary inputs are memory-mapped and converted to f32 row by row, so the only large
//! allocation is the returned [`Matrix`]. [`MatrixFile`] reads a range of rows at a time for
//! callers that stream blocks instead of holding the whole file.
//!
//! Outputs ([`write_neighbors`], or [`NeighborWriter`] a block of rows at a time) are chosen
//! by extension too: `.npz`, `.ivecs` (with a `.fvecs` of distances beside it), `.csv` edge
//! list, `.mtx` Matrix Market. Every output is written to a temporary file in the destination
//! directory and renamed into place only when complete, so a failed run leaves no partial
//! file behind.

mod atomic;
mod binary;
mod checksum;
mod h5_layout;
mod mtx;
mod npy;
mod npz;
mod text;
mod vecs;

#[cfg(feature = "hdf5")]
mod h5;

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::data::{Matrix, MatrixRef, Neighbors};
use crate::error::{Error, Result};

#[doc(hidden)]
pub use h5_layout::check_hdf5_layout;
pub use npy::write_matrix_npy;

/// Input extensions [`read_matrix`] understands, for messages.
pub const INPUT_EXTENSIONS: &str = ".npy, .fvecs, .bvecs, .ivecs, .fbin, .u8bin, .i8bin, .ibin, .csv, .tsv, .hdf5, .h5";

/// Output extensions [`write_neighbors`] understands, for messages.
pub const OUTPUT_EXTENSIONS: &str = ".npz, .ivecs (distances in a .fvecs beside it), .csv, .mtx";

/// Reads a whole matrix file into memory as f32.
///
/// `spec` is a path, or `FILE.hdf5:DATASET` to pick a dataset other than `train` from an
/// HDF5 file. The format follows the extension (see the [module docs](self)).
///
/// Errors name the file and what is wrong with it: a missing file, an unknown extension, a
/// size that does not match the header, vectors of different dimensions (with the vector
/// number and byte offset), unparsable text (with line, column and the text), and files with
/// no rows or no columns. Values are not checked for NaN here; the search does that and
/// names the row and column.
pub fn read_matrix(spec: &str) -> Result<Matrix> {
    let file = MatrixFile::open(spec)?;
    let rows = file.rows();
    file.read_rows(0..rows)
}

/// An opened matrix file whose rows can be read a range at a time.
///
/// Binary formats stay memory-mapped and are converted only for the rows asked for; text
/// and HDF5 inputs are parsed when opened.
pub struct MatrixFile {
    path: PathBuf,
    inner: Source,
    header: Option<String>,
}

enum Source {
    Mapped(binary::Mapped),
    Loaded(Matrix),
    #[cfg(feature = "hdf5")]
    Hdf5(h5::Dataset),
}

impl MatrixFile {
    /// Opens `spec` (a path, or `FILE.hdf5:DATASET`) and checks its header and size.
    pub fn open(spec: &str) -> Result<MatrixFile> {
        let (path, dataset) = split_spec(spec);
        let ext = extension(&path);
        let format = InputFormat::from_extension(&ext).ok_or_else(|| {
            let shown = if ext.is_empty() { "no extension".to_string() } else { format!("extension .{ext}") };
            Error::file(&path, format!("cannot tell the format from {shown}; supported inputs are {INPUT_EXTENSIONS}"))
        })?;
        match dataset.as_deref() {
            Some(name) if format != InputFormat::Hdf5 => {
                return Err(Error::file(
                    &path,
                    format!("only .hdf5 and .h5 inputs take a :DATASET suffix (got \":{name}\")"),
                ))
            }
            Some("") => return Err(Error::file(&path, "the dataset name after ':' is empty (FILE.hdf5:DATASET)")),
            _ => {}
        }
        let mut header = None;
        let inner = match format {
            InputFormat::Npy => Source::Mapped(npy::open(&path)?),
            InputFormat::Vecs(elem) => Source::Mapped(vecs::open(&path, elem)?),
            InputFormat::Bin(elem) => Source::Mapped(binary::open_bin(&path, elem)?),
            InputFormat::Text(delimiter) => {
                let text = text::read(&path, delimiter)?;
                header = text.header;
                Source::Loaded(text.matrix)
            }
            InputFormat::Hdf5 => open_hdf5(&path, dataset.as_deref())?,
        };
        let file = MatrixFile { path, inner, header };
        if file.rows() == 0 || file.cols() == 0 {
            return Err(Error::file(
                &file.path,
                format!("holds no vectors ({} rows x {} columns)", file.rows(), file.cols()),
            ));
        }
        Ok(file)
    }

    /// The file's path (without any `:DATASET` suffix).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The first line of a text input when it was skipped as a header (its fields joined by
    /// the delimiter), so that callers can tell the user what was not read as data.
    pub fn skipped_header(&self) -> Option<&str> {
        self.header.as_deref()
    }

    /// Number of vectors.
    pub fn rows(&self) -> usize {
        match &self.inner {
            Source::Mapped(m) => m.rows(),
            Source::Loaded(m) => m.rows(),
            #[cfg(feature = "hdf5")]
            Source::Hdf5(d) => d.rows(),
        }
    }

    /// Dimension of each vector.
    pub fn cols(&self) -> usize {
        match &self.inner {
            Source::Mapped(m) => m.cols(),
            Source::Loaded(m) => m.cols(),
            #[cfg(feature = "hdf5")]
            Source::Hdf5(d) => d.cols(),
        }
    }

    /// The file's rows in place, without reading them into memory, where the file stores
    /// exactly f32 rows (`.npy` of little-endian float32 in C order, `.fbin`); `None` for
    /// every other layout, whose rows [`MatrixFile::read_rows`] converts. The operating
    /// system pages the rows in as they are used and may drop them again under memory
    /// pressure.
    pub fn f32_rows(&self) -> Option<MatrixRef<'_>> {
        match &self.inner {
            Source::Mapped(m) => m.f32_rows(),
            _ => None,
        }
    }

    /// Reads rows `range` as f32.
    pub fn read_rows(&self, range: Range<usize>) -> Result<Matrix> {
        if range.start > range.end || range.end > self.rows() {
            return Err(Error::arg(
                "range",
                format!("rows {range:?} are outside 0..{} of {}", self.rows(), self.path.display()),
            ));
        }
        match &self.inner {
            Source::Mapped(m) => m.read_rows(range),
            Source::Loaded(m) => {
                let cols = m.cols();
                let values = m.as_slice()[range.start * cols..range.end * cols].to_vec();
                Matrix::new(values, range.len(), cols)
            }
            #[cfg(feature = "hdf5")]
            Source::Hdf5(d) => d.read_rows(&self.path, range),
        }
    }
}

#[cfg(feature = "hdf5")]
fn open_hdf5(path: &Path, dataset: Option<&str>) -> Result<Source> {
    Ok(Source::Hdf5(h5::Dataset::open(path, dataset.unwrap_or(h5::DEFAULT_DATASET))?))
}

#[cfg(not(feature = "hdf5"))]
fn open_hdf5(path: &Path, _dataset: Option<&str>) -> Result<Source> {
    Err(Error::file(
        path,
        "reading HDF5 needs the hdf5 feature: rebuild with `cargo build --release --features hdf5` \
         (it links the system HDF5 library, e.g. Debian's libhdf5-dev), or convert the file to .npy",
    ))
}

/// Element types of binary inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    F16,
    F32,
    F64,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    Bool,
}

impl Elem {
    pub(crate) fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 | Elem::Bool => 1,
            Elem::F16 | Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InputFormat {
    Npy,
    Vecs(Elem),
    Bin(Elem),
    Text(u8),
    Hdf5,
}

impl InputFormat {
    fn from_extension(ext: &str) -> Option<InputFormat> {
        Some(match ext {
            "npy" => InputFormat::Npy,
            "fvecs" => InputFormat::Vecs(Elem::F32),
            "bvecs" => InputFormat::Vecs(Elem::U8),
            "ivecs" => InputFormat::Vecs(Elem::I32),
            "fbin" => InputFormat::Bin(Elem::F32),
            "u8bin" => InputFormat::Bin(Elem::U8),
            "i8bin" => InputFormat::Bin(Elem::I8),
            "ibin" => InputFormat::Bin(Elem::I32),
            "csv" => InputFormat::Text(b','),
            "tsv" => InputFormat::Text(b'\t'),
            "hdf5" | "h5" => InputFormat::Hdf5,
            _ => return None,
        })
    }
}

/// Splits `FILE.hdf5:DATASET` into the path and the dataset. Only a suffix after an input
/// extension counts (so that `x.npy:train` is refused by name, not by a strange extension),
/// and only when the whole spec is not itself a file: paths that merely contain a colon are
/// left whole.
fn split_spec(spec: &str) -> (PathBuf, Option<String>) {
    if let Some((file, dataset)) = spec.rsplit_once(':') {
        let known = InputFormat::from_extension(&extension(Path::new(file))).is_some();
        if known && !Path::new(spec).exists() {
            return (PathBuf::from(file), Some(dataset.to_string()));
        }
    }
    (PathBuf::from(spec), None)
}

fn extension(path: &Path) -> String {
    path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OutputFormat {
    Npz,
    Ivecs,
    Csv,
    Mtx,
}

impl OutputFormat {
    fn of(path: &Path) -> Result<OutputFormat> {
        match extension(path).as_str() {
            "npz" => Ok(OutputFormat::Npz),
            "ivecs" => Ok(OutputFormat::Ivecs),
            "csv" => Ok(OutputFormat::Csv),
            "mtx" => Ok(OutputFormat::Mtx),
            ext => {
                let shown = if ext.is_empty() { "no extension".to_string() } else { format!("extension .{ext}") };
                Err(Error::file(
                    path,
                    format!("cannot tell the output format from {shown}; supported outputs are {OUTPUT_EXTENSIONS}"),
                ))
            }
        }
    }
}

/// The `.fvecs` file that holds the distances of an `.ivecs` output.
pub fn distances_path(ivecs: &Path) -> PathBuf {
    ivecs.with_extension("fvecs")
}

/// Every file [`write_neighbors`] writes for `path`: the file itself, and for `.ivecs` the
/// `.fvecs` of distances beside it.
pub fn output_files(path: &Path) -> Vec<PathBuf> {
    match OutputFormat::of(path) {
        Ok(OutputFormat::Ivecs) => vec![path.to_path_buf(), distances_path(path)],
        _ => vec![path.to_path_buf()],
    }
}

/// Refuses an output that would replace one of `inputs`: any file it writes (see
/// [`output_files`]) that is an input by path, symbolic link or hard link. Inputs are read
/// before outputs are written, so this would otherwise silently destroy the data.
pub fn refuse_overwriting_inputs(output: &Path, inputs: &[&Path]) -> Result<()> {
    for written in output_files(output) {
        if let Some(input) = inputs.iter().find(|input| atomic::same_file(&written, input)) {
            let how = if written == output { String::new() } else { format!(" (through {})", written.display()) };
            return Err(Error::file(
                output,
                format!("the output would overwrite the input {}{how}; choose another output name", input.display()),
            ));
        }
    }
    Ok(())
}

pub use atomic::remove_partial_outputs;
pub(crate) use atomic::{write as write_whole, Partial, Sink};
pub(crate) use binary::map_file;
pub(crate) use checksum::checksum;

/// Checks, before any work is done, that `path` has an output extension [`write_neighbors`]
/// knows and that its directory exists and accepts new files.
pub fn check_output_path(path: &Path) -> Result<()> {
    OutputFormat::of(path)?;
    atomic::check_writable(path)
}

/// Refuses, before any work is done, a path an index cannot be saved to: one without the
/// `.knng` extension (so that no input is overwritten by mistake), or one that cannot be
/// written.
pub fn check_index_path(path: &Path) -> Result<()> {
    if path.extension().and_then(|e| e.to_str()).is_none_or(|e| !e.eq_ignore_ascii_case("knng")) {
        return Err(Error::file(path, "an index is written to a file named *.knng"));
    }
    atomic::check_writable(path)
}

/// Refuses, before any work is done, an output of `queries x k` neighbours that the file
/// system holding `path` has no room for: bytes of the binary formats (with the scratch copy
/// of an `.npz`'s distances), at least 8 a neighbour for the text formats. Where the free
/// space cannot be told (not Linux), nothing is refused.
pub fn check_output_space(path: &Path, queries: usize, k: usize) -> Result<()> {
    let values = (queries as u128) * (k as u128);
    let needed = match OutputFormat::of(path)? {
        OutputFormat::Npz => values * 16,
        OutputFormat::Ivecs => values * 8 + queries as u128 * 8,
        OutputFormat::Csv | OutputFormat::Mtx => values * 8,
    };
    let Some(free) = free_space(&atomic::directory_of(path)) else { return Ok(()) };
    if needed <= free as u128 {
        return Ok(());
    }
    let gb = |b: u128| b as f64 / 1e9;
    Err(Error::file(
        path,
        format!(
            "the output would take at least {:.1} GB ({queries} rows of {k} neighbours) but its file system has \
             {:.1} GB free; use a smaller k or write it elsewhere",
            gb(needed),
            gb(free as u128)
        ),
    ))
}

/// Bytes free to this user on the file system holding `dir`.
#[cfg(target_os = "linux")]
fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string and `stats` a buffer statvfs fills on success.
    let stats = unsafe {
        if libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) != 0 {
            return None;
        }
        stats.assume_init()
    };
    Some((stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}

#[cfg(not(target_os = "linux"))]
fn free_space(_dir: &Path) -> Option<u64> {
    None
}

/// Writes neighbour lists in the format given by `path`'s extension.
///
/// `n_cols` is the number of corpus rows (the column count of the Matrix Market output).
/// Formats:
///
/// - `.npz`: arrays `indices` (int64) and `distances` (float32), both `queries x k`, as
///   `numpy.load` reads them;
/// - `.ivecs`: indices as TEXMEX vectors, and distances in a `.fvecs` with the same stem;
/// - `.csv`: header `query,neighbor,distance`, one edge per line, nearest first;
/// - `.mtx`: Matrix Market `coordinate real general`, 1-based, `queries x n_cols`, the
///   distance as the value (readable by `scipy.io.mmread`).
///
/// Nothing appears at `path` unless the whole output was written. [`NeighborWriter`] writes
/// the same files a block of rows at a time.
pub fn write_neighbors(path: &Path, nb: &Neighbors, n_cols: usize) -> Result<()> {
    let expected = nb.queries.checked_mul(nb.k);
    if expected != Some(nb.indices.len()) || expected != Some(nb.distances.len()) {
        return Err(Error::arg(
            "neighbors",
            format!(
                "{} indices and {} distances do not make {} queries x {} neighbours",
                nb.indices.len(),
                nb.distances.len(),
                nb.queries,
                nb.k
            ),
        ));
    }
    let mut writer = NeighborWriter::create(path, nb.queries, nb.k, n_cols)?;
    writer.write_rows(&nb.indices, &nb.distances)?;
    writer.finish()
}

/// Writes neighbour lists row by row, in the format of the path's extension (the formats of
/// [`write_neighbors`]), so that a graph larger than memory can be saved as its rows are
/// found. Memory use does not grow with the number of rows.
///
/// Nothing appears at the path until [`finish`](NeighborWriter::finish); dropped unfinished
/// (after an error, or a panic), it leaves nothing behind. An `.npz` whose rows come in
/// several calls keeps its distances in a scratch file beside the output until `finish`, so
/// it needs their size again in free disk space.
pub struct NeighborWriter {
    path: PathBuf,
    queries: usize,
    k: usize,
    n_cols: usize,
    /// Rows written so far.
    rows: usize,
    /// A write failed part way, so the files no longer end on a whole row.
    failed: bool,
    out: Output,
}

enum Output {
    Npz(Box<npz::Writer>),
    Ivecs { indices: atomic::Partial, distances: atomic::Partial },
    Csv(atomic::Partial),
    Mtx(atomic::Partial),
}

impl NeighborWriter {
    /// Starts an output of `queries` rows of `k` neighbours each; `n_cols` is the number of
    /// corpus rows (every index must be below it; the column count of `.mtx`).
    pub fn create(path: &Path, queries: usize, k: usize, n_cols: usize) -> Result<NeighborWriter> {
        let format = OutputFormat::of(path)?;
        if k == 0 {
            return Err(Error::arg("k", "there are no neighbours to write (k = 0)"));
        }
        if queries.checked_mul(k).is_none() {
            return Err(Error::arg(
                "neighbors",
                format!("{queries} queries x {k} neighbours overflow the entry count"),
            ));
        }
        let out = match format {
            OutputFormat::Npz => Output::Npz(Box::new(npz::Writer::create(path, queries, k)?)),
            OutputFormat::Ivecs => {
                if i32::try_from(k).is_err() {
                    return Err(Error::arg("k", format!("k = {k} does not fit the i32 dimension of a .ivecs file")));
                }
                let indices = atomic::Partial::create(path)?;
                let distances = atomic::Partial::create(&distances_path(path))?;
                Output::Ivecs { indices, distances }
            }
            OutputFormat::Csv => {
                let mut file = atomic::Partial::create(path)?;
                file.fill(text::write_edges_header)?;
                Output::Csv(file)
            }
            OutputFormat::Mtx => {
                let mut file = atomic::Partial::create(path)?;
                file.fill(|w| mtx::write_header(w, queries, k, n_cols))?;
                Output::Mtx(file)
            }
        };
        Ok(NeighborWriter { path: path.to_path_buf(), queries, k, n_cols, rows: 0, failed: false, out })
    }

    /// Appends the next whole rows: `indices` and `distances` are `rows x k`, row-major,
    /// nearest first, and follow the rows written before. A block that is refused (a bad
    /// index, too many rows, a length that is not whole rows) writes nothing.
    pub fn write_rows(&mut self, indices: &[u32], distances: &[f32]) -> Result<()> {
        self.check_rows(indices, distances)?;
        let (first_row, k) = (self.rows, self.k);
        // Stays set if a write below fails part way.
        self.failed = true;
        match &mut self.out {
            Output::Npz(npz) => npz.write_rows(indices, distances)?,
            Output::Ivecs { indices: ivecs, distances: fvecs } => {
                ivecs.fill(|w| vecs::write_rows(w, indices, k, |v| (v as i32).to_le_bytes()))?;
                fvecs.fill(|w| vecs::write_rows(w, distances, k, f32::to_le_bytes))?;
            }
            Output::Csv(file) => file.fill(|w| text::write_edges(w, first_row, indices, distances, k))?,
            Output::Mtx(file) => file.fill(|w| mtx::write_entries(w, first_row, indices, distances, k))?,
        }
        self.failed = false;
        self.rows += indices.len() / k;
        Ok(())
    }

    fn check_rows(&self, indices: &[u32], distances: &[f32]) -> Result<()> {
        if self.failed {
            return Err(self.failed_earlier());
        }
        if indices.len() != distances.len() || !indices.len().is_multiple_of(self.k) {
            return Err(Error::arg(
                "neighbors",
                format!(
                    "{} indices and {} distances are not the same number of whole rows of k = {}",
                    indices.len(),
                    distances.len(),
                    self.k
                ),
            ));
        }
        let rows = indices.len() / self.k;
        if rows > self.queries - self.rows {
            return Err(Error::arg(
                "neighbors",
                format!("{rows} more rows after {} would exceed the {} queries", self.rows, self.queries),
            ));
        }
        if let Some(at) = indices.iter().position(|&i| i as usize >= self.n_cols) {
            return Err(Error::arg(
                "neighbors",
                format!(
                    "row {}: index {} is not below the corpus size {}",
                    self.rows + at / self.k,
                    indices[at],
                    self.n_cols
                ),
            ));
        }
        Ok(())
    }

    /// Checks that all rows came, flushes the files and moves every one into place.
    pub fn finish(self) -> Result<()> {
        if self.failed {
            return Err(self.failed_earlier());
        }
        if self.rows != self.queries {
            return Err(Error::file(
                &self.path,
                format!("{} of {} rows were written; nothing was saved", self.rows, self.queries),
            ));
        }
        match self.out {
            Output::Npz(npz) => npz.finish(),
            Output::Ivecs { indices, distances } => atomic::persist_pair(indices, distances),
            Output::Csv(file) | Output::Mtx(file) => file.persist(),
        }
    }

    fn failed_earlier(&self) -> Error {
        Error::file(&self.path, "an earlier write failed, so the output is incomplete")
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// A small matrix with distinct, exactly representable values.
    pub fn sample(rows: usize, cols: usize) -> Matrix {
        let values = (0..rows * cols).map(|i| (i as f32) * 0.5 - 7.0).collect();
        Matrix::new(values, rows, cols).unwrap()
    }

    pub fn sample_neighbors() -> Neighbors {
        Neighbors {
            indices: vec![1, 2, 0, 2, 1, 0, 0, 1, 2, 4, 3, 0],
            distances: vec![0.5, 1.25, 0.0, 2.0, 3.5, 1e-7, 4.0, 4.0, 6.0, -1.5, 7.0, 8.0],
            queries: 4,
            k: 3,
        }
    }

    pub fn message(err: Error) -> String {
        err.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn spec_splitting() {
        assert_eq!(split_spec("a.hdf5:test"), (PathBuf::from("a.hdf5"), Some("test".into())));
        assert_eq!(split_spec("dir/a.H5:/group/x"), (PathBuf::from("dir/a.H5"), Some("/group/x".into())));
        assert_eq!(split_spec("a.hdf5"), (PathBuf::from("a.hdf5"), None));
        assert_eq!(split_spec("a.hdf5:"), (PathBuf::from("a.hdf5"), Some(String::new())));
        assert_eq!(split_spec("x.npy:train"), (PathBuf::from("x.npy"), Some("train".into())));
        assert_eq!(split_spec("c:/data/a.npy"), (PathBuf::from("c:/data/a.npy"), None));
        assert_eq!(split_spec("odd:name.npy"), (PathBuf::from("odd:name.npy"), None));
    }

    #[test]
    fn f32_rows_are_used_in_place_only_where_the_file_stores_them() {
        let dir = tempfile::tempdir().unwrap();
        let m = sample(5, 3);
        let f32_bytes: Vec<u8> = m.as_slice().iter().flat_map(|v| v.to_le_bytes()).collect();
        let npy = dir.path().join("a.npy");
        npy::write_matrix_npy(&npy, &m).unwrap();
        let mut fbin = [5u32.to_le_bytes(), 3u32.to_le_bytes()].concat();
        fbin.extend_from_slice(&f32_bytes);
        let fbin_path = dir.path().join("a.fbin");
        std::fs::write(&fbin_path, fbin).unwrap();
        for path in [&npy, &fbin_path] {
            let file = MatrixFile::open(path.to_str().unwrap()).unwrap();
            let rows = file.f32_rows().unwrap_or_else(|| panic!("{} not in place", path.display()));
            assert_eq!((rows.rows(), rows.cols(), rows.as_slice()), (5, 3, m.as_slice()));
        }
        // Rows with a prefix (.fvecs) or other value types are converted.
        let mut fvecs = Vec::new();
        for row in m.as_slice().chunks(3) {
            fvecs.extend_from_slice(&3i32.to_le_bytes());
            fvecs.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        }
        let fvecs_path = dir.path().join("a.fvecs");
        std::fs::write(&fvecs_path, fvecs).unwrap();
        let u8bin_path = dir.path().join("a.u8bin");
        std::fs::write(&u8bin_path, [[5u32.to_le_bytes(), 3u32.to_le_bytes()].concat(), vec![7u8; 15]].concat())
            .unwrap();
        for path in [&fvecs_path, &u8bin_path] {
            let file = MatrixFile::open(path.to_str().unwrap()).unwrap();
            assert!(file.f32_rows().is_none(), "{}", path.display());
            assert_eq!(file.read_rows(0..5).unwrap().rows(), 5);
        }
    }

    #[test]
    fn unknown_input_extension_lists_supported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("data.parquet");
        std::fs::write(&p, b"x").unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("data.parquet") && msg.contains(".fvecs") && msg.contains(".npy"), "{msg}");
    }

    #[test]
    fn missing_file_is_named() {
        for name in ["absent.npy", "absent.fvecs", "absent.fbin", "absent.csv"] {
            let msg = message(read_matrix(&format!("/nonexistent-dir/{name}")).unwrap_err());
            assert!(msg.contains(name) && msg.contains("not found"), "{msg}");
        }
    }

    #[test]
    fn dataset_suffix_only_for_hdf5() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        write_matrix_npy(&p, &sample(3, 2)).unwrap();
        let spec = format!("{}:train", p.display());
        let msg = message(read_matrix(&spec).unwrap_err());
        assert!(msg.contains("a.npy:") && msg.contains("only .hdf5 and .h5") && msg.contains(":train"), "{msg}");
        assert!(!msg.contains("extension"), "{msg}");
        let spec = format!("{}:", dir.path().join("b.hdf5").display());
        let msg = message(read_matrix(&spec).unwrap_err());
        assert!(msg.contains("b.hdf5:") && msg.contains("dataset name") && msg.contains("empty"), "{msg}");
    }

    #[cfg(not(feature = "hdf5"))]
    #[test]
    fn hdf5_without_feature_says_how_to_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.hdf5");
        std::fs::write(&p, b"x").unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("--features hdf5") && msg.contains("a.hdf5"), "{msg}");
    }

    #[test]
    fn same_matrix_from_every_binary_format() {
        let dir = tempfile::tempdir().unwrap();
        let m = sample(5, 3);
        let npy_path = dir.path().join("m.npy");
        write_matrix_npy(&npy_path, &m).unwrap();
        let fvecs_path = dir.path().join("m.fvecs");
        let mut bytes = Vec::new();
        vecs::write_rows(&mut bytes, m.as_slice(), 3, |v| v.to_le_bytes()).unwrap();
        std::fs::write(&fvecs_path, &bytes).unwrap();
        let fbin_path = dir.path().join("m.fbin");
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&5u32.to_le_bytes());
        bytes.extend_from_slice(&3u32.to_le_bytes());
        for v in m.as_slice() {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        std::fs::write(&fbin_path, &bytes).unwrap();
        let csv_path = dir.path().join("m.csv");
        let text: String = (0..5)
            .map(|i| m.view().row(i).iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",") + "\n")
            .collect();
        std::fs::write(&csv_path, text).unwrap();
        for p in [npy_path, fvecs_path, fbin_path, csv_path] {
            assert_eq!(read_matrix(p.to_str().unwrap()).unwrap(), m, "{}", p.display());
        }
    }

    #[test]
    fn matrix_file_reads_row_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let m = sample(7, 4);
        let p = dir.path().join("m.npy");
        write_matrix_npy(&p, &m).unwrap();
        let f = MatrixFile::open(p.to_str().unwrap()).unwrap();
        assert_eq!((f.rows(), f.cols()), (7, 4));
        let part = f.read_rows(2..5).unwrap();
        assert_eq!(part.as_slice(), &m.as_slice()[8..20]);
        assert_eq!(f.read_rows(3..3).unwrap().rows(), 0);
        assert!(f.read_rows(5..8).is_err());
    }

    #[test]
    fn empty_inputs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.fvecs");
        std::fs::write(&p, b"").unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("e.fvecs") && msg.contains("empty"), "{msg}");
        let p = dir.path().join("e.csv");
        std::fs::write(&p, b"a,b,c\n").unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("e.csv") && msg.contains("no vectors"), "{msg}");
    }

    #[test]
    fn output_path_checks() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_output_path(&dir.path().join("g.npz")).is_ok());
        assert!(check_output_path(&dir.path().join("g.ivecs")).is_ok());
        assert!(check_output_path(&dir.path().join("g.csv")).is_ok());
        assert!(check_output_path(&dir.path().join("g.mtx")).is_ok());
        let msg = message(check_output_path(&dir.path().join("g.parquet")).unwrap_err());
        assert!(msg.contains(".npz") && msg.contains(".mtx"), "{msg}");
        let msg = message(check_output_path(&dir.path().join("missing/g.npz")).unwrap_err());
        assert!(msg.contains("missing"), "{msg}");
        let msg = message(check_output_path(dir.path()).unwrap_err());
        assert!(msg.contains("output"), "{msg}");
        std::fs::create_dir(dir.path().join("d.npz")).unwrap();
        let msg = message(check_output_path(&dir.path().join("d.npz")).unwrap_err());
        assert!(msg.contains("directory"), "{msg}");
        // A leftover probe would be mistaken for output by later runs.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn outputs_never_replace_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.fvecs");
        std::fs::write(&base, b"x").unwrap();
        // `-o base.ivecs` writes its distances to base.fvecs, the input.
        let msg = message(refuse_overwriting_inputs(&dir.path().join("base.ivecs"), &[&base]).unwrap_err());
        assert!(
            msg.contains("base.ivecs") && msg.contains("overwrite the input") && msg.contains("base.fvecs"),
            "{msg}"
        );
        let link = dir.path().join("link.npz");
        std::fs::hard_link(&base, &link).unwrap();
        assert!(refuse_overwriting_inputs(&link, &[&base]).is_err());
        assert!(refuse_overwriting_inputs(&dir.path().join("other.ivecs"), &[&base]).is_ok());
        assert!(refuse_overwriting_inputs(&dir.path().join("g.npz"), &[&base]).is_ok());
    }

    #[test]
    fn inconsistent_neighbors_are_refused_without_output() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.csv");
        let mut nb = sample_neighbors();
        nb.indices.pop();
        assert!(write_neighbors(&p, &nb, 5).is_err());
        let nb = sample_neighbors();
        let msg = message(write_neighbors(&p, &nb, 4).unwrap_err());
        assert!(msg.contains("corpus size 4"), "{msg}");
        assert!(!p.exists());
    }

    const OUTPUTS: [&str; 4] = ["g.npz", "g.ivecs", "g.csv", "g.mtx"];

    /// File names in `dir`, sorted.
    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    /// Writes `nb` through a [`NeighborWriter`] in blocks of `chunks` rows.
    fn write_in_chunks(path: &Path, nb: &Neighbors, n_cols: usize, chunks: &[usize]) -> Result<()> {
        let mut writer = NeighborWriter::create(path, nb.queries, nb.k, n_cols)?;
        let mut row = 0;
        for &rows in chunks {
            let span = row * nb.k..(row + rows) * nb.k;
            writer.write_rows(&nb.indices[span.clone()], &nb.distances[span])?;
            row += rows;
        }
        writer.finish()
    }

    #[test]
    fn rows_written_in_chunks_give_the_same_files() {
        let nb = sample_neighbors();
        for name in OUTPUTS {
            let whole = tempfile::tempdir().unwrap();
            let chunked = tempfile::tempdir().unwrap();
            write_neighbors(&whole.path().join(name), &nb, 5).unwrap();
            write_in_chunks(&chunked.path().join(name), &nb, 5, &[1, 0, 2, 1]).unwrap();
            let files = listing(whole.path());
            assert_eq!(files, listing(chunked.path()), "{name}");
            assert_eq!(files.len(), output_files(Path::new(name)).len(), "{name}: {files:?}");
            for file in files {
                let a = std::fs::read(whole.path().join(&file)).unwrap();
                let b = std::fs::read(chunked.path().join(&file)).unwrap();
                assert_eq!(a, b, "{file}");
            }
        }
    }

    #[test]
    fn unfinished_writers_leave_nothing() {
        let nb = sample_neighbors();
        for name in OUTPUTS {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(name);
            let mut writer = NeighborWriter::create(&path, 4, 3, 5).unwrap();
            writer.write_rows(&nb.indices[..6], &nb.distances[..6]).unwrap();
            let names = listing(dir.path());
            assert!(!names.is_empty() && names.iter().all(|n| n.contains(".knng-partial-")), "{names:?}");
            drop(writer);
            assert_eq!(listing(dir.path()), Vec::<String>::new(), "{name}");

            // Unwinding from a panic drops the writer too.
            let unwound = std::panic::catch_unwind(|| {
                let mut writer = NeighborWriter::create(&path, 4, 3, 5).unwrap();
                writer.write_rows(&nb.indices[..3], &nb.distances[..3]).unwrap();
                panic!("a search failed while {name} was being written");
            });
            assert!(unwound.is_err());
            assert_eq!(listing(dir.path()), Vec::<String>::new(), "{name}");
        }
    }

    #[test]
    fn missing_rows_are_refused_at_finish() {
        let nb = sample_neighbors();
        for name in OUTPUTS {
            let dir = tempfile::tempdir().unwrap();
            let msg = message(write_in_chunks(&dir.path().join(name), &nb, 5, &[1, 1]).unwrap_err());
            assert!(msg.contains(name) && msg.contains("2 of 4 rows were written"), "{msg}");
            assert_eq!(listing(dir.path()), Vec::<String>::new(), "{name}");
        }
    }

    #[test]
    fn refused_rows_are_named_and_write_nothing() {
        let nb = sample_neighbors();
        for name in OUTPUTS {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(name);
            let mut writer = NeighborWriter::create(&path, 4, 3, 5).unwrap();
            writer.write_rows(&nb.indices[..6], &nb.distances[..6]).unwrap();
            let mut bad = nb.indices[6..].to_vec();
            bad[4] = 9;
            let msg = message(writer.write_rows(&bad, &nb.distances[6..]).unwrap_err());
            assert!(msg.contains("row 3: index 9 is not below the corpus size 5"), "{msg}");
            let msg = message(writer.write_rows(&nb.indices[6..8], &nb.distances[6..8]).unwrap_err());
            assert!(msg.contains("whole rows of k = 3"), "{msg}");
            let msg = message(writer.write_rows(&nb.indices[6..9], &nb.distances[6..]).unwrap_err());
            assert!(msg.contains("3 indices and 6 distances"), "{msg}");
            let msg = message(writer.write_rows(&nb.indices[3..], &nb.distances[3..]).unwrap_err());
            assert!(msg.contains("3 more rows after 2 would exceed the 4 queries"), "{msg}");
            // Refused blocks wrote nothing, so the right rows still make the right file.
            writer.write_rows(&nb.indices[6..], &nb.distances[6..]).unwrap();
            writer.finish().unwrap();
            let whole = tempfile::tempdir().unwrap();
            write_neighbors(&whole.path().join(name), &nb, 5).unwrap();
            for file in listing(whole.path()) {
                let a = std::fs::read(whole.path().join(&file)).unwrap();
                let b = std::fs::read(dir.path().join(&file)).unwrap();
                assert_eq!(a, b, "{file}");
            }
        }
    }

    #[test]
    fn impossible_outputs_are_refused_at_create() {
        let dir = tempfile::tempdir().unwrap();
        let msg = message(NeighborWriter::create(&dir.path().join("g.csv"), 4, 0, 5).err().unwrap());
        assert!(msg.contains("k = 0"), "{msg}");
        let k = i32::MAX as usize + 1;
        let msg = message(NeighborWriter::create(&dir.path().join("g.ivecs"), 1, k, 5).err().unwrap());
        assert!(msg.contains("k = 2147483648") && msg.contains("i32"), "{msg}");
        let msg = message(NeighborWriter::create(&dir.path().join("g.txt"), 1, 1, 5).err().unwrap());
        assert!(msg.contains("g.txt") && msg.contains(".npz"), "{msg}");
        assert_eq!(listing(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn writers_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<NeighborWriter>();
    }
}
