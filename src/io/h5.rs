//! ann-benchmarks HDF5 files: 2-D datasets `train`, `test`, `neighbors`, `distances`.
//!
//! HDF5 does its own buffered reading, so these inputs are not memory-mapped; rows are read
//! through hyperslab selections, converted to f32 by the library.

use std::ops::Range;
use std::path::Path;

use hdf5::types::TypeDescriptor;

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
        let shape = dataset.shape();
        if shape.len() != 2 {
            return Err(Error::file(
                path,
                format!("dataset {name:?} has shape {shape:?}; expected 2-D (rows, columns)"),
            ));
        }
        Ok(Dataset { _file: file, name: name.to_string(), rows: shape[0], cols: shape[1], dataset })
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
