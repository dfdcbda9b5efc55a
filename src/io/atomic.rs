//! Outputs appear whole or not at all: each is written to a temporary file beside its
//! destination and renamed over it once complete (a rename within one directory is atomic).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

pub(crate) type Sink = BufWriter<File>;

/// A temporary file that is deleted unless it is moved into place.
struct Temp {
    path: PathBuf,
    kept: bool,
}

impl Temp {
    fn create(dest: &Path) -> Result<(Temp, Sink)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = directory_of(dest);
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let path = dir.join(format!(".{name}.{}-{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::file(dest, format!("cannot create the output file: {e}")))?;
        Ok((Temp { path, kept: false }, BufWriter::with_capacity(1 << 20, file)))
    }

    fn finish(&self, sink: Sink, dest: &Path) -> Result<()> {
        let file = sink.into_inner().map_err(|e| Error::io(dest, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(dest, e))
    }

    fn persist(mut self, dest: &Path) -> Result<()> {
        fs::rename(&self.path, dest)
            .map_err(|e| Error::file(dest, format!("cannot move the finished output into place: {e}")))?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.kept {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `dest` through `fill`; on any error nothing is left behind.
pub(crate) fn write(dest: &Path, fill: impl FnOnce(&mut Sink) -> io::Result<()>) -> Result<()> {
    let (temp, mut sink) = Temp::create(dest)?;
    fill(&mut sink).map_err(|e| Error::io(dest, e))?;
    temp.finish(sink, dest)?;
    temp.persist(dest)
}

/// Writes two files that belong together: both are complete before either is moved in.
pub(crate) fn write_pair(
    first: &Path,
    fill_first: impl FnOnce(&mut Sink) -> io::Result<()>,
    second: &Path,
    fill_second: impl FnOnce(&mut Sink) -> io::Result<()>,
) -> Result<()> {
    let (temp1, mut sink1) = Temp::create(first)?;
    fill_first(&mut sink1).map_err(|e| Error::io(first, e))?;
    temp1.finish(sink1, first)?;
    let (temp2, mut sink2) = Temp::create(second)?;
    fill_second(&mut sink2).map_err(|e| Error::io(second, e))?;
    temp2.finish(sink2, second)?;
    temp2.persist(second)?;
    temp1.persist(first).inspect_err(|_| {
        // Half a pair would be read as a complete result.
        let _ = fs::remove_file(second);
    })
}

/// Fails early, before any computation, if `path` could not be written later.
pub(crate) fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::file(path, "is a directory, not an output file"));
    }
    let dir = directory_of(path);
    if !dir.is_dir() {
        let what = if dir.exists() { "is not a directory" } else { "does not exist" };
        return Err(Error::file(path, format!("the output directory {} {what}", dir.display())));
    }
    let (probe, mut sink) = Temp::create(path)?;
    sink.write_all(b"").map_err(|e| Error::io(path, e))?;
    drop(sink);
    drop(probe);
    Ok(())
}
