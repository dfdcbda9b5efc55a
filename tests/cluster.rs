//! Graphs and searches shared by the ranks of a cluster, each rank a thread of this process and the
//! messages between them channels: rank 0's answer is exact and the same as one process's,
//! the other ranks receive no rows, every rank computes its share of the blocks, and a rank
//! that fails ends the others' calls with an error rather than a hang. The MPI form of the
//! same (`mpirun` over the command line) is in `tests/mpi.rs`.

mod common;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use common::{cases, check, Case};
use knng::{Backend, Cluster, Error, Knn, Metric, Neighbors, Options, RunStats};
use rand::{Rng, SeedableRng};

/// One rank of a job of threads.
struct ThreadRank {
    rank: usize,
    /// To each rank (its slot for this rank's messages).
    to: Vec<Sender<Vec<u8>>>,
    /// From each rank.
    from: Vec<Mutex<Receiver<Vec<u8>>>>,
}

impl Cluster for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.to.len()
    }

    fn send(&self, to: usize, bytes: &[u8]) -> knng::Result<()> {
        self.to[to].send(bytes.to_vec()).map_err(|_| Error::Cluster(format!("rank {to} has ended")))
    }

    fn receive(&self, from: usize) -> knng::Result<Vec<u8>> {
        let receiver = self.from[from].lock().unwrap();
        receiver.recv().map_err(|_| Error::Cluster(format!("rank {from} ended without sending")))
    }
}

/// The ranks of a job of `size` threads.
fn job(size: usize) -> Vec<ThreadRank> {
    // channels[a][b]: from rank a to rank b.
    let mut senders: Vec<Vec<Option<Sender<Vec<u8>>>>> = (0..size).map(|_| (0..size).map(|_| None).collect()).collect();
    let mut receivers: Vec<Vec<Option<Receiver<Vec<u8>>>>> =
        (0..size).map(|_| (0..size).map(|_| None).collect()).collect();
    for a in 0..size {
        for b in 0..size {
            let (tx, rx) = channel();
            senders[a][b] = Some(tx);
            receivers[b][a] = Some(rx);
        }
    }
    senders
        .into_iter()
        .zip(receivers)
        .enumerate()
        .map(|(rank, (to, from))| ThreadRank {
            rank,
            to: to.into_iter().map(Option::unwrap).collect(),
            from: from.into_iter().map(|r| Mutex::new(r.unwrap())).collect(),
        })
        .collect()
}

/// Runs `graph` on every rank of a job of `size` threads, each with `options` and its rank,
/// and returns each rank's answer (or error) and run statistics, by rank.
fn on_ranks(
    size: usize,
    options: &Options,
    graph: impl Fn(&Knn, usize) -> knng::Result<Neighbors> + Sync,
) -> Vec<(knng::Result<Neighbors>, RunStats)> {
    std::thread::scope(|scope| {
        let ranks: Vec<_> = job(size)
            .into_iter()
            .map(|rank| {
                let r = rank.rank;
                let options = Options { cluster: Some(Arc::new(rank)), ..options.clone() };
                let graph = &graph;
                scope.spawn(move || {
                    let knn = Knn::new(options).unwrap();
                    let answer = graph(&knn, r);
                    (answer, knn.last_run())
                })
            })
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// The graphs of the table and one of many exact duplicates (later rounds).
fn graph_cases() -> Vec<Case> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let mut rows: Vec<Vec<f32>> = (0..120).map(|_| vec![0.5, -1.0, 2.0]).collect();
    rows.extend((0..70).map(|_| (0..3).map(|_| rng.random_range(-3.0..3.0)).collect::<Vec<f32>>()));
    let duplicates = Case {
        name: "euclidean: 120 duplicates among 190 rows, k=5".into(),
        corpus: knng::Matrix::from_rows(&rows).unwrap(),
        queries: None,
        k: 5,
        metric: Metric::Euclidean,
    };
    cases().into_iter().filter(|c| c.queries.is_none()).chain([duplicates]).collect()
}

/// Every graph case shared by `size` ranks with `options`: rank 0's answer is exact and
/// equal to `single`'s, the others' have no rows, and every rank computed blocks.
fn check_shared(size: usize, options: &Options, single: &Knn) -> Vec<Vec<RunStats>> {
    let mut all = Vec::new();
    // Software GPUs take the small cases only.
    let most = if options.backend == Backend::Gpu { 40_000 } else { usize::MAX };
    for case in graph_cases().into_iter().filter(|c| c.corpus.rows() * c.corpus.cols() <= most) {
        let label = format!("[{size} ranks, {:?}] {}", options.backend, case.name);
        let runs = on_ranks(size, options, |knn, _| knn.graph(case.corpus.view(), case.k, case.metric));
        let whole = single.graph(case.corpus.view(), case.k, case.metric).unwrap();
        let mut stats = Vec::new();
        for (rank, (answer, run)) in runs.into_iter().enumerate() {
            let answer = answer.unwrap_or_else(|e| panic!("{label}: rank {rank}: {e}"));
            if rank == 0 {
                check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &answer);
                same_graph(&label, &answer, &whole);
            } else {
                assert_eq!(answer.queries, 0, "{label}: rank {rank} received rows");
            }
            // Rows whose fp32 keys overflow are answered by the host, by design.
            if !case.name.contains("f32's range") {
                assert_eq!(run.rows_brute_forced, 0, "{label}: rank {rank}: {run:?}");
            }
            stats.push(run);
        }
        // A rank that computed blocks sent lists to their owners or finished rows to rank 0.
        for (rank, run) in stats.iter().enumerate().skip(1) {
            assert!(run.blocks == 0 || run.bytes_sent > 0, "{label}: rank {rank} sent nothing: {run:?}");
        }
        // The P (P + 1) / 2 jobs of P blocks, dealt in turn.
        let jobs: usize = stats.iter().map(|s| s.blocks).sum();
        let p = (0..=jobs).find(|p| p * (p + 1) / 2 >= jobs).unwrap();
        assert_eq!(p * (p + 1) / 2, jobs, "{label}: {jobs} jobs");
        for (rank, run) in stats.iter().enumerate() {
            assert_eq!(run.blocks, (jobs + size - 1 - rank) / size, "{label}: rank {rank}'s share of {jobs} jobs");
        }
        all.push(stats);
    }
    all
}

/// `got` is `want`: the same distances, bit for bit, and the same neighbours, except among
/// rows exactly as far as the k-th, where the contract lets either be returned (a run of
/// duplicates across the k-th place).
fn same_graph(label: &str, got: &Neighbors, want: &Neighbors) {
    assert_eq!((got.queries, got.k), (want.queries, want.k), "{label}: shape");
    let bits = |d: &[f32]| d.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got.distances), bits(&want.distances), "{label}: distances differ from one process's");
    for i in 0..got.queries {
        let (row, kth) = (i * got.k..(i + 1) * got.k, want.distances[(i + 1) * got.k - 1]);
        for at in row.filter(|&at| want.distances[at] != kth) {
            assert_eq!(got.indices[at], want.indices[at], "{label}: row {i}'s neighbours differ from one process's");
        }
    }
}

#[test]
fn cpu_ranks_share_graphs() {
    let single = Knn::new(Options { backend: Backend::Cpu, ..Options::default() }).unwrap();
    for size in [2, 3, 4] {
        let options = Options { backend: Backend::Cpu, block_rows: Some(23), ..Options::default() };
        let runs = check_shared(size, &options, &single);
        assert!(runs.iter().flatten().any(|s| s.rounds > 1), "{size} ranks: no later round");
        assert!(runs.iter().any(|r| r.iter().all(|s| s.blocks > 1)), "{size} ranks: no graph shared by all");
    }
    // The planner's blocks (two a rank at least), and lists spilled on every rank.
    let options = Options { backend: Backend::Cpu, ..Options::default() };
    check_shared(3, &options, &single);
    let options =
        Options { backend: Backend::Cpu, block_rows: Some(23), lists_in_memory: Some(1), ..Options::default() };
    let runs = check_shared(2, &options, &single);
    assert!(runs.iter().flatten().any(|s| s.bytes_spilled > 0), "no rank spilled lists");
}

/// A search over 3 ranks: rank 0 receives every query's answer, exact and the same as one
/// process's; the others receive none.
#[test]
fn cpu_ranks_share_searches() {
    let single = Knn::new(Options { backend: Backend::Cpu, ..Options::default() }).unwrap();
    let options = Options { backend: Backend::Cpu, ..Options::default() };
    for case in cases().into_iter().filter(|c| c.queries.is_some()) {
        let queries = case.queries.as_ref().unwrap();
        let label = format!("[3 ranks] {}", case.name);
        let runs = on_ranks(3, &options, |knn, _| knn.search(case.corpus.view(), queries.view(), case.k, case.metric));
        let whole = single.search(case.corpus.view(), queries.view(), case.k, case.metric).unwrap();
        for (rank, (answer, _)) in runs.into_iter().enumerate() {
            let answer = answer.unwrap_or_else(|e| panic!("{label}: rank {rank}: {e}"));
            if rank == 0 {
                check(&label, &case.corpus, queries, case.k, case.metric, false, &answer);
                same_graph(&label, &answer, &whole);
            } else {
                assert_eq!(answer.queries, 0, "{label}: rank {rank} received rows");
            }
        }
    }
}

/// Two ranks on the GPU, with subgroups where the adapter has them and without.
#[test]
fn gpu_ranks_share_graphs() {
    let adapter = std::env::var("KNNG_TEST_ADAPTER").ok();
    let single = Knn::new(Options { backend: Backend::Cpu, ..Options::default() }).unwrap();
    for no_subgroups in [false, true] {
        let options = Options {
            backend: Backend::Gpu,
            adapter: adapter.clone(),
            no_subgroups,
            block_rows: Some(64),
            ..Options::default()
        };
        let probe = Knn::new(options.clone()).unwrap_or_else(|e| panic!("GPU test without a usable GPU adapter: {e}"));
        assert!(probe.is_gpu(), "the GPU backend was not used: {}", probe.description());
        if !no_subgroups && !probe.description().contains("subgroup select") {
            eprintln!("SKIPPED: {} has no subgroup operations", probe.description());
            continue;
        }
        drop(probe);
        for stats in check_shared(2, &options, &single) {
            assert!(stats.iter().all(|s| s.workers == 1), "{stats:?}");
        }
    }
}

/// A rank whose call fails (here: it reads data of another width) ends every rank's call
/// with an error; none waits for ever.
#[test]
fn a_failing_rank_ends_the_others_calls() {
    let rows: Vec<[f32; 3]> = (0..40).map(|i| [i as f32, (i * i % 7) as f32, 1.0]).collect();
    let data = knng::Matrix::from_rows(&rows).unwrap();
    let narrow: Vec<[f32; 2]> = rows.iter().map(|r| [r[0], r[1]]).collect();
    let narrow = knng::Matrix::from_rows(&narrow).unwrap();
    let options = Options { backend: Backend::Cpu, block_rows: Some(7), ..Options::default() };
    let runs = on_ranks(3, &options, |knn, rank| {
        let own = if rank == 1 { &narrow } else { &data };
        knn.graph(own.view(), 3, Metric::Euclidean)
    });
    for (rank, (answer, _)) in runs.iter().enumerate() {
        let err = answer.as_ref().expect_err("a rank failed");
        assert!(matches!(err, Error::Cluster(_)), "rank {rank}: {err}");
        if rank == 1 {
            assert!(err.to_string().contains("same input"), "rank {rank}: {err}");
        }
    }
}
