//! A directory that records each finished block of a partitioned graph, so that a run killed
//! at any moment resumes where it stopped and gives the same answer.
//!
//! `knng-checkpoint.txt` names what the blocks belong to (the data's shape and fingerprint,
//! k, metric, the block plan); a run with anything else is refused, naming what differs. Each
//! block is one file `block-I-J.bin`: a header, the lists of its rows, and an xxh3 checksum
//! of everything before it, written to a temporary name, synced, and renamed, so that a file
//! under its final name is whole. A file that fails its checks is reported, never used.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use super::blocks::{BlockPlan, Job};
use super::lists::Part;
use crate::data::MatrixRef;
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::refine::NONE;

const MANIFEST: &str = "knng-checkpoint.txt";
const FIRST_LINE: &str = "knng checkpoint 1";
const BLOCK_MAGIC: &[u8; 8] = b"KNNGBLK1";

/// What a checkpoint's blocks were computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    entries: Vec<(&'static str, String)>,
}

impl Manifest {
    pub fn new(data: MatrixRef<'_>, k: usize, metric: Metric, include_self: bool, plan: BlockPlan) -> Self {
        let entries = vec![
            ("rows", data.rows().to_string()),
            ("cols", data.cols().to_string()),
            ("data", format!("{:016x}", crate::io::checksum(bytemuck::cast_slice(data.as_slice())))),
            ("k", k.to_string()),
            ("metric", metric.name().to_string()),
            ("include_self", include_self.to_string()),
            ("block_rows", plan.rows.to_string()),
        ];
        Manifest { entries }
    }

    fn text(&self) -> String {
        let mut text = format!("{FIRST_LINE}\n");
        for (key, value) in &self.entries {
            text += &format!("{key} = {value}\n");
        }
        text
    }

    /// What differs between the manifest written as `text` and this one, or why `text` is
    /// not a manifest.
    fn differences(&self, text: &str) -> std::result::Result<Vec<String>, String> {
        let mut lines = text.lines();
        if lines.next() != Some(FIRST_LINE) {
            return Err(format!("its first line is not {FIRST_LINE:?}"));
        }
        let theirs: Vec<(&str, &str)> = lines
            .map(|line| line.split_once(" = ").ok_or_else(|| format!("line {line:?} is not `key = value`")))
            .collect::<std::result::Result<_, _>>()?;
        let mut differ = Vec::new();
        for (key, ours) in &self.entries {
            match theirs.iter().find(|(k, _)| k == key) {
                None => return Err(format!("it has no {key}")),
                Some((_, there)) if there != ours => differ.push(if *key == "data" {
                    format!("the data differ (fingerprint {there} there, {ours} here)")
                } else {
                    format!("{key} is {there} there and {ours} here")
                }),
                Some(_) => {}
            }
        }
        Ok(differ)
    }
}

/// An open checkpoint directory.
pub(crate) struct Checkpoint {
    dir: PathBuf,
    /// Ties each block file to its manifest.
    id: u64,
    plan: BlockPlan,
}

impl Checkpoint {
    /// Opens `dir` for `manifest`, creating it where it does not exist; refuses a checkpoint
    /// of other inputs or arguments.
    pub fn open(dir: &Path, manifest: &Manifest, plan: BlockPlan) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join(MANIFEST);
        let text = manifest.text();
        match fs::read_to_string(&path) {
            Ok(existing) => match manifest.differences(&existing) {
                Ok(differ) if differ.is_empty() => {}
                Ok(differ) => {
                    return Err(Error::file(
                        dir,
                        format!(
                            "this checkpoint was made for other inputs or arguments: {}; resume with those, or \
                             give another --checkpoint directory (or delete this one) to start over",
                            differ.join("; ")
                        ),
                    ))
                }
                Err(why) => {
                    return Err(Error::file(
                        &path,
                        format!("not a knng checkpoint manifest ({why}); delete it to start over"),
                    ))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if block_files(dir)?.next().is_some() {
                    return Err(Error::file(
                        dir,
                        format!("holds block files but no {MANIFEST}; delete them or give another directory"),
                    ));
                }
                write_durably(dir, MANIFEST, text.as_bytes())?;
            }
            Err(e) => return Err(Error::io(&path, e)),
        }
        Ok(Checkpoint { dir: dir.to_path_buf(), id: xxh3_64(text.as_bytes()), plan })
    }

    /// The indices of the jobs of `jobs` recorded as finished.
    pub fn finished(&self, jobs: &[Job]) -> Vec<usize> {
        (0..jobs.len()).filter(|&i| self.dir.join(file_name(jobs[i])).is_file()).collect()
    }

    /// The lists recorded for `job`. A damaged file is an error that names it.
    pub fn load(&self, job: Job, kc: usize) -> Result<Vec<Part>> {
        let path = self.dir.join(file_name(job));
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        self.decode(job, kc, &bytes).map_err(|why| {
            Error::file(&path, format!("damaged checkpoint block ({why}); delete the file to compute the block again"))
        })
    }

    /// Records `job`'s lists durably.
    pub fn record(&self, job: Job, kc: usize, parts: &[Part]) -> Result<()> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(BLOCK_MAGIC);
        bytes.extend_from_slice(&self.id.to_le_bytes());
        let (i, j) = block_pair(job);
        for v in [i as u32, j as u32, kc as u32, parts.len() as u32] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        parts.iter().for_each(|p| p.encode(&mut bytes));
        let sum = xxh3_64(&bytes);
        bytes.extend_from_slice(&sum.to_le_bytes());
        write_durably(&self.dir, &file_name(job), &bytes)
    }

    fn decode(&self, job: Job, kc: usize, bytes: &[u8]) -> std::result::Result<Vec<Part>, String> {
        let Some(body_len) = bytes.len().checked_sub(8).filter(|&l| l >= 32) else {
            return Err(format!("{} bytes, too short", bytes.len()));
        };
        let (body, sum) = bytes.split_at(body_len);
        if xxh3_64(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes")) {
            return Err("checksum mismatch: truncated or overwritten".into());
        }
        let mut at = 0;
        let mut take = |len: usize| -> std::result::Result<&[u8], String> {
            let piece = body.get(at..at + len).ok_or("shorter than its header says")?;
            at += len;
            Ok(piece)
        };
        if take(8)? != BLOCK_MAGIC {
            return Err("not a knng checkpoint block".into());
        }
        let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
        let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        if u64_at(take(8)?) != self.id {
            return Err(format!("written for another {MANIFEST}"));
        }
        let (i, j) = block_pair(job);
        let header = [u32_at(take(4)?), u32_at(take(4)?), u32_at(take(4)?), u32_at(take(4)?)];
        let expected_ranges: Vec<std::ops::Range<usize>> =
            if i == j { vec![self.plan.range(i)] } else { vec![self.plan.range(i), self.plan.range(j)] };
        if header != [i, j, kc, expected_ranges.len()] {
            return Err(format!("its header {header:?} does not describe block ({i}, {j}) with lists of {kc}"));
        }
        let mut parts = Vec::new();
        for range in expected_ranges {
            let part = Part::decode(kc, &mut take)?;
            if part.first != range.start || part.rows != range.len() {
                return Err(format!("rows {}.. ({}) where rows {range:?} were expected", part.first, part.rows));
            }
            if let Some(bad) = part.ids.iter().find(|&&id| id != NONE && id as usize >= self.plan.n) {
                return Err(format!("row id {bad} beyond the data's {} rows", self.plan.n));
            }
            parts.push(part);
        }
        if at != body.len() {
            return Err(format!("{} bytes after the last list", body.len() - at));
        }
        Ok(parts)
    }
}

fn block_pair(job: Job) -> (usize, usize) {
    match job {
        Job::Diagonal(i) => (i, i),
        Job::Pair(i, j) => (i, j),
    }
}

fn file_name(job: Job) -> String {
    let (i, j) = block_pair(job);
    format!("block-{i}-{j}.bin")
}

fn block_files(dir: &Path) -> Result<impl Iterator<Item = PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    Ok(entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.starts_with("block-") && name.ends_with(".bin")
    }))
}

/// Removes the checkpoint in `dir` of a finished graph ([`Options::checkpoint`](crate::Options::checkpoint)):
/// its manifest and block files, those of the ranks of a cluster in their directories
/// (`rank-R-of-N`), and the directories when nothing else is left in them.
pub fn remove(dir: &Path) -> Result<()> {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.path().is_dir() && name.starts_with("rank-") && name.contains("-of-") {
                remove_one(&entry.path())?;
            }
        }
    }
    remove_one(dir)
}

fn remove_one(dir: &Path) -> Result<()> {
    // Files that a run killed while it wrote them left half-written (`write_durably`).
    let unfinished: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(".partial-")))
                .collect()
        })
        .unwrap_or_default();
    for path in block_files(dir)?.chain([dir.join(MANIFEST)]).chain(unfinished) {
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(&path, e)),
            _ => {}
        }
    }
    let _ = fs::remove_dir(dir);
    Ok(())
}

/// Writes `name` in `dir` whole or not at all: a temporary file, synced, renamed, and the
/// directory synced so that the rename survives a crash.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let temporary = dir.join(format!("{name}.partial-{}", std::process::id()));
    let path = dir.join(name);
    let result = (|| {
        let mut file = fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, &path)?;
        fs::File::open(dir)?.sync_all()
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&temporary);
        Error::io(&path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Matrix;

    fn setup(dir: &Path, k: usize) -> (Checkpoint, Vec<Job>) {
        let data = Matrix::new((0..40).map(|v| v as f32).collect(), 20, 2).unwrap();
        let plan = BlockPlan::new(20, 8);
        let manifest = Manifest::new(data.view(), k, Metric::Euclidean, false, plan);
        (Checkpoint::open(dir, &manifest, plan).unwrap(), plan.graph_jobs())
    }

    fn lists(plan: BlockPlan, job: Job, kc: usize) -> Vec<Part> {
        let (i, j) = block_pair(job);
        let ranges = if i == j { vec![plan.range(i)] } else { vec![plan.range(i), plan.range(j)] };
        ranges
            .into_iter()
            .map(|r| {
                let mut p = Part::empty(r.start, r.len(), kc);
                p.keys[0] = 1.5;
                p.ids[0] = 3;
                p.flags[0] = 2;
                p.exact = (r.start == 0).then(|| vec![0.25; r.len() * kc]);
                p
            })
            .collect()
    }

    #[test]
    fn recorded_blocks_come_back_and_damaged_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (c, jobs) = setup(dir.path(), 4);
        assert!(c.finished(&jobs).is_empty());
        let recorded = lists(c.plan, jobs[1], 5);
        c.record(jobs[1], 5, &recorded).unwrap();
        let (c, _) = setup(dir.path(), 4);
        assert_eq!(c.finished(&jobs), [1]);
        assert_eq!(c.load(jobs[1], 5).unwrap(), recorded);

        let path = dir.path().join(file_name(jobs[1]));
        let bytes = fs::read(&path).unwrap();
        for damaged in [bytes[..bytes.len() - 3].to_vec(), {
            let mut b = bytes.clone();
            b[40] ^= 1;
            b
        }] {
            fs::write(&path, damaged).unwrap();
            let message = c.load(jobs[1], 5).unwrap_err().to_string();
            let name = file_name(jobs[1]);
            assert!(message.contains(&name) && message.contains("damaged checkpoint block"), "{message}");
        }
    }

    #[test]
    fn removal_takes_the_ranks_parts_and_files_left_half_written() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let rank = dir.join("rank-1-of-2");
        let (c, jobs) = setup(&rank, 4);
        c.record(jobs[0], 5, &lists(c.plan, jobs[0], 5)).unwrap();
        // As a run killed in `write_durably` leaves them.
        fs::write(rank.join(format!("{}.partial-77", file_name(jobs[1]))), b"half").unwrap();
        fs::write(dir.join(format!("{MANIFEST}.partial-78")), b"half").unwrap();
        remove(&dir).unwrap();
        assert!(
            !dir.exists(),
            "left: {:?}",
            fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        );
    }

    #[test]
    fn a_checkpoint_of_other_arguments_is_refused_naming_the_difference() {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path(), 4);
        let data = Matrix::new((0..40).map(|v| v as f32).collect(), 20, 2).unwrap();
        let plan = BlockPlan::new(20, 8);
        let other = Manifest::new(data.view(), 5, Metric::Euclidean, false, plan);
        let message = Checkpoint::open(dir.path(), &other, plan).err().unwrap().to_string();
        assert!(message.contains("k is 4 there and 5 here"), "{message}");
        let changed = Matrix::new((1..41).map(|v| v as f32).collect(), 20, 2).unwrap();
        let other = Manifest::new(changed.view(), 4, Metric::Euclidean, false, plan);
        let message = Checkpoint::open(dir.path(), &other, plan).err().unwrap().to_string();
        assert!(message.contains("the data differ"), "{message}");
    }
}
