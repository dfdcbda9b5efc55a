//! The answers of a whole-data graph on disk: rows are ranked out of order (query tiles
//! first, rows that needed more candidates later) but handed to the caller in order, and
//! the host memory limit may not hold them all. Each row's ids and distances go to their
//! place in a scratch file when ranked and are read back in order at the end.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::Partial;

/// A scratch file of `rows x k` ids followed by `rows x k` distances, removed when dropped.
pub(crate) struct AnswerFile {
    /// Removes the file when dropped.
    _partial: Partial,
    file: File,
    path: PathBuf,
    rows: usize,
    k: usize,
}

impl AnswerFile {
    /// A file in `dir` for `rows` rows of `k` answers.
    pub fn new(dir: &Path, rows: usize, k: usize) -> Result<Self> {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut partial = Partial::scratch(&dir.join(format!("knng-answers-{run}")), "rows")?;
        let path = partial.dest().to_path_buf();
        let file = partial.file()?.try_clone().map_err(|e| Error::io(&path, e))?;
        Ok(AnswerFile { _partial: partial, file, path, rows, k })
    }

    /// Writes rows `first..` (as many as `ids` holds, `k` a row) in their places. May be
    /// called from several threads at once, for different rows.
    pub fn write_rows(&self, first: usize, ids: &[u32], distances: &[f32]) -> Result<()> {
        debug_assert_eq!(ids.len(), distances.len());
        debug_assert!(first * self.k + ids.len() <= self.rows * self.k);
        let at = (first * self.k * 4) as u64;
        let io = |e| Error::io(&self.path, e);
        self.file.write_all_at(bytemuck::cast_slice(ids), at).map_err(io)?;
        self.file.write_all_at(bytemuck::cast_slice(distances), self.distances_at() + at).map_err(io)
    }

    /// Reads rows `first..first + count` into `ids` and `distances` (resized to fit).
    pub fn read_rows(&self, first: usize, count: usize, ids: &mut Vec<u32>, distances: &mut Vec<f32>) -> Result<()> {
        let len = count * self.k;
        ids.resize(len, 0);
        distances.resize(len, 0.0);
        let at = (first * self.k * 4) as u64;
        let io = |e| Error::io(&self.path, e);
        self.file.read_exact_at(bytemuck::cast_slice_mut(ids), at).map_err(io)?;
        self.file.read_exact_at(bytemuck::cast_slice_mut(distances), self.distances_at() + at).map_err(io)
    }

    fn distances_at(&self) -> u64 {
        (self.rows * self.k * 4) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_written_out_of_order_read_back_in_order_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = AnswerFile::new(dir.path(), 5, 2).unwrap();
        file.write_rows(3, &[30, 31, 40, 41], &[3.0, 3.5, 4.0, 4.5]).unwrap();
        file.write_rows(0, &[0, 1, 10, 11, 20, 21], &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5]).unwrap();
        file.write_rows(1, &[12, 13], &[1.25, 1.75]).unwrap();
        let (mut ids, mut distances) = (Vec::new(), Vec::new());
        file.read_rows(1, 3, &mut ids, &mut distances).unwrap();
        assert_eq!(ids, [12, 13, 20, 21, 30, 31]);
        assert_eq!(distances, [1.25, 1.75, 2.0, 2.5, 3.0, 3.5]);
        drop(file);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the scratch file outlived the run");
    }
}
