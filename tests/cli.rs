//! The `knng` command line as scripts use it: every input format, every output format, and
//! every kind of bad input ending in one clear error line and no output file.
//!
//! All runs use `--backend cpu`, so these tests need no GPU and stay fast.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use knng::Matrix;
use npyz::npz::NpzArchive;
use rand::{rngs::StdRng, Rng, SeedableRng};

const ROWS: usize = 60;
const DIM: usize = 12;

fn knng(args: &[&str]) -> Output {
    // The HDF5 library opens files without close-on-exec: a fixture written by one test while
    // another spawns knng leaves its lock held by that child, and a reader that locks fails.
    Command::new(env!("CARGO_BIN_EXE_knng"))
        .args(args)
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .output()
        .expect("the knng binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs knng and expects success; returns stderr.
fn ok(args: &[&str]) -> String {
    let out = knng(args);
    assert!(out.status.success(), "knng {args:?} failed: {}", text(&out.stderr));
    text(&out.stderr)
}

/// Runs knng and expects exit status `code` with one `error:` message containing every
/// one of `needles`; returns the message.
fn fails(args: &[&str], code: i32, needles: &[&str]) -> String {
    let out = knng(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "knng {args:?}: stderr {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "knng {args:?}: stderr {err}");
    if code == 1 {
        // Status lines may come first; the failure is the last line.
        assert_eq!(err.lines().last(), Some(errors[0]), "knng {args:?}: stderr {err}");
    } else {
        // clap's usage errors: the message, then usage help.
        assert!(err.starts_with("error:"), "knng {args:?}: stderr {err}");
    }
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "knng {args:?}: {needle:?} not in {err}");
    }
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Small integer values, exact in every input type (f32, u8, i8, i32, text).
fn sample(rows: usize, seed: u64) -> Matrix {
    let mut rng = StdRng::seed_from_u64(seed);
    let values = (0..rows * DIM).map(|_| rng.random_range(0..100u8) as f32).collect();
    Matrix::new(values, rows, DIM).unwrap()
}

fn write_vecs(path: &Path, m: &Matrix, width: usize, enc: impl Fn(f32) -> Vec<u8>) {
    let mut b = Vec::new();
    for i in 0..m.rows() {
        b.extend_from_slice(&(m.cols() as i32).to_le_bytes());
        for &v in m.view().row(i) {
            let bytes = enc(v);
            assert_eq!(bytes.len(), width);
            b.extend_from_slice(&bytes);
        }
    }
    std::fs::write(path, b).unwrap();
}

fn write_bin(path: &Path, m: &Matrix, enc: impl Fn(f32) -> Vec<u8>) {
    let mut b = Vec::new();
    b.extend_from_slice(&(m.rows() as u32).to_le_bytes());
    b.extend_from_slice(&(m.cols() as u32).to_le_bytes());
    for &v in m.as_slice() {
        b.extend_from_slice(&enc(v));
    }
    std::fs::write(path, b).unwrap();
}

fn write_text(path: &Path, m: &Matrix, sep: &str, header: bool) {
    let mut t = String::new();
    if header {
        t += &(0..m.cols()).map(|j| format!("f{j}")).collect::<Vec<_>>().join(sep);
        t += "\n";
    }
    for i in 0..m.rows() {
        t += &m.view().row(i).iter().map(|v| v.to_string()).collect::<Vec<_>>().join(sep);
        t += "\n";
    }
    std::fs::write(path, t).unwrap();
}

/// The same matrix in every input format knng reads; returns the paths.
fn every_format(dir: &Path, m: &Matrix) -> Vec<PathBuf> {
    let p = |name: &str| dir.join(name);
    write_matrix_npy(&p("data.npy"), m).unwrap();
    write_vecs(&p("data.fvecs"), m, 4, |v| v.to_le_bytes().to_vec());
    write_vecs(&p("data.bvecs"), m, 1, |v| vec![v as u8]);
    write_vecs(&p("data.ivecs"), m, 4, |v| (v as i32).to_le_bytes().to_vec());
    write_bin(&p("data.fbin"), m, |v| v.to_le_bytes().to_vec());
    write_bin(&p("data.u8bin"), m, |v| vec![v as u8]);
    write_bin(&p("data.i8bin"), m, |v| vec![v as i8 as u8]);
    write_text(&p("data.csv"), m, ",", true);
    write_text(&p("data.tsv"), m, "\t", false);
    let mut paths: Vec<PathBuf> = ["npy", "fvecs", "bvecs", "ivecs", "fbin", "u8bin", "i8bin", "csv", "tsv"]
        .iter()
        .map(|e| p(&format!("data.{e}")))
        .collect();
    // A float64 Fortran-ordered array, as numpy writes `np.asfortranarray(x)`.
    let mut npy = npy_header("<f8", true, &format!("({}, {})", m.rows(), m.cols()));
    for j in 0..m.cols() {
        for i in 0..m.rows() {
            npy.extend_from_slice(&(m.view().row(i)[j] as f64).to_le_bytes());
        }
    }
    std::fs::write(p("fortran.npy"), npy).unwrap();
    paths.push(p("fortran.npy"));
    #[cfg(feature = "hdf5")]
    {
        let file = hdf5::File::create(p("data.hdf5")).unwrap();
        let ds = file.new_dataset::<f32>().shape((m.rows(), m.cols())).create("train").unwrap();
        ds.write_raw(m.as_slice()).unwrap();
        paths.push(p("data.hdf5"));
    }
    paths
}

fn write_matrix_npy(path: &Path, m: &Matrix) -> std::io::Result<()> {
    let mut bytes = npy_header("<f4", false, &format!("({}, {})", m.rows(), m.cols()));
    bytes.extend(m.as_slice().iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, bytes)
}

fn npy_header(descr: &str, fortran: bool, shape: &str) -> Vec<u8> {
    let order = if fortran { "True" } else { "False" };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

struct Graph {
    indices: Vec<i64>,
    distances: Vec<f32>,
    rows: usize,
    k: usize,
}

fn read_npz(path: &Path) -> Graph {
    let mut npz = NpzArchive::open(path).unwrap();
    let idx = npz.by_name("indices").unwrap().expect("an indices array");
    let shape = idx.shape().to_vec();
    assert_eq!(idx.dtype().descr(), "'<i8'");
    let indices: Vec<i64> = idx.into_vec().unwrap();
    let dist = npz.by_name("distances").unwrap().expect("a distances array");
    assert_eq!(dist.shape(), shape.as_slice());
    assert_eq!(dist.dtype().descr(), "'<f4'");
    let distances: Vec<f32> = dist.into_vec().unwrap();
    Graph { indices, distances, rows: shape[0] as usize, k: shape[1] as usize }
}

fn read_vecs<T>(path: &Path, decode: impl Fn([u8; 4]) -> T) -> (Vec<T>, usize) {
    let bytes = std::fs::read(path).unwrap();
    let k = i32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    for rec in bytes.chunks_exact(4 + 4 * k) {
        assert_eq!(i32::from_le_bytes(rec[0..4].try_into().unwrap()) as usize, k);
        out.extend(rec[4..].chunks_exact(4).map(|c| decode(c.try_into().unwrap())));
    }
    (out, k)
}

/// Checks a Euclidean graph (or search) against a float64 brute force. Integer data have
/// exact ties, which may be broken either way, so sorted distances are compared.
fn check_exact(data: &Matrix, queries: &Matrix, g: &Graph, exclude_self: bool) {
    assert_eq!(g.rows, queries.rows());
    for i in 0..queries.rows() {
        let q = queries.view().row(i);
        let dist = |j: usize| -> f64 {
            q.iter().zip(data.view().row(j)).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum::<f64>().sqrt()
        };
        let mut truth: Vec<f64> = (0..data.rows()).filter(|&j| !(exclude_self && j == i)).map(dist).collect();
        truth.sort_by(f64::total_cmp);
        let row = &g.indices[i * g.k..(i + 1) * g.k];
        let mut got: Vec<f64> = row.iter().map(|&j| dist(j as usize)).collect();
        got.sort_by(f64::total_cmp);
        assert_eq!(got, truth[..g.k], "row {i}");
        if exclude_self {
            assert!(!row.contains(&(i as i64)), "row {i} lists itself");
        }
        for (n, &j) in row.iter().enumerate() {
            let reported = g.distances[i * g.k + n];
            assert!((reported as f64 - dist(j as usize)).abs() < 1e-4, "row {i}");
        }
        let ds = &g.distances[i * g.k..(i + 1) * g.k];
        assert!(ds.windows(2).all(|w| w[0] <= w[1]), "row {i} is not sorted: {ds:?}");
    }
}

/// Files in `dir`, for checking that a failed run left nothing behind (temporaries included).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn same_graph_from_every_input_format() {
    let dir = tempfile::tempdir().unwrap();
    let m = sample(ROWS, 1);
    let inputs = every_format(dir.path(), &m);
    let mut first: Option<Graph> = None;
    for input in &inputs {
        let out = dir.path().join(format!("graph-{}.npz", input.file_name().unwrap().to_string_lossy()));
        ok(&["graph", s(input), "-k", "7", "-o", s(&out), "--backend", "cpu", "--quiet"]);
        let g = read_npz(&out);
        assert_eq!((g.rows, g.k), (ROWS, 7), "{}", input.display());
        match &first {
            None => {
                check_exact(&m, &m, &g, true);
                first = Some(g);
            }
            Some(f) => {
                assert_eq!(g.indices, f.indices, "{}", input.display());
                assert_eq!(g.distances, f.distances, "{}", input.display());
            }
        }
    }
}

#[test]
fn every_output_format_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let m = sample(ROWS, 2);
    let input = dir.path().join("data.npy");
    write_matrix_npy(&input, &m).unwrap();
    let run = |out: &str| {
        let out = dir.path().join(out);
        ok(&["graph", s(&input), "-k", "5", "-o", s(&out), "--backend", "cpu"]);
        out
    };
    let g = read_npz(&run("g.npz"));
    check_exact(&m, &m, &g, true);

    let ivecs = run("g.ivecs");
    let (indices, k) = read_vecs(&ivecs, i32::from_le_bytes);
    assert_eq!(k, 5);
    assert_eq!(indices.iter().map(|&i| i as i64).collect::<Vec<_>>(), g.indices);
    let (distances, _) = read_vecs(&dir.path().join("g.fvecs"), f32::from_le_bytes);
    assert_eq!(distances, g.distances);

    let csv = std::fs::read_to_string(run("g.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("query,neighbor,distance"));
    let edges: Vec<(usize, i64, f32)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    assert_eq!(edges.len(), ROWS * 5);
    for (n, &(q, j, d)) in edges.iter().enumerate() {
        assert_eq!((q, j, d), (n / 5, g.indices[n], g.distances[n]));
    }

    let mtx = std::fs::read_to_string(run("g.mtx")).unwrap();
    assert!(mtx.starts_with("%%MatrixMarket matrix coordinate real general\n"));
    let mut body = mtx.lines().filter(|l| !l.starts_with('%'));
    assert_eq!(body.next(), Some(format!("{ROWS} {ROWS} {}", ROWS * 5).as_str()));
    for (n, line) in body.enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0].parse::<usize>().unwrap(), n / 5 + 1);
        assert_eq!(f[1].parse::<i64>().unwrap(), g.indices[n] + 1);
        assert_eq!(f[2].parse::<f32>().unwrap(), g.distances[n]);
    }
}

#[test]
fn search_matches_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = sample(ROWS, 3);
    let queries = sample(17, 4);
    let c = dir.path().join("corpus.fvecs");
    write_vecs(&c, &corpus, 4, |v| v.to_le_bytes().to_vec());
    let q = dir.path().join("queries.csv");
    write_text(&q, &queries, ",", false);
    let out = dir.path().join("nn.npz");
    ok(&["search", s(&c), "--queries", s(&q), "-k", "9", "-o", s(&out), "--backend", "cpu", "--threads", "1"]);
    check_exact(&corpus, &queries, &read_npz(&out), false);
    // k may be the whole corpus in a search; -q is --quiet here as everywhere.
    let status =
        ok(&["search", s(&c), "--queries", s(&q), "-k", &ROWS.to_string(), "-o", s(&out), "--backend", "cpu", "-q"]);
    assert!(status.is_empty(), "a quiet search wrote {status:?}");
    check_exact(&corpus, &queries, &read_npz(&out), false);
}

#[test]
fn include_self_and_other_metrics() {
    let dir = tempfile::tempdir().unwrap();
    // Distinct rows, so each point is strictly its own nearest neighbour.
    let mut m = sample(ROWS, 5);
    let mut values = m.as_slice().to_vec();
    for i in 0..ROWS {
        values[i * DIM] = 1000.0 + 7.0 * i as f32;
    }
    m = Matrix::new(values, ROWS, DIM).unwrap();
    let input = dir.path().join("data.npy");
    write_matrix_npy(&input, &m).unwrap();
    let out = dir.path().join("g.npz");
    ok(&["graph", s(&input), "-k", &ROWS.to_string(), "--include-self", "-o", s(&out), "--backend", "cpu"]);
    let g = read_npz(&out);
    for i in 0..ROWS {
        assert_eq!(g.indices[i * ROWS], i as i64);
        assert_eq!(g.distances[i * ROWS], 0.0);
    }
    for metric in ["sqeuclidean", "cosine", "correlation", "inner_product", "l2", "ip", "pearson"] {
        ok(&["graph", s(&input), "-k", "3", "--metric", metric, "-o", s(&out), "--backend", "cpu"]);
        let g = read_npz(&out);
        assert_eq!((g.rows, g.k), (ROWS, 3), "{metric}");
    }
}

#[test]
fn quiet_is_silent_and_status_goes_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.npy");
    write_matrix_npy(&input, &sample(ROWS, 6)).unwrap();
    let out = dir.path().join("g.npz");
    let run = knng(&["graph", s(&input), "-k", "2", "-o", s(&out), "--backend", "cpu", "--quiet"]);
    assert!(run.status.success());
    assert!(run.stdout.is_empty() && run.stderr.is_empty(), "{}", text(&run.stderr));
    let status = ok(&["graph", s(&input), "-k", "2", "-o", s(&out), "--backend", "cpu"]);
    assert!(status.contains("wrote") && status.contains("cpu"), "{status}");
    // Not a terminal: no progress bar escape codes.
    assert!(!status.contains('\u{1b}'), "{status}");
}

#[test]
fn bad_inputs_fail_cleanly_without_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = d.join("good.npy");
    write_matrix_npy(&good, &sample(ROWS, 7)).unwrap();
    let other_dim = d.join("other.npy");
    write_matrix_npy(&other_dim, &Matrix::new(vec![1.0; 15], 5, 3).unwrap()).unwrap();

    std::fs::write(d.join("junk.npy"), b"this is certainly not a numpy file").unwrap();
    std::fs::write(d.join("junk.fbin"), b"\xff\xff\xff\x7f\x02\x00\x00\x00 and more junk").unwrap();
    let mut truncated = Vec::new();
    for i in 0..4 {
        truncated.extend_from_slice(&3i32.to_le_bytes());
        for j in 0..3 {
            truncated.extend_from_slice(&((i * 3 + j) as f32).to_le_bytes());
        }
    }
    truncated.truncate(truncated.len() - 6);
    std::fs::write(d.join("short.fvecs"), truncated).unwrap();
    std::fs::write(d.join("ragged.csv"), "1,2,3\n4,5,6\n7,8\n").unwrap();
    std::fs::write(d.join("words.csv"), "x,y\n1,2\n3,oops\n").unwrap();
    std::fs::write(d.join("nan.csv"), "1,2\n3,4\n5,nan\n7,8\n").unwrap();
    std::fs::write(d.join("inf.tsv"), "1\t2\n3\t4\ninf\t4\n").unwrap();
    std::fs::write(d.join("data.parquet"), "x").unwrap();
    let before = listing(d);

    let out = d.join("out.npz");
    let o = s(&out);
    let g = s(&good);
    let cpu = ["--backend", "cpu"];
    let graph = |input: &str, k: &str| -> Vec<String> {
        let mut v: Vec<String> = ["graph", input, "-k", k, "-o", o].iter().map(|x| x.to_string()).collect();
        v.extend(cpu.iter().map(|x| x.to_string()));
        v
    };
    let run = |args: Vec<String>, code: i32, needles: &[&str]| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        fails(&refs, code, needles);
        assert_eq!(listing(d), before, "knng {args:?} left files behind");
    };
    let p = |name: &str| s(&d.join(name)).to_string();

    run(graph(&p("missing.npy"), "3"), 1, &["missing.npy", "not found"]);
    run(graph(&p("junk.npy"), "3"), 1, &["junk.npy", "not a valid .npy"]);
    run(graph(&p("junk.fbin"), "3"), 1, &["junk.fbin", "bytes"]);
    run(graph(&p("short.fvecs"), "3"), 1, &["short.fvecs", "truncated", "64 bytes", "58 bytes"]);
    run(graph(&p("ragged.csv"), "1"), 1, &["ragged.csv", "line 3 has 2 fields"]);
    run(graph(&p("words.csv"), "1"), 1, &["words.csv", "line 3, column 2", "\"oops\""]);
    run(graph(&p("nan.csv"), "1"), 1, &["nan.csv", "NaN", "row 2", "column 1"]);
    run(graph(&p("inf.tsv"), "1"), 1, &["inf.tsv", "inf", "row 2", "column 0"]);
    run(graph(&p("data.parquet"), "3"), 1, &["data.parquet", ".npy", ".fvecs", ".csv"]);
    run(graph(g, "0"), 2, &["-k", "at least 1"]);
    run(graph(g, "-3"), 2, &["-k"]);
    run(graph(g, &ROWS.to_string()), 1, &["-k", "too large", "good.npy", &format!("{ROWS} rows")]);
    run(
        graph(g, "3").into_iter().chain(["--metric".into(), "manhattan".into()]).collect(),
        2,
        &["manhattan", "--metric"],
    );
    run(graph(g, "3").into_iter().chain(["--backend".into(), "tpu".into()]).collect(), 2, &["tpu", "--backend"]);
    let search = |corpus: &str, queries: &str, k: &str| -> Vec<String> {
        ["search", corpus, "--queries", queries, "-k", k, "-o", o, "--backend", "cpu"]
            .iter()
            .map(|x| x.to_string())
            .collect()
    };
    run(search(g, &p("other.npy"), "3"), 1, &["dimension mismatch", "good.npy", "other.npy", "12", "3"]);
    run(search(&p("other.npy"), &p("other.npy"), "6"), 1, &["-k", "other.npy", "5 rows"]);
    run(search(g, &p("nan.csv"), "3"), 1, &["dimension mismatch"]);
    run(search(&p("nan.csv"), &p("nan.csv"), "1"), 1, &["nan.csv", "NaN", "row 2"]);

    // Unwritable outputs are refused before any reading or computing.
    let unwritable = |out: &str| -> Vec<String> {
        ["graph", &p("missing.npy"), "-k", "3", "-o", out, "--backend", "cpu"].iter().map(|x| x.to_string()).collect()
    };
    run(unwritable(&p("no-such-dir/out.npz")), 1, &["no-such-dir", "does not exist"]);
    run(unwritable(&format!("{g}/out.npz")), 1, &["good.npy", "not a directory"]);
    run(unwritable(&p("out.parquet")), 1, &["out.parquet", ".npz", ".mtx"]);
    run(unwritable(s(d)), 1, &["output"]);

    // An output that is also an input is refused, and the input survives.
    std::fs::write(d.join("self.csv"), "1,2\n3,4\n5,6\n").unwrap();
    let before = listing(d);
    let self_csv = p("self.csv");
    let args = vec!["graph", &self_csv, "-k", "1", "-o", &self_csv, "--backend", "cpu"];
    fails(&args, 1, &["self.csv", "overwrite the input"]);
    assert_eq!(listing(d), before);
    assert_eq!(std::fs::read_to_string(d.join("self.csv")).unwrap(), "1,2\n3,4\n5,6\n");
}

#[test]
fn failed_run_keeps_an_existing_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g.csv");
    std::fs::write(&out, "previous result\n").unwrap();
    std::fs::write(dir.path().join("nan.csv"), "1,2\nnan,3\n5,6\n").unwrap();
    fails(&["graph", s(&dir.path().join("nan.csv")), "-k", "1", "-o", s(&out), "--backend", "cpu"], 1, &["NaN"]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous result\n");
    assert_eq!(listing(dir.path()), ["g.csv", "nan.csv"]);
}

#[test]
fn usage_errors_exit_2() {
    fails(&["graph"], 2, &["INPUT"]);
    fails(&["search", "a.npy", "-k", "3", "-o", "x.npz"], 2, &["--queries"]);
    fails(&["frobnicate"], 2, &["frobnicate"]);
    fails(&["graph", "a.npy", "-k", "3", "-o", "x.npz", "--threads", "0"], 2, &["--threads"]);
}

#[test]
fn demo_and_bench_run_small() {
    let out = knng(&["demo", "--n", "400", "--d", "24", "-k", "5", "--backend", "cpu", "--quiet"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(said.contains("64 exact") && said.contains("cpu"), "{said}");

    // --threads sizes the pool before the bench generates its data in parallel.
    let out = knng(&["bench", "--n", "300", "--d", "16", "-k", "4", "--backend", "cpu", "--json", "--threads", "1"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    let line = said.trim();
    assert!(line.starts_with('{') && line.ends_with('}') && !line.contains('\n'), "{said}");
    for key in
        ["\"what\":\"graph\"", "\"n\":300", "\"d\":16", "\"k\":4", "\"seconds\":", "\"backend\":\"cpu: 1 threads"]
    {
        assert!(line.contains(key), "{key} not in {line}");
    }
    let out = knng(&[
        "bench",
        "--n",
        "300",
        "--d",
        "16",
        "-k",
        "4",
        "--what",
        "search",
        "--queries",
        "50",
        "--backend",
        "cpu",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("search n=300 queries=50"), "{}", text(&out.stdout));
}

#[test]
fn info_lists_the_choice() {
    let out = knng(&["info"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("--backend auto uses"), "{}", text(&out.stdout));
}

/// `knng bench --what select` of `rows` x `cols` keys with both selects (subgroup and
/// workgroup), plus `extra` flags: each run's standard output, after asserting it succeeded.
fn bench_select_both_ways(rows: &str, cols: &str, k: &str, extra: &[&str]) -> Vec<String> {
    [&[][..], &["--no-subgroups"][..]]
        .into_iter()
        .map(|select| {
            let mut args =
                vec!["bench", "--what", "select", "--rows", rows, "--cols", cols, "-k", k, "--backend", "gpu"];
            args.extend_from_slice(select);
            args.extend_from_slice(extra);
            let out = knng(&args);
            assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
            text(&out.stdout)
        })
        .collect()
}

/// The select-only benchmark runs the GPU kernel (lavapipe in CI; a test without a GPU
/// adapter fails) and checks its own answer before reporting a time.
#[test]
fn bench_select_runs_on_the_gpu_and_checks_itself() {
    for said in bench_select_both_ways("40", "3000", "100", &["--json", "--profile"]) {
        for key in ["\"what\":\"select\"", "\"rows\":40", "\"cols\":3000", "\"k\":100", "\"backend\":\"gpu"] {
            assert!(said.contains(key), "{key} not in {said}");
        }
    }
    fails(&["bench", "--what", "select", "--rows", "4", "--cols", "10", "-k", "3", "--backend", "cpu"], 1, &["GPU"]);
}

/// Rows as long as a distance tile's take the select's whole first-pass machinery (the pivot
/// lowered by a wider sample, the histogram tail, and, on this seeded data, a row whose first
/// pivot leaves too few keys under it and takes the BAND pass); the bench checks every row
/// against a selection on the host and fails otherwise.
#[test]
fn bench_select_checks_every_row_of_long_rows() {
    bench_select_both_ways("256", "65536", "2048", &[]);
}

/// The distance-only benchmark runs the GPU kernel and checks a row of its keys against
/// float64 before reporting TFLOP/s.
#[test]
fn bench_distance_runs_on_the_gpu_and_checks_itself() {
    let out = knng(&[
        "bench",
        "--what",
        "distance",
        "--rows",
        "200",
        "--cols",
        "700",
        "--d",
        "37",
        "--backend",
        "gpu",
        "--json",
        "--profile",
    ]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    for key in ["\"what\":\"distance\"", "\"rows\":200", "\"cols\":700", "\"d\":37", "\"backend\":\"gpu", "\"tflops\":"]
    {
        assert!(said.contains(key), "{key} not in {said}");
    }
    assert!(!said.contains("\"gpu_s\":null"), "profiling gives the kernel's time: {said}");
    fails(&["bench", "--what", "distance", "--rows", "4", "--cols", "10", "--backend", "cpu"], 1, &["GPU"]);
}

/// `--select sort` on `graph` and `search`, on the CPU and on the GPU (lavapipe in CI): the
/// float64 answer, byte for byte the quick multi-select's output, and a status line that says
/// which selector ran.
#[test]
fn select_sort_gives_the_quick_selects_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = sample(ROWS, 5);
    let queries = sample(13, 6);
    let (c, q) = (dir.path().join("corpus.fvecs"), dir.path().join("queries.fvecs"));
    write_vecs(&c, &corpus, 4, |v| v.to_le_bytes().to_vec());
    write_vecs(&q, &queries, 4, |v| v.to_le_bytes().to_vec());
    for backend in ["cpu", "gpu"] {
        let run = |select: &str, search: bool| {
            let out = dir.path().join(format!("{backend}-{select}-{search}.npz"));
            let mut args = vec!["graph", s(&c)];
            if search {
                args = vec!["search", s(&c), "--queries", s(&q)];
            }
            args.extend(["-k", "11", "--backend", backend, "--select", select, "-o", s(&out)]);
            let status = ok(&args);
            assert_eq!(status.contains("sort select"), select == "sort", "{args:?}: {status}");
            out
        };
        for search in [false, true] {
            let sorted = run("sort", search);
            let wanted = if search { &queries } else { &corpus };
            check_exact(&corpus, wanted, &read_npz(&sorted), !search);
            let quick = run("quick", search);
            assert_eq!(std::fs::read(&sorted).unwrap(), std::fs::read(&quick).unwrap(), "{backend}, search {search}");
        }
    }
    fails(&["graph", s(&c), "-k", "3", "-o", "x.npz", "--select", "heap"], 2, &["--select", "heap"]);
}

/// 2-D points, many of them shared by several rows, as `.npy`.
fn write_points(path: &Path, rows: usize, seed: u64) -> Matrix {
    let mut rng = StdRng::seed_from_u64(seed);
    let values: Vec<f32> = (0..rows * 2).map(|_| rng.random_range(0..12u8) as f32 * 0.5).collect();
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, 2), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, bytes).unwrap();
    Matrix::new(values, rows, 2).unwrap()
}

#[test]
fn algorithm_kdtree_gives_the_float64_answer_and_says_what_ran() {
    let dir = tempfile::tempdir().unwrap();
    let (c, q) = (dir.path().join("points.npy"), dir.path().join("queries.npy"));
    let corpus = write_points(&c, 150, 7);
    let queries = write_points(&q, 20, 8);
    for search in [false, true] {
        let mut distances = Vec::new();
        for algorithm in ["kdtree", "brute", "auto"] {
            let out = dir.path().join(format!("{algorithm}-{search}.npz"));
            let mut args = vec!["graph", s(&c)];
            if search {
                args = vec!["search", s(&c), "--queries", s(&q)];
            }
            args.extend(["-k", "9", "--backend", "cpu", "--algorithm", algorithm, "-o", s(&out)]);
            let status = ok(&args);
            // `auto` takes the kd-tree for 2-D euclidean data on the CPU.
            let tree = algorithm != "brute";
            assert_eq!(status.contains("algorithm: kd-tree"), tree, "{args:?}: {status}");
            assert_eq!(status.contains("by the kd-tree"), tree, "{args:?}: {status}");
            let g = read_npz(&out);
            check_exact(&corpus, if search { &queries } else { &corpus }, &g, !search);
            distances.push(g.distances);
        }
        // Ties may pick different rows, never different distances.
        assert!(distances.windows(2).all(|w| w[0] == w[1]), "search {search}");
        // The hybrid on the GPU (lavapipe in CI): the kd-tree's bytes, and a status line that
        // says how many rows the grid answered.
        let kd_tree = std::fs::read(dir.path().join(format!("kdtree-{search}.npz"))).unwrap();
        let out = dir.path().join(format!("hybrid-{search}.npz"));
        let mut args = vec!["graph", s(&c)];
        if search {
            args = vec!["search", s(&c), "--queries", s(&q)];
        }
        args.extend(["-k", "9", "--backend", "gpu", "--algorithm", "hybrid", "-o", s(&out)]);
        let status = ok(&args);
        assert!(status.contains("algorithm: hybrid") && status.contains("by the GPU grid ("), "{args:?}: {status}");
        assert_eq!(std::fs::read(&out).unwrap(), kd_tree, "{args:?}");
    }
    // Where the kd-tree does not apply, brute force runs and says why.
    let out = dir.path().join("other-metrics.npz");
    let status = ok(&[
        "graph",
        s(&c),
        "-k",
        "3",
        "-m",
        "sqeuclidean",
        "--backend",
        "cpu",
        "--algorithm",
        "kdtree",
        "-o",
        s(&out),
    ]);
    assert!(status.contains("by the kd-tree"), "{status}");
    let status = ok(&[
        "graph",
        s(&c),
        "-k",
        "3",
        "-m",
        "inner_product",
        "--backend",
        "cpu",
        "--algorithm",
        "kdtree",
        "-o",
        s(&out),
    ]);
    assert!(status.contains("algorithm: brute force, as the kd-tree takes euclidean"), "{status}");
    assert!(!status.contains("by the kd-tree"), "{status}");
    fails(&["graph", s(&c), "-k", "3", "-o", "x.npz", "--algorithm", "balltree"], 2, &["--algorithm", "balltree"]);
}

/// `--algorithm covertree` on points with shared rows, as a graph and a search: the float64
/// answer, and a status line that says what ran; brute force, with the reason, for inner
/// products. `auto` on the CPU takes the cover tree for many rows of low intrinsic dimension
/// in 16 columns, and says the estimate.
#[test]
fn algorithm_covertree_gives_the_float64_answer_and_auto_takes_it_for_low_intrinsic_dimension() {
    let dir = tempfile::tempdir().unwrap();
    let (c, q) = (dir.path().join("points.npy"), dir.path().join("queries.npy"));
    let corpus = write_points(&c, 150, 17);
    let queries = write_points(&q, 20, 18);
    for search in [false, true] {
        let out = dir.path().join(format!("cover-{search}.npz"));
        let mut args = vec!["graph", s(&c)];
        if search {
            args = vec!["search", s(&c), "--queries", s(&q)];
        }
        args.extend(["-k", "9", "--backend", "cpu", "--algorithm", "covertree", "-o", s(&out)]);
        let status = ok(&args);
        assert!(status.contains("algorithm: cover tree") && status.contains("by the cover tree"), "{status}");
        check_exact(&corpus, if search { &queries } else { &corpus }, &read_npz(&out), !search);
    }
    let out = dir.path().join("inner.npz");
    let args = ["graph", s(&c), "-k", "3", "-m", "inner_product", "--algorithm", "cover-tree", "-o", s(&out)];
    let status = ok(&args);
    assert!(status.contains("brute force, as the cover tree does not take inner_product"), "{status}");
    assert!(!status.contains("by the cover tree"), "{status}");

    // Two uniform coordinates through a fixed linear map into 16 columns.
    let mut rng = StdRng::seed_from_u64(33);
    let map: Vec<f32> = (0..32).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let rows: Vec<Vec<f32>> = (0..60_000)
        .map(|_| {
            let z = [rng.random_range(0.0f32..1.0), rng.random_range(0.0f32..1.0)];
            (0..16).map(|c| z[0] * map[c] + z[1] * map[16 + c]).collect()
        })
        .collect();
    let flat = dir.path().join("flat.npy");
    write_matrix_npy(&flat, &Matrix::from_rows(&rows).unwrap()).unwrap();
    let status = ok(&["graph", s(&flat), "-k", "4", "--backend", "cpu", "-o", s(&out)]);
    let said = "algorithm: cover tree on the CPU's threads (16 dimensions, euclidean, intrinsic dimension about ";
    let estimate: f64 =
        status.split(said).nth(1).and_then(|r| r.split(')').next()).and_then(|m| m.parse().ok()).unwrap_or(0.0);
    assert!((1.5..2.6).contains(&estimate), "{status}");
    assert!(status.contains("by the cover tree"), "{status}");
}

/// `knng index build` then `knng search INDEX.knng`: a cover-tree index and one of the rows
/// alone give the float64 answer under the metric they were built for, the same bytes as a
/// search of the file; `index info` says what an index holds; a damaged index, another
/// metric and a path without `.knng` are refused with messages that say so, writing nothing.
#[test]
fn a_saved_index_is_searched_by_the_cover_tree_and_damage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (c, q) = (dir.path().join("points.npy"), dir.path().join("queries.npy"));
    let corpus = write_points(&c, 150, 21);
    let queries = write_points(&q, 20, 22);
    let index = dir.path().join("points.knng");
    for (algorithm, metric, said) in
        [("covertree", "sqeuclidean", "a cover tree over 150 rows"), ("brute", "euclidean", "(no tree)")]
    {
        let status =
            ok(&["index", "build", s(&c), "-o", s(&index), "--algorithm", algorithm, "-m", metric, "--backend", "cpu"]);
        assert!(status.contains(said) && status.contains(metric), "{status}");
        let info = text(&knng(&["index", "info", s(&index)]).stdout);
        assert!(info.contains(said), "{info}");
        let (from_index, from_file) = (dir.path().join("index.npz"), dir.path().join("file.npz"));
        let status =
            ok(&["search", s(&index), "--queries", s(&q), "-k", "7", "--backend", "cpu", "-o", s(&from_index)]);
        assert!(status.contains(&format!("loaded {}", s(&index))), "{status}");
        assert_eq!(status.contains("by the cover tree"), algorithm == "covertree", "{status}");
        let args =
            ["search", s(&c), "--queries", s(&q), "-k", "7", "-m", metric, "--backend", "cpu", "-o", s(&from_file)];
        ok(&args);
        assert_eq!(std::fs::read(&from_index).unwrap(), std::fs::read(&from_file).unwrap(), "{algorithm}");
        if metric == "euclidean" {
            check_exact(&corpus, &queries, &read_npz(&from_index), false);
        }
    }
    let out = dir.path().join("refused.npz");
    let search = |index: &Path, extra: &[&str], needles: &[&str]| {
        let mut args = vec!["search", s(index), "--queries", s(&q), "-k", "3", "-o", s(&out)];
        args.extend(extra);
        fails(&args, 1, needles);
        assert!(!out.exists());
    };
    search(&index, &["-m", "cosine"], &["built for euclidean distances, not cosine"]);
    let bytes = std::fs::read(&index).unwrap();
    let damaged = dir.path().join("damaged.knng");
    std::fs::write(&damaged, &bytes[..bytes.len() - 100]).unwrap();
    search(&damaged, &[], &[s(&damaged), "truncated"]);
    let mut flipped = bytes.clone();
    flipped[bytes.len() - 100] ^= 4;
    std::fs::write(&damaged, &flipped).unwrap();
    search(&damaged, &[], &[s(&damaged), "corpus array fails its checksum"]);
    let mut newer = bytes;
    newer[8] = 9;
    std::fs::write(&damaged, &newer).unwrap();
    search(&damaged, &[], &[s(&damaged), "index format 9", "build the index again"]);
    fails(&["index", "build", s(&c), "-o", s(&out)], 1, &["a file named *.knng"]);
    fails(&["index", "build", s(&c), "-o", s(&index), "--algorithm", "kdtree"], 1, &["built by each search"]);
}
