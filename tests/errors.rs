//! Bad input ends in a typed error whose message names what is wrong, on every backend.

use knng::{Algorithm, Backend, Error, Knn, Matrix, Metric, Options};

fn engines() -> Vec<Knn> {
    let mut v = vec![Knn::new(Options { backend: Backend::Cpu, ..Options::default() }).unwrap()];
    let gpu = Knn::new(Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("GPU test without a usable GPU adapter: {e}"));
    v.push(gpu);
    v
}

fn grid(n: usize, d: usize) -> Matrix {
    Matrix::new((0..n * d).map(|i| (i % 7) as f32 + (i / d) as f32 * 0.5).collect(), n, d).unwrap()
}

#[test]
fn bad_k_is_refused() {
    let data = grid(10, 3);
    for knn in engines() {
        let e = knn.graph(data.view(), 0, Metric::Euclidean).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("k must be at least 1"), "{e}");
        let e = knn.graph(data.view(), 10, Metric::Euclidean).unwrap_err();
        assert!(e.to_string().contains("k = 10") && e.to_string().contains("(9)"), "{e}");
        let e = knn.search(data.view(), data.view(), 11, Metric::Euclidean).unwrap_err();
        assert!(e.to_string().contains("k = 11"), "{e}");
        // k = n is fine for a search and for a graph that includes the point itself.
        assert_eq!(knn.search(data.view(), data.view(), 10, Metric::Euclidean).unwrap().k, 10);
    }
}

#[test]
fn empty_inputs_are_refused() {
    let empty = Matrix::new(vec![], 0, 4).unwrap();
    let no_cols = Matrix::new(vec![], 5, 0).unwrap();
    for knn in engines() {
        for m in [&empty, &no_cols] {
            let e = knn.graph(m.view(), 1, Metric::Euclidean).unwrap_err();
            assert!(matches!(e, Error::Empty { .. }), "{e}");
            assert!(e.to_string().contains("is empty"), "{e}");
        }
    }
}

#[test]
fn dimension_mismatch_is_refused() {
    for knn in engines() {
        let e = knn.search(grid(10, 3).view(), grid(2, 4).view(), 1, Metric::Euclidean).unwrap_err();
        assert_eq!(e.to_string(), "dimension mismatch: corpus has 3 columns but queries have 4");
    }
}

#[test]
fn non_finite_values_name_row_and_column() {
    for (value, text) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf"), (f32::NEG_INFINITY, "-inf")] {
        let mut v = grid(20, 5).into_vec();
        v[7 * 5 + 3] = value;
        v[9 * 5 + 1] = value;
        let data = Matrix::new(v, 20, 5).unwrap();
        for knn in engines() {
            let e = knn.graph(data.view(), 3, Metric::Euclidean).unwrap_err();
            assert_eq!(e.to_string(), format!("data has a non-finite value {text} at row 7, column 3"));
            let e = knn.search(grid(20, 5).view(), data.view(), 3, Metric::Cosine).unwrap_err();
            assert!(
                e.to_string().starts_with("queries has a non-finite value") && e.to_string().contains("row 7"),
                "{e}"
            );
        }
    }
}

#[test]
fn degenerate_rows_are_refused_where_the_metric_is_undefined() {
    let mut v = grid(12, 4).into_vec();
    v[5 * 4..6 * 4].fill(0.0);
    let zero_row = Matrix::new(v, 12, 4).unwrap();
    let mut v = grid(12, 4).into_vec();
    v[8 * 4..9 * 4].fill(3.5);
    let constant_row = Matrix::new(v, 12, 4).unwrap();
    for knn in engines() {
        let e = knn.graph(zero_row.view(), 2, Metric::Cosine).unwrap_err();
        assert_eq!(e.to_string(), "data row 5 is a zero vector: the cosine distance is undefined for it");
        let e = knn.graph(constant_row.view(), 2, Metric::Correlation).unwrap_err();
        assert_eq!(
            e.to_string(),
            "data row 8 is constant (zero variance): the correlation distance is undefined for it"
        );
        // Subnormal values only: a zero vector wherever subnormals are flushed.
        let mut v = grid(12, 4).into_vec();
        v[2 * 4..3 * 4].copy_from_slice(&[1e-39, -2e-40, 0.0, 5e-45]);
        let e = knn.graph(Matrix::new(v, 12, 4).unwrap().view(), 2, Metric::Cosine).unwrap_err();
        assert_eq!(
            e.to_string(),
            "data row 2 is a zero vector in f32 arithmetic (every value is below 1.2e-38, f32's smallest normal \
             magnitude): the cosine distance is undefined for it"
        );
        // The same rows are fine under metrics that define them.
        knn.graph(zero_row.view(), 2, Metric::Euclidean).unwrap();
        knn.graph(constant_row.view(), 2, Metric::Cosine).unwrap();
    }
}

#[test]
fn huge_values_are_refused_before_they_overflow() {
    let mut v = grid(6, 2).into_vec();
    v[4 * 2 + 1] = 3e19;
    let data = Matrix::new(v, 6, 2).unwrap();
    for knn in engines() {
        let e = knn.graph(data.view(), 2, Metric::SqEuclidean).unwrap_err();
        assert!(e.to_string().contains("row 4, column 1"), "{e}");
    }
}

#[test]
fn names_are_parsed_with_aliases_and_clear_errors() {
    assert_eq!("l2".parse::<Metric>().unwrap(), Metric::Euclidean);
    assert_eq!("pearson".parse::<Metric>().unwrap(), Metric::Correlation);
    assert_eq!("IP".parse::<Metric>().unwrap(), Metric::InnerProduct);
    let e = "manhattan".parse::<Metric>().unwrap_err();
    assert!(e.to_string().contains("manhattan") && e.to_string().contains("euclidean"), "{e}");
    let e = "tpu".parse::<Backend>().unwrap_err();
    assert!(e.to_string().contains("tpu"), "{e}");
}

#[test]
fn an_unknown_adapter_is_a_clear_error() {
    let options =
        Options { backend: Backend::Gpu, adapter: Some("no such adapter 12345".into()), ..Options::default() };
    let e = Knn::new(options).err().expect("the adapter does not exist");
    assert!(e.to_string().contains("no such adapter 12345"), "{e}");
    let options = Options { backend: Backend::Gpu, adapter: Some("999".into()), ..Options::default() };
    let e = Knn::new(options).err().expect("index out of range");
    assert!(e.to_string().contains("999"), "{e}");
}

#[test]
fn a_k_too_large_for_the_gpu_budget_is_an_error_not_a_crash() {
    let knn = Knn::new(Options {
        backend: Backend::Gpu,
        adapter: std::env::var("KNNG_TEST_ADAPTER").ok(),
        memory_budget: Some(4 << 10),
        ..Options::default()
    })
    .unwrap();
    let data = grid(600, 8);
    let e = knn.graph(data.view(), 599, Metric::Euclidean).unwrap_err();
    assert!(matches!(e, Error::TooLargeForDevice(_)), "{e}");
}

/// The first bad row of a large input is the one named, however the scan is split across
/// cores (the corpus scan also computes the centring mean in the same pass), on every
/// backend (a GPU engine writes the corpus to the GPU meanwhile, in three 2 MiB parts here).
#[test]
fn first_bad_row_of_a_large_input_is_named() {
    let n = 300_000;
    let mut values: Vec<f32> = (0..n * 4).map(|i| (i % 11) as f32).collect();
    values[290_000 * 4 + 1] = f32::NAN;
    values[200_000 * 4 + 3] = 1e30;
    values[140_234 * 4 + 2] = f32::INFINITY;
    let data = Matrix::new(values, n, 4).unwrap();
    for knn in engines() {
        for metric in [Metric::Euclidean, Metric::InnerProduct] {
            let e = knn.graph(data.view(), 3, metric).unwrap_err();
            assert!(matches!(e, Error::NonFinite { row: 140_234, col: 2, .. }), "{metric}: {e}");
            let e = knn.search(data.view(), grid(3, 4).view(), 3, metric).unwrap_err();
            assert!(matches!(e, Error::NonFinite { row: 140_234, col: 2, .. }), "{metric}: {e}");
        }
    }
    // Under cosine an all-zero row is as bad, and here it comes first.
    let mut values = vec![1.0f32; n * 4];
    values[9 * 4..10 * 4].fill(0.0);
    values[280_000 * 4] = f32::NAN;
    let data = Matrix::new(values, n, 4).unwrap();
    for knn in engines() {
        let e = knn.graph(data.view(), 3, Metric::Cosine).unwrap_err();
        assert!(matches!(e, Error::DegenerateRow { row: 9, .. }), "{e}");
    }
}

/// A graph whose answer exceeds the host limit is refused whole, with a message that names
/// the answer and the way around it, and computed when its rows are taken as they come.
#[test]
fn graphs_beyond_the_memory_limit_are_refused_whole_and_streamed() {
    let data = grid(3000, 4);
    let options = Options {
        backend: Backend::Cpu,
        algorithm: Algorithm::Brute,
        max_host_memory: Some(1 << 20),
        ..Options::default()
    };
    let knn = Knn::new(options).unwrap();
    let e = knn.graph(data.view(), 50, Metric::Euclidean).unwrap_err();
    let message = e.to_string();
    assert!(matches!(e, Error::HostMemory(_)), "{e}");
    assert!(message.contains("answers alone take 1.1 MiB") && message.contains("graph_streamed"), "{message}");
    let mut rows = 0;
    knn.graph_streamed(data.view(), 50, Metric::Euclidean, &mut |finished| {
        assert_eq!(finished.first, rows);
        rows += finished.indices.len() / 50;
        Ok(())
    })
    .unwrap();
    assert_eq!(rows, 3000);
    let stats = knn.last_run();
    assert!(stats.blocks > 1 && stats.bytes_spilled > 0, "{stats:?}");
}

/// Under a host limit that holds its tree but not its whole answer, the kd-tree hands the
/// rows over in blocks, in order, with brute force's distances (ties may pick other rows);
/// under one that cannot hold the tree, brute force runs in blocks.
#[test]
fn kd_tree_graphs_beyond_the_memory_limit_are_streamed_in_blocks() {
    let data = grid(3000, 4);
    let streamed = |algorithm, limit: u64| {
        let options = Options { backend: Backend::Cpu, algorithm, max_host_memory: Some(limit), ..Options::default() };
        let knn = Knn::new(options).unwrap();
        let (mut pieces, mut distances) = (0, Vec::new());
        knn.graph_streamed(data.view(), 50, Metric::Euclidean, &mut |finished| {
            assert_eq!(finished.first, distances.len() / 50);
            pieces += 1;
            distances.extend_from_slice(finished.distances);
            Ok(())
        })
        .unwrap();
        assert_eq!(distances.len(), 3000 * 50);
        (knn.last_run(), pieces, distances)
    };
    let (tree, pieces, tree_distances) = streamed(Algorithm::Auto, 1 << 20);
    assert_eq!(tree.algorithm, Algorithm::KdTree);
    assert!(pieces > 1, "{pieces} pieces");
    let (brute, _, brute_distances) = streamed(Algorithm::Brute, 1 << 20);
    assert_eq!(brute.algorithm, Algorithm::Brute);
    assert!(tree_distances == brute_distances, "the kd-tree's distances differ from brute force's");
    // 8000 rows of 6 values: a tree of about 1 MiB, where brute force's blocks need less.
    let data = grid(8000, 6);
    let options = Options { backend: Backend::Cpu, max_host_memory: Some(900 << 10), ..Options::default() };
    let knn = Knn::new(options).unwrap();
    let mut rows = 0;
    knn.graph_streamed(data.view(), 10, Metric::Euclidean, &mut |finished| {
        rows += finished.indices.len() / 10;
        Ok(())
    })
    .unwrap();
    assert_eq!((rows, knn.last_run().algorithm), (8000, Algorithm::Brute), "a tree beyond the limit");
}

/// An index file changed in any byte, cut short at any length, lengthened, or written in
/// another format version is refused with a message that names the file and says what is
/// wrong; the file itself loads and answers. Under cosine the tree holds unit vectors beside
/// the rows; under euclidean it reads its points from the rows, held once in node order.
#[test]
fn damaged_index_files_are_refused() {
    for metric in [Metric::Cosine, Metric::Euclidean] {
        damaged_index_files_are_refused_under(metric);
    }
}

fn damaged_index_files_are_refused_under(metric: Metric) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grid.knng");
    let knn =
        Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::CoverTree, ..Options::default() }).unwrap();
    let data = grid(40, 3);
    knn.build_index(data.view(), metric).unwrap().save(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let index = knng::Index::load(&path).unwrap();
    // The grid repeats rows: 19 distinct points among its 40.
    assert_eq!(index.points(), Some(19), "{metric}");
    let found = knn.search_index(&index, data.view(), 1).unwrap();
    assert_eq!(found, knn.search(data.view(), data.view(), 1, metric).unwrap());
    assert_eq!(&knng::Index::from_bytes(&good).unwrap().corpus()[..], data.as_slice());

    let refused = |bytes: &[u8], what: &str| -> String {
        std::fs::write(&path, bytes).unwrap();
        let e = knng::Index::load(&path).expect_err(what).to_string();
        assert!(e.starts_with(&path.display().to_string()), "{what}: {e}");
        let e2 = knng::Index::from_bytes(bytes).expect_err(what).to_string();
        assert!(e2.contains(e.split(": ").last().unwrap()), "{what}: {e} / {e2}");
        e
    };
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        refused(&bad, &format!("byte {at} changed"));
    }
    for len in 0..good.len() {
        let e = refused(&good[..len], &format!("cut to {len} bytes"));
        assert!(
            ["empty", "truncated", "not a knng index", "checksum", "padding"].iter().any(|w| e.contains(w)),
            "cut to {len}: {e}"
        );
    }
    let mut longer = good.clone();
    longer.extend([0u8; 8]);
    assert!(refused(&longer, "lengthened").contains("follow its last array"));
    let e = refused(&good[..good.len() / 2], "cut in half");
    assert!(e.contains("truncated") && e.contains(&(good.len() / 2).to_string()), "{e}");
    let e = refused(b"KNNGINDX", "magic alone");
    assert!(e.contains("truncated"), "{e}");
    let mut npy = good.clone();
    npy[..6].copy_from_slice(b"\x93NUMPY");
    assert!(refused(&npy, "another kind of file").contains("not a knng index"));
    let mut newer = good.clone();
    newer[8] = 3;
    let e = refused(&newer, "format 3");
    assert!(e.contains("index format 3") && e.contains("reads format 2") && e.contains("build the index again"), "{e}");
    let mut header = good.clone();
    header[60] ^= 1;
    assert!(refused(&header, "header").contains("header fails its checksum"));
}
