//! Partitioned graphs from the command line: several devices, checkpoints, kills at random
//! moments, and checkpoints that must be refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use knng::{Matrix, Metric, Neighbors};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn knng() -> Command {
    Command::new(env!("CARGO_BIN_EXE_knng"))
}

fn run(args: &[&str]) -> Output {
    knng().args(args).output().expect("the knng binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn succeeds(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "knng {args:?} failed: {}", stderr(&out));
    stderr(&out)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Gaussian clusters with many near-ties, written as `.fvecs`.
fn write_data(path: &Path, rows: usize, dim: usize, seed: u64) -> Matrix {
    let mut rng = StdRng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..8 * dim).map(|_| rng.random_range(-5.0..5.0f32)).collect();
    let mut values = Vec::with_capacity(rows * dim);
    let mut bytes = Vec::new();
    for _ in 0..rows {
        let c = rng.random_range(0..8);
        bytes.extend_from_slice(&(dim as i32).to_le_bytes());
        for j in 0..dim {
            let v = centres[c * dim + j] + (rng.random_range(-4..=4) as f32) * 0.25;
            values.push(v);
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).unwrap();
    Matrix::new(values, rows, dim).unwrap()
}

/// The `.ivecs` and `.fvecs` an output named `OUT.ivecs` consists of.
fn output_bytes(out: &Path) -> (Vec<u8>, Vec<u8>) {
    (std::fs::read(out).unwrap(), std::fs::read(out.with_extension("fvecs")).unwrap())
}

fn neighbors_of(out: &Path, rows: usize, k: usize) -> Neighbors {
    let (ids, dists) = output_bytes(out);
    common::neighbors_from_vecs(&ids, &dists, rows, k)
}

fn block_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().ends_with(".bin")).count()
    })
}

/// Starts `args`, kills it (SIGKILL) once `dir` holds `blocks` finished blocks; false when
/// the run finished first.
fn kill_after(args: &[&str], dir: &Path, blocks: usize) -> bool {
    let mut child = knng().args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if block_files(dir) >= blocks {
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        assert!(Instant::now() < deadline, "knng {args:?} neither finished nor wrote {blocks} blocks");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The number in `resuming: B of T blocks done`, if stderr says it.
fn resumed(stderr: &str) -> Option<(usize, usize)> {
    let line = stderr.lines().find(|l| l.starts_with("resuming: "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    Some((words[1].parse().ok()?, words[3].parse().ok()?))
}

struct Setup {
    _dir: tempfile::TempDir,
    input: PathBuf,
    checkpoint: PathBuf,
    data: Matrix,
    root: PathBuf,
}

fn setup(rows: usize, dim: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let input = root.join("data.fvecs");
    let data = write_data(&input, rows, dim, rows as u64);
    Setup { checkpoint: root.join("checkpoint"), input, data, root, _dir: dir }
}

/// Kills a checkpointed run at `points` (blocks finished), then lets it finish: the output
/// must be byte-identical to that of an uninterrupted run and exact.
fn kill_and_resume(backend: &[&str], rows: usize, dim: usize, k: usize, block_rows: usize, points: &[usize]) {
    let t = setup(rows, dim);
    let (k_text, block_text) = (k.to_string(), block_rows.to_string());
    let args = |out: &Path, checkpoint: bool| -> Vec<String> {
        let mut a: Vec<String> =
            ["graph", s(&t.input), "-k", &k_text, "--block-rows", &block_text, "-o", s(out)].map(String::from).into();
        a.extend(backend.iter().map(|s| s.to_string()));
        if checkpoint {
            a.extend(["--checkpoint".to_string(), s(&t.checkpoint).to_string()]);
        }
        a
    };
    let reference = t.root.join("reference.ivecs");
    let a = args(&reference, false);
    succeeds(&a.iter().map(String::as_str).collect::<Vec<_>>());
    common::check("uninterrupted", &t.data, &t.data, k, Metric::Euclidean, true, &neighbors_of(&reference, rows, k));

    let out = t.root.join("resumed.ivecs");
    let a = args(&out, true);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut killed = 0;
    for &point in points {
        if kill_after(&a, &t.checkpoint, point) {
            killed += 1;
        }
        assert!(!out.exists(), "a killed run left an output");
    }
    assert!(killed > 0, "every run finished before it could be killed: use more blocks");
    let message = succeeds(&a);
    let (done, total) = resumed(&message).unwrap_or_else(|| panic!("no resuming line in {message}"));
    assert!(done >= points[..killed].iter().copied().max().unwrap() && done <= total, "{message}");
    assert_eq!(output_bytes(&out), output_bytes(&reference), "the resumed output differs");
    assert!(!t.checkpoint.exists(), "the checkpoint was left after the output was written");
}

#[test]
fn killed_cpu_runs_resume_to_the_same_bytes() {
    // 24 blocks, 300 jobs; three kills at seeded random points.
    let mut rng = StdRng::seed_from_u64(7);
    let mut points: Vec<usize> = (0..3).map(|_| rng.random_range(5..200)).collect();
    points.sort();
    kill_and_resume(&["--backend", "cpu"], 12000, 16, 10, 500, &points);
}

#[test]
fn killed_gpu_runs_resume_to_the_same_bytes() {
    let adapter = std::env::var("KNNG_TEST_ADAPTER").unwrap_or_else(|_| "0".into());
    let mut rng = StdRng::seed_from_u64(11);
    let point = rng.random_range(3..30);
    kill_and_resume(&["--backend", "gpu", "--adapter", &adapter], 2400, 16, 8, 200, &[point]);
}

/// Two devices on one adapter write exactly what one device writes, block by block.
#[test]
fn two_devices_write_what_one_writes() {
    let adapter = std::env::var("KNNG_TEST_ADAPTER").unwrap_or_else(|_| "0".into());
    let t = setup(1500, 20);
    let one = t.root.join("one.ivecs");
    let two = t.root.join("two.ivecs");
    let common_args = ["graph", s(&t.input), "-k", "12", "--backend", "gpu", "--block-rows", "400"];
    succeeds(&[&common_args[..], &["--devices", &adapter, "-o", s(&one)]].concat());
    let both = format!("{adapter},{adapter}");
    let message = succeeds(&[&common_args[..], &["--devices", &both, "-o", s(&two)]].concat());
    assert_eq!(message.matches("gpu:").count(), 2, "not two devices: {message}");
    assert_eq!(output_bytes(&one), output_bytes(&two));
    common::check("two devices", &t.data, &t.data, 12, Metric::Euclidean, true, &neighbors_of(&two, 1500, 12));
}

/// A checkpoint of other arguments, or with a damaged block, is refused with a message that
/// names the difference or the file, and nothing is written.
#[test]
fn mismatched_and_damaged_checkpoints_are_refused() {
    let t = setup(12000, 16);
    let out = t.root.join("g.ivecs");
    let args = |k: &'static str| {
        vec![
            "graph",
            s(&t.input),
            "-k",
            k,
            "--backend",
            "cpu",
            "--block-rows",
            "500",
            "--checkpoint",
            s(&t.checkpoint),
            "-o",
            s(&out),
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let a = args("10");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    assert!(kill_after(&a, &t.checkpoint, 20), "the run finished before it could be killed");

    let other = args("11");
    let other: Vec<&str> = other.iter().map(String::as_str).collect();
    let refused = run(&other);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    assert!(message.contains("k is 10 there and 11 here"), "{message}");
    assert!(!out.exists());

    let block = std::fs::read_dir(&t.checkpoint)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "bin"))
        .unwrap();
    let mut bytes = std::fs::read(&block).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&block, &bytes).unwrap();
    let refused = run(&a);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    let name = block.file_name().unwrap().to_string_lossy().into_owned();
    assert!(message.contains("damaged checkpoint block") && message.contains(&name), "{message}");
    assert!(!message.contains("panicked"), "{message}");
    assert!(!out.exists());
}

/// A graph whose lists exceed `--max-memory` is cut into blocks, spills the lists of later
/// blocks to `--scratch`, streams its rows into every output format, and writes what an
/// unlimited run writes, leaving nothing in the scratch directory.
#[test]
fn a_graph_beyond_its_memory_limit_spills_and_writes_what_an_unlimited_run_writes() {
    let t = setup(8000, 8);
    let scratch = t.root.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    for ext in ["npz", "mtx"] {
        let (whole, limited) = (t.root.join(format!("whole.{ext}")), t.root.join(format!("limited.{ext}")));
        let common_args = ["graph", s(&t.input), "-k", "10", "--backend", "cpu"];
        let message = succeeds(&[&common_args[..], &["-o", s(&whole)]].concat());
        assert!(!message.contains("spilled"), "{message}");
        let limits = ["--max-memory", "2MiB", "--scratch", s(&scratch), "-o", s(&limited)];
        let message = succeeds(&[&common_args[..], &limits].concat());
        assert!(message.contains("of lists spilled to disk"), "{message}");
        assert_eq!(std::fs::read(&whole).unwrap(), std::fs::read(&limited).unwrap(), "{ext} outputs differ");
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0, "spill files were left behind");
    }
    let npz = t.root.join("limited.npz");
    let mut archive = npyz::npz::NpzArchive::open(&npz).unwrap();
    let indices: Vec<i64> = archive.by_name("indices").unwrap().unwrap().into_vec().unwrap();
    let distances: Vec<f32> = archive.by_name("distances").unwrap().unwrap().into_vec().unwrap();
    let got = Neighbors { indices: indices.iter().map(|&i| i as u32).collect(), distances, queries: 8000, k: 10 };
    common::check("spilled", &t.data, &t.data, 10, Metric::Euclidean, true, &got);
}
