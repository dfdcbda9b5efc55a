//! Graphs and searches over the ranks of an MPI job, through the command line under `mpirun` (the `mpi`
//! feature; Open MPI's launcher must be installed): the same bytes as one process on the
//! CPU and on the GPU, for 2, 3 and 4 ranks; a checkpointed job killed and started again
//! resumes; a failing rank ends the job with its rank and cause and no output; `knng info`
//! reports every rank.
#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use knng::{Matrix, Metric};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn knng() -> &'static str {
    env!("CARGO_BIN_EXE_knng")
}

/// `mpirun` starting `ranks` copies of `program args`: as root where the tests run as root,
/// more ranks than cores, and every rank free to use every core (Open MPI binds each rank to
/// one core by default).
fn mpirun(ranks: usize, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", &ranks.to_string(), program]);
    c.args(args);
    c
}

fn output(mut c: Command) -> Output {
    c.output().expect("mpirun runs (install openmpi-bin)")
}

fn succeeds(c: Command, what: &str) -> String {
    let out = output(c);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what} failed: {stderr}");
    stderr
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Rows of continuous random values (no two distances tie), written as `.fvecs`.
fn write_data(path: &Path, rows: usize, dim: usize, seed: u64) -> Matrix {
    let mut rng = StdRng::seed_from_u64(seed);
    let values: Vec<f32> = (0..rows * dim).map(|_| rng.random_range(-1.0..1.0f32)).collect();
    let mut bytes = Vec::new();
    for row in values.chunks(dim) {
        bytes.extend_from_slice(&(dim as i32).to_le_bytes());
        row.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    }
    std::fs::write(path, bytes).unwrap();
    Matrix::new(values, rows, dim).unwrap()
}

fn read_output(out: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(out).unwrap();
    bytes.extend(std::fs::read(out.with_extension("fvecs")).unwrap());
    bytes
}

/// The graph of `input` by one process and by jobs of each of `ranks`: every job writes the
/// bytes one process writes, which are exact.
fn same_bytes_as_one_process(data: &Matrix, input: &Path, dir: &Path, args: &[&str], ranks: &[usize], k: usize) {
    let graph = |out: &Path| -> Vec<String> {
        let mut a: Vec<String> = ["graph", s(input), "-k", &k.to_string(), "-o", s(out)].map(String::from).into();
        a.extend(args.iter().map(|a| a.to_string()));
        a
    };
    let single = dir.join("single.ivecs");
    let a = graph(&single);
    let mut one = Command::new(knng());
    one.args(&a);
    succeeds(one, "one process");
    let want = read_output(&single);
    let (ids, dists) = want.split_at(std::fs::metadata(&single).unwrap().len() as usize);
    let neighbors = common::neighbors_from_vecs(ids, dists, data.rows(), k);
    common::check("one process", data, data, k, Metric::Euclidean, true, &neighbors);
    for &r in ranks {
        let out = dir.join(format!("ranks-{r}.ivecs"));
        let a = graph(&out);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let message = succeeds(mpirun(r, knng(), &a), &format!("{r} ranks"));
        assert!(message.contains(&format!("shared by {r} ranks")), "{r} ranks: {message}");
        assert_eq!(read_output(&out), want, "{r} ranks {args:?}: the output differs from one process's");
    }
}

#[test]
fn cpu_jobs_write_what_one_process_writes() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.fvecs");
    let data = write_data(&input, 2000, 12, 1);
    same_bytes_as_one_process(&data, &input, dir.path(), &["--backend", "cpu"], &[2, 3, 4], 10);
    // Small blocks: many jobs a rank, later rounds, and lists spilled on every rank.
    let small = ["--backend", "cpu", "--block-rows", "150", "--max-memory", "24MiB"];
    same_bytes_as_one_process(&data, &input, dir.path(), &small, &[3], 40);
}

#[test]
fn gpu_jobs_write_what_one_process_writes() {
    let adapter = std::env::var("KNNG_TEST_ADAPTER").unwrap_or_else(|_| "0".into());
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.fvecs");
    let data = write_data(&input, 1200, 16, 2);
    same_bytes_as_one_process(&data, &input, dir.path(), &["--backend", "gpu", "--adapter", &adapter], &[2, 3], 8);
}

/// A search over 3 ranks (each answers a third of the queries) writes what one process writes.
#[test]
fn searches_are_shared_by_rows_of_queries() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, queries) = (dir.path().join("corpus.fvecs"), dir.path().join("queries.fvecs"));
    let (base, asked) = (write_data(&corpus, 1500, 10, 5), write_data(&queries, 301, 10, 6));
    let search = |out: &Path| -> Vec<String> {
        ["search", s(&corpus), "--queries", s(&queries), "-k", "7", "--backend", "cpu", "-o", s(out)]
            .map(String::from)
            .into()
    };
    let single = dir.path().join("single.ivecs");
    let mut one = Command::new(knng());
    one.args(search(&single));
    succeeds(one, "one process");
    let want = read_output(&single);
    let (ids, dists) = want.split_at(std::fs::metadata(&single).unwrap().len() as usize);
    common::check(
        "one process",
        &base,
        &asked,
        7,
        Metric::Euclidean,
        false,
        &common::neighbors_from_vecs(ids, dists, 301, 7),
    );
    let out = dir.path().join("ranks.ivecs");
    let a = search(&out);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let message = succeeds(mpirun(3, knng(), &a), "3 ranks");
    assert!(message.contains("queries shared by 3 ranks"), "{message}");
    assert_eq!(read_output(&out), want, "3 ranks: the search's output differs from one process's");
}

fn write_matrix(path: &Path, m: &Matrix) {
    let mut bytes = Vec::new();
    for row in m.as_slice().chunks(m.cols()) {
        bytes.extend_from_slice(&(m.cols() as i32).to_le_bytes());
        row.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    }
    std::fs::write(path, bytes).unwrap();
}

/// The exact table's larger cases (graphs and searches, k up to 1500, rows sorted along a
/// line, cosine, inner product) over 3 ranks on the CPU and on the GPU under a tiny memory
/// budget, in small blocks: the bytes one process writes, which are exact.
#[test]
fn larger_cases_over_three_ranks() {
    let adapter = std::env::var("KNNG_TEST_ADAPTER").unwrap_or_else(|_| "0".into());
    let gpu = ["--backend", "gpu", "--adapter", &adapter, "--gpu-memory", "16MiB"];
    for case in common::larger_cases() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus.fvecs");
        write_matrix(&corpus, &case.corpus);
        let (k, metric) = (case.k.to_string(), case.metric.to_string());
        let mut args: Vec<String> = match &case.queries {
            Some(queries) => {
                let path = dir.path().join("queries.fvecs");
                write_matrix(&path, queries);
                ["search", s(&corpus), "--queries", s(&path)].map(String::from).into()
            }
            None => ["graph", s(&corpus), "--block-rows", "700"].map(String::from).into(),
        };
        args.extend(["-k", &k, "--metric", &metric, "-q"].map(String::from));
        for backend in [&["--backend", "cpu"][..], &gpu[..]] {
            let label = format!("{} {backend:?}", case.name);
            let run = |out: &Path| -> Vec<String> {
                let mut a = args.clone();
                a.extend(backend.iter().map(|b| b.to_string()));
                a.extend(["-o".to_string(), s(out).to_string()]);
                a
            };
            let single = dir.path().join("single.ivecs");
            let mut one = Command::new(knng());
            one.args(run(&single));
            succeeds(one, &format!("{label}: one process"));
            let (want, nq) = (read_output(&single), case.queries.as_ref().map_or(case.corpus.rows(), Matrix::rows));
            let (ids, dists) = want.split_at(std::fs::metadata(&single).unwrap().len() as usize);
            let got = common::neighbors_from_vecs(ids, dists, nq, case.k);
            let queries = case.queries.as_ref().unwrap_or(&case.corpus);
            common::check(&label, &case.corpus, queries, case.k, case.metric, case.queries.is_none(), &got);
            let out = dir.path().join("ranks.ivecs");
            let a = run(&out);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            succeeds(mpirun(3, knng(), &a), &format!("{label}: 3 ranks"));
            assert_eq!(read_output(&out), want, "{label}: 3 ranks wrote other bytes than one process");
        }
    }
}

/// A rank killed (SIGKILL) in the middle of a job ends every rank: mpirun exits non-zero and
/// no output is left.
#[test]
fn a_killed_rank_ends_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.fvecs");
    write_data(&input, 8000, 32, 7);
    let out = dir.path().join("out.npz");
    let checkpoint = dir.path().join("checkpoint");
    let a = ["graph", s(&input), "-k", "10", "--block-rows", "200", "--backend", "cpu", "-o", s(&out)];
    let mut a: Vec<&str> = a.into();
    // The checkpoint's block files say when the ranks are under way.
    a.extend(["--checkpoint", s(&checkpoint)]);
    let mut job = mpirun(3, knng(), &a).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while block_files(&checkpoint) < 10 {
        assert!(job.try_wait().unwrap().is_none(), "the job finished before a rank could be killed");
        assert!(Instant::now() < deadline, "the job wrote no blocks");
        std::thread::sleep(Duration::from_millis(2));
    }
    let ranks = Command::new("pgrep").args(["-P", &job.id().to_string()]).output().unwrap();
    let ranks = String::from_utf8_lossy(&ranks.stdout);
    let victim = ranks.split_whitespace().nth(1).expect("mpirun's children are its ranks");
    Command::new("kill").args(["-KILL", victim]).status().unwrap();
    let ended = Instant::now();
    let status = job.wait().unwrap();
    assert!(!status.success(), "the job succeeded without a rank");
    assert!(ended.elapsed() < Duration::from_secs(30), "the other ranks went on for {:?}", ended.elapsed());
    assert!(!out.exists(), "a job that lost a rank left an output");
}

/// Block files of every rank's part of a checkpoint.
fn block_files(dir: &Path) -> usize {
    let Ok(ranks) = std::fs::read_dir(dir) else { return 0 };
    ranks
        .filter_map(|r| std::fs::read_dir(r.ok()?.path()).ok())
        .flatten()
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".bin")))
        .count()
}

/// A checkpointed job stopped (SIGTERM to mpirun, as a scheduler's time limit sends) once
/// its ranks finished some blocks, then started again, resumes and writes what one process
/// writes; the checkpoint is gone afterwards.
#[test]
fn a_stopped_job_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.fvecs");
    // Large enough that the job outlasts mpirun's forwarding of SIGTERM to the ranks, which
    // takes about a second (a job of 8000 rows finished first on a fast machine).
    write_data(&input, 16000, 32, 3);
    let checkpoint = dir.path().join("checkpoint");
    let (single, out) = (dir.path().join("single.ivecs"), dir.path().join("job.ivecs"));
    let args = |out: &Path| -> Vec<String> {
        ["graph", s(&input), "-k", "10", "--block-rows", "200", "--backend", "cpu", "-o", s(out)]
            .map(String::from)
            .into()
    };
    let mut one = Command::new(knng());
    one.args(args(&single));
    succeeds(one, "one process");
    let mut a = args(&out);
    a.extend(["--checkpoint".into(), s(&checkpoint).into()]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut job = mpirun(3, knng(), &a).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let stopped = loop {
        if job.try_wait().unwrap().is_some() {
            break false;
        }
        if block_files(&checkpoint) >= 20 {
            let _ = Command::new("kill").args(["-TERM", &job.id().to_string()]).status();
            job.wait().unwrap();
            break true;
        }
        assert!(Instant::now() < deadline, "the job neither finished nor wrote 20 blocks");
        std::thread::sleep(Duration::from_millis(2));
    };
    assert!(stopped, "the job finished before it could be stopped: use more blocks");
    assert!(!out.exists(), "a stopped job left an output");
    let message = succeeds(mpirun(3, knng(), &a), "the resumed job");
    assert!(message.contains("resuming: "), "{message}");
    assert_eq!(read_output(&out), read_output(&single), "the resumed output differs");
    assert!(!checkpoint.exists(), "the checkpoint was left after the output was written");
}

/// A rank that fails (rank 1 reads another file) ends every rank: mpirun exits non-zero, the
/// message names the rank and the cause, and no output is left.
#[test]
fn a_failing_rank_ends_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.fvecs");
    write_data(&input, 500, 8, 4);
    let narrow = dir.path().join("narrow.fvecs");
    write_data(&narrow, 500, 5, 4);
    let script = dir.path().join("rank1-reads-another.sh");
    std::fs::write(&script, "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec \"$@\" \"$OTHER\"; else exec \"$@\" \"$INPUT\"; fi\n").unwrap();
    let out = dir.path().join("out.npz");
    for (other, cause) in [(dir.path().join("missing.fvecs"), "missing.fvecs"), (narrow, "same input")] {
        // Both files reach the ranks through the environment (`-x`).
        let mut c = Command::new("mpirun");
        c.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            "-x",
            "INPUT",
            "-x",
            "OTHER",
            "-np",
            "3",
        ]);
        c.args(["sh", s(&script), knng(), "graph", "-k", "5", "--backend", "cpu", "-o", s(&out)]);
        c.env("INPUT", &input).env("OTHER", &other);
        let result = output(c);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success(), "the job succeeded: {stderr}");
        assert!(stderr.contains("error: rank 1 of 3: ") && stderr.contains(cause), "{stderr}");
        assert!(!out.exists(), "a failed job left an output");
    }
}

#[test]
fn info_reports_every_rank() {
    let out = output(mpirun(2, knng(), &["info"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("MPI job of 2 ranks"), "{stdout}");
    for rank in 0..2 {
        let at = stdout.find(&format!("== rank {rank}\nhost ")).unwrap_or_else(|| panic!("rank {rank}: {stdout}"));
        assert!(stdout[at..].contains("--backend auto uses"), "{stdout}");
    }
}
