//! ann-benchmarks HDF5 files: 2-D datasets `train`, `test`, `neighbors`, `distances`.
//!
//! HDF5 does its own buffered reading, so these inputs are not memory-mapped; rows are read
//! through hyperslab selections, converted to f32 by the library.

use std::ops::Range;
use std::path::Path;

use hdf5::types::TypeDescriptor;

use super::h5_layout::layout_problem;
use crate::data::Matrix;
use crate::error::{Error, Result};

pub(crate) const DEFAULT_DATASET: &str = "train";

pub(crate) struct Dataset {
    // Kept so that the dataset's file stays open for later reads.
    _file: hdf5::File,
    dataset: hdf5::Dataset,
    name: String,
    rows: usize,
    cols: usize,
}

impl Dataset {
    pub(crate) fn open(path: &Path, name: &str) -> Result<Dataset> {
        if !path.exists() {
            return Err(Error::file(path, "file not found"));
        }
        let file = hdf5::File::open(path).map_err(|e| Error::file(path, format!("not a readable HDF5 file: {e}")))?;
        let dataset = file.dataset(name).map_err(|_| {
            let names = file.member_names().unwrap_or_default();
            let available = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            Error::file(path, format!("has no dataset {name:?} (available: {available}); pick one with FILE:NAME"))
        })?;
        let dtype = dataset
            .dtype()
            .and_then(|t| t.to_descriptor())
            .map_err(|e| Error::file(path, format!("dataset {name:?}: cannot read its type: {e}")))?;
        match dtype {
            TypeDescriptor::Integer(_)
            | TypeDescriptor::Unsigned(_)
            | TypeDescriptor::Float(_)
            | TypeDescriptor::Boolean => {}
            other => return Err(Error::file(path, format!("dataset {name:?} holds {other}, not numbers"))),
        }
        let space = dataset.space().map_err(|e| Error::file(path, format!("dataset {name:?}: {e}")))?;
        let shape: Vec<u64> = space.shape().iter().map(|&s| s as u64).collect();
        let max_shape: Vec<u64> = space.maxdims().iter().map(|m| m.map_or(u64::MAX, |m| m as u64)).collect();
        let chunk: Option<Vec<u64>> = dataset.chunk().map(|c| c.iter().map(|&c| c as u64).collect());
        let elem_size = dataset.dtype().map(|t| t.size() as u64).unwrap_or(0);
        if let Some(problem) = layout_problem(&shape, Some(&max_shape), chunk.as_deref(), elem_size) {
            return Err(Error::file(path, format!("dataset {name:?} {problem}")));
        }
        let (rows, cols) = (shape[0] as usize, shape[1] as usize);
        // A contiguous dataset stores every value uncompressed: a file holding fewer bytes than
        // its shape needs is truncated or corrupted (libhdf5 would invent fill values).
        let needed = shape[0] as u128 * shape[1] as u128 * elem_size as u128;
        let file_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let stored = dataset.storage_size().min(file_len);
        if chunk.is_none() && (stored as u128) < needed {
            return Err(Error::file(
                path,
                format!(
                    "dataset {name:?} claims shape {shape:?} ({needed} bytes) but the file stores {stored} bytes of it \
                     (truncated or corrupted)"
                ),
            ));
        }
        Ok(Dataset { _file: file, name: name.to_string(), rows, cols, dataset })
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    pub(crate) fn read_rows(&self, path: &Path, range: Range<usize>) -> Result<Matrix> {
        let n = range.len();
        if n == 0 {
            return Matrix::new(Vec::new(), 0, self.cols);
        }
        // libhdf5 allocates the rows itself, where a failure would abort the process.
        let bytes = (n as u64).saturating_mul(self.cols as u64).saturating_mul(4);
        if crate::memory::available_host_memory().is_some_and(|available| bytes > available) {
            return Err(Error::file(
                path,
                format!(
                    "dataset {:?}: {n} rows x {} columns of f32 take {}, more than the {} of memory available",
                    self.name,
                    self.cols,
                    crate::memory::bytes(bytes),
                    crate::memory::bytes(crate::memory::available_host_memory().unwrap_or(0))
                ),
            ));
        }
        let array = self
            .dataset
            .read_slice_2d::<f32, _>((range, ..))
            .map_err(|e| Error::file(path, format!("dataset {:?}: {e}", self.name)))?;
        let values = if array.is_standard_layout() {
            array.into_raw_vec_and_offset().0
        } else {
            array.iter().copied().collect()
        };
        Matrix::new(values, n, self.cols)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{read_matrix, MatrixFile};

    fn ann_file(path: &std::path::Path) {
        let file = hdf5::File::create(path).unwrap();
        let train = sample(6, 4);
        file.new_dataset::<f32>().shape((6, 4)).create("train").unwrap().write_raw(train.as_slice()).unwrap();
        let test: Vec<f64> = (0..6).map(|i| i as f64 * 0.25).collect();
        file.new_dataset::<f64>().shape((3, 2)).create("test").unwrap().write_raw(&test).unwrap();
        let nb: Vec<i32> = (0..6).collect();
        file.new_dataset::<i32>().shape((2, 3)).create("neighbors").unwrap().write_raw(&nb).unwrap();
        file.new_dataset::<f32>().shape(5).create("flat").unwrap().write_raw(&[1.0f32; 5]).unwrap();
    }

    #[test]
    fn reads_train_by_default_and_named_datasets() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ann.hdf5");
        ann_file(&p);
        let spec = p.to_str().unwrap();
        assert_eq!(read_matrix(spec).unwrap(), sample(6, 4));
        let test = read_matrix(&format!("{spec}:test")).unwrap();
        assert_eq!((test.rows(), test.cols()), (3, 2));
        assert_eq!(test.as_slice()[5], 1.25);
        let nb = read_matrix(&format!("{spec}:neighbors")).unwrap();
        assert_eq!(nb.as_slice(), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let part = MatrixFile::open(spec).unwrap().read_rows(2..4).unwrap();
        assert_eq!(part.as_slice(), &sample(6, 4).as_slice()[8..16]);
    }

    /// A 1.4 kB file whose dataset claims 10^9 x 1000 values it does not hold: refused by name,
    /// not read (libhdf5 would allocate 4 TB of fill values).
    #[test]
    fn datasets_larger_than_their_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("claims.hdf5");
        {
            let file = hdf5::File::create(&p).unwrap();
            file.new_dataset::<f32>().shape((1_000_000_000, 1000)).create("train").unwrap();
        }
        assert!(std::fs::metadata(&p).unwrap().len() < 100_000);
        let msg = message(MatrixFile::open(p.to_str().unwrap()).err().expect("refused"));
        assert!(msg.contains("claims.hdf5") && msg.contains("1000000000, 1000") && msg.contains("stores"), "{msg}");
    }

    /// A chunked, compressed dataset with one corrupted byte in its shape (a dimension of
    /// 16711692 where the maximum is 12): refused before libhdf5 reads a chunk.
    #[test]
    fn corrupted_dimensions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.h5");
        {
            let file = hdf5::File::create(&p).unwrap();
            let values: Vec<f32> = (0..36).map(|i| i as f32).collect();
            let ds = file.new_dataset::<f32>().shape((12, 3)).chunk((4, 3)).deflate(6).create("train").unwrap();
            ds.write_raw(&values).unwrap();
        }
        assert_eq!(read_matrix(p.to_str().unwrap()).unwrap().rows(), 12);
        // The dataspace message stores the dimensions and the maximum dimensions as 8-byte
        // values: 12, 3, 12, 3. Corrupt the first byte of the first dimension above its 12.
        let mut bytes = std::fs::read(&p).unwrap();
        let pattern: Vec<u8> = [12u64, 3, 12, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let at = bytes.windows(pattern.len()).position(|w| w == pattern).expect("the dataspace message");
        bytes[at + 2] = 0xff;
        std::fs::write(&p, &bytes).unwrap();
        let msg = message(read_matrix(p.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("bad.h5"), "{msg}");
    }

    #[test]
    fn bad_datasets_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ann.h5");
        ann_file(&p);
        let spec = p.to_str().unwrap();
        let msg = message(read_matrix(&format!("{spec}:nope")).unwrap_err());
        assert!(msg.contains("ann.h5") && msg.contains("\"nope\"") && msg.contains("train"), "{msg}");
        let msg = message(read_matrix(&format!("{spec}:flat")).unwrap_err());
        assert!(msg.contains("expected 2-D"), "{msg}");
        let junk = dir.path().join("junk.hdf5");
        std::fs::write(&junk, b"not hdf5 at all").unwrap();
        let msg = message(read_matrix(junk.to_str().unwrap()).unwrap_err());
        assert!(msg.contains("junk.hdf5") && msg.contains("not a readable HDF5"), "{msg}");
        let msg = message(read_matrix(dir.path().join("absent.hdf5").to_str().unwrap()).unwrap_err());
        assert!(msg.contains("not found"), "{msg}");
    }
}
