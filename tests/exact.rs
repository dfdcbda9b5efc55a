//! One table of cases, run on every backend, each result checked against the float64 oracle.
//!
//! GPU tests fail when no adapter is found: a GPU test that passes without a GPU proves
//! nothing. Set `KNNG_TEST_ADAPTER` to choose the adapter (index or part of its name) and
//! `KNNG_ALLOW_NO_SUBGROUPS=1` on adapters without subgroups (wgpu's GL backend), where the
//! subgroup tests then say loudly that they were skipped.

mod common;

use common::{
    bounded_cases, cases, check, chunked_corpus_cases, large_corpus_cases, larger_cases, long_list_cases, lowdim_cases,
    manifold_cases, published_cases, same_shape_cases, sparse_cases, symmetric_cases, Case, CHUNKED_BINDING,
};
use knng::{Algorithm, Backend, Knn, Metric, Options, Select};
use rand::{Rng, SeedableRng};

/// `default_budget`: the engine runs with the default memory budget, so every case's corpus
/// is resident in one binding.
fn run_table(knn: &Knn, default_budget: bool) {
    run_cases(knn, cases(), default_budget, false);
}

/// `shortlists`: the GPU engine has narrow distance tiles, so every row must take some
/// tile's candidates from the shortlist of its running bound, where lists are short enough to
/// keep shortlists at all (up to 256 candidates, k up to 200: `plan::DENSE_KC`).
/// Returns each case's run statistics.
fn run_cases(knn: &Knn, cases: Vec<Case>, default_budget: bool, shortlists: bool) -> Vec<knng::RunStats> {
    let mut runs = Vec::new();
    for case in cases {
        let label = format!("[{}] {}", knn.description(), case.name);
        let started = std::time::Instant::now();
        match &case.queries {
            Some(queries) => {
                let got = knn
                    .search(case.corpus.view(), queries.view(), case.k, case.metric)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                check(&label, &case.corpus, queries, case.k, case.metric, false, &got);
            }
            None => {
                let got = knn.graph(case.corpus.view(), case.k, case.metric).unwrap_or_else(|e| panic!("{label}: {e}"));
                check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &got);
            }
        }
        let stats = knn.last_run();
        eprintln!("{label}: {:.2} s, {stats:?}", started.elapsed().as_secs_f64());
        // Adapters with f64 re-rank on the GPU whenever the corpus is resident, as every
        // case of the default-budget tables is.
        if default_budget && knn.description().contains("f64 re-ranking") {
            assert!(stats.rows_reranked_on_gpu > 0, "{label}: the GPU re-ranking did not run");
            assert!(stats.rows_certified_on_gpu > 0, "{label}: the GPU certificate did not run");
        }
        if shortlists && case.k <= SHORTLIST_MAX_K {
            assert!(stats.rows_shortlisted > 0, "{label}: no row took candidates from a shortlist");
        }
        // The float64 brute force is a safety net, not a path that may carry a test, except
        // for rows whose fp32 keys overflow: by design the host answers those.
        if !case.name.contains("f32's range") {
            assert_eq!(stats.rows_brute_forced, 0, "{label}: the backend failed to select rows");
        }
        runs.push(stats);
    }
    runs
}

/// The largest k whose first-round lists (k + max(16, k / 4) candidates) keep shortlists.
const SHORTLIST_MAX_K: usize = 200;

/// A GPU engine, or a failed test. `None` only for a declared skip of the subgroup path.
fn gpu(no_subgroups: bool, memory_budget: Option<u64>) -> Option<Knn> {
    gpu_with(no_subgroups, memory_budget, None)
}

fn gpu_with(no_subgroups: bool, memory_budget: Option<u64>, max_column_tile: Option<usize>) -> Option<Knn> {
    gpu_tiles(no_subgroups, memory_budget, max_column_tile, None)
}

fn gpu_tiles(
    no_subgroups: bool,
    memory_budget: Option<u64>,
    max_column_tile: Option<usize>,
    max_query_tile: Option<usize>,
) -> Option<Knn> {
    let options = Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        no_subgroups,
        memory_budget,
        // With small tiles, also cap dispatches at 3 workgroups per dimension so that every
        // kernel runs on its 2-D dispatch path.
        max_workgroups_per_dimension: memory_budget.map(|_| 3),
        max_column_tile,
        max_query_tile,
        // Symmetric blocks wherever they fit, also where the planner would not choose them.
        symmetric_graphs: max_query_tile.map(|_| true),
        ..Options::default()
    };
    gpu_engine(options)
}

/// The GPU engine of `options`, or a failed test. `None` only for a declared skip of the
/// subgroup path.
fn gpu_engine(options: Options) -> Option<Knn> {
    let no_subgroups = options.no_subgroups;
    let knn = Knn::new(options).unwrap_or_else(|e| panic!("GPU test without a usable GPU adapter: {e}"));
    assert!(knn.is_gpu(), "the GPU backend was not used: {}", knn.description());
    let subgroup_select = knn.description().contains("subgroup select");
    if no_subgroups {
        assert!(!subgroup_select, "asked for the workgroup select, got {}", knn.description());
    } else if !subgroup_select {
        if std::env::var("KNNG_ALLOW_NO_SUBGROUPS").as_deref() == Ok("1") {
            eprintln!("SKIPPED: {} has no subgroup operations (KNNG_ALLOW_NO_SUBGROUPS=1)", knn.description());
            return None;
        }
        panic!("the adapter has no subgroup operations: {}; set KNNG_ALLOW_NO_SUBGROUPS=1 to skip", knn.description());
    }
    eprintln!("running on {}", knn.description());
    Some(knn)
}

/// A budget so small that corpora are cut into several chunks and streamed, queries into
/// several tiles, and every row's candidates merged across distance tiles.
const TINY_BUDGET: u64 = 48 << 10;

/// Whether the kd-tree takes `case` (euclidean or sqeuclidean, at most 8 columns).
fn kd_tree_takes(case: &Case) -> bool {
    matches!(case.metric, Metric::Euclidean | Metric::SqEuclidean) && case.corpus.cols() <= 8
}

/// The kd-tree on the low-dimensional table and on the general one, where it runs wherever
/// it can and brute force runs elsewhere.
#[test]
fn kd_tree_matches_float64_oracle() {
    let knn = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::KdTree, ..Options::default() }).unwrap();
    for table in [lowdim_cases(), cases()] {
        let took: Vec<(String, bool)> = table.iter().map(|c| (c.name.clone(), kd_tree_takes(c))).collect();
        assert!(took.iter().filter(|t| t.1).count() >= 10, "too few cases for the kd-tree");
        let runs = run_cases(&knn, table, false, false);
        for ((name, takes), stats) in took.iter().zip(runs) {
            let expected = if *takes { Algorithm::KdTree } else { Algorithm::Brute };
            assert_eq!(stats.algorithm, expected, "{name}");
        }
    }
}

/// The cover tree on the low-dimensional table, the general one and the wide one, where it
/// runs for every metric but the inner product and brute force runs for that: asked of the
/// CPU backend (built and searched on the CPU's threads) and of a GPU one (built on the
/// GPU, `cover_tree.wgsl`; graphs answered from the GPU's cover sets,
/// `cover_tree_query.wgsl`, searches on the CPU's threads; brute force on the GPU).
#[test]
fn cover_tree_matches_float64_oracle() {
    let options = |backend| Options {
        backend,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok().filter(|_| backend == Backend::Gpu),
        algorithm: Algorithm::CoverTree,
        no_subgroups: backend == Backend::Gpu,
        cover_sets_on_gpu: Some(true),
        ..Options::default()
    };
    let engines = [Some(Knn::new(options(Backend::Cpu)).unwrap()), gpu_engine(options(Backend::Gpu))];
    for knn in engines.iter().flatten() {
        for table in [lowdim_cases(), cases(), manifold_cases()] {
            let took: Vec<(String, bool, Option<usize>)> = table
                .iter()
                .map(|c| {
                    (c.name.clone(), c.metric != Metric::InnerProduct, c.queries.is_none().then(|| c.corpus.rows()))
                })
                .collect();
            let runs = run_cases(knn, table, false, false);
            let (mut graph_rows, mut on_gpu) = (0, 0);
            for ((name, takes, graph), stats) in took.iter().zip(runs) {
                let expected = if *takes { Algorithm::CoverTree } else { Algorithm::Brute };
                assert_eq!(stats.algorithm, expected, "{name}");
                assert_eq!(stats.tree_built_on_gpu, *takes && knn.is_gpu(), "{name}: where the tree was built");
                let rows = graph.filter(|_| *takes && knn.is_gpu()).unwrap_or(0);
                assert!(stats.rows_queried_on_gpu <= rows, "{name}: {} rows from the GPU", stats.rows_queried_on_gpu);
                graph_rows += rows;
                on_gpu += stats.rows_queried_on_gpu;
            }
            // The cover sets answer most graph rows; the rest (collections that overflow on
            // ties, or that the host could not prove complete) go to the CPU's descent.
            assert!(on_gpu * 2 >= graph_rows, "{on_gpu} of {graph_rows} graph rows answered from the GPU");
        }
    }
}

/// A cover tree whose points exceed one binding is built on the GPU from chunks of whole
/// points, one binding each, up to the bindings the adapter gives the build (eight on Mesa's
/// drivers); more than that is built on the CPU, as is a tree whose sets (64 bytes a point)
/// exceed one binding. Bindings capped at 36 KiB: the manifold table's points take one to
/// seventeen of them.
#[test]
fn cover_trees_of_points_in_several_bindings_match_float64_oracle() {
    const BINDING: u64 = 36 << 10;
    const MOST_CHUNKS: usize = 8;
    let options = Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        algorithm: Algorithm::CoverTree,
        no_subgroups: true,
        max_binding: Some(BINDING),
        ..Options::default()
    };
    let Some(knn) = gpu_engine(options) else { return };
    let cases: Vec<Case> = manifold_cases().into_iter().filter(|c| c.metric != Metric::InnerProduct).collect();
    let chunks: Vec<usize> =
        cases.iter().map(|c| c.corpus.rows().div_ceil(BINDING as usize / (4 * c.corpus.cols()))).collect();
    assert!(cases.iter().all(|c| c.corpus.rows() * 64 <= BINDING as usize), "a case's sets exceed a binding");
    assert!(chunks.iter().any(|&c| c > 2 && c <= MOST_CHUNKS) && chunks.iter().any(|&c| c > MOST_CHUNKS));
    let names: Vec<String> = cases.iter().map(|c| c.name.clone()).collect();
    for ((name, chunks), stats) in names.iter().zip(chunks).zip(run_cases(&knn, cases, false, false)) {
        assert_eq!(stats.algorithm, Algorithm::CoverTree, "{name}");
        assert_eq!(stats.tree_built_on_gpu, chunks <= MOST_CHUNKS, "{name}: {chunks} chunks of points");
    }
}

/// Mesa's llvmpipe ends an invocation's loops once they have taken 65535 steps together, with
/// no error; the cover tree's GPU build sums one distance in one invocation, so with more
/// columns than that its sums there come out short. There the build must say so and the tree
/// be built on the CPU; on every adapter the graph is the float64 oracle's.
#[test]
fn cover_tree_builds_cut_short_by_the_driver_fall_back_to_the_cpu() {
    let options = Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        algorithm: Algorithm::CoverTree,
        no_subgroups: true,
        ..Options::default()
    };
    let Some(knn) = gpu_engine(options) else { return };
    let (n, d, k) = (40, 70_000, 3);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let values: Vec<f32> = (0..n * d)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    let data = knng::Matrix::new(values, n, d).unwrap();
    let got = knn.graph(data.view(), k, Metric::Euclidean).unwrap();
    check("cover tree, 70000 columns", &data, &data, k, Metric::Euclidean, true, &got);
    let stats = knn.last_run();
    assert_eq!(stats.algorithm, Algorithm::CoverTree);
    if knn.description().contains("llvmpipe") {
        assert!(!stats.tree_built_on_gpu, "llvmpipe cut the build's loops short, and the GPU's tree was kept");
    }
}

/// The GPU's ranking of lists longer than a workgroup sorts (`certify_runs`) takes a binary
/// search per pair and run: at 40,000 candidates a row passes llvmpipe's 65535 loop steps an
/// invocation, after which every loop ends at once, and without a check the row's answer
/// came back wrong with nothing noticing. Such a row must not be accepted: the answer stays
/// the float64 oracle's on every adapter.
#[test]
fn long_lists_ranked_on_the_gpu_match_float64_oracle() {
    let options = Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        no_subgroups: true,
        ..Options::default()
    };
    let Some(knn) = gpu_engine(options) else { return };
    let (n, d, k) = (40_000, 2, 39_000);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let corpus = knng::Matrix::new((0..n * d).map(|_| next()).collect(), n, d).unwrap();
    let queries = knng::Matrix::new((0..3 * d).map(|_| next()).collect(), 3, d).unwrap();
    let got = knn.search(corpus.view(), queries.view(), k, Metric::Euclidean).unwrap();
    check("k = 39000 of 40000 rows", &corpus, &queries, k, Metric::Euclidean, false, &got);
}

/// Saved indexes on the low-dimensional table, the manifolds and the general table: each
/// built, saved, loaded (mapped) and searched by the cover tree (an index of the rows alone
/// for inner products, searched by brute force), with each case's queries or, for a graph
/// case, its own rows (but for inner products). The answer of the loaded index is the float64 oracle's and the same as
/// the index's before it was saved.
#[test]
fn saved_index_matches_float64_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("case.knng");
    let options = |algorithm| Options { backend: Backend::Cpu, algorithm, ..Options::default() };
    let (tree, brute) =
        (Knn::new(options(Algorithm::CoverTree)).unwrap(), Knn::new(options(Algorithm::Brute)).unwrap());
    for case in lowdim_cases().into_iter().chain(manifold_cases()).chain(cases()) {
        let takes = case.metric != Metric::InnerProduct;
        // A row's inner product with itself can pass f32's range where the graph leaves it out.
        if !takes && case.queries.is_none() {
            continue;
        }
        let knn = if takes { &tree } else { &brute };
        let label = format!("[index] {}", case.name);
        let built = knn.build_index(case.corpus.view(), case.metric).unwrap_or_else(|e| panic!("{label}: {e}"));
        built.save(&path).unwrap_or_else(|e| panic!("{label}: {e}"));
        let index = knng::Index::load(&path).unwrap_or_else(|e| panic!("{label}: {e}"));
        let expected = if takes { Algorithm::CoverTree } else { Algorithm::Brute };
        assert_eq!((index.algorithm(), index.metric()), (expected, case.metric), "{label}");
        assert_eq!(&index.corpus()[..], case.corpus.as_slice(), "{label}");
        // A euclidean tree reads its points from the rows: the file holds them once.
        let (n, d) = (case.corpus.rows() as u64, case.corpus.cols() as u64);
        let rows_once = matches!(case.metric, Metric::Euclidean | Metric::SqEuclidean) || !takes;
        let tree_bytes = if takes { 32 * n + 8 * n + 64 * 6 } else { 0 };
        let limit = 4096 + 4 * n * d * if rows_once { 1 } else { 2 } + tree_bytes;
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= limit, "{label}: an index file of {size} bytes, more than {limit}");
        let queries = case.queries.as_ref().unwrap_or(&case.corpus);
        let got = knn.search_index(&index, queries.view(), case.k).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(knn.last_run().algorithm, expected, "{label}");
        check(&label, &case.corpus, queries, case.k, case.metric, false, &got);
        let before = knn.search_index(&built, queries.view(), case.k).unwrap();
        assert_eq!(got, before, "{label}: the loaded index answers otherwise");
        // Searched as rows, a tree's index gives its rows back in their own order.
        if takes && case.k <= 16 && case.corpus.rows() <= 4096 {
            let by_rows = brute.search_index(&index, queries.view(), case.k).unwrap();
            assert_eq!(brute.last_run().algorithm, Algorithm::Brute, "{label}");
            check(&format!("{label} (as rows)"), &case.corpus, queries, case.k, case.metric, false, &by_rows);
        }
    }
}

/// The hybrid join (the GPU grid beside the kd-tree) on the low-dimensional table and on the
/// general one, on the GPU with subgroups (where the adapter has them) and without, under the
/// default budget and one that cuts the grid's queries into several batches; brute force
/// where the grid does not apply. The grid must take rows and prove answers on the table,
/// on adapters with f64 some of them on the GPU itself (k up to 128).
#[test]
fn hybrid_matches_float64_oracle() {
    let mut engines = Vec::new();
    for (no_subgroups, budget) in [(false, None), (true, None), (true, Some(1u64 << 20))] {
        let options = Options {
            backend: Backend::Gpu,
            adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
            algorithm: Algorithm::Hybrid,
            no_subgroups,
            memory_budget: budget,
            max_workgroups_per_dimension: budget.map(|_| 3),
            ..Options::default()
        };
        engines.extend(gpu_engine(options));
    }
    let cpu = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Hybrid, ..Options::default() }).unwrap();
    for knn in &engines {
        let (mut taken, mut proven, mut on_gpu) = (0, 0, 0);
        for table in [lowdim_cases(), cases()] {
            let takes: Vec<(String, bool)> =
                table.iter().map(|c| (c.name.clone(), kd_tree_takes(c) && c.corpus.cols() <= 6)).collect();
            let runs = run_cases(knn, table, false, false);
            for ((name, takes), stats) in takes.iter().zip(runs) {
                let expected = if *takes { Algorithm::Hybrid } else { Algorithm::Brute };
                assert_eq!(stats.algorithm, expected, "{name}");
                if *takes {
                    assert!(stats.rows_on_grid > 0, "{name}: the GPU grid took no rows");
                }
                (taken, proven) = (taken + stats.rows_on_grid, proven + stats.rows_proven_by_grid);
                on_gpu += stats.rows_proven_on_gpu;
            }
        }
        // The grid is sized for most sampled rows to succeed (`lowdim::grid`).
        assert!(proven * 2 > taken, "[{}] the grid proved {proven} of the {taken} rows it took", knn.description());
        let f64_adapter = knn.description().contains("f64 re-ranking");
        assert_eq!(on_gpu > 0, f64_adapter, "[{}] {on_gpu} rows proven on the GPU", knn.description());
    }
    // Without a GPU engine the kd-tree answers every row.
    for case in lowdim_cases().into_iter().take(5) {
        let got = cpu.graph(case.corpus.view(), case.k, case.metric).unwrap();
        check(&case.name, &case.corpus, &case.corpus, case.k, case.metric, true, &got);
        assert_eq!(cpu.last_run().algorithm, Algorithm::KdTree, "{}", case.name);
    }
}

/// A hybrid graph large enough that the GPU's batches of queries are uploaded by the host's
/// thread pool while the pool's threads work the kd-tree's end of the queue: the answer must
/// come, and be the kd-tree's (whose answers the float64 oracle checks above). The GPU's
/// first batch, taken before the threads start, is its largest: 65,536 rows here.
#[test]
fn hybrid_graphs_in_large_batches_match_the_kd_tree() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(32);
    let n = 600_000;
    let rows: Vec<Vec<f32>> =
        (0..n).map(|_| vec![rng.random_range(0.0f32..1.0), rng.random_range(0.0f32..1.0)]).collect();
    let data = knng::Matrix::from_rows(&rows).unwrap();
    let options = Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        algorithm: Algorithm::Hybrid,
        no_subgroups: true,
        ..Options::default()
    };
    let hybrid = gpu_engine(options).expect("no subgroups asked for");
    let tree = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::KdTree, ..Options::default() }).unwrap();
    let got = hybrid.graph(data.view(), 4, Metric::Euclidean).unwrap();
    let stats = hybrid.last_run();
    assert!(stats.rows_on_grid >= 65_536 && stats.rows_proven_by_grid > 0, "{stats:?}");
    if hybrid.description().contains("f64 re-ranking") {
        assert_eq!(stats.rows_proven_on_gpu, stats.rows_proven_by_grid, "{stats:?}");
    }
    assert_eq!(got, tree.graph(data.view(), 4, Metric::Euclidean).unwrap());
}

/// The kd-tree counting each point as its own nearest neighbour (first in its list, before
/// its duplicates), and writing into lent arrays.
#[test]
fn kd_tree_lists_self_first_and_fills_lent_arrays() {
    let options =
        Options { backend: Backend::Cpu, algorithm: Algorithm::KdTree, include_self: true, ..Options::default() };
    let knn = Knn::new(options).unwrap();
    for case in lowdim_cases().into_iter().filter(|c| c.queries.is_none()) {
        let mut lent = knn.graph(case.corpus.view(), 3, case.metric).unwrap();
        knn.graph_into(case.corpus.view(), case.k, case.metric, &mut lent).unwrap();
        assert_eq!(knn.last_run().algorithm, Algorithm::KdTree, "{}", case.name);
        // Each row first, then its k - 1 nearest others.
        let (n, k) = (case.corpus.rows(), case.k);
        let mut others = knng::Neighbors { queries: n, k: k - 1, ..Default::default() };
        for row in 0..n {
            assert_eq!(lent.indices_of(row)[0] as usize, row, "{}: row {row} does not come first", case.name);
            assert_eq!(lent.distances_of(row)[0], 0.0, "{}: row {row}", case.name);
            others.indices.extend_from_slice(&lent.indices_of(row)[1..]);
            others.distances.extend_from_slice(&lent.distances_of(row)[1..]);
        }
        if k > 1 {
            check(&case.name, &case.corpus, &case.corpus, k - 1, case.metric, true, &others);
        }
    }
}

/// The low-dimensional table on the brute-force engines: the CPU, the GPU with subgroups
/// (where the adapter has them) and without.
#[test]
fn brute_force_on_low_dimensional_data_matches_float64_oracle() {
    let cpu = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap();
    let mut engines = vec![cpu];
    engines.extend(gpu(false, None));
    engines.push(gpu(true, None).expect("the workgroup select runs on every adapter"));
    for knn in engines {
        for stats in run_cases(&knn, lowdim_cases(), false, false) {
            assert_eq!(stats.algorithm, Algorithm::Brute, "{}", knn.description());
        }
    }
}

#[test]
fn cpu_backend_matches_float64_oracle() {
    let knn = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap();
    assert!(!knn.is_gpu());
    run_table(&knn, true);
}

#[test]
fn gpu_subgroup_select_matches_float64_oracle() {
    if let Some(knn) = gpu(false, None) {
        run_table(&knn, true);
    }
}

#[test]
fn gpu_workgroup_select_matches_float64_oracle() {
    run_table(&gpu(true, None).expect("the workgroup select runs on every adapter"), true);
}

#[test]
fn gpu_subgroup_select_small_tiles_matches_float64_oracle() {
    if let Some(knn) = gpu(false, Some(TINY_BUDGET)) {
        run_cases(&knn, small_tile_cases(), false, false);
    }
}

#[test]
fn gpu_workgroup_select_small_tiles_matches_float64_oracle() {
    let knn = gpu(true, Some(TINY_BUDGET)).expect("the workgroup select runs on every adapter");
    run_cases(&knn, small_tile_cases(), false, false);
}

/// The table without the cases whose point is not the tiling, which in tiles of a few rows
/// take most of the table's time on a software adapter: the 520-row graphs of 260 values
/// (how the exact keys of long rows are grouped, the same at any budget), the rows of extreme
/// magnitudes (how keys beyond f32's range are answered), and the rows of 300 values but in
/// one metric (those of 258 values also take the scalar kernels); and without its rows of
/// 3000 and 4096 values, of which a tiny budget does not hold one.
fn small_tile_cases() -> Vec<Case> {
    let other_point = |c: &Case| {
        ["520 x 260", "magnitudes", "f32's range"].iter().any(|n| c.name.contains(n))
            || (c.name.contains("d=300") && c.metric != Metric::Euclidean)
    };
    cases().into_iter().filter(|c| !other_point(c) && c.corpus.cols() < 3000).collect()
}

/// Budget that cuts the larger cases into several chunks and query tiles, and distance
/// tiles narrow enough that every row has many of them (shortlists, merges).
const SMALL_BUDGET: u64 = 2 << 20;
const NARROW_TILE: usize = 384;

#[test]
fn cpu_backend_larger_cases() {
    let knn = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap();
    run_cases(&knn, larger_cases(), false, false);
}

#[test]
fn gpu_subgroup_select_larger_cases() {
    if let Some(knn) = gpu_with(false, Some(SMALL_BUDGET), Some(NARROW_TILE)) {
        run_cases(&knn, larger_cases(), false, true);
    }
}

#[test]
fn gpu_workgroup_select_larger_cases() {
    let knn =
        gpu_with(true, Some(SMALL_BUDGET), Some(NARROW_TILE)).expect("the workgroup select runs on every adapter");
    run_cases(&knn, larger_cases(), false, true);
}

#[test]
fn large_corpora_match_float64_oracle() {
    run_on_every_backend(large_corpus_cases);
}

/// `cases` at the default budget on the CPU, the GPU with subgroups (where the adapter has
/// them) and the GPU without: one engine each, for all the cases in turn.
fn run_on_every_backend(cases: fn() -> Vec<Case>) {
    let cpu = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap();
    run_cases(&cpu, cases(), true, false);
    if let Some(knn) = gpu(false, None) {
        run_cases(&knn, cases(), true, false);
    }
    run_cases(&gpu(true, None).expect("the workgroup select runs on every adapter"), cases(), true, false);
}

/// Corpora resident in several chunks, each with its original rows beside it: the float64
/// re-ranking runs chunk by chunk on the GPU (`run_cases` asserts that it ran).
#[test]
fn corpora_resident_in_chunks_match_float64_oracle() {
    let cpu = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap();
    run_cases(&cpu, chunked_corpus_cases(), true, false);
    for no_subgroups in [false, true] {
        let options = Options {
            backend: Backend::Gpu,
            adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
            no_subgroups,
            max_binding: Some(CHUNKED_BINDING),
            ..Options::default()
        };
        if let Some(knn) = gpu_engine(options) {
            run_cases(&knn, chunked_corpus_cases(), true, false);
        }
    }
}

/// Lists longer than one run of the GPU ranking, at the default budget (so that the GPU ranks
/// them where the adapter has f64: `run_cases` asserts it).
#[test]
fn long_candidate_lists_match_float64_oracle() {
    run_on_every_backend(long_list_cases);
}

/// An engine keeps the buffers of the last corpus for the next one of its shape.
#[test]
fn corpora_of_one_shape_are_answered_from_their_own_rows() {
    run_on_every_backend(same_shape_cases);
}

/// Graphs swept in symmetric blocks: query tiles of 256 rows, distance tiles of 384, and a
/// budget that holds every row's lists and shortlists.
fn run_symmetric(no_subgroups: bool) {
    let Some(knn) = gpu_tiles(no_subgroups, Some(SYMMETRIC_BUDGET), Some(NARROW_TILE), Some(256)) else { return };
    // The same engine with a progress callback: reports must rise to the total.
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = reports.clone();
    let progress: knng::Progress = std::sync::Arc::new(move |done, total| sink.lock().unwrap().push((done, total)));
    let with_progress = Knn::new(Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        no_subgroups,
        memory_budget: Some(SYMMETRIC_BUDGET),
        max_column_tile: Some(NARROW_TILE),
        max_query_tile: Some(256),
        symmetric_graphs: Some(true),
        progress: Some(progress),
        ..Options::default()
    })
    .unwrap();
    let case = &symmetric_cases()[0];
    with_progress.graph(case.corpus.view(), case.k, case.metric).unwrap();
    assert!(with_progress.last_run().rows_in_symmetric_blocks > 0);
    let reports = reports.lock().unwrap();
    let n = case.corpus.rows() as u64;
    assert!(reports.len() > 2, "progress was reported {} times", reports.len());
    assert!(reports.windows(2).all(|w| w[0].0 <= w[1].0), "progress went backwards: {reports:?}");
    assert!(reports.iter().any(|&(done, _)| done > 0 && done < n), "no progress before the end: {reports:?}");
    assert_eq!(reports.last(), Some(&(n, n)));

    for case in symmetric_cases() {
        let label = format!("[{}] {}", knn.description(), case.name);
        let started = std::time::Instant::now();
        let got = knn.graph(case.corpus.view(), case.k, case.metric).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &got);
        let stats = knn.last_run();
        eprintln!("{label}: {:.2} s, {stats:?}", started.elapsed().as_secs_f64());
        assert!(stats.rows_in_symmetric_blocks >= case.corpus.rows(), "{label}: not swept in symmetric blocks");
        if case.name.contains("wide rows") && knn.description().contains("f64 re-ranking") {
            assert!(stats.rows_sharing_keys > 0, "{label}: mutual pairs' exact keys were not shared");
        }
        if case.name.contains("cluster around row 0") {
            assert!(stats.rows_overflowed > 0, "{label}: no column-side shortlist overflowed");
        }
        if case.name.contains("centre of a sphere") {
            // Its second round ran in the sweep's buffers; the next call of the same shape
            // finds them as its plan wants them.
            assert!(stats.rounds > 1 && stats.rows_widened < 20, "{label}: not a small second round");
            let again = knn.graph(case.corpus.view(), case.k, case.metric).unwrap();
            check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &again);
            let stats = knn.last_run();
            assert_eq!(stats.tile_buffer_allocations, 0, "{label}: the same shape allocated tile buffers again");
        }
        assert_eq!(stats.rows_brute_forced, 0, "{label}: the backend failed to select rows");
    }
}

const SYMMETRIC_BUDGET: u64 = 64 << 20;

/// Rows per block of the CPU's symmetric sweep (`cpu::SYMMETRIC_BLOCK`): graphs of more rows
/// have pairs of blocks to share.
const CPU_SYMMETRIC_BLOCK: usize = 1024;

/// The CPU's graphs swept in symmetric blocks, and the same graphs swept plainly.
#[test]
fn cpu_backend_symmetric_graphs() {
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = reports.clone();
    let progress: knng::Progress = std::sync::Arc::new(move |done, total| sink.lock().unwrap().push((done, total)));
    let engine = |symmetric: bool| {
        Knn::new(Options {
            backend: Backend::Cpu,
            algorithm: Algorithm::Brute,
            symmetric_graphs: Some(symmetric),
            progress: Some(progress.clone()),
            ..Options::default()
        })
        .unwrap()
    };
    let mut swept = 0;
    for symmetric in [true, false] {
        let knn = engine(symmetric);
        for case in symmetric_cases() {
            let label = format!("[{}, symmetric {symmetric}] {}", knn.description(), case.name);
            reports.lock().unwrap().clear();
            let got = knn.graph(case.corpus.view(), case.k, case.metric).unwrap_or_else(|e| panic!("{label}: {e}"));
            check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &got);
            let stats = knn.last_run();
            eprintln!("{label}: {stats:?}");
            let n = case.corpus.rows();
            if symmetric && n > CPU_SYMMETRIC_BLOCK {
                assert!(stats.rows_in_symmetric_blocks >= n, "{label}: not swept in symmetric blocks");
                swept += 1;
                let reports = reports.lock().unwrap();
                assert!(
                    reports.iter().any(|&(done, _)| done > 0 && done < n as u64),
                    "{label}: no progress before the end"
                );
                assert_eq!(reports.last(), Some(&(n as u64, n as u64)), "{label}");
            } else {
                assert_eq!(stats.rows_in_symmetric_blocks, 0, "{label}: swept in symmetric blocks");
            }
            if !case.name.contains("f32's range") {
                assert_eq!(stats.rows_brute_forced, 0, "{label}: the backend failed to select rows");
            }
        }
    }
    assert!(swept >= 4, "only {swept} graphs had more than one symmetric block");
}

/// Graphs swept over the upper triangle under sampled bounds (long lists' sweep, forced here
/// for short lists too): query tiles of 256 rows, so that later rows' lists take keys from
/// several earlier tiles' blocks. Rows whose list came out short or overflowed (the late
/// cluster's, whose sampled bounds are far too wide) must be searched again, not answered.
fn run_bounded(no_subgroups: bool) {
    let Some(knn) = gpu_engine(Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        no_subgroups,
        memory_budget: Some(BOUNDED_BUDGET),
        max_query_tile: Some(256),
        bounded_sweeps: Some(true),
        ..Options::default()
    }) else {
        return;
    };
    // The sweep ranks on the GPU: without f64 the plain sweep answers.
    let ranks = knn.description().contains("f64 re-ranking");
    let (mut swept, mut searched_again) = (0, 0);
    // Not the long lists' graphs: their lists exceed what a bounded sweep's select holds, so
    // forced, it leaves them to the plain sweep (`plan_bounded`'s tests), as the long lists'
    // own test runs them.
    let graphs = (symmetric_cases().into_iter().chain(bounded_cases())).filter(|c| c.queries.is_none());
    for case in graphs {
        let label = format!("[{}] {}", knn.description(), case.name);
        let started = std::time::Instant::now();
        let got = knn.graph(case.corpus.view(), case.k, case.metric).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &got);
        let stats = knn.last_run();
        eprintln!("{label}: {:.2} s, {stats:?}", started.elapsed().as_secs_f64());
        if stats.rows_in_bounded_sweeps > 0 {
            assert!(stats.rows_in_bounded_sweeps >= case.corpus.rows(), "{label}: not every row was swept");
            swept += 1;
            if case.name.contains("every 4th skips") {
                assert!(stats.rows_overflowed >= 400, "{label}: the cluster's lists did not overflow");
                searched_again += 1;
            } else {
                // Bounds four deviations from the list's ends leave a row short or overflowing
                // rarely: many such rows mean bounds that are not the rows' own.
                let rows = case.corpus.rows();
                assert!(
                    stats.rows_overflowed <= rows / 100,
                    "{label}: {} rows short or overflowed",
                    stats.rows_overflowed
                );
            }
        }
        if !case.name.contains("f32's range") {
            assert_eq!(stats.rows_brute_forced, 0, "{label}: the backend failed to select rows");
        }
    }
    if ranks {
        assert!(swept >= 8, "only {swept} graphs were swept under sampled bounds");
        assert_eq!(searched_again, 1, "the graph whose lists overflow was not swept");
    } else {
        assert_eq!(swept, 0, "swept under sampled bounds without ranking on the GPU");
    }
}

const BOUNDED_BUDGET: u64 = 256 << 20;

/// A budget that narrows the sparse cases' distance tiles to 1024 columns.
const SPARSE_BUDGET: u64 = 8 << 20;

fn run_sparse(no_subgroups: bool) {
    let Some(knn) = gpu_with(no_subgroups, Some(SPARSE_BUDGET), None) else { return };
    let runs = run_cases(&knn, sparse_cases(), false, true);
    for (case, stats) in sparse_cases().iter().zip(&runs) {
        let label = format!("[{}] {}", knn.description(), case.name);
        assert!(stats.rows_in_sparse_sweeps > 0, "{label}: no sparse distance tiles ran");
        if case.name.contains("sorted") {
            assert!(stats.rows_overflowed > 0, "{label}: no shortlist overflowed a sparse tile");
        }
    }
}

#[test]
fn gpu_subgroup_select_sparse_tiles() {
    run_sparse(false);
}

#[test]
fn gpu_workgroup_select_sparse_tiles() {
    run_sparse(true);
}

#[test]
fn gpu_subgroup_select_bounded_sweeps() {
    run_bounded(false);
}

#[test]
fn gpu_workgroup_select_bounded_sweeps() {
    run_bounded(true);
}

#[test]
fn gpu_subgroup_select_symmetric_graphs() {
    run_symmetric(false);
}

#[test]
fn gpu_workgroup_select_symmetric_graphs() {
    run_symmetric(true);
}

/// Query tiles of 256 rows, not symmetric: each tile's ranked answers are published to the
/// host by the next tile's distance kernel, where the adapter lets mapped buffers be bound as
/// storage (`knng info`: MAPPABLE_PRIMARY_BUFFERS), and must arrive whole and in place.
#[test]
fn answers_published_during_the_next_tile_match_float64_oracle() {
    let cpu = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap();
    run_cases(&cpu, published_cases(), true, false);
    for no_subgroups in [false, true] {
        let Some(knn) = gpu_engine(Options {
            backend: Backend::Gpu,
            adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
            no_subgroups,
            max_query_tile: Some(256),
            symmetric_graphs: Some(false),
            ..Options::default()
        }) else {
            continue;
        };
        let runs = run_cases(&knn, published_cases(), true, false);
        if knn.description().contains("answers published") {
            for (case, stats) in published_cases().iter().zip(runs) {
                let rows = case.queries.as_ref().unwrap_or(&case.corpus).rows();
                // Every tile but the last; later rounds (a few rows in one tile) publish none.
                let published = stats.rows_published;
                assert!(published > 0 && published < rows, "{}: {published} of {rows} rows published", case.name);
            }
        }
    }
}

/// `graph_into` and `search_into` write every entry of the answer into the arrays they are
/// lent: each case runs with arrays that hold poison (ids past every corpus, NaN distances)
/// and room enough, and must match the oracle in those very arrays.
fn run_lent(knn: &Knn) {
    let mut out = knng::Neighbors::default();
    for case in cases() {
        let label = format!("[{}] {} (lent arrays)", knn.description(), case.name);
        let len = case.queries.as_ref().unwrap_or(&case.corpus).rows() * case.k;
        out.indices.resize(out.indices.len().max(len), 0);
        out.distances.resize(out.distances.len().max(len), 0.0);
        out.indices.fill(u32::MAX - 1);
        out.distances.fill(f32::NAN);
        let lent = (out.indices.as_ptr(), out.distances.as_ptr());
        match &case.queries {
            Some(queries) => {
                knn.search_into(case.corpus.view(), queries.view(), case.k, case.metric, &mut out)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                check(&label, &case.corpus, queries, case.k, case.metric, false, &out);
            }
            None => {
                knn.graph_into(case.corpus.view(), case.k, case.metric, &mut out)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &out);
            }
        }
        assert_eq!(
            (out.indices.as_ptr(), out.distances.as_ptr()),
            lent,
            "{label}: the answer is not in the lent arrays"
        );
    }
}

#[test]
fn answers_written_into_lent_arrays_match_float64_oracle() {
    run_lent(&Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap());
    if let Some(knn) = gpu(false, None) {
        run_lent(&knn);
    }
    run_lent(&gpu(true, None).expect("the workgroup select runs on every adapter"));
}

/// Rows present three times each: under correlation a row's duplicates are exactly 0 away on
/// every backend (the float64 key divides by sqrt(x^2 y^2), and sqrt(a a) = a), and the
/// answers match the oracle. 900 rows of 24 values, so that the GPU sums each key in groups.
#[test]
fn duplicates_are_exactly_zero_apart_under_correlation() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let distinct: Vec<Vec<f32>> = (0..300).map(|_| (0..24).map(|_| rng.random_range(-3.0f32..3.0)).collect()).collect();
    let rows: Vec<&Vec<f32>> = distinct.iter().flat_map(|r| [r, r, r]).collect();
    let corpus = knng::Matrix::from_rows(&rows).unwrap();
    let mut engines =
        vec![Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::Brute, ..Options::default() }).unwrap()];
    engines.extend(gpu(false, None));
    engines.push(gpu(true, None).expect("the workgroup select runs on every adapter"));
    for knn in &engines {
        let label = format!("[{}] duplicated rows", knn.description());
        let got = knn.graph(corpus.view(), 5, Metric::Correlation).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&label, &corpus, &corpus, 5, Metric::Correlation, true, &got);
        for i in 0..corpus.rows() {
            assert_eq!(&got.distances_of(i)[..2], &[0.0, 0.0], "{label}: row {i}'s duplicates");
        }
    }
}

/// The graphs of the table and a graph of many exact duplicates (whose rows need later
/// rounds), cut into blocks of `block_rows` rows.
fn partitioned_cases() -> Vec<Case> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let mut rows: Vec<Vec<f32>> = (0..150).map(|_| vec![0.5, -1.0, 2.0]).collect();
    rows.extend((0..60).map(|_| (0..3).map(|_| rng.random_range(-3.0..3.0)).collect::<Vec<f32>>()));
    let duplicates = Case {
        name: "euclidean: 150 duplicates among 210 rows, k=5".into(),
        corpus: knng::Matrix::from_rows(&rows).unwrap(),
        queries: None,
        k: 5,
        metric: Metric::Euclidean,
    };
    cases().into_iter().filter(|c| c.queries.is_none()).chain([duplicates]).collect()
}

/// Every graph answered through blocks dealt to `workers` engines, exact; some through
/// several blocks and later rounds, and with `spilled`, the lists of most blocks of rows
/// spilled to the scratch directory.
fn run_partitioned(knn: &Knn, workers: usize, spilled: bool) -> Vec<knng::RunStats> {
    let runs = run_cases(knn, partitioned_cases(), false, false);
    for stats in &runs {
        assert!(stats.blocks > 0 && stats.workers == workers, "not partitioned over {workers} workers: {stats:?}");
    }
    assert!(runs.iter().any(|s| s.blocks >= 10), "no graph took many blocks");
    assert!(runs.iter().any(|s| s.rounds > 1 && s.blocks > 1), "no partitioned graph took a later round");
    assert_eq!(runs.iter().any(|s| s.bytes_spilled > 0), spilled, "lists spilled: {spilled} expected");
    stream_in_blocks(knn);
    // Devices with f64 compute the candidates' float64 keys, which travel with the lists
    // (those of rows listed by pairs computed one way are computed on the host).
    if knn.description().contains("f64 re-ranking") {
        let whole = |s: &&knng::RunStats| s.pair_blocks_one_way == 0;
        assert!(runs.iter().filter(whole).all(|s| s.rows_reranked_on_gpu > 0), "the GPU's float64 keys were not used");
        assert!(runs.iter().any(|s| s.rows_reranked_on_gpu > 0), "the GPU's float64 keys were never used");
    }
    runs
}

/// A graph handed over block by block, in order, is the graph returned whole.
fn stream_in_blocks(knn: &Knn) {
    let case = partitioned_cases().pop().expect("the duplicates case comes last");
    let whole = knn.graph(case.corpus.view(), case.k, case.metric).unwrap();
    let mut streamed = knng::Neighbors { queries: case.corpus.rows(), k: case.k, ..Default::default() };
    let mut handed = 0;
    knn.graph_streamed(case.corpus.view(), case.k, case.metric, &mut |rows| {
        assert_eq!(rows.first * case.k, streamed.indices.len(), "rows handed over out of order");
        assert!(!rows.indices.is_empty() && rows.indices.len() == rows.distances.len());
        streamed.indices.extend_from_slice(rows.indices);
        streamed.distances.extend_from_slice(rows.distances);
        handed += 1;
        Ok(())
    })
    .unwrap();
    assert!(handed > 1, "the graph came in one piece");
    assert!(knn.last_run().rounds > 1, "no block of rows took a later round");
    assert_eq!(streamed, whole);
}

#[test]
fn cpu_backend_partitioned_graphs() {
    let knn = Knn::new(Options { backend: Backend::Cpu, block_rows: Some(29), ..Options::default() }).unwrap();
    let runs = run_partitioned(&knn, 1, false);
    assert!(runs.iter().any(|s| s.pair_blocks_once > 0), "no block was computed two-sided");
    let options =
        Options { backend: Backend::Cpu, block_rows: Some(29), lists_in_memory: Some(1), ..Options::default() };
    run_partitioned(&Knn::new(options).unwrap(), 1, true);
}

/// Two devices opened on one adapter share each graph's blocks, holding the lists of two
/// blocks of rows and spilling the rest: with subgroups where the adapter has them, else
/// (wgpu's GL backend) without.
#[test]
fn gpu_partitioned_graphs_on_two_devices() {
    let adapter = std::env::var("KNNG_TEST_ADAPTER").unwrap_or_else(|_| "0".into());
    let options = |no_subgroups| Options {
        backend: Backend::Gpu,
        devices: vec![adapter.clone(), adapter.clone()],
        no_subgroups,
        // Blocks of whole 64-row tiles: off-diagonal blocks are computed two-sided where both
        // have kc rows (forced: the planner finds blocks this small cheaper one way), one way
        // beside the last, short block.
        block_rows: Some(64),
        symmetric_graphs: Some(true),
        lists_in_memory: Some(2),
        ..Options::default()
    };
    let knn = match gpu_engine(options(false)) {
        Some(knn) => knn,
        None => gpu_engine(options(true)).expect("the workgroup select runs on every adapter"),
    };
    assert_eq!(knn.description().matches("gpu:").count(), 2, "{}", knn.description());
    let runs = run_partitioned(&knn, 2, true);
    assert!(runs.iter().any(|s| s.pair_blocks_once > 0), "no block was computed two-sided");
    assert!(runs.iter().any(|s| s.pair_blocks_one_way > 0), "no pair was computed one way");
}

/// Graphs ranked on the GPU whose answers leave memory for a scratch file tile by tile and
/// come back in order, later rounds included: with subgroups where the adapter has them, and
/// without. Devices without float64 do not rank on the device and keep the answers in memory.
#[test]
fn gpu_graphs_with_answers_on_disk() {
    let adapter = std::env::var("KNNG_TEST_ADAPTER").ok();
    let options = |no_subgroups| Options {
        backend: Backend::Gpu,
        adapter: adapter.clone(),
        no_subgroups,
        answers_on_disk: Some(true),
        // Several query tiles a graph, each handed over on its own, after a symmetric sweep
        // wherever one fits.
        max_query_tile: Some(64),
        symmetric_graphs: Some(true),
        ..Options::default()
    };
    let engines = [gpu_engine(options(false)), gpu_engine(options(true))];
    assert!(engines[1].is_some(), "the workgroup select runs on every adapter");
    for knn in engines.iter().flatten() {
        let ranks = knn.description().contains("f64 re-ranking");
        let runs = run_cases(knn, partitioned_cases(), false, false);
        for stats in &runs {
            assert_eq!(stats.blocks, 0, "partitioned: {stats:?}");
            assert_eq!(stats.rows_ranked_to_disk > 0, ranks, "answers to disk: {ranks} expected: {stats:?}");
        }
        if ranks {
            assert!(runs.iter().any(|s| s.rounds > 1), "no graph on disk took a later round");
            assert!(runs.iter().any(|s| s.rows_in_symmetric_blocks > 0), "no graph on disk was swept symmetrically");
        }
        let case = partitioned_cases().pop().expect("the duplicates case comes last");
        let whole = knn.graph(case.corpus.view(), case.k, case.metric).unwrap();
        let mut streamed = knng::Neighbors { queries: case.corpus.rows(), k: case.k, ..Default::default() };
        knn.graph_streamed(case.corpus.view(), case.k, case.metric, &mut |rows| {
            assert_eq!(rows.first * case.k, streamed.indices.len(), "rows handed over out of order");
            streamed.indices.extend_from_slice(rows.indices);
            streamed.distances.extend_from_slice(rows.distances);
            Ok(())
        })
        .unwrap();
        assert_eq!(streamed, whole);
    }
}

/// How the sort selector's tests cut a problem.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SortTiles {
    /// As the planner chooses.
    Planned,
    /// Under a tiny budget: later tiles' sorted lists merge into running lists.
    Tiny,
    /// Symmetric sweeps of narrow tiles: the column side comes from the same sorts.
    Symmetric,
    /// Partitioned graphs of 64-row blocks: pairs of blocks swept two-sided, whose column side
    /// comes from the same sorts.
    Blocks,
}

/// One engine of each backend with `select`: the CPU, and the GPU with and without subgroups
/// (`None` where the subgroup path is skipped, as [`gpu_engine`] allows), with `tiles`.
fn engines_selecting(select: Select, tiles: SortTiles) -> Vec<Knn> {
    let symmetric = tiles == SortTiles::Symmetric;
    let cpu = Knn::new(Options {
        backend: Backend::Cpu,
        algorithm: Algorithm::Brute,
        select,
        symmetric_graphs: symmetric.then_some(true),
        block_rows: (tiles == SortTiles::Blocks).then_some(64),
        ..Options::default()
    })
    .unwrap();
    let mut engines = vec![cpu];
    for no_subgroups in [false, true] {
        let budget = match tiles {
            SortTiles::Planned | SortTiles::Blocks => None,
            SortTiles::Tiny => Some(TINY_BUDGET),
            SortTiles::Symmetric => Some(SYMMETRIC_BUDGET),
        };
        let options = Options {
            backend: Backend::Gpu,
            adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
            no_subgroups,
            select,
            memory_budget: budget,
            max_workgroups_per_dimension: (tiles == SortTiles::Tiny).then_some(3),
            max_column_tile: symmetric.then_some(NARROW_TILE),
            max_query_tile: symmetric.then_some(256),
            // Pairs of 64-row blocks are two-sided only where forced: two searches cost less.
            symmetric_graphs: (symmetric || tiles == SortTiles::Blocks).then_some(true),
            block_rows: (tiles == SortTiles::Blocks).then_some(64),
            ..Options::default()
        };
        let knn = Knn::new(options).unwrap_or_else(|e| panic!("GPU test without a usable GPU adapter: {e}"));
        assert!(knn.is_gpu(), "the GPU backend was not used: {}", knn.description());
        let scans = knn.description().contains("subgroup scans") || knn.description().contains("subgroup select");
        if !no_subgroups && !scans && std::env::var("KNNG_ALLOW_NO_SUBGROUPS").as_deref() == Ok("1") {
            eprintln!("SKIPPED: {} has no subgroup operations (KNNG_ALLOW_NO_SUBGROUPS=1)", knn.description());
            continue;
        }
        assert_eq!(scans, !no_subgroups, "{}", knn.description());
        engines.push(knn);
    }
    for knn in &engines {
        assert_eq!(knn.description().contains("sort select"), select == Select::Sort, "{}", knn.description());
    }
    engines
}

/// The batch index sort selector: on every backend, the table's answers are the float64
/// oracle's and byte for byte what the quick multi-select gives; under a tiny budget too, where
/// later distance tiles' sorted lists merge into running lists that bound shortlists (on a
/// part of the table that has ties, duplicates, offsets and searches: in tiles of a few rows
/// the whole table takes minutes on a software adapter); and in symmetric sweeps, whose
/// column rows take their lists from the same sorts (on graphs of ties, clusters and wide rows).
#[test]
fn sort_select_matches_float64_oracle_and_quick_select() {
    let in_tiles =
        ["euclidean: duplicates", "cosine: lattice ties", "offset 1000 lattice", "sqeuclidean: search 300", "lon/lat"];
    let tiled = cases().into_iter().filter(|c| in_tiles.iter().any(|n| c.name.contains(n))).collect::<Vec<_>>();
    let swept = ["cosine: graph n=1200 d=16", "correlation: graph n=600 d=256", "cluster around row 0"];
    let symmetric =
        symmetric_cases().into_iter().filter(|c| swept.iter().any(|n| c.name.contains(n))).collect::<Vec<_>>();
    assert_eq!(symmetric.len(), swept.len(), "a symmetric case was renamed");
    let blocks = partitioned_cases().into_iter().filter(|c| c.corpus.rows() > 128).collect::<Vec<_>>();
    // The 520-row graphs of 260 values test how exact keys are grouped, whichever select ran.
    let planned = cases().into_iter().filter(|c| !c.name.contains("520 x 260")).collect::<Vec<_>>();
    let mut pairs_swept = 0;
    for (tiles, cases) in [
        (SortTiles::Planned, planned),
        (SortTiles::Tiny, tiled),
        (SortTiles::Symmetric, symmetric),
        (SortTiles::Blocks, blocks),
    ] {
        let sorting = engines_selecting(Select::Sort, tiles);
        let quick = engines_selecting(Select::Quick, tiles);
        assert_eq!(sorting.len(), quick.len());
        for (sort, quick) in sorting.iter().zip(&quick) {
            for case in &cases {
                let label = format!("[{}] {}", sort.description(), case.name);
                let started = std::time::Instant::now();
                let (sorted, picked) = match &case.queries {
                    Some(queries) => {
                        let run = |knn: &Knn| knn.search(case.corpus.view(), queries.view(), case.k, case.metric);
                        let sorted = run(sort).unwrap_or_else(|e| panic!("{label}: {e}"));
                        check(&label, &case.corpus, queries, case.k, case.metric, false, &sorted);
                        (sorted, run(quick).unwrap_or_else(|e| panic!("{label}, quick: {e}")))
                    }
                    None => {
                        let run = |knn: &Knn| knn.graph(case.corpus.view(), case.k, case.metric);
                        let sorted = run(sort).unwrap_or_else(|e| panic!("{label}: {e}"));
                        check(&label, &case.corpus, &case.corpus, case.k, case.metric, true, &sorted);
                        (sorted, run(quick).unwrap_or_else(|e| panic!("{label}, quick: {e}")))
                    }
                };
                assert_eq!(sorted.indices, picked.indices, "{label}: indices differ from the quick select's");
                let bits = |n: &knng::Neighbors| n.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&sorted), bits(&picked), "{label}: distances differ from the quick select's");
                if !case.name.contains("f32's range") {
                    assert_eq!(sort.last_run().rows_brute_forced, 0, "{label}: the backend failed to select rows");
                }
                eprintln!("{label}: {:.2} s, {tiles:?}", started.elapsed().as_secs_f64());
                if tiles == SortTiles::Symmetric && sort.is_gpu() {
                    let swept = sort.last_run().rows_in_symmetric_blocks;
                    assert!(swept >= case.corpus.rows(), "{label}: not swept in symmetric blocks");
                }
                if tiles == SortTiles::Blocks && sort.is_gpu() {
                    pairs_swept += sort.last_run().pair_blocks_once;
                }
            }
        }
    }
    assert!(pairs_swept > 0, "no pair of blocks was swept two-sided with the sort selector");
}
