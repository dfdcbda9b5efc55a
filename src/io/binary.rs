//! Memory-mapped binary matrices and the big-ann-benchmarks `.fbin` family.

use std::fs::File;
use std::io::ErrorKind;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;

use super::Elem;
use crate::data::{Matrix, MatrixRef};
use crate::error::{Error, Result};

/// Rows a task converts when a mapped file is read into f32 rows.
const CONVERTED_ROWS_PER_TASK: usize = 2048;

/// Maps `path` read-only, with file-not-found and empty-file errors that name it.
pub(crate) fn map_file(path: &Path) -> Result<Mmap> {
    let file = File::open(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => Error::file(path, "file not found"),
        _ => Error::io(path, e),
    })?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        return Err(Error::file(path, "is a directory, not a file"));
    }
    if meta.len() == 0 {
        return Err(Error::file(path, "file is empty"));
    }
    // SAFETY: the map is only read. If another process truncates the file while it is
    // mapped, reads past the new end fault; that is the documented cost of not copying
    // inputs that may be larger than memory.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(map)
}

pub(crate) fn elem_name(elem: Elem) -> &'static str {
    match elem {
        Elem::F16 => "float16",
        Elem::F32 => "float32",
        Elem::F64 => "float64",
        Elem::I8 => "int8",
        Elem::U8 => "uint8",
        Elem::I16 => "int16",
        Elem::U16 => "uint16",
        Elem::I32 => "int32",
        Elem::U32 => "uint32",
        Elem::I64 => "int64",
        Elem::U64 => "uint64",
        Elem::Bool => "bool",
    }
}

/// Where the values of a mapped matrix lie: value `(i, j)` starts at byte
/// `base + i * row_bytes + column_offset(j)`.
pub(crate) struct Mapped {
    pub(crate) map: Mmap,
    pub(crate) path: PathBuf,
    pub(crate) elem: Elem,
    pub(crate) big_endian: bool,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) base: usize,
    pub(crate) row_bytes: usize,
    /// `None` when the columns of a row are contiguous; otherwise the byte offset of each
    /// column within the row (Fortran-ordered arrays).
    pub(crate) col_offsets: Option<Vec<usize>>,
    /// The dimension each row must repeat in the 4 bytes before its values (TEXMEX `.fvecs`
    /// and kin); checked as rows are read, so that opening a file does not read all of it.
    pub(crate) row_dim: Option<i32>,
}

impl Mapped {
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// The values in place, where the file stores exactly f32 rows: little-endian f32, row
    /// after row, nothing between them.
    pub(crate) fn f32_rows(&self) -> Option<MatrixRef<'_>> {
        let in_place = self.elem == Elem::F32
            && !self.big_endian
            && cfg!(target_endian = "little")
            && self.col_offsets.is_none()
            && self.row_dim.is_none()
            && self.row_bytes == self.cols * 4;
        if !in_place {
            return None;
        }
        let bytes = self.map.get(self.base..self.base + self.rows * self.row_bytes)?;
        let values: &[f32] = bytemuck::try_cast_slice(bytes).ok()?;
        // SAFETY: `map_file` maps the file shared and read-only, and `self` holds the map.
        MatrixRef::new(values, self.rows, self.cols).ok().map(|m| unsafe { m.file_mapped() })
    }

    pub(crate) fn read_rows(&self, range: Range<usize>) -> Result<Matrix> {
        let cols = self.cols;
        let n = range.len();
        let len = n.checked_mul(cols).ok_or_else(|| Error::file(&self.path, "too many values"))?;
        // Zeros not written first: the converting threads fault the pages in.
        let mut out: Vec<f32> = crate::data::try_zeroed(len).ok_or_else(|| {
            Error::file(
                &self.path,
                format!("not enough memory for {n} rows x {cols} columns of f32 ({} bytes)", len as u128 * 4),
            )
        })?;
        let size = self.elem.size();
        match &self.col_offsets {
            None => {
                // Blocks of rows on every core: one thread converts at a fraction of the page
                // cache's speed. The first failing block, in row order, names the error.
                let block_values = (cols * CONVERTED_ROWS_PER_TASK).max(1);
                let failures: Vec<Result<()>> = out
                    .par_chunks_mut(block_values)
                    .enumerate()
                    .map(|(b, block)| {
                        let first = range.start + b * CONVERTED_ROWS_PER_TASK;
                        for (r, dst) in (first..).zip(block.chunks_exact_mut(cols.max(1))) {
                            let start = self.base + r * self.row_bytes;
                            if let Some(dim) = self.row_dim {
                                let found = i32::from_le_bytes(self.map[start - 4..start].try_into().unwrap());
                                if found != dim {
                                    return Err(super::vecs::dimension_error(&self.path, r, start - 4, found, dim));
                                }
                            }
                            decode(self.elem, self.big_endian, &self.map[start..start + cols * size], dst);
                        }
                        self.release(first, block.len() / cols.max(1));
                        Ok(())
                    })
                    .collect();
                failures.into_iter().collect::<Result<()>>()?;
            }
            Some(offsets) => {
                // Column by column, so that the mapped file is read in order.
                for (j, &off) in offsets.iter().enumerate() {
                    for (o, r) in range.clone().enumerate() {
                        let start = self.base + r * self.row_bytes + off;
                        out[o * cols + j] = decode_one(self.elem, self.big_endian, &self.map[start..start + size]);
                    }
                }
            }
        }
        if self.elem == Elem::F64 {
            self.refuse_f32_overflow(&out, range.start, cols)?;
        }
        Matrix::new(out, n, cols)
    }

    /// Gives back the mapped pages of rows `first..first + rows` once they are converted, so
    /// that the input and its converted copy are not both resident.
    fn release(&self, first: usize, rows: usize) {
        #[cfg(unix)]
        if rows > 0 {
            let from = self.base + first * self.row_bytes;
            // SAFETY: the map is a read-only shared map of a file (`map_file`): a page given
            // back reads the same bytes again when touched, by this thread or another.
            let _ = unsafe {
                self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, rows * self.row_bytes)
            };
        }
        #[cfg(not(unix))]
        let _ = (first, rows);
    }

    /// Names the first float64 value that is finite but too large for f32 (it became an
    /// infinity when converted, which the search would report as a non-finite input).
    fn refuse_f32_overflow(&self, out: &[f32], first_row: usize, cols: usize) -> Result<()> {
        let Some(at) = out.iter().position(|v| v.is_infinite()) else { return Ok(()) };
        let (r, j) = (first_row + at / cols.max(1), at % cols.max(1));
        let start = self.base + r * self.row_bytes + self.col_offsets.as_ref().map_or(j * 8, |o| o[j]);
        let bytes: [u8; 8] = self.map[start..start + 8].try_into().unwrap();
        let value = if self.big_endian { f64::from_be_bytes(bytes) } else { f64::from_le_bytes(bytes) };
        if value.is_finite() {
            return Err(Error::file(
                &self.path,
                format!(
                    "row {r}, column {j}: the float64 value {value:e} overflows float32 (largest {:e}); \
                     knng computes in float32",
                    f32::MAX
                ),
            ));
        }
        // A true infinity: the search names it with its row and column.
        Ok(())
    }
}

macro_rules! convert {
    ($src:expr, $dst:expr, $t:ty, $n:literal, $big:expr, $to:expr) => {{
        let chunks = $src.chunks_exact($n);
        if $big {
            for (d, c) in $dst.iter_mut().zip(chunks) {
                *d = $to(<$t>::from_be_bytes(c.try_into().unwrap()));
            }
        } else {
            for (d, c) in $dst.iter_mut().zip(chunks) {
                *d = $to(<$t>::from_le_bytes(c.try_into().unwrap()));
            }
        }
    }};
}

/// Converts contiguous stored values to f32; `dst.len()` values are read from `src`.
pub(crate) fn decode(elem: Elem, big_endian: bool, src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len() * elem.size());
    match elem {
        Elem::F32 => convert!(src, dst, f32, 4, big_endian, |v: f32| v),
        Elem::F64 => convert!(src, dst, f64, 8, big_endian, |v: f64| v as f32),
        Elem::F16 => convert!(src, dst, u16, 2, big_endian, f16_to_f32),
        Elem::I8 => convert!(src, dst, i8, 1, false, |v: i8| v as f32),
        Elem::U8 => convert!(src, dst, u8, 1, false, |v: u8| v as f32),
        Elem::Bool => convert!(src, dst, u8, 1, false, |v: u8| (v != 0) as u8 as f32),
        Elem::I16 => convert!(src, dst, i16, 2, big_endian, |v: i16| v as f32),
        Elem::U16 => convert!(src, dst, u16, 2, big_endian, |v: u16| v as f32),
        Elem::I32 => convert!(src, dst, i32, 4, big_endian, |v: i32| v as f32),
        Elem::U32 => convert!(src, dst, u32, 4, big_endian, |v: u32| v as f32),
        Elem::I64 => convert!(src, dst, i64, 8, big_endian, |v: i64| v as f32),
        Elem::U64 => convert!(src, dst, u64, 8, big_endian, |v: u64| v as f32),
    }
}

/// IEEE half precision to single; every half value is exact in f32.
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    match exp {
        0 => {
            let magnitude = mant as f32 * (1.0 / 16_777_216.0);
            if sign != 0 {
                -magnitude
            } else {
                magnitude
            }
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (mant << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (mant << 13)),
    }
}

fn decode_one(elem: Elem, big_endian: bool, src: &[u8]) -> f32 {
    let mut v = [0.0f32];
    decode(elem, big_endian, src, &mut v);
    v[0]
}

/// Opens a big-ann-benchmarks file: `u32` rows, `u32` columns, then the values, row-major,
/// little-endian.
pub(crate) fn open_bin(path: &Path, elem: Elem) -> Result<Mapped> {
    let map = map_file(path)?;
    let len = map.len();
    if len < 8 {
        return Err(Error::file(
            path,
            format!("file is {len} bytes, shorter than the 8-byte header (u32 rows, u32 columns)"),
        ));
    }
    let rows = u32::from_le_bytes(map[0..4].try_into().unwrap()) as u64;
    let cols = u32::from_le_bytes(map[4..8].try_into().unwrap()) as u64;
    let expected = 8u128 + rows as u128 * cols as u128 * elem.size() as u128;
    if expected != len as u128 {
        let how = if (len as u128) < expected { "truncated: " } else { "" };
        return Err(Error::file(
            path,
            format!(
                "{how}the header says {rows} rows x {cols} columns of {}, which takes {expected} bytes, \
                 but the file has {len} bytes",
                elem_name(elem)
            ),
        ));
    }
    let (rows, cols) = (rows as usize, cols as usize);
    Ok(Mapped {
        map,
        path: path.to_path_buf(),
        elem,
        big_endian: false,
        rows,
        cols,
        base: 8,
        row_bytes: cols * elem.size(),
        col_offsets: None,
        row_dim: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::read_matrix;
    use super::super::testutil::*;
    use super::*;

    fn bin_bytes(rows: u32, cols: u32, values: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&rows.to_le_bytes());
        b.extend_from_slice(&cols.to_le_bytes());
        b.extend_from_slice(values);
        b
    }

    #[test]
    fn round_trip_every_element_type() {
        let dir = tempfile::tempdir().unwrap();
        let m = sample(4, 3);
        let f32s: Vec<u8> = m.as_slice().iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = dir.path().join("a.fbin");
        std::fs::write(&p, bin_bytes(4, 3, &f32s)).unwrap();
        assert_eq!(read_matrix(p.to_str().unwrap()).unwrap(), m);

        let bytes: Vec<u8> = (0..12u8).map(|i| i * 20).collect();
        let p = dir.path().join("a.u8bin");
        std::fs::write(&p, bin_bytes(3, 4, &bytes)).unwrap();
        let got = read_matrix(p.to_str().unwrap()).unwrap();
        assert_eq!((got.rows(), got.cols()), (3, 4));
        assert_eq!(got.as_slice()[11], 220.0);

        let p = dir.path().join("a.i8bin");
        std::fs::write(&p, bin_bytes(3, 4, &bytes)).unwrap();
        let got = read_matrix(p.to_str().unwrap()).unwrap();
        assert_eq!(got.as_slice()[11], (220u8 as i8) as f32);

        let ints: Vec<u8> = [-3i32, 7, 1 << 20, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = dir.path().join("a.ibin");
        std::fs::write(&p, bin_bytes(2, 2, &ints)).unwrap();
        assert_eq!(read_matrix(p.to_str().unwrap()).unwrap().as_slice(), &[-3.0, 7.0, 1048576.0, -1.0]);
    }

    #[test]
    fn truncated_and_oversized_files_name_both_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.fbin");
        std::fs::write(&p, bin_bytes(10, 4, &[0u8; 100])).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(
            msg.contains("t.fbin") && msg.contains("168") && msg.contains("108") && msg.contains("truncated"),
            "{msg}"
        );

        std::fs::write(&p, bin_bytes(1, 4, &[0u8; 20])).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("24") && msg.contains("28"), "{msg}");

        std::fs::write(&p, [1u8, 2, 3]).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("shorter than the 8-byte header"), "{msg}");
    }

    #[test]
    fn junk_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.u8bin");
        std::fs::write(&p, b"this is not a vector file at all").unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("j.u8bin") && msg.contains("the header says"), "{msg}");
    }

    #[test]
    fn decode_handles_byte_order_and_half() {
        let mut out = [0.0f32; 2];
        decode(Elem::F64, true, &[1.5f64.to_be_bytes(), (-2.0f64).to_be_bytes()].concat(), &mut out);
        assert_eq!(out, [1.5, -2.0]);
        decode(Elem::F16, false, &[0x00, 0x3c, 0x00, 0xc0], &mut out);
        assert_eq!(out, [1.0, -2.0]);
        decode(Elem::F16, false, &[0x01, 0x00, 0xff, 0x7b], &mut out);
        assert_eq!(out, [5.960_464_5e-8, 65504.0]);
        decode(Elem::F16, false, &[0x00, 0x7c, 0x00, 0x80], &mut out);
        assert_eq!(out[0], f32::INFINITY);
        assert!(out[1] == 0.0 && out[1].is_sign_negative());
        decode(Elem::U64, false, &[u64::MAX.to_le_bytes(), 5u64.to_le_bytes()].concat(), &mut out);
        assert_eq!(out, [u64::MAX as f32, 5.0]);
        decode(Elem::I16, true, &[0xff, 0xfe, 0x00, 0x02], &mut out);
        assert_eq!(out, [-2.0, 2.0]);
    }
}
