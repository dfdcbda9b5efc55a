//! What a new user meets first, and what a bad-input probe of the command line found: no
//! input is ever replaced by an output, runs too large for the machine are refused before they
//! allocate, interrupted and failed writes leave nothing behind, and every message names the
//! file, line, flag or value at fault.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn knng(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_knng")).args(args).output().expect("the knng binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Files in `dir`, sorted: a failed run must not add any (partial files included).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Expects exit status `code`, one `error:` line holding every needle, no panic, and no file
/// added to `dir`.
fn refused(args: &[&str], code: i32, needles: &[&str], dir: &Path) -> String {
    let before = listing(dir);
    let out = knng(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "knng {args:?}: {err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "knng {args:?}: {err}");
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "knng {args:?}: {needle:?} not in {err}");
    }
    assert_eq!(listing(dir), before, "knng {args:?} left files behind");
    err
}

fn fvecs(rows: &[[f32; 3]]) -> Vec<u8> {
    rows.iter().flat_map(|r| 3i32.to_le_bytes().into_iter().chain(r.iter().flat_map(|v| v.to_le_bytes()))).collect()
}

fn npy_f32(rows: usize, cols: usize, values: impl Iterator<Item = f32>) -> Vec<u8> {
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(values.flat_map(f32::to_le_bytes));
    out
}

#[test]
fn outputs_never_replace_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = d.join("base.fvecs");
    let data = fvecs(&[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [3.0, 0.0, 0.0], [7.0, 1.0, 0.0], [2.0, 2.0, 2.0]]);
    std::fs::write(&base, &data).unwrap();
    let queries = d.join("q.fvecs");
    std::fs::write(&queries, fvecs(&[[0.5, 0.0, 0.0]])).unwrap();
    // `-o base.ivecs` writes its distances to base.fvecs beside it: the input.
    let ivecs = d.join("base.ivecs");
    refused(&["graph", s(&base), "-k", "3", "-o", s(&ivecs), "--backend", "cpu"], 1, &["base.fvecs", "overwrite"], d);
    refused(
        &["search", s(&base), "--queries", s(&queries), "-k", "2", "-o", s(&ivecs), "--backend", "cpu"],
        1,
        &["base.fvecs", "overwrite"],
        d,
    );
    let q_ivecs = d.join("q.ivecs");
    refused(
        &["search", s(&base), "--queries", s(&queries), "-k", "2", "-o", s(&q_ivecs), "--backend", "cpu"],
        1,
        &["q.fvecs", "overwrite"],
        d,
    );
    // A hard link and a symbolic link to the input are the input.
    let hard = d.join("hard.csv");
    std::fs::write(d.join("data.csv"), "1,2\n3,4\n5,6\n").unwrap();
    std::fs::hard_link(d.join("data.csv"), &hard).unwrap();
    refused(&["graph", s(&d.join("data.csv")), "-k", "1", "-o", s(&hard), "--backend", "cpu"], 1, &["overwrite"], d);
    #[cfg(unix)]
    {
        let soft = d.join("soft.csv");
        std::os::unix::fs::symlink(d.join("data.csv"), &soft).unwrap();
        refused(&["graph", s(&soft), "-k", "1", "-o", s(&hard), "--backend", "cpu"], 1, &["overwrite"], d);
    }
    assert_eq!(std::fs::read(&base).unwrap(), data);
    assert_eq!(std::fs::read_to_string(d.join("data.csv")).unwrap(), "1,2\n3,4\n5,6\n");
    // Another name is fine, and the pair is written.
    let out = d.join("graph.ivecs");
    let run = knng(&["graph", s(&base), "-k", "2", "-o", s(&out), "--backend", "cpu"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(out.exists() && d.join("graph.fvecs").exists());
}

#[test]
fn runs_too_large_for_memory_are_refused_before_they_allocate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 2^21 x 1 is 8 MB; k = 2^21 - 1 asks for 70 TB of output, more than any disk holds.
    let n = 1 << 21;
    let input = d.join("line.npy");
    std::fs::write(&input, npy_f32(n, 1, (0..n).map(|i| i as f32))).unwrap();
    let out = d.join("g.npz");
    let started = Instant::now();
    let k = (n - 1).to_string();
    refused(
        &["graph", s(&input), "-k", &k, "-o", s(&out), "--backend", "cpu"],
        1,
        &["g.npz", "the output would take at least 70368.7 GB", "file system has", "smaller k"],
        d,
    );
    assert!(started.elapsed() < Duration::from_secs(20), "refused only after {:?}", started.elapsed());
    // An explicit limit is a limit: 2000 rows with k = 1999 need about 64 MB by brute force.
    let small = d.join("small.npy");
    std::fs::write(&small, npy_f32(2000, 1, (0..2000).map(|i| i as f32))).unwrap();
    let args = ["graph", s(&small), "-k", "1999", "-o", s(&out), "--backend", "cpu", "--max-memory", "16"];
    refused(&[&args[..], &["--algorithm", "brute"]].concat(), 1, &["host memory", "16.0 MiB is the limit set"], d);
    // The kd-tree (auto's choice in one dimension) needs 64 KB beside the blocks of answers
    // it hands to the output.
    let run = Command::new(env!("CARGO_BIN_EXE_knng")).args(args).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stderr).contains("by the kd-tree"));
    refused(&["graph", s(&small), "-k", "1", "-o", s(&out), "--max-memory", "17592186044416"], 2, &["--max-memory"], d);
}

#[test]
fn more_rows_than_ids_can_number_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A sparse .npy of 2^32 rows x 1 (16 GiB that take no disk space).
    let input = d.join("huge.npy");
    let header = npy_f32(1 << 32, 1, std::iter::empty());
    std::fs::write(&input, &header).unwrap();
    std::fs::OpenOptions::new().write(true).open(&input).unwrap().set_len(header.len() as u64 + (4 << 32)).unwrap();
    let out = d.join("g.npz");
    refused(
        &["graph", s(&input), "-k", "1", "-o", s(&out), "--backend", "cpu"],
        1,
        &["huge.npy", "4294967296 rows", "at most 4294967295"],
        d,
    );
}

#[test]
fn threads_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("a.csv");
    std::fs::write(&input, "1,2\n3,4\n5,6\n").unwrap();
    let out = dir.path().join("g.npz");
    let started = Instant::now();
    refused(
        &["graph", s(&input), "-k", "1", "-o", s(&out), "--backend", "cpu", "--threads", "5000"],
        1,
        &["--threads 5000", "at most"],
        dir.path(),
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    refused(
        &["graph", s(&input), "-k", "1", "-o", s(&out), "--gpu-memory", "17592186044416"],
        2,
        &["--gpu-memory"],
        dir.path(),
    );
}

/// Starts a search whose CSV output takes a while to write, waits until its partial file
/// appears, and stops it with `signal`: the partial file goes, no output appears.
fn interrupted_while_writing(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let n = 3000;
    let input = d.join("points.npy");
    std::fs::write(&input, npy_f32(n, 2, (0..2 * n).map(|i| ((i * 7919) % 1000) as f32))).unwrap();
    let out = d.join("all.csv");
    let mut child = Command::new(env!("CARGO_BIN_EXE_knng"))
        .args(["search", s(&input), "--queries", s(&input), "-k", "3000", "-o", s(&out), "--backend", "cpu", "-q"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let partial = d.join(format!("all.csv.knng-partial-{}", child.id()));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !partial.exists() {
        assert!(Instant::now() < deadline, "no partial file appeared");
        assert!(child.try_wait().unwrap().is_none(), "knng ended before it was interrupted");
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(!status.success(), "knng {signal} exited with {status}");
    assert_eq!(listing(d), ["points.npy"], "after {signal}");
}

#[test]
fn an_interrupted_write_leaves_nothing_behind() {
    interrupted_while_writing("-INT");
    interrupted_while_writing("-TERM");
}

#[test]
fn partial_files_of_dead_processes_are_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("a.csv"), "1,2\n3,4\n5,6\n").unwrap();
    // Left by a process killed with SIGKILL; no process has this pid.
    std::fs::write(d.join("g.npz.knng-partial-4294967294"), b"half").unwrap();
    let run = knng(&["graph", s(&d.join("a.csv")), "-k", "1", "-o", s(&d.join("g.npz")), "--backend", "cpu"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(listing(d), ["a.csv", "g.npz"]);
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_one_clean_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let n = 500;
    let input = d.join("p.npy");
    std::fs::write(&input, npy_f32(n, 2, (0..2 * n).map(|i| i as f32))).unwrap();
    for out in ["g.npz", "g.csv", "g.ivecs"] {
        // Files may grow to 4 KiB: the output's write fails as on a full disk (EFBIG).
        let script = format!(
            "trap '' XFSZ; ulimit -f 4; exec {} graph {} -k 50 -o {} --backend cpu",
            env!("CARGO_BIN_EXE_knng"),
            s(&input),
            s(&d.join(out))
        );
        let run = Command::new("sh").args(["-c", &script]).output().unwrap();
        let err = text(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{out}: {err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(last.starts_with("error: ") && last.contains(out), "{out}: {err}");
        assert!(!err.contains("ZipWriter") && !err.contains("Os {") && !err.contains("Io("), "{out}: {err}");
        assert_eq!(listing(d), ["p.npy"], "{out}");
    }
}

#[test]
fn skipped_csv_headers_are_reported_and_malformed_first_rows_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("h.csv"), "x,y\n1,2\n3,4\n6,8\n").unwrap();
    let run = knng(&["graph", s(&d.join("h.csv")), "-k", "1", "-o", s(&d.join("g.npz")), "--backend", "cpu"]);
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("h.csv") && err.contains("header") && err.contains("\"x,y\""), "{err}");
    assert!(err.contains("3 rows x 2 columns"), "{err}");
    for (name, body, needle) in [
        ("dots.csv", "1.0,2.0.,3.0\n4,5,6\n7,8,9\n", "line 1, column 2"),
        ("hex.csv", "0x10,1\n2,3\n4,5\n", "line 1, column 1"),
        ("trailing.csv", "1,2,\n3,4,\n5,6,\n", "line 1, column 3"),
        ("quote.csv", "1,2\n\"3,4\n5,6\n", "never closed"),
    ] {
        std::fs::write(d.join(name), body).unwrap();
        let out = d.join("m.npz");
        refused(&["graph", s(&d.join(name)), "-k", "1", "-o", s(&out), "--backend", "cpu"], 1, &[name, needle], d);
    }
}

#[test]
fn messages_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("x.npy"), npy_f32(3, 2, (0..6).map(|i| i as f32))).unwrap();
    let out = d.join("g.npz");
    let spec = format!("{}:train", s(&d.join("x.npy")));
    let err = refused(&["graph", &spec, "-k", "1", "-o", s(&out)], 1, &["x.npy", "only .hdf5 and .h5"], d);
    assert!(!err.contains("extension"), "{err}");
    let spec = format!("{}:", s(&d.join("y.hdf5")));
    refused(&["graph", &spec, "-k", "1", "-o", s(&out)], 1, &["y.hdf5", "dataset name", "empty"], d);
    // One query row is "1 row".
    std::fs::write(d.join("q.csv"), "1,1\n").unwrap();
    let run = knng(&["search", s(&d.join("x.npy")), "--queries", s(&d.join("q.csv")), "-k", "2", "-o", s(&out)]);
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("1 row x 2 columns") && err.contains("search: 1 query in 3 rows"), "{err}");
}

/// `--include-self` puts each point first in its own list, exact duplicates of smaller index
/// or not, on every backend.
#[test]
fn include_self_puts_the_point_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Rows 0, 1 and 3 are the same point.
    std::fs::write(d.join("dup.csv"), "1,1\n1,1\n5,5\n1,1\n9,0\n").unwrap();
    let mut backends = vec!["cpu"];
    if !knng::adapters().is_empty() {
        backends.push("gpu");
    } else {
        eprintln!("SKIPPED the GPU half of include_self_puts_the_point_first: no GPU adapter");
    }
    for backend in backends {
        for k in ["2", "3", "5"] {
            let out = d.join("g.csv");
            let run =
                knng(&["graph", s(&d.join("dup.csv")), "-k", k, "--include-self", "-o", s(&out), "--backend", backend]);
            assert!(run.status.success(), "{}", text(&run.stderr));
            let edges = std::fs::read_to_string(&out).unwrap();
            let first: Vec<(usize, usize)> = edges
                .lines()
                .skip(1)
                .map(|l| l.split(',').map(|f| f.parse::<f64>().unwrap() as usize).collect::<Vec<_>>())
                .filter(|f| f.len() == 3)
                .map(|f| (f[0], f[1]))
                .collect();
            let k: usize = k.parse().unwrap();
            for q in 0..5 {
                assert_eq!(first[q * k], (q, q), "{backend} k={k}: {edges}");
            }
            // The duplicates follow, by index.
            assert_eq!(first[k + 1], (1, 0), "{backend} k={k}: {edges}");
        }
    }
}

/// A headless machine's Mesa complains about XDG_RUNTIME_DIR while knng probes for GPUs;
/// successful runs print knng's own lines only.
#[test]
fn probing_gpus_prints_nothing_foreign() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.csv"), "1,2\n3,4\n5,6\n").unwrap();
    let out = dir.path().join("g.npz");
    let input = dir.path().join("a.csv");
    let runs: [&[&str]; 2] = [&["info"], &["graph", s(&input), "-k", "1", "-o", s(&out)]];
    for args in runs {
        let run = Command::new(env!("CARGO_BIN_EXE_knng")).args(args).env_remove("XDG_RUNTIME_DIR").output().unwrap();
        let err = text(&run.stderr);
        assert!(run.status.success(), "{args:?}: {err}");
        assert!(!err.contains("XDG_RUNTIME_DIR") && !err.contains("error"), "{args:?}: {err}");
    }
}
