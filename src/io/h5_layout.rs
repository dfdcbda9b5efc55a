//! Checks of an HDF5 dataset's layout before anything of it is read.
//!
//! libhdf5 trusts the shape, maximum dimensions and chunk sizes written in a file: a corrupted
//! dimension makes it allocate and decompress until memory runs out, and a tiny file may claim
//! terabytes. These checks use only the numbers from the file's metadata, so they run (and
//! are fuzzed) without the HDF5 library.

use crate::error::{Error, Result};

/// The largest chunk libhdf5 itself accepts (4 GiB); a larger one is a corrupted file.
const MAX_CHUNK_BYTES: u128 = 1 << 32;

/// Why a dataset's layout cannot be read as a matrix, or `None` when it can.
///
/// `shape`: the dataset's dimensions; `max_shape`: its maximum dimensions (`u64::MAX` for an
/// unlimited one), if the file gives them; `chunk`: the chunk dimensions of a chunked dataset;
/// `elem_size`: bytes a value as stored.
pub(crate) fn layout_problem(
    shape: &[u64],
    max_shape: Option<&[u64]>,
    chunk: Option<&[u64]>,
    elem_size: u64,
) -> Option<String> {
    if shape.len() != 2 {
        return Some(format!("has shape {shape:?}; expected 2-D (rows, columns)"));
    }
    if elem_size == 0 || elem_size > 16 {
        return Some(format!("stores values of {elem_size} bytes; expected numbers of 1 to 16 bytes"));
    }
    if let Some(max) = max_shape {
        if max.len() != shape.len() {
            return Some(format!("is corrupted: shape {shape:?} but maximum dimensions {max:?}"));
        }
        if let Some(axis) = (0..shape.len()).find(|&a| shape[a] > max[a]) {
            return Some(format!("is corrupted: dimension {axis} is {} but its maximum is {}", shape[axis], max[axis]));
        }
    }
    let values = shape.iter().try_fold(1u128, |acc, &s| acc.checked_mul(s as u128));
    let Some(bytes) = values.and_then(|v| v.checked_mul(elem_size as u128)) else {
        return Some(format!("has shape {shape:?}, whose size overflows"));
    };
    if bytes > u64::MAX as u128 {
        return Some(format!("has shape {shape:?}, {bytes} bytes: more than any file can hold"));
    }
    if let Some(chunk) = chunk {
        if chunk.len() != shape.len() {
            return Some(format!("is corrupted: shape {shape:?} but chunks of {chunk:?}"));
        }
        if chunk.contains(&0) {
            return Some(format!("is corrupted: chunks of {chunk:?} hold no values"));
        }
        let chunk_bytes = chunk.iter().fold(elem_size as u128, |acc, &c| acc.saturating_mul(c as u128));
        if chunk_bytes > MAX_CHUNK_BYTES {
            return Some(format!("is corrupted: chunks of {chunk:?} take {chunk_bytes} bytes each (at most 4 GiB)"));
        }
    }
    None
}

/// Checks an HDF5 dataset's layout as [`layout_problem`] does, for fuzzing.
#[doc(hidden)]
pub fn check_hdf5_layout(
    shape: &[u64],
    max_shape: Option<&[u64]>,
    chunk: Option<&[u64]>,
    elem_size: u64,
) -> Result<()> {
    match layout_problem(shape, max_shape, chunk, elem_size) {
        None => Ok(()),
        Some(problem) => Err(Error::arg("dataset", format!("the dataset {problem}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_layouts_pass() {
        assert_eq!(layout_problem(&[10, 3], None, None, 4), None);
        assert_eq!(layout_problem(&[10, 3], Some(&[10, 3]), Some(&[4, 3]), 4), None);
        assert_eq!(layout_problem(&[10, 3], Some(&[u64::MAX, 3]), Some(&[1, 1]), 8), None);
        // Chunks may be larger than the dataset (a dataset that was never extended).
        assert_eq!(layout_problem(&[2, 3], None, Some(&[1024, 3]), 4), None);
    }

    #[test]
    fn corrupted_layouts_are_named() {
        let p = layout_problem(&[16711692, 3], Some(&[12, 3]), Some(&[4, 3]), 4).unwrap();
        assert!(p.contains("dimension 0 is 16711692 but its maximum is 12"), "{p}");
        assert!(layout_problem(&[10, 3], Some(&[10]), None, 4).unwrap().contains("maximum dimensions"));
        assert!(layout_problem(&[10, 3], None, Some(&[0, 3]), 4).unwrap().contains("no values"));
        assert!(layout_problem(&[10, 3], None, Some(&[4]), 4).unwrap().contains("chunks of"));
        assert!(layout_problem(&[10, 3], None, Some(&[1 << 20, 1 << 20]), 4).unwrap().contains("4 GiB"));
        assert!(layout_problem(&[u64::MAX, u64::MAX], None, None, 4).unwrap().contains("overflows"));
        assert!(layout_problem(&[1 << 62, 8], None, None, 4).unwrap().contains("more than any file"));
        assert!(layout_problem(&[10], None, None, 4).unwrap().contains("expected 2-D"));
        assert!(layout_problem(&[10, 3], None, None, 0).unwrap().contains("bytes"));
    }

    #[test]
    fn public_check_never_panics_on_extremes() {
        for shape in [&[][..], &[0, 0], &[u64::MAX; 2], &[u64::MAX; 9]] {
            for elem in [0, 1, 4, u64::MAX] {
                let _ = check_hdf5_layout(shape, Some(shape), Some(shape), elem);
                let _ = check_hdf5_layout(shape, None, None, elem);
            }
        }
    }
}
