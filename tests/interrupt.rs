//! `Options::interrupt` stops a search or a graph with `Error::Interrupted`, on every engine,
//! whether it was set before the call or while the call runs; once cleared, the same engine
//! answers exactly again.
//!
//! The GPU tests fail when no adapter is found (`KNNG_TEST_ADAPTER` chooses one): in CI they
//! run on Mesa's lavapipe.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::check;
use knng::{Algorithm, Backend, Error, Knn, Matrix, Metric, Options};
use rand::{Rng, SeedableRng};

fn data(n: usize, d: usize, seed: u64) -> Matrix {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    Matrix::new((0..n * d).map(|_| rng.random::<f32>()).collect(), n, d).unwrap()
}

/// An engine whose flag is set by its own progress report once some rows are done: the
/// interrupt then arrives in the middle of the work, between two tiles or blocks.
/// `late`: counts the progress reports made after the flag was set.
fn engine(options: Options, flag: &Arc<AtomicBool>, mid_run: bool, late: &Arc<AtomicU64>) -> Knn {
    let (setter, late) = (flag.clone(), late.clone());
    let progress: knng::Progress = Arc::new(move |done, _total| {
        if setter.load(Ordering::Relaxed) {
            late.fetch_add(1, Ordering::Relaxed);
        }
        if mid_run && done > 0 {
            setter.store(true, Ordering::Relaxed);
        }
    });
    let wants_gpu = options.backend == Backend::Gpu;
    let knn = Knn::new(Options { interrupt: Some(flag.clone()), progress: Some(progress), ..options })
        .unwrap_or_else(|e| panic!("cannot open the engine (a GPU test needs an adapter): {e}"));
    assert_eq!(knn.is_gpu(), wants_gpu, "the engine opened is {}", knn.description());
    knn
}

fn gpu_options() -> Options {
    Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        // Several query tiles, so that a run has a next tile to stop before.
        max_query_tile: Some(64),
        ..Options::default()
    }
}

/// Runs a graph and a search with the flag set before the call and set mid-run, each ending
/// in `Error::Interrupted`, then clears the flag and checks exact answers from the same engine.
fn stops_and_resumes(label: &str, options: Options, n: usize, d: usize, metric: Metric) {
    let corpus = data(n, d, 7);
    let queries = data(n / 2, d, 8);
    let k = 5;
    for mid_run in [false, true] {
        let flag = Arc::new(AtomicBool::new(!mid_run));
        let late = Arc::new(AtomicU64::new(0));
        let knn = engine(options.clone(), &flag, mid_run, &late);
        let label = format!("[{}] {label}, set {}", knn.description(), if mid_run { "mid-run" } else { "before" });
        match knn.graph(corpus.view(), k, metric) {
            Err(Error::Interrupted) => {}
            other => panic!("{label}: graph gave {:?} instead of Error::Interrupted", other.map(|g| g.queries)),
        }
        // Set after the first rows were done, the flag stopped the work before the rest: at
        // most the blocks then in flight on other threads, and a sweep's closing report,
        // were reported after it.
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get()) as u64;
        let late = late.load(Ordering::Relaxed);
        assert!(late <= threads + 1, "{label}: {late} progress reports after the interrupt");
        flag.store(!mid_run, Ordering::Relaxed);
        match knn.search(corpus.view(), queries.view(), k, metric) {
            Err(Error::Interrupted) => {}
            other => panic!("{label}: search gave {:?} instead of Error::Interrupted", other.map(|g| g.queries)),
        }
        assert_eq!(Error::Interrupted.to_string(), "interrupted");

        // Cleared (and no longer set by the progress report): exact answers again.
        let knn = engine(options.clone(), &flag, false, &Arc::default());
        flag.store(false, Ordering::Relaxed);
        let graph = knn.graph(corpus.view(), k, metric).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&label, &corpus, &corpus, k, metric, true, &graph);
        let found = knn.search(corpus.view(), queries.view(), k, metric).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&label, &corpus, &queries, k, metric, false, &found);
    }
}

#[test]
fn cpu_brute_force_stops() {
    let options = Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() };
    stops_and_resumes("cpu brute force", options.clone(), 3000, 24, Metric::Cosine);
    // Graphs swept in symmetric blocks of row pairs.
    let symmetric = Options { symmetric_graphs: Some(true), ..options };
    stops_and_resumes("cpu symmetric blocks", symmetric, 3000, 24, Metric::Euclidean);
}

#[test]
fn cpu_kd_tree_stops() {
    let options = Options { backend: Backend::Cpu, algorithm: Algorithm::KdTree, ..Options::default() };
    stops_and_resumes("cpu kd-tree", options, 6000, 3, Metric::Euclidean);
}

#[test]
fn cpu_cover_tree_stops() {
    let options = Options { backend: Backend::Cpu, algorithm: Algorithm::CoverTree, ..Options::default() };
    stops_and_resumes("cpu cover tree", options, 3000, 24, Metric::Cosine);
}

#[test]
fn gpu_cover_tree_stops() {
    let options = Options { algorithm: Algorithm::CoverTree, ..gpu_options() };
    stops_and_resumes("gpu cover tree", options, 3000, 24, Metric::Cosine);
}

#[test]
fn cpu_partitioned_graph_stops() {
    let options = Options { backend: Backend::Cpu, block_rows: Some(500), ..Options::default() };
    stops_and_resumes("cpu partitioned", options, 2000, 16, Metric::SqEuclidean);
}

#[test]
fn gpu_brute_force_stops() {
    stops_and_resumes(
        "gpu brute force",
        Options { symmetric_graphs: Some(false), ..gpu_options() },
        600,
        16,
        Metric::Euclidean,
    );
    stops_and_resumes(
        "gpu symmetric tiles",
        Options { symmetric_graphs: Some(true), ..gpu_options() },
        600,
        16,
        Metric::Correlation,
    );
}

#[test]
fn gpu_partitioned_graph_stops() {
    let options = Options { block_rows: Some(200), ..gpu_options() };
    stops_and_resumes("gpu partitioned", options, 600, 16, Metric::Euclidean);
}

#[test]
fn gpu_hybrid_stops() {
    let options = Options { algorithm: Algorithm::Hybrid, ..gpu_options() };
    stops_and_resumes("gpu hybrid", options, 6000, 2, Metric::Euclidean);
}
