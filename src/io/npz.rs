//! Neighbour lists as a NumPy `.npz` archive, as `numpy.savez` writes it (entries stored
//! uncompressed, so `numpy.load(..., mmap_mode=...)`-style readers and fast loading work).

use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use npyz::zip::{self, write::FileOptions, CompressionMethod, ZipWriter};

use super::atomic::Partial;
use super::npy::{header, write_values};
use crate::error::{Error, Result};

/// An `.npz` of `queries x k` neighbours written row by row: indices go straight into the
/// archive's first entry, distances into a scratch file beside it that is copied into the
/// second entry at the end (an archive's entries follow one another, and a graph may not
/// fit in memory). Rows that all come in one call (an answer held whole) write both entries
/// at once, with no scratch file.
pub(crate) struct Writer {
    path: PathBuf,
    zip: ZipWriter<Archive>,
    /// The distances so far, once rows came in parts.
    scratch: Option<Partial>,
    /// The distances' entry is written.
    distances_written: bool,
    abandoned: Arc<AtomicBool>,
    shape: [usize; 2],
    entry_bytes: u64,
    values_written: u64,
}

impl Writer {
    pub(crate) fn create(path: &Path, queries: usize, k: usize) -> Result<Writer> {
        let abandoned = Arc::new(AtomicBool::new(false));
        let archive = Archive { file: Partial::create(path)?, abandoned: abandoned.clone(), position: 0 };
        let mut writer = Writer {
            path: path.to_path_buf(),
            zip: ZipWriter::new(archive),
            scratch: None,
            distances_written: false,
            abandoned,
            shape: [queries, k],
            entry_bytes: (queries as u64).saturating_mul(k as u64),
            values_written: 0,
        };
        writer.start_entry("indices.npy", 8)?;
        writer.zip.write_all(&header("<i8", &writer.shape)).map_err(|e| Error::io(path, e))?;
        Ok(writer)
    }

    pub(crate) fn write_rows(&mut self, indices: &[u32], distances: &[f32]) -> Result<()> {
        write_widened(&mut self.zip, indices).map_err(|e| Error::io(&self.path, e))?;
        let every_row = self.values_written == 0 && indices.len() as u64 == self.entry_bytes;
        self.values_written += indices.len() as u64;
        if every_row {
            self.start_distances()?;
            write_floats(&mut self.zip, distances).map_err(|e| Error::io(&self.path, e))?;
            self.distances_written = true;
            return Ok(());
        }
        let scratch = match &mut self.scratch {
            Some(scratch) => scratch,
            None => {
                let mut scratch = Partial::scratch(&self.path, "distances")?;
                scratch.fill(|w| w.write_all(&header("<f4", &self.shape)))?;
                self.scratch.insert(scratch)
            }
        };
        scratch.fill(|w| write_floats(w, distances))
    }

    /// Writes the distances' entry where rows came in parts (copied from the scratch file),
    /// closes the archive and moves it into place.
    pub(crate) fn finish(mut self) -> Result<()> {
        crate::trace::mark(|| "npz: indices written".to_string());
        if !self.distances_written {
            match self.scratch.take() {
                Some(mut scratch) => {
                    self.start_entry("distances.npy", 4)?;
                    io::copy(&mut scratch.read_back()?, &mut self.zip).map_err(|e| Error::io(&self.path, e))?;
                }
                None => self.start_distances()?,
            }
        }
        let archive = self.zip.finish().map_err(|e| Error::io(&self.path, zip_error(e)))?;
        crate::trace::mark(|| "npz: distances written".to_string());
        archive.file.persist()
    }

    /// Starts the distances' entry with its header.
    fn start_distances(&mut self) -> Result<()> {
        self.start_entry("distances.npy", 4)?;
        self.zip.write_all(&header("<f4", &self.shape)).map_err(|e| Error::io(&self.path, e))
    }

    /// Starts an entry of `entry_bytes` values of `size` bytes each (stored, as
    /// `numpy.savez` does), zip64 where it needs it.
    fn start_entry(&mut self, name: &str, size: u64) -> Result<()> {
        let bytes = self.entry_bytes.saturating_mul(size);
        // Entries dated the zip epoch, not the time of writing: the same graph gives the same
        // bytes (a resumed run, a run on other devices).
        let options = FileOptions::default()
            .last_modified_time(zip::DateTime::default())
            .compression_method(CompressionMethod::Stored)
            .large_file(bytes >= u32::MAX as u64 - 4096);
        self.zip.start_file(name, options).map_err(|e| Error::io(&self.path, zip_error(e)))
    }
}

impl Drop for Writer {
    /// The zip writer's own `Drop` finishes an unfinished archive; an abandoned one (after an
    /// error, or dropped unfinished) is about to be deleted, and after a failed write (a full
    /// disk) that attempt would fail again and print its debug text to stderr.
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }
}

/// The archive's partial file. Once the writer is abandoned, bytes are counted but not
/// written and seeks only move the count, so that the zip writer's `Drop` completes without
/// touching the file.
struct Archive {
    file: Partial,
    abandoned: Arc<AtomicBool>,
    position: u64,
}

impl Write for Archive {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = if self.abandoned.load(Ordering::Relaxed) { buf.len() } else { self.file.sink().write(buf)? };
        self.position += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.abandoned.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.file.sink().flush()
    }
}

impl Seek for Archive {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.position = match (self.abandoned.load(Ordering::Relaxed), pos) {
            (false, pos) => self.file.sink().seek(pos)?,
            (true, SeekFrom::Start(at)) => at,
            (true, SeekFrom::Current(by)) => self.position.saturating_add_signed(by),
            // The zip writer never seeks from the end of what it writes.
            (true, SeekFrom::End(_)) => return Err(io::Error::other("the archive was abandoned")),
        };
        Ok(self.position)
    }
}

/// Writes `distances` as little-endian float32.
fn write_floats(w: &mut impl Write, distances: &[f32]) -> io::Result<()> {
    match cfg!(target_endian = "little") {
        true => w.write_all(bytemuck::cast_slice(distances)),
        false => write_values(w, distances, f32::to_le_bytes),
    }
}

/// Values a part of [`write_widened`] converts at once.
const WIDEN_PART: usize = 1 << 16;

/// Writes `indices` as little-endian int64, converted on every thread a few MB at a time
/// (one thread converts more slowly than the archive takes them).
fn write_widened(w: &mut impl Write, indices: &[u32]) -> io::Result<()> {
    use rayon::prelude::*;
    let block = WIDEN_PART * rayon::current_num_threads().max(1);
    let mut bytes = vec![0u8; indices.len().min(block) * 8];
    for values in indices.chunks(block) {
        let out = &mut bytes[..values.len() * 8];
        out.par_chunks_mut(WIDEN_PART * 8).zip(values.par_chunks(WIDEN_PART)).for_each(|(out, values)| {
            for (out, &v) in out.chunks_exact_mut(8).zip(values) {
                out.copy_from_slice(&i64::from(v).to_le_bytes());
            }
        });
        w.write_all(out)?;
    }
    Ok(())
}

fn zip_error(e: zip::result::ZipError) -> io::Error {
    match e {
        zip::result::ZipError::Io(e) => e,
        e => io::Error::other(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::write_neighbors as write;
    use super::*;
    use npyz::npz::NpzArchive;

    #[test]
    fn round_trip_through_npyz() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.npz");
        let nb = sample_neighbors();
        write(&p, &nb, 5).unwrap();
        let mut npz = NpzArchive::open(&p).unwrap();
        let mut names: Vec<_> = npz.array_names().map(String::from).collect();
        names.sort();
        assert_eq!(names, ["distances", "indices"]);
        let idx = npz.by_name("indices").unwrap().unwrap();
        assert_eq!(idx.shape(), &[4, 3]);
        assert_eq!(idx.dtype().descr(), "'<i8'");
        let idx: Vec<i64> = idx.into_vec().unwrap();
        assert_eq!(idx, nb.indices.iter().map(|&i| i as i64).collect::<Vec<_>>());
        let dist = npz.by_name("distances").unwrap().unwrap();
        assert_eq!(dist.shape(), &[4, 3]);
        assert_eq!(dist.into_vec::<f32>().unwrap(), nb.distances);
    }

    /// Rows in parts go through the scratch file; all at once, straight into the archive:
    /// the same bytes either way.
    #[test]
    fn rows_in_parts_and_at_once_give_the_same_archive() {
        let dir = tempfile::tempdir().unwrap();
        let nb = sample_neighbors();
        let (parts, once) = (dir.path().join("parts.npz"), dir.path().join("once.npz"));
        let mut writer = Writer::create(&parts, 4, 3).unwrap();
        writer.write_rows(&nb.indices[..6], &nb.distances[..6]).unwrap();
        writer.write_rows(&nb.indices[6..], &nb.distances[6..]).unwrap();
        assert!(writer.scratch.is_some());
        writer.finish().unwrap();
        let mut writer = Writer::create(&once, 4, 3).unwrap();
        writer.write_rows(&nb.indices, &nb.distances).unwrap();
        assert!(writer.scratch.is_none());
        writer.finish().unwrap();
        assert_eq!(std::fs::read(&parts).unwrap(), std::fs::read(&once).unwrap());
        let names: Vec<_> = dir.path().read_dir().unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn abandoned_archive_closes_without_writing() {
        // The zip writer's `Drop` closes an unfinished archive; once abandoned that must
        // succeed (a failure is printed to stderr) and write nothing to the doomed file.
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Writer::create(&dir.path().join("g.npz"), 4, 3).unwrap();
        writer.write_rows(&[1; 6], &[0.5; 6]).unwrap();
        writer.zip.flush().unwrap();
        let partial = dir.path().join(format!("g.npz.knng-partial-{}", std::process::id()));
        let before = std::fs::metadata(&partial).unwrap().len();
        writer.abandoned.store(true, Ordering::Relaxed);
        let mut archive = writer.zip.finish().unwrap();
        assert!(archive.file.sink().buffer().is_empty());
        assert_eq!(std::fs::metadata(&partial).unwrap().len(), before);
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nodir").join("g.npz");
        assert!(write(&p, &sample_neighbors(), 5).is_err());
        assert!(!p.exists());
    }
}
