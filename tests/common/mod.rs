//! The float64 oracle, the tie-aware comparator and the table of cases shared by every
//! backend's tests. The oracle is written independently of the library: plain loops over
//! float64 values, no shared code.

#![allow(dead_code)]

use knng::{Matrix, Metric, Neighbors};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Distance as the oracle computes it, in float64, in the reported form.
pub fn oracle_distance(metric: Metric, x: &[f32], y: &[f32]) -> f64 {
    let x: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let y: Vec<f64> = y.iter().map(|&v| v as f64).collect();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    match metric {
        Metric::Euclidean => x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt(),
        Metric::SqEuclidean => x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>(),
        Metric::Cosine => 1.0 - dot(&x, &y) / (dot(&x, &x).sqrt() * dot(&y, &y).sqrt()),
        Metric::Correlation => {
            let mx = x.iter().sum::<f64>() / x.len() as f64;
            let my = y.iter().sum::<f64>() / y.len() as f64;
            let xc: Vec<f64> = x.iter().map(|v| v - mx).collect();
            let yc: Vec<f64> = y.iter().map(|v| v - my).collect();
            1.0 - dot(&xc, &yc) / (dot(&xc, &xc).sqrt() * dot(&yc, &yc).sqrt())
        }
        Metric::InnerProduct => dot(&x, &y),
    }
}

/// Ascending "nearness" key: distance, or minus the inner product.
fn key(metric: Metric, d: f64) -> f64 {
    if metric == Metric::InnerProduct {
        -d
    } else {
        d
    }
}

/// Checks `got` against the float64 brute force, ties aside: every returned neighbour is at
/// most as far as the true k-th, every row strictly nearer than the true k-th is returned,
/// indices are distinct and in range, self is excluded when asked, reported distances match
/// the float64 ones to fp32 rounding, and rows are sorted by (distance, index).
pub fn check(
    case: &str,
    corpus: &Matrix,
    queries: &Matrix,
    k: usize,
    metric: Metric,
    exclude_self: bool,
    got: &Neighbors,
) {
    assert_eq!(got.queries, queries.rows(), "{case}: number of result rows");
    assert_eq!(got.k, k, "{case}: k");
    assert_eq!(got.indices.len(), queries.rows() * k, "{case}: indices length");
    assert_eq!(got.distances.len(), queries.rows() * k, "{case}: distances length");
    for qi in 0..queries.rows() {
        let q = &queries.as_slice()[qi * queries.cols()..(qi + 1) * queries.cols()];
        let row = |j: usize| &corpus.as_slice()[j * corpus.cols()..(j + 1) * corpus.cols()];
        let mut all: Vec<(f64, usize)> = (0..corpus.rows())
            .filter(|&j| !(exclude_self && j == qi))
            .map(|j| (key(metric, oracle_distance(metric, q, row(j))), j))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let kth = all[k - 1].0;
        // No absolute floor beyond f64's: rows of 1e-25 have keys of 1e-50, and a floor such
        // as 1e-30 would make every key of theirs a tie.
        let scale = all.iter().map(|e| e.0.abs()).fold(0.0, f64::max).max(f64::MIN_POSITIVE);
        let tol = 1e-9 * scale;

        let ids = got.indices_of(qi);
        let dists = got.distances_of(qi);
        let mut seen = std::collections::HashSet::new();
        for (slot, (&j, &dist)) in ids.iter().zip(dists).enumerate() {
            let j = j as usize;
            assert!(j < corpus.rows(), "{case}: query {qi} slot {slot}: index {j} out of range");
            assert!(!(exclude_self && j == qi), "{case}: query {qi} lists itself");
            assert!(seen.insert(j), "{case}: query {qi} lists {j} twice");
            let true_dist = oracle_distance(metric, q, row(j));
            assert!(
                key(metric, true_dist) <= kth + tol,
                "{case}: query {qi} slot {slot}: neighbour {j} at {true_dist} is farther than the true k-th ({kth}); got {ids:?}, want {:?}",
                all[..k].iter().map(|e| e.1).collect::<Vec<_>>()
            );
            let err = (dist as f64 - true_dist).abs();
            assert!(
                // Distances under f32's subnormals are reported as 0.
                err <= 1e-6 * true_dist.abs().max(scale * 1e-3) + 1e-45,
                "{case}: query {qi} slot {slot}: reported distance {dist} but float64 gives {true_dist}"
            );
            if slot > 0 {
                let prev = key(metric, dists[slot - 1] as f64);
                let this = key(metric, dist as f64);
                assert!(prev <= this, "{case}: query {qi}: distances not sorted at slot {slot}: {dists:?}");
                if prev == this {
                    assert!(
                        ids[slot - 1] < ids[slot],
                        "{case}: query {qi}: equal distances not ordered by index at slot {slot}"
                    );
                }
            }
        }
        for &(kk, j) in all.iter().take_while(|e| e.0 < kth - tol) {
            assert!(seen.contains(&j), "{case}: query {qi} misses neighbour {j} at {kk}, nearer than the k-th ({kth})");
        }
    }
}

/// One row of the case table.
pub struct Case {
    pub name: String,
    pub corpus: Matrix,
    /// `None`: a kNN graph of the corpus.
    pub queries: Option<Matrix>,
    pub k: usize,
    pub metric: Metric,
}

fn random(rng: &mut StdRng, n: usize, d: usize, offset: f32) -> Matrix {
    let data = (0..n * d).map(|_| offset + rng.random_range(-1.0f32..1.0)).collect();
    Matrix::new(data, n, d).unwrap()
}

/// Integer-valued rows: many exact ties among distances.
/// Constant rows are nudged, since cosine and correlation are undefined for them.
fn lattice(rng: &mut StdRng, n: usize, d: usize, levels: i32, offset: f32) -> Matrix {
    let mut data: Vec<f32> = (0..n * d).map(|_| offset + rng.random_range(0..levels) as f32).collect();
    for row in data.chunks_mut(d) {
        if row.iter().all(|&v| v == row[0]) {
            row[0] += 1.0;
        }
    }
    Matrix::new(data, n, d).unwrap()
}

/// Like 8x8 image patches stored as raw counts with a large common offset: the case where the
/// plain fp32 expansion loses neighbours.
fn offset_patches(rng: &mut StdRng, n: usize) -> Matrix {
    let data = (0..n * 64).map(|_| 1000.0 + rng.random_range(0..16) as f32).collect();
    Matrix::new(data, n, 64).unwrap()
}

/// Longitude/latitude-like pairs: two dimensions, large offset, tiny spread.
fn lon_lat(rng: &mut StdRng, n: usize) -> Matrix {
    let data = (0..n)
        .flat_map(|_| [-122.4 + rng.random_range(-0.01f32..0.01), 37.7 + rng.random_range(-0.01f32..0.01)])
        .collect();
    Matrix::new(data, n, 2).unwrap()
}

/// Each row of uniform values scaled by its own power of ten between 1e-30 and 1e18.
fn scaled_rows(rng: &mut StdRng, n: usize, d: usize) -> Matrix {
    let mut m = random(rng, n, d, 0.0).into_vec();
    for row in m.chunks_mut(d) {
        let s = 10f32.powf(rng.random_range(-30.0f32..17.9));
        row.iter_mut().for_each(|v| *v *= s);
    }
    Matrix::new(m, n, d).unwrap()
}

/// Two-dimensional rows along a line, stored in their order along it.
fn sorted_line(rng: &mut StdRng, n: usize) -> Matrix {
    let rows: Vec<Vec<f32>> = (0..n)
        .map(|i| vec![i as f32 * 0.01 + rng.random_range(0.0..0.005f32), rng.random_range(0.0..0.02f32)])
        .collect();
    Matrix::from_rows(&rows).unwrap()
}

fn scaled(m: Matrix, s: f32) -> Matrix {
    let (n, d) = (m.rows(), m.cols());
    Matrix::new(m.into_vec().into_iter().map(|v| v * s).collect(), n, d).unwrap()
}

fn with_duplicates(rng: &mut StdRng, n: usize, d: usize) -> Matrix {
    let base = random(rng, n / 3 + 1, d, 0.0);
    let rows: Vec<Vec<f32>> =
        (0..n).map(|i| base.as_slice()[(i % base.rows()) * d..(i % base.rows() + 1) * d].to_vec()).collect();
    Matrix::from_rows(&rows).unwrap()
}

/// The table run on every backend.
pub fn cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(20261122);
    let mut out = Vec::new();
    let mut add = |name: String, corpus: Matrix, queries: Option<Matrix>, k: usize, metric: Metric| {
        out.push(Case { name, corpus, queries, k, metric });
    };
    for metric in Metric::ALL {
        let m = metric.name();
        add(format!("{m}: n=1 search k=1"), random(&mut rng, 1, 3, 0.0), Some(random(&mut rng, 4, 3, 0.0)), 1, metric);
        add(format!("{m}: n=2 graph k=1"), random(&mut rng, 2, 5, 0.0), None, 1, metric);
        // Every row of one column is constant, so correlation needs two.
        let d1 = if metric == Metric::Correlation { 2 } else { 1 };
        add(format!("{m}: d={d1} graph"), random(&mut rng, 40, d1, 0.0), None, 5, metric);
        add(format!("{m}: graph k=n-1"), random(&mut rng, 37, 6, 0.0), None, 36, metric);
        add(format!("{m}: search k=n"), random(&mut rng, 29, 7, 0.0), Some(random(&mut rng, 11, 7, 0.0)), 29, metric);
        add(format!("{m}: odd sizes 133x37 k=7"), random(&mut rng, 133, 37, 0.0), None, 7, metric);
        add(format!("{m}: duplicates"), with_duplicates(&mut rng, 90, 9), None, 4, metric);
        add(format!("{m}: lattice ties"), lattice(&mut rng, 150, 5, 3, 0.0), None, 10, metric);
        add(format!("{m}: offset 1000 lattice"), lattice(&mut rng, 120, 16, 4, 1000.0), None, 8, metric);
        add(format!("{m}: wide rows d=300 k=9"), random(&mut rng, 150, 300, 2.0), None, 9, metric);
        // Exact keys of long rows run the same slot of 256 neighbouring rows side by side:
        // three blocks of rows, the last of 8 (the order does not depend on the metric).
        if matches!(metric, Metric::SqEuclidean | Metric::Cosine | Metric::Correlation) {
            add(format!("{m}: wide rows 520 x 260 k=5"), random(&mut rng, 520, 260, 1.0), None, 5, metric);
        }
        // Rows of a few dozen values, a multiple of 4: the grouped vec4 exact-key kernel (the
        // odd sizes above and the search below take the scalar one), with 1, 2 and 4
        // invocations per candidate.
        add(format!("{m}: rows of 44 values k=6"), random(&mut rng, 70, 44, 1.0), None, 6, metric);
        add(format!("{m}: rows of 64 values k=6"), random(&mut rng, 80, 64, 1.0), None, 6, metric);
        add(format!("{m}: rows of 132 values k=7"), random(&mut rng, 70, 132, 1.0), None, 7, metric);
        // Long rows whose length is not a multiple of 4 take the scalar exact-key kernel.
        add(format!("{m}: wide rows d=258 k=5"), random(&mut rng, 60, 258, 2.0), None, 5, metric);
        add(
            format!("{m}: search 300 x 70 k=20 offset"),
            random(&mut rng, 300, 70, 50.0),
            Some(random(&mut rng, 41, 70, 50.0)),
            20,
            metric,
        );
    }
    add("euclidean: image patches offset 1000".into(), offset_patches(&mut rng, 400), None, 10, Metric::Euclidean);
    add("sqeuclidean: lon/lat pairs".into(), lon_lat(&mut rng, 500), None, 12, Metric::SqEuclidean);
    // Magnitudes whose squares and products leave f32's normal range: sums of squares of
    // rows of 1e-25 underflow, of long rows near 1e18 overflow.
    for metric in [Metric::Cosine, Metric::Correlation] {
        add(
            format!("{}: rows of magnitudes 1e-30 to 1e18", metric.name()),
            scaled_rows(&mut rng, 200, 400),
            None,
            6,
            metric,
        );
    }
    add(
        "inner_product: rows of 1e-25".into(),
        scaled(random(&mut rng, 150, 40, 0.0), 1e-25),
        None,
        5,
        Metric::InnerProduct,
    );
    // Squared distances and inner products at or beyond the edge of f32's range: fp32 keys
    // that may be +inf, like the padding, prove nothing, and the host answers the rows
    // (`key_error_bound`).
    add(
        "euclidean: rows of 9e17, d=1024, keys beyond f32's range".into(),
        scaled(random(&mut rng, 40, 1024, 0.0), 9e17),
        None,
        3,
        Metric::Euclidean,
    );
    add(
        "inner_product: rows of 5e17 to 1e18, d=1024, keys at the edge of f32's range".into(),
        scaled(random(&mut rng, 40, 1024, 1.0), 5e17),
        None,
        3,
        Metric::InnerProduct,
    );
    // The widths of embeddings and GIST-like descriptors: one chunk of a few rows' worth of
    // GEMM depth, and exact keys of long rows.
    add(
        "euclidean: wide vectors, search 9 queries in 160 x 960 k=10".into(),
        random(&mut rng, 160, 960, 0.5),
        Some(random(&mut rng, 9, 960, 0.5)),
        10,
        Metric::Euclidean,
    );
    add("cosine: wide vectors, graph n=90 d=3000 k=5".into(), random(&mut rng, 90, 3000, 0.2), None, 5, Metric::Cosine);
    add(
        "inner_product: wide vectors, search 6 queries in 120 x 4096 k=7".into(),
        random(&mut rng, 120, 4096, 0.0),
        Some(random(&mut rng, 6, 4096, 0.0)),
        7,
        Metric::InnerProduct,
    );
    add(
        "correlation: wide vectors, graph n=70 d=4096 k=4".into(),
        random(&mut rng, 70, 4096, 1.0),
        None,
        4,
        Metric::Correlation,
    );
    for s in 0..6 {
        let n = rng.random_range(2..260usize);
        let d = rng.random_range(2..40usize);
        let k = rng.random_range(1..n);
        let metric = Metric::ALL[s % Metric::ALL.len()];
        let offset = rng.random_range(-5.0f32..5.0);
        let m = random(&mut rng, n, d, offset);
        add(format!("seeded shape #{s}: n={n} d={d} k={k} {}", metric.name()), m, None, k, metric);
    }
    out
}

/// Low-dimensional data, for the kd-tree (and every other engine): 1 to 6 dimensions,
/// uniform, exponential and clustered points, many rows sharing coordinates, lattices whose
/// distances tie in long runs, a large common offset, and k up to 1000.
pub fn lowdim_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(20261126);
    let mut out = Vec::new();
    let mut add = |name: String, corpus: Matrix, queries: Option<Matrix>, k: usize, metric: Metric| {
        out.push(Case { name, corpus, queries, k, metric });
    };
    let exponential = |rng: &mut StdRng, n: usize, d: usize| {
        let data = (0..n * d).map(|_| -(1.0f32 - rng.random_range(0.0f32..1.0)).ln()).collect();
        Matrix::new(data, n, d).unwrap()
    };
    // Gaussian-like blobs (sums of uniforms) of very different spreads.
    let clustered = |rng: &mut StdRng, n: usize, d: usize| {
        let centres: Vec<(f32, f32)> = (0..5).map(|c| (rng.random_range(-50.0f32..50.0), 10f32.powi(-c))).collect();
        let data = (0..n)
            .flat_map(|i| {
                let (centre, spread) = centres[i % centres.len()];
                (0..d)
                    .map(|_| centre + spread * (0..4).map(|_| rng.random_range(-1.0f32..1.0)).sum::<f32>())
                    .collect::<Vec<_>>()
            })
            .collect();
        Matrix::new(data, n, d).unwrap()
    };
    // Points rounded to a coarse grid: most rows share their coordinates with others, some
    // with dozens.
    let rounded = |rng: &mut StdRng, n: usize, d: usize, step: f32| {
        let data = (0..n * d).map(|_| (rng.random_range(-1.0f32..1.0) / step).round() * step).collect();
        Matrix::new(data, n, d).unwrap()
    };
    for d in 1..=6 {
        let metric = if d % 2 == 0 { Metric::Euclidean } else { Metric::SqEuclidean };
        let m = metric.name();
        add(format!("{m}: uniform d={d} k=10"), random(&mut rng, 700, d, 0.0), None, 10, metric);
        add(format!("{m}: exponential d={d} k=25"), exponential(&mut rng, 600, d), None, 25, metric);
        add(format!("{m}: clustered d={d} k=7"), clustered(&mut rng, 500, d), None, 7, metric);
        add(format!("{m}: lattice ties d={d} k=12"), lattice(&mut rng, 400, d, 4, 0.0), None, 12, metric);
        add(format!("{m}: shared coordinates d={d} k=9"), rounded(&mut rng, 500, d, 0.5), None, 9, metric);
    }
    let metric = Metric::Euclidean;
    add(
        "euclidean: 300 copies of one point and 20 others, k=40".into(),
        {
            let mut rows = vec![vec![0.25f32, -3.0]; 300];
            rows.extend((0..20).map(|i| vec![i as f32, 1.0]));
            Matrix::from_rows(&rows).unwrap()
        },
        None,
        40,
        metric,
    );
    add(
        "euclidean: lon/lat pairs with duplicates".into(),
        {
            let m = lon_lat(&mut rng, 400).into_vec();
            let rows: Vec<Vec<f32>> = (0..600).map(|i| m[(i % 400) * 2..(i % 400) * 2 + 2].to_vec()).collect();
            Matrix::from_rows(&rows).unwrap()
        },
        None,
        11,
        metric,
    );
    add("euclidean: offset 1000 lattice d=3".into(), lattice(&mut rng, 300, 3, 5, 1000.0), None, 20, metric);
    add("euclidean: sorted line, k=1000".into(), sorted_line(&mut rng, 1200), None, 1000, metric);
    add("sqeuclidean: uniform d=2, k=n-1".into(), random(&mut rng, 150, 2, 0.0), None, 149, Metric::SqEuclidean);
    add(
        "euclidean: search d=3 among shared coordinates, k=30".into(),
        rounded(&mut rng, 800, 3, 0.25),
        Some(rounded(&mut rng, 90, 3, 0.25)),
        30,
        metric,
    );
    add(
        "euclidean: search d=2 exponential, k=n".into(),
        exponential(&mut rng, 60, 2),
        Some(exponential(&mut rng, 40, 2)),
        60,
        metric,
    );
    add("euclidean: rows of 1e-25, d=2".into(), scaled(random(&mut rng, 200, 2, 0.0), 1e-25), None, 6, metric);
    out
}

/// Points with few degrees of freedom in many columns: `m` angles mapped through random
/// sinusoids into `d` columns, plus `offset` in every column.
pub fn manifold(rng: &mut StdRng, n: usize, m: usize, d: usize, offset: f32) -> Matrix {
    let maps: Vec<(usize, f32, f32)> = (0..d)
        .map(|_| (rng.random_range(0..m), rng.random_range(0.5f32..3.0), rng.random_range(0.0f32..6.3)))
        .collect();
    let data = (0..n)
        .flat_map(|_| {
            let angles: Vec<f32> = (0..m).map(|_| rng.random_range(0.0f32..6.3)).collect();
            maps.iter().map(|&(a, f, phase)| offset + (f * angles[a] + phase).sin()).collect::<Vec<_>>()
        })
        .collect();
    Matrix::new(data, n, d).unwrap()
}

/// Data of low intrinsic dimension in many columns, for the cover tree: manifolds of 1 to 6
/// dimensions in 16 to 300 columns under every metric, with duplicates, a large common
/// offset, rows that differ only in scale (one point to cosine), and long lists.
pub fn manifold_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(20261127);
    let mut out = Vec::new();
    for (m, d, metric, k) in [
        (1usize, 16usize, Metric::Euclidean, 5usize),
        (2, 64, Metric::SqEuclidean, 10),
        (3, 100, Metric::Cosine, 8),
        (4, 128, Metric::Correlation, 12),
        (6, 300, Metric::Euclidean, 20),
        (2, 32, Metric::InnerProduct, 6),
    ] {
        let corpus = manifold(&mut rng, 500, m, d, 0.0);
        out.push(Case { name: format!("{metric}: {m}-manifold in d={d} k={k}"), corpus, queries: None, k, metric });
    }
    let corpus = manifold(&mut rng, 400, 3, 48, 0.0);
    let queries = manifold(&mut rng, 90, 3, 48, 0.0);
    out.push(Case {
        name: "euclidean: search of a 3-manifold in d=48 k=15".into(),
        corpus,
        queries: Some(queries),
        k: 15,
        metric: Metric::Euclidean,
    });
    out.push(Case {
        name: "euclidean: 2-manifold in d=40 at offset 1e4, k=9".into(),
        corpus: manifold(&mut rng, 400, 2, 40, 1e4),
        queries: None,
        k: 9,
        metric: Metric::Euclidean,
    });
    out.push(Case {
        name: "correlation: 2-manifold in d=40 at offset 300, k=9".into(),
        corpus: manifold(&mut rng, 400, 2, 40, 300.0),
        queries: None,
        k: 9,
        metric: Metric::Correlation,
    });
    // Each point three times, and the rows of one point at four scales (distance 0 under
    // cosine, four distinct rows).
    let base = manifold(&mut rng, 120, 2, 24, 0.5).into_vec();
    let mut rows: Vec<Vec<f32>> = (0..360).map(|i| base[(i % 120) * 24..][..24].to_vec()).collect();
    rows.extend(
        (0..40).flat_map(|i| [1.0f32, 2.0, 0.5, 8.0].map(|s| base[i * 24..][..24].iter().map(|v| v * s).collect())),
    );
    let duplicated = Matrix::from_rows(&rows).unwrap();
    for (metric, k) in [(Metric::Euclidean, 7), (Metric::Cosine, 11)] {
        out.push(Case {
            name: format!("{metric}: 2-manifold with duplicates and scaled rows, k={k}"),
            corpus: duplicated.clone(),
            queries: None,
            k,
            metric,
        });
    }
    out.push(Case {
        name: "euclidean: 2-manifold in d=20, k=300".into(),
        corpus: manifold(&mut rng, 450, 2, 20, 0.0),
        queries: None,
        k: 300,
        metric: Metric::Euclidean,
    });
    out
}

/// Fewer, larger cases: several distance tiles per row under a small budget, large k.
/// Graphs for the symmetric sweep, where each row also gathers candidates from later rows as
/// a column. The second puts every row of its first query tiles far apart and the rest in a
/// tight cluster around row 0, whose list, complete over the early rows, then takes far more
/// keys from each later tile than its shortlist holds.
pub fn symmetric_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(11);
    let spread = 600;
    let mut late_cluster: Vec<Vec<f32>> =
        (0..spread).map(|i| vec![(i % 30) as f32 * 2.0, (i / 30) as f32 * 2.0, 0.0]).collect();
    late_cluster.extend((0..900).map(|_| vec![rng.random_range(0.0..1.0f32), rng.random_range(0.0..1.0f32), 1.0]));
    let mut cases: Vec<Case> = larger_cases().into_iter().filter(|c| c.queries.is_none()).collect();
    for metric in [Metric::Cosine, Metric::Correlation] {
        cases.push(Case {
            name: format!("{}: graph n=1200 d=16 k=7", metric.name()),
            corpus: random(&mut rng, 1200, 16, 0.5),
            queries: None,
            k: 7,
            metric,
        });
    }
    // Rows of 256 values or more share the exact keys of mutual pairs (scalar and vec4 loads).
    cases.push(Case {
        name: "euclidean: graph n=700 d=258 k=12, wide rows".into(),
        corpus: random(&mut rng, 700, 258, 0.0),
        queries: None,
        k: 12,
        metric: Metric::Euclidean,
    });
    cases.push(Case {
        name: "correlation: graph n=600 d=256 k=30, wide rows".into(),
        corpus: lattice(&mut rng, 600, 256, 3, 10.0),
        queries: None,
        k: 30,
        metric: Metric::Correlation,
    });
    // A point at the centre of a sphere of 64 points: its neighbours are equidistant to fp32
    // rounding, so its certificate fails and it alone takes a second round.
    let mut sphere = random(&mut rng, 1200, 16, 0.0).into_vec();
    let centre: Vec<f32> = (0..16).map(|j| if j == 0 { 50.0 } else { 0.0 }).collect();
    sphere.extend(&centre);
    for _ in 0..64 {
        let dir: Vec<f32> = (0..16).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let norm = dir.iter().map(|v| v * v).sum::<f32>().sqrt();
        sphere.extend(dir.iter().zip(&centre).map(|(v, c)| c + v / norm));
    }
    cases.push(Case {
        name: "euclidean: graph n=1265 d=16 k=5, the centre of a sphere".into(),
        corpus: Matrix::new(sphere, 1265, 16).unwrap(),
        queries: None,
        k: 5,
        metric: Metric::Euclidean,
    });
    cases.push(Case {
        name: "euclidean: graph n=1500 d=3 k=4, a cluster around row 0 after 600 spread rows".into(),
        corpus: Matrix::from_rows(&late_cluster).unwrap(),
        queries: None,
        k: 4,
        metric: Metric::Euclidean,
    });
    cases
}

pub fn larger_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(7);
    vec![
        Case {
            name: "euclidean: graph n=3000 d=24 k=100".into(),
            corpus: random(&mut rng, 3000, 24, 3.0),
            queries: None,
            k: 100,
            metric: Metric::Euclidean,
        },
        Case {
            name: "cosine: search 2000 x 300 queries d=19 k=1500".into(),
            corpus: random(&mut rng, 2000, 19, 0.2),
            queries: Some(random(&mut rng, 300, 19, 0.2)),
            k: 1500,
            metric: Metric::Cosine,
        },
        Case {
            // Sorted data: a row's first distance tiles are far from it, so its bound is
            // loose and its shortlist overflows on the tiles around it.
            name: "euclidean: graph n=2000 d=2 k=10, rows sorted along a line".into(),
            corpus: sorted_line(&mut rng, 2000),
            queries: None,
            k: 10,
            metric: Metric::Euclidean,
        },
        Case {
            // Query tiles after the first read their rows' float64 norms from their offset
            // (cosine keys on the GPU take the norms from the host).
            name: "cosine: graph n=1200 d=40 k=12".into(),
            corpus: random(&mut rng, 1200, 40, 0.5),
            queries: None,
            k: 12,
            metric: Metric::Cosine,
        },
        Case {
            name: "inner_product: graph n=2500 d=33 k=1".into(),
            corpus: random(&mut rng, 2500, 33, 0.0),
            queries: None,
            k: 1,
            metric: Metric::InnerProduct,
        },
    ]
}

/// Candidate lists longer than 1024 pairs, which the GPU ranks in sorted runs: three runs of
/// a search; cosine graphs of nearly parallel vectors, whose certificates fail and send rows
/// to a second round with every row a candidate, with more and with fewer than 1024 answers a
/// row (those are gathered in workgroup memory before they are written); and k = n.
pub fn long_list_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(23);
    vec![
        Case {
            name: "euclidean: search 3000 x 40 queries d=6 k=2100".into(),
            corpus: random(&mut rng, 3000, 6, 0.5),
            queries: Some(random(&mut rng, 40, 6, 0.5)),
            k: 2100,
            metric: Metric::Euclidean,
        },
        Case {
            name: "cosine: lattice graph n=2600 d=3 k=1700 offset 1000".into(),
            corpus: lattice(&mut rng, 2600, 3, 5, 1000.0),
            queries: None,
            k: 1700,
            metric: Metric::Cosine,
        },
        Case {
            name: "cosine: lattice graph n=2600 d=3 k=900 offset 1000".into(),
            corpus: lattice(&mut rng, 2600, 3, 5, 1000.0),
            queries: None,
            k: 900,
            metric: Metric::Cosine,
        },
        Case {
            name: "cosine: search 2500 x 12 queries d=5 k=n".into(),
            corpus: random(&mut rng, 2500, 5, 0.3),
            queries: Some(random(&mut rng, 12, 5, 0.3)),
            k: 2500,
            metric: Metric::Cosine,
        },
    ]
}

/// Graphs and a search in several query tiles, each ranked on the GPU (where the adapter has
/// f64) and its answers published during the next tile's distance kernel; the last tile's
/// are copied after its ranking. Short lists, lists of one ranking run, lists of several.
pub fn published_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(37);
    vec![
        Case {
            name: "euclidean: graph n=1800 d=12 k=30 in query tiles".into(),
            corpus: random(&mut rng, 1800, 12, 0.5),
            queries: None,
            k: 30,
            metric: Metric::Euclidean,
        },
        Case {
            name: "inner product: search 1100 x 700 queries d=8 k=300 in query tiles".into(),
            corpus: random(&mut rng, 1100, 8, 0.2),
            queries: Some(random(&mut rng, 700, 8, 0.2)),
            k: 300,
            metric: Metric::InnerProduct,
        },
        Case {
            name: "cosine: lattice graph n=1300 d=3 k=1100 offset 1000 in query tiles".into(),
            corpus: lattice(&mut rng, 1300, 3, 5, 1000.0),
            queries: None,
            k: 1100,
            metric: Metric::Cosine,
        },
    ]
}

/// Corpora of one shape one after another: an engine keeps the buffers of the last corpus for
/// the next one of its shape, and each must be answered from its own rows.
pub fn same_shape_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(31);
    let (n, d) = (400, 24);
    let first = random(&mut rng, n, d, 0.0);
    let second = lattice(&mut rng, n, d, 4, 50.0);
    let third = random(&mut rng, n, d, 3.0);
    let queries = random(&mut rng, 30, d, 0.0);
    vec![
        Case {
            name: "same shape 1: random graph".into(),
            corpus: first,
            queries: None,
            k: 9,
            metric: Metric::Euclidean,
        },
        Case {
            name: "same shape 2: lattice graph".into(),
            corpus: second,
            queries: None,
            k: 9,
            metric: Metric::Euclidean,
        },
        Case {
            name: "same shape 3: search".into(),
            corpus: third,
            queries: Some(queries),
            k: 9,
            metric: Metric::Euclidean,
        },
    ]
}

/// A corpus of more than 8 MiB (uploaded in parts by several cores) searched by a few queries,
/// and corpora whose rows fill whole 16384-column distance tiles, where the select checks its
/// first pivot against a wider sample (`lower_first_pivot`) and finishes what it keeps by a
/// histogram (`tail_select`): on a lattice, whose keys tie in long runs, for short and long
/// lists (at k=700 the histogram's crowded bins go back to the select's passes).
pub fn large_corpus_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(11);
    let ties = lattice(&mut rng, 20_000, 4, 3, 0.0);
    vec![
        Case {
            name: "euclidean: search 7 queries in a 70000 x 32 corpus".into(),
            corpus: random(&mut rng, 70_000, 32, 0.5),
            queries: Some(random(&mut rng, 7, 32, 0.5)),
            k: 9,
            metric: Metric::Euclidean,
        },
        Case {
            name: "euclidean: search 5 lattice queries in a 20000 x 4 lattice, k=9".into(),
            corpus: ties.clone(),
            queries: Some(lattice(&mut rng, 5, 4, 3, 0.0)),
            k: 9,
            metric: Metric::Euclidean,
        },
        Case {
            name: "euclidean: search 5 lattice queries in a 20000 x 4 lattice, k=700".into(),
            corpus: ties,
            queries: Some(lattice(&mut rng, 5, 4, 3, 0.0)),
            k: 700,
            metric: Metric::Euclidean,
        },
        Case {
            name: "euclidean: search a row whose near keys are where the select samples its pivots".into(),
            corpus: sampled_positions_near(16_384),
            queries: Some(Matrix::new(vec![0.0], 1, 1).unwrap()),
            // Over 256 candidates: every distance tile is selected densely, shortlists unused.
            k: 300,
            metric: Metric::Euclidean,
        },
    ]
}

/// Corpora larger than [`CHUNKED_BINDING`], so that a GPU engine whose bindings are capped to
/// it keeps them resident in several chunks (original rows beside each for the float64
/// re-ranking): searches and graphs, every metric family, rows short and wide.
pub fn chunked_corpus_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(17);
    vec![
        Case {
            name: "euclidean: search 7 queries in a 20000 x 32 corpus of 11 chunks".into(),
            corpus: random(&mut rng, 20_000, 32, 0.5),
            queries: Some(random(&mut rng, 7, 32, 0.5)),
            k: 9,
            metric: Metric::Euclidean,
        },
        Case {
            name: "sqeuclidean: graph of a 4000 x 24 lattice in chunks, k=10".into(),
            corpus: lattice(&mut rng, 4000, 24, 3, 0.0),
            queries: None,
            k: 10,
            metric: Metric::SqEuclidean,
        },
        Case {
            name: "cosine: graph of 3000 x 40 in chunks, k=6".into(),
            corpus: random(&mut rng, 3000, 40, 0.3),
            queries: None,
            k: 6,
            metric: Metric::Cosine,
        },
        Case {
            name: "correlation: search 9 lattice queries in a 9000 x 6 lattice in chunks, k=12".into(),
            corpus: lattice(&mut rng, 9000, 6, 3, 0.0),
            queries: Some(lattice(&mut rng, 9, 6, 3, 0.0)),
            k: 12,
            metric: Metric::Correlation,
        },
        Case {
            name: "inner product: search 5 queries in 1500 x 300 rows in chunks, k=7".into(),
            corpus: random(&mut rng, 1500, 300, 0.0),
            queries: Some(random(&mut rng, 5, 300, 0.0)),
            k: 7,
            metric: Metric::InnerProduct,
        },
        Case {
            name: "euclidean: search 4 queries in 1200 x 258 rows in chunks, k=5".into(),
            corpus: random(&mut rng, 1200, 258, 0.0),
            queries: Some(random(&mut rng, 4, 258, 0.0)),
            k: 5,
            metric: Metric::Euclidean,
        },
    ]
}

/// The binding cap of [`chunked_corpus_cases`].
pub const CHUNKED_BINDING: u64 = 256 << 10;

/// `n` points on a line, for a query at the origin: at every (n / 64)-th row, where the GPU
/// select takes its pivot samples in a distance tile of n columns, the points 1, 2, ..., 64;
/// 512 more between 16.5 and 31.5; all others far away. For k = 300 (375 candidates) the
/// first pivot keeps too few, and so do the bands up to the 8th and the 16th sample: the row
/// takes three BAND passes before its segment holds enough.
fn sampled_positions_near(n: usize) -> Matrix {
    let stride = n / 64;
    let data = (0..n)
        .map(|i| match i % stride {
            0 => (i / stride + 1) as f32,
            100..108 => 16.5 + 15.0 * ((i / stride) * 8 + i % stride - 100) as f32 / 512.0,
            _ => 1000.0 + 0.01 * i as f32,
        })
        .collect();
    Matrix::new(data, n, 1).unwrap()
}

/// Graphs whose sampled bounds (a bounded sweep samples every 4th row from row 2 at these
/// sizes) miss what matters: a tight cluster on every row the sample skips, so that its rows'
/// bounds, set by spread rows far away, take the whole cluster and overflow their lists.
pub fn bounded_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(17);
    let rows: Vec<Vec<f32>> = (0..1600)
        .map(|i| match i % 4 {
            0 => (0..4).map(|_| 5.0 + rng.random_range(0.0..0.01f32)).collect(),
            _ => (0..4).map(|_| rng.random_range(-50.0..50.0f32)).collect(),
        })
        .collect();
    vec![
        Case {
            name: "euclidean: graph n=1600 d=4 k=10, a cluster on the rows a sample of every 4th skips".into(),
            corpus: Matrix::from_rows(&rows).unwrap(),
            queries: None,
            k: 10,
            metric: Metric::Euclidean,
        },
        // Integer distances: many keys equal the kc-th, so the select's ties decide the list.
        Case {
            name: "euclidean: lattice graph n=2000 d=3 k=250, ties at every rank".into(),
            corpus: lattice(&mut rng, 2000, 3, 12, 0.0),
            queries: None,
            k: 250,
            metric: Metric::Euclidean,
        },
    ]
}

/// Corpora of 4096 rows, which a budget of a few MiB cuts into distance tiles narrowed to
/// 1024 columns: each query tile's first is dense and the rest sparse (keys under a row's
/// bound only). Sorted rows overflow shortlists (the first tile is far from a row, so its
/// bound is loose) and are searched again; ties and duplicates must still come out as the
/// dense path gives them.
pub fn sparse_cases() -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(29);
    let line = sorted_line(&mut rng, 4096);
    vec![
        Case {
            name: "euclidean: graph n=4096 d=8 k=10".into(),
            corpus: random(&mut rng, 4096, 8, 2.0),
            queries: None,
            k: 10,
            metric: Metric::Euclidean,
        },
        Case {
            name: "euclidean: graph n=4096 d=2 k=16, rows sorted along a line".into(),
            corpus: line,
            queries: None,
            k: 16,
            metric: Metric::Euclidean,
        },
        Case {
            name: "sqeuclidean: lattice graph n=4096 d=3 k=40, ties at every rank".into(),
            corpus: lattice(&mut rng, 4096, 3, 9, 0.0),
            queries: None,
            k: 40,
            metric: Metric::SqEuclidean,
        },
        Case {
            name: "cosine: search 4096 x 700 queries d=12 k=30, duplicated rows".into(),
            corpus: with_duplicates(&mut rng, 4096, 12),
            queries: Some(random(&mut rng, 700, 12, 0.3)),
            k: 30,
            metric: Metric::Cosine,
        },
        Case {
            name: "inner_product: search 4096 x 500 queries d=16 k=5".into(),
            corpus: random(&mut rng, 4096, 16, 0.0),
            queries: Some(random(&mut rng, 500, 16, 0.0)),
            k: 5,
            metric: Metric::InnerProduct,
        },
    ]
}

/// The graph in an `.ivecs` of indices and an `.fvecs` of distances (`rows` rows of `k`).
#[allow(dead_code)]
pub fn neighbors_from_vecs(ids: &[u8], dists: &[u8], rows: usize, k: usize) -> Neighbors {
    let words = |bytes: &[u8]| -> Vec<[u8; 4]> {
        bytes
            .chunks_exact(4 * (k + 1))
            .flat_map(|row| row[4..].chunks_exact(4).map(|w| w.try_into().unwrap()))
            .collect()
    };
    let indices: Vec<u32> = words(ids).into_iter().map(u32::from_le_bytes).collect();
    let distances: Vec<f32> = words(dists).into_iter().map(f32::from_le_bytes).collect();
    assert_eq!(indices.len(), rows * k);
    Neighbors { indices, distances, queries: rows, k }
}
