//! Replays the checked-in fuzz inputs on the stable toolchain, through the same code the fuzz
//! targets run (`fuzz/common/harness.rs`, included below):
//!
//! - every file of `fuzz/seeds/TARGET/` (the minimised corpus) must go through without a
//!   panic;
//! - every file of `fuzz/regressions/TARGET/` (an input that once crashed a target) must give
//!   the outcome that `fuzz/regressions/EXPECTED` lists for it.
//!
//! Fuzzing itself is `fuzz/run.sh` (nightly); see `fuzz/README.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "../fuzz/common/harness.rs"]
mod harness;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `dir`, by name; dot files (`.gitkeep`) are not inputs.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    files
}

/// What one input gave, as `EXPECTED` writes it: `ok`, `err` (and the message) or `short`
/// (too short to pick an extension, so nothing was read).
fn replay(target: &str, data: &[u8]) -> (&'static str, String) {
    let outcome = if target == "hdf5_layout" {
        harness::run_hdf5_layout(data).map(|()| String::new())
    } else if target == "index" {
        harness::run_index(data).map(|(rows, cols)| format!("{rows} x {cols}"))
    } else {
        match harness::run_file_target(target, data) {
            None => return ("short", String::new()),
            Some(o) => o.map(|(rows, cols)| format!("{rows} x {cols}")),
        }
    };
    match outcome {
        Ok(shape) => ("ok", shape),
        Err(msg) => ("err", msg),
    }
}

#[test]
fn seeds_replay_without_panics() {
    let mut total = 0;
    for &target in harness::TARGETS {
        let dir = fuzz_dir().join("seeds").join(target);
        assert!(dir.is_dir(), "{} is missing: the minimised corpus of {target} must be checked in", dir.display());
        let files = inputs(&dir);
        assert!(!files.is_empty(), "{} holds no inputs", dir.display());
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for path in &files {
            let data = std::fs::read(path).unwrap();
            let (kind, _) = replay(target, &data);
            *counts.entry(kind).or_default() += 1;
        }
        eprintln!("{target}: {} seeds replayed: {counts:?}", files.len());
        // A corpus of nothing but broken inputs would fuzz only the error paths.
        if target != "hdf5_layout" {
            assert!(counts.contains_key("ok"), "no seed of {target} reads as a matrix");
        }
        assert!(counts.contains_key("err"), "no seed of {target} is refused");
        total += files.len();
    }
    assert!(total > 0);
}

/// `fuzz/regressions/EXPECTED`: one line per input, `TARGET/FILE ok`, `TARGET/FILE short` or
/// `TARGET/FILE err TEXT` where TEXT must appear in the error; `#` starts a comment.
fn expectations() -> BTreeMap<String, (String, String)> {
    let path = fuzz_dir().join("regressions").join("EXPECTED");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, char::is_whitespace);
        let name = parts.next().unwrap().to_string();
        let kind = parts.next().unwrap_or_else(|| panic!("EXPECTED line {}: no outcome", n + 1)).to_string();
        let text = parts.next().unwrap_or("").trim().to_string();
        assert!(["ok", "err", "short"].contains(&kind.as_str()), "EXPECTED line {}: outcome {kind:?}", n + 1);
        assert!(out.insert(name.clone(), (kind, text)).is_none(), "EXPECTED lists {name} twice");
    }
    out
}

#[test]
fn regressions_give_their_expected_outcome() {
    let mut expected = expectations();
    assert!(!expected.is_empty(), "fuzz/regressions/EXPECTED lists no input");
    let mut replayed = 0;
    for &target in harness::TARGETS {
        let dir = fuzz_dir().join("regressions").join(target);
        if !dir.is_dir() {
            continue;
        }
        for path in inputs(&dir) {
            let name = format!("{target}/{}", path.file_name().unwrap().to_string_lossy());
            let (kind, text) =
                expected.remove(&name).unwrap_or_else(|| panic!("{name} is not listed in fuzz/regressions/EXPECTED"));
            let data = std::fs::read(&path).unwrap();
            let (got, detail) = replay(target, &data);
            assert_eq!(got, kind, "{name}: {detail}");
            assert!(detail.contains(&text), "{name}: expected {text:?} in {detail:?}");
            replayed += 1;
        }
    }
    assert!(expected.is_empty(), "EXPECTED lists inputs that are not there: {:?}", expected.keys());
    eprintln!("{replayed} regression inputs replayed");
}
