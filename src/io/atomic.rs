//! Outputs appear whole or not at all: each is written to a partial file beside its
//! destination and renamed over it once complete (a rename within one directory is atomic).
//!
//! Partial files are named `NAME.knng-partial-PID` (a scratch file that holds part of an
//! output until it is copied in, `NAME.PART.knng-partial-PID`), so that a user who sees one
//! knows what it is. They are removed when a write fails or is dropped unfinished, by
//! [`remove_partial_outputs`] (which the CLI calls on SIGINT and SIGTERM), and, if a process
//! died without either, by the next write to the same directory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};

pub(crate) type Sink = BufWriter<File>;

const PARTIAL: &str = ".knng-partial-";

/// Partial files this process has open, for [`remove_partial_outputs`]; `None` once that
/// has run, after which no output is created or moved into place.
static OPEN_PARTIALS: Mutex<Option<Vec<PathBuf>>> = Mutex::new(Some(Vec::new()));

/// Removes every partial output file this process is writing, and makes every later
/// attempt to create or finish an output fail. For signal handlers: a run interrupted by
/// Ctrl-C leaves nothing behind, even where its other threads go on working while the process
/// exits (an MPI library's exit handlers can take a second).
pub fn remove_partial_outputs() {
    let paths = OPEN_PARTIALS.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
    for path in paths {
        let _ = fs::remove_file(path);
    }
}

fn interrupted(dest: &Path) -> Error {
    Error::file(dest, "interrupted; the output is not written")
}

/// A partial file that is deleted unless it is moved into place.
struct Temp {
    path: PathBuf,
    kept: bool,
}

impl Temp {
    fn create(dest: &Path) -> Result<(Temp, Sink)> {
        Temp::create_part(dest, "", 1 << 20)
    }

    /// Creates `NAME{part}.knng-partial-PID`, written through a buffer of `buffer` bytes;
    /// `part` tells apart several partial files of one output.
    fn create_part(dest: &Path, part: &str, buffer: usize) -> Result<(Temp, Sink)> {
        let dir = directory_of(dest);
        remove_stale_partials(&dir);
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let path = dir.join(format!("{name}{part}{PARTIAL}{}", std::process::id()));
        let mut registry = OPEN_PARTIALS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(registry) = registry.as_mut() else { return Err(interrupted(dest)) };
        // Readable too, for scratch files that are copied into the output at the end.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::file(dest, format!("cannot create the output file: {e}")))?;
        registry.push(path.clone());
        Ok((Temp { path, kept: false }, BufWriter::with_capacity(buffer, file)))
    }

    fn persist(mut self, dest: &Path) -> Result<()> {
        // Under the registry's lock, so that an interruption either comes first and the
        // output is not moved, or comes after it is in place.
        let registry = OPEN_PARTIALS.lock().unwrap_or_else(|e| e.into_inner());
        let moved = match registry.is_some() {
            true => fs::rename(&self.path, dest)
                .map_err(|e| Error::file(dest, format!("cannot move the finished output into place: {e}"))),
            false => Err(interrupted(dest)),
        };
        // Released before `self` is dropped, which takes the lock again.
        drop(registry);
        self.kept = moved.is_ok();
        moved
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(registry) = OPEN_PARTIALS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            registry.retain(|p| p != &self.path);
        }
        if !self.kept {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Removes partial files in `dir` left by processes that no longer run (killed with SIGKILL,
/// or by a power cut). Where liveness cannot be told (no `/proc`), nothing is removed.
fn remove_stale_partials(dir: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.rsplit_once(PARTIAL)).map(|(_, pid)| pid) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

pub(crate) fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `dest` through `fill`; on any error nothing is left behind.
pub(crate) fn write(dest: &Path, fill: impl FnOnce(&mut Sink) -> io::Result<()>) -> Result<()> {
    let mut out = Partial::create(dest)?;
    out.fill(fill)?;
    out.persist()
}

/// An output file being written row by row: a partial file beside `dest`, deleted when
/// dropped unless [`Partial::persist`] moved it into place. Its I/O errors name `dest`.
pub(crate) struct Partial {
    // Declared before `temp` so that the file is closed before it is removed.
    sink: Sink,
    temp: Temp,
    dest: PathBuf,
}

impl Partial {
    pub(crate) fn create(dest: &Path) -> Result<Partial> {
        let (temp, sink) = Temp::create(dest)?;
        Ok(Partial { sink, temp, dest: dest.to_path_buf() })
    }

    /// A scratch file that holds part of `dest` until it is copied in (see
    /// [`Partial::read_back`]), named `NAME.PART.knng-partial-PID`; it is never moved into
    /// place. Its buffer is small: a run may keep many open, and their writes are large.
    pub(crate) fn scratch(dest: &Path, part: &str) -> Result<Partial> {
        let (temp, sink) = Temp::create_part(dest, &format!(".{part}"), 64 << 10)?;
        Ok(Partial { sink, temp, dest: dest.to_path_buf() })
    }

    pub(crate) fn sink(&mut self) -> &mut Sink {
        &mut self.sink
    }

    /// Writes through `fill`, naming `dest` in an error.
    pub(crate) fn fill(&mut self, fill: impl FnOnce(&mut Sink) -> io::Result<()>) -> Result<()> {
        fill(&mut self.sink).map_err(|e| Error::io(&self.dest, e))
    }

    /// The file itself, for reads and writes at chosen offsets (`FileExt`), with what was
    /// written through the buffer flushed; errors of such I/O should name [`Partial::dest`].
    pub(crate) fn file(&mut self) -> Result<&File> {
        self.sink.flush().map_err(|e| Error::io(&self.dest, e))?;
        Ok(self.sink.get_ref())
    }

    /// The path the file stands for, for error messages.
    pub(crate) fn dest(&self) -> &Path {
        &self.dest
    }

    /// Everything written so far, read from the start.
    pub(crate) fn read_back(&mut self) -> Result<BufReader<&File>> {
        self.sink.flush().map_err(|e| Error::io(&self.dest, e))?;
        let mut file = self.sink.get_ref();
        file.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&self.dest, e))?;
        Ok(BufReader::with_capacity(1 << 20, file))
    }

    /// Flushes the file and moves it into place. It is not synced: an output can be computed
    /// again, and waiting for the disk to take a graph of many GB can take longer than the
    /// graph did (the operating system writes it back; a checkpoint, which must survive a
    /// crash, is synced by `partition::checkpoint`).
    pub(crate) fn persist(mut self) -> Result<()> {
        self.flush()?;
        self.temp.persist(&self.dest)
    }

    fn flush(&mut self) -> Result<()> {
        self.sink.flush().map_err(|e| Error::io(&self.dest, e))
    }
}

/// Moves two files that belong together into place: both are flushed before either is moved.
pub(crate) fn persist_pair(mut first: Partial, mut second: Partial) -> Result<()> {
    first.flush()?;
    second.flush()?;
    second.temp.persist(&second.dest)?;
    first.temp.persist(&first.dest).inspect_err(|_| {
        // Half a pair would be read as a complete result.
        let _ = fs::remove_file(&second.dest);
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

/// True when `a` and `b` name the same file: the same path, a symbolic link to it, or a hard
/// link (the same device and inode). A path that does not exist is no other file.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) else { return false };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registered for `remove_partial_outputs`, which ends every later write of the process
    /// and so is tested from outside (an interrupted `knng`: tests/first_contact.rs).
    #[test]
    fn partial_files_are_named_and_registered_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("g.npz");
        let (temp, _sink) = Temp::create(&dest).unwrap();
        let expected = dir.path().join(format!("g.npz.knng-partial-{}", std::process::id()));
        assert_eq!(temp.path, expected);
        assert!(expected.exists());
        assert!(OPEN_PARTIALS.lock().unwrap().as_ref().unwrap().contains(&expected));
        drop(temp);
        assert!(!expected.exists());
        assert!(!OPEN_PARTIALS.lock().unwrap().as_ref().unwrap().contains(&expected));
    }

    #[test]
    fn scratch_files_are_named_registered_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("g.npz");
        let mut scratch = Partial::scratch(&dest, "distances").unwrap();
        let expected = dir.path().join(format!("g.npz.distances.knng-partial-{}", std::process::id()));
        assert_eq!(scratch.temp.path, expected);
        assert!(OPEN_PARTIALS.lock().unwrap().as_ref().unwrap().contains(&expected));
        scratch.fill(|w| w.write_all(b"first ")).unwrap();
        scratch.fill(|w| w.write_all(b"second")).unwrap();
        let mut back = String::new();
        io::Read::read_to_string(&mut scratch.read_back().unwrap(), &mut back).unwrap();
        assert_eq!(back, "first second");
        drop(scratch);
        assert!(!expected.exists());
        assert!(!OPEN_PARTIALS.lock().unwrap().as_ref().unwrap().contains(&expected));
    }

    #[test]
    fn stale_partials_of_dead_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        // No process has a pid this large (Linux allows at most 2^22).
        let stale = dir.path().join("g.npz.knng-partial-4294967294");
        let alive = dir.path().join(format!("h.npz.knng-partial-{}", std::process::id()));
        let unrelated = dir.path().join("notes.knng-partial-abc");
        for p in [&stale, &alive, &unrelated] {
            fs::write(p, b"x").unwrap();
        }
        write(&dir.path().join("out.csv"), |w| w.write_all(b"1\n")).unwrap();
        assert!(!stale.exists());
        assert!(alive.exists() && unrelated.exists());
    }

    #[test]
    fn same_file_sees_links() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.fvecs");
        fs::write(&a, b"x").unwrap();
        let hard = dir.path().join("hard.fvecs");
        fs::hard_link(&a, &hard).unwrap();
        assert!(same_file(&a, &hard));
        #[cfg(unix)]
        {
            let soft = dir.path().join("soft.fvecs");
            std::os::unix::fs::symlink(&a, &soft).unwrap();
            assert!(same_file(&soft, &a));
        }
        assert!(same_file(&a, &dir.path().join(".").join("a.fvecs")));
        assert!(!same_file(&a, &dir.path().join("absent.fvecs")));
    }
}
