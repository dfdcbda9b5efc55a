//! TEXMEX vector files (`.fvecs`, `.bvecs`, `.ivecs`): each vector is a little-endian `i32`
//! dimension followed by that many values.

use std::io::{self, Write};
use std::path::Path;

use super::binary::{elem_name, map_file, Mapped};
use super::Elem;
use crate::error::{Error, Result};

pub(crate) fn dimension_error(path: &Path, vector: usize, offset: usize, found: i32, expected: i32) -> Error {
    Error::file(
        path,
        format!(
            "vector {vector} at byte offset {offset} has dimension {found}, but vector 0 has {expected}; \
             all vectors must have the same dimension"
        ),
    )
}

pub(crate) fn open(path: &Path, elem: Elem) -> Result<Mapped> {
    let map = map_file(path)?;
    let len = map.len();
    let dim_at = |off: usize| i32::from_le_bytes(map[off..off + 4].try_into().unwrap());
    if len < 4 {
        return Err(Error::file(path, format!("truncated: file has {len} bytes, less than one 4-byte dimension")));
    }
    let dim = dim_at(0);
    if dim <= 0 {
        return Err(Error::file(
            path,
            format!("vector 0 at byte offset 0 has dimension {dim}; is this really a .{} file?", ext_of(elem)),
        ));
    }
    let record = 4 + dim as usize * elem.size();
    if len % record != 0 {
        // Walk the headers only now, to tell a differing dimension from a cut-off file.
        let mut off = 0;
        let mut i = 0;
        while off + 4 <= len {
            let found = dim_at(off);
            if found != dim {
                return Err(dimension_error(path, i, off, found, dim));
            }
            if off + record > len {
                break;
            }
            off += record;
            i += 1;
        }
        if i == 0 {
            return Err(Error::file(
                path,
                format!(
                    "truncated, or not a .{} file: vector 0 has dimension {dim}, which takes {record} bytes, \
                     but the file has {len} bytes",
                    ext_of(elem)
                ),
            ));
        }
        return Err(Error::file(
            path,
            format!(
                "truncated: {} vectors of dimension {dim} ({}, {record} bytes each) take {} bytes, \
                 but the file has {len} bytes; vector {i} at byte offset {off} is incomplete",
                i + 1,
                elem_name(elem),
                off + record,
            ),
        ));
    }
    Ok(Mapped {
        rows: len / record,
        cols: dim as usize,
        path: path.to_path_buf(),
        elem,
        big_endian: false,
        base: 4,
        row_bytes: record,
        col_offsets: None,
        row_dim: Some(dim),
        map,
    })
}

fn ext_of(elem: Elem) -> &'static str {
    match elem {
        Elem::U8 => "bvecs",
        Elem::I32 => "ivecs",
        _ => "fvecs",
    }
}

/// Writes `values` as vectors of `k` values each, in TEXMEX layout.
pub(crate) fn write_rows<W: Write, T: Copy, const N: usize>(
    w: &mut W,
    values: &[T],
    k: usize,
    to_bytes: impl Fn(T) -> [u8; N],
) -> io::Result<()> {
    let dim = i32::try_from(k)
        .map_err(|_| io::Error::other(format!("k = {k} does not fit the i32 dimension of a vecs file")))?;
    if k == 0 {
        return Ok(());
    }
    let mut buf = Vec::with_capacity(4 + k * N);
    for row in values.chunks_exact(k) {
        buf.clear();
        buf.extend_from_slice(&dim.to_le_bytes());
        for &v in row {
            buf.extend_from_slice(&to_bytes(v));
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{read_matrix, write_neighbors, MatrixFile};
    use super::*;

    fn fvecs(rows: &[&[f32]]) -> Vec<u8> {
        let mut b = Vec::new();
        for r in rows {
            b.extend_from_slice(&(r.len() as i32).to_le_bytes());
            for v in *r {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn round_trip_fvecs_bvecs_ivecs() {
        let dir = tempfile::tempdir().unwrap();
        let m = sample(6, 5);
        let p = dir.path().join("a.fvecs");
        let mut bytes = Vec::new();
        write_rows(&mut bytes, m.as_slice(), 5, |v| v.to_le_bytes()).unwrap();
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(read_matrix(p.to_str().unwrap()).unwrap(), m);

        let p = dir.path().join("a.bvecs");
        let vals: Vec<u8> = (0..12u8).map(|v| v * 21).collect();
        let mut bytes = Vec::new();
        write_rows(&mut bytes, &vals, 4, |v| [v]).unwrap();
        std::fs::write(&p, &bytes).unwrap();
        let got = read_matrix(p.to_str().unwrap()).unwrap();
        assert_eq!((got.rows(), got.cols()), (3, 4));
        assert_eq!(got.as_slice(), vals.iter().map(|&v| v as f32).collect::<Vec<_>>().as_slice());

        let p = dir.path().join("a.ivecs");
        let vals = [-5i32, 9, 1 << 24, 3];
        let mut bytes = Vec::new();
        write_rows(&mut bytes, &vals, 2, |v| v.to_le_bytes()).unwrap();
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(read_matrix(p.to_str().unwrap()).unwrap().as_slice(), &[-5.0, 9.0, 16777216.0, 3.0]);
    }

    #[test]
    fn ragged_dimension_names_vector_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.fvecs");
        // Same total size as three 2-d vectors plus change, so the walk must find the bad one.
        std::fs::write(&p, fvecs(&[&[1.0, 2.0], &[3.0, 4.0], &[5.0, 6.0, 7.0]])).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("r.fvecs") && msg.contains("vector 2 at byte offset 24 has dimension 3"), "{msg}");

        // Sizes that add up to whole records: caught while reading rows.
        std::fs::write(&p, fvecs(&[&[1.0, 2.0, 3.0], &[3.0], &[5.0, 6.0, 7.0, 8.0, 9.0]])).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("vector 1 at byte offset 16 has dimension 1, but vector 0 has 3"), "{msg}");
    }

    /// Rows converted by several tasks: every value in place, and of two bad dimensions in
    /// different tasks' rows, the first is named.
    #[test]
    fn rows_converted_in_parallel_keep_their_order_and_first_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("many.fvecs");
        let rows: Vec<Vec<f32>> = (0..9000).map(|i| vec![i as f32, -(i as f32), 0.5]).collect();
        let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        let mut bytes = fvecs(&refs);
        std::fs::write(&p, &bytes).unwrap();
        let m = read_matrix(p.to_str().unwrap()).unwrap();
        assert_eq!(m.as_slice(), rows.concat().as_slice());
        // Rows 8000 and 2500: whole records, so that only the conversion finds them.
        for bad in [8000usize, 2500] {
            bytes[bad * 16..bad * 16 + 4].copy_from_slice(&7i32.to_le_bytes());
        }
        std::fs::write(&p, &bytes).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("vector 2500 at byte offset 40000 has dimension 7"), "{msg}");
    }

    #[test]
    fn truncated_file_names_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.fvecs");
        let mut b = fvecs(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        b.truncate(b.len() - 3);
        std::fs::write(&p, &b).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(
            msg.contains("t.fvecs")
                && msg.contains("truncated")
                && msg.contains("32 bytes")
                && msg.contains("29 bytes"),
            "{msg}"
        );
        let p = dir.path().join("t.bvecs");
        std::fs::write(&p, [1u8, 0]).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("truncated"), "{msg}");
    }

    #[test]
    fn junk_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.fvecs");
        std::fs::write(&p, b"hello, this is text and not vectors\n").unwrap();
        assert!(read_matrix(p.to_str().unwrap()).is_err());
        std::fs::write(&p, (-4i32).to_le_bytes()).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("dimension -4"), "{msg}");
    }

    #[test]
    fn neighbors_as_ivecs_and_fvecs() {
        let dir = tempfile::tempdir().unwrap();
        let nb = sample_neighbors();
        let p = dir.path().join("g.ivecs");
        write_neighbors(&p, &nb, 5).unwrap();
        let idx = MatrixFile::open(p.to_str().unwrap()).unwrap().read_rows(0..4).unwrap();
        assert_eq!(idx.cols(), 3);
        assert_eq!(idx.as_slice(), nb.indices.iter().map(|&i| i as f32).collect::<Vec<_>>().as_slice());
        let dist = read_matrix(dir.path().join("g.fvecs").to_str().unwrap()).unwrap();
        assert_eq!(dist.as_slice(), nb.distances.as_slice());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
