//! Lists of blocks of rows that the memory budget does not hold: each block's parts are
//! appended to a file of its own in the scratch directory, and read back, one part at a
//! time, when the block's rows are finished. The files are removed when read, when the run
//! ends, and (named as partial outputs are) by the next run in the directory if this one was
//! killed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::lists::Part;
use crate::error::{Error, Result};
use crate::io::Partial;

/// The spilled parts of each block of rows.
pub(crate) struct Spill {
    /// The files' common name, `DIR/knng-spill-RUN`.
    path: PathBuf,
    kc: usize,
    files: HashMap<usize, Partial>,
    /// Bytes written, for the run's statistics.
    pub written: u64,
}

impl Spill {
    /// Spills lists of `kc` into `dir`, which must exist.
    pub fn new(dir: &Path, kc: usize) -> Self {
        Spill { path: unique(dir, "knng-spill"), kc, files: HashMap::new(), written: 0 }
    }

    /// Appends `part`, lists of rows of block `block`.
    pub fn put(&mut self, block: usize, part: &Part) -> Result<()> {
        let file = match self.files.entry(block) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Partial::scratch(&self.path, &format!("rows-{block}"))?)
            }
        };
        let mut bytes = Vec::new();
        part.encode(&mut bytes);
        file.fill(|w| w.write_all(&(bytes.len() as u64).to_le_bytes()).and_then(|()| w.write_all(&bytes)))?;
        self.written += bytes.len() as u64 + 8;
        Ok(())
    }

    /// Hands every part spilled for block `block` to `each`, then removes its file.
    pub fn take(&mut self, block: usize, mut each: impl FnMut(Part)) -> Result<()> {
        let Some(mut file) = self.files.remove(&block) else { return Ok(()) };
        let path = &self.path;
        let damaged = |why: String| Error::file(path, format!("scratch file damaged ({why}); run again"));
        let mut reader = file.read_back()?;
        let mut length = [0u8; 8];
        let mut bytes = Vec::new();
        loop {
            match reader.read_exact(&mut length) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(Error::io(path, e)),
            }
            bytes.resize(u64::from_le_bytes(length) as usize, 0);
            reader.read_exact(&mut bytes).map_err(|e| Error::io(path, e))?;
            let mut at = 0;
            let mut take = |len: usize| {
                let piece = bytes.get(at..at + len).ok_or_else(|| "a part shorter than its lists".to_string());
                at += len;
                piece
            };
            each(Part::decode(self.kc, &mut take).map_err(damaged)?);
        }
        Ok(())
    }
}

/// Checks that `dir` is a directory that accepts files, before any work is done.
pub(crate) fn check_scratch(dir: &Path) -> Result<()> {
    Partial::scratch(&unique(dir, "knng-scratch"), "probe").map(drop)
}

/// `DIR/NAME-N`, N counting the calls: runs of one process may share a directory.
fn unique(dir: &Path, name: &str) -> PathBuf {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    dir.join(format!("{name}-{}", CALLS.fetch_add(1, Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn part(first: usize, rows: usize, key: f32) -> Part {
        let mut p = Part::empty(first, rows, 2);
        p.keys[0] = key;
        p.ids[0] = 5;
        p
    }

    #[test]
    fn spilled_parts_come_back_once_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::new(dir.path(), 2);
        spill.put(3, &part(0, 4, 1.0)).unwrap();
        spill.put(1, &part(0, 2, 2.0)).unwrap();
        spill.put(3, &part(0, 4, 3.0)).unwrap();
        let mut back = Vec::new();
        spill.take(3, |p| back.push(p)).unwrap();
        assert_eq!(back, [part(0, 4, 1.0), part(0, 4, 3.0)]);
        spill.take(3, |_| panic!("taken twice")).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "block 1's file is still there");
        drop(spill);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "spill files outlived the run");
    }

    #[test]
    fn a_missing_scratch_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        let message = check_scratch(&missing).unwrap_err().to_string();
        assert!(message.contains("nowhere"), "{message}");
    }
}
