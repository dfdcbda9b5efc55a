//! Exact ground truth for an approximate (ANN) index: the true `k` nearest base vectors of
//! every query, written as TEXMEX `.ivecs` (the layout of the SIFT and GIST benchmarks), and
//! the recall of an approximate answer measured against it.
//!
//! cargo run --release --example ground_truth -- base.fvecs query.fvecs 100 groundtruth.ivecs
//!
//! Without arguments it makes a small base and query set in a temporary directory first.

use std::path::PathBuf;

use knng::{io, Knn, Matrix, Metric, Neighbors, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scratch = std::env::temp_dir().join(format!("knng-example-{}", std::process::id()));
    let (base_path, query_path, k, output) = match args.as_slice() {
        [base, query, k, output] => (base.clone(), query.clone(), k.parse::<usize>()?, PathBuf::from(output)),
        [] => {
            std::fs::create_dir_all(&scratch)?;
            let (base, query) = (scratch.join("base.npy"), scratch.join("query.npy"));
            io::write_matrix_npy(&base, &random(20_000, 32, 1))?;
            io::write_matrix_npy(&query, &random(200, 32, 2))?;
            let shown = |p: PathBuf| p.to_string_lossy().into_owned();
            (shown(base), shown(query), 10, scratch.join("groundtruth.ivecs"))
        }
        _ => return Err("usage: ground_truth [BASE QUERIES K OUTPUT.ivecs]".into()),
    };
    let base = io::read_matrix(&base_path)?;
    let queries = io::read_matrix(&query_path)?;

    let knn = Knn::new(Options::default())?;
    let truth = knn.search(base.view(), queries.view(), k, Metric::Euclidean)?;
    // `.ivecs` gets the ids; their distances go to a `.fvecs` of the same stem beside it.
    io::write_neighbors(&output, &truth, base.rows())?;
    println!("{}: {} queries x {k} exact neighbours on {}", output.display(), queries.rows(), knn.description());

    // How an ANN index's answer is scored: here a stand-in that misses each query's nearest
    // neighbour. Ties at the k-th distance make several id sets correct, so recall counts an
    // id as found when its distance is within the true k-th distance.
    let approximate = Neighbors {
        indices: (0..queries.rows()).flat_map(|q| truth.indices_of(q)[1..].iter().copied().chain([u32::MAX])).collect(),
        distances: Vec::new(),
        queries: queries.rows(),
        k,
    };
    println!("recall@{k} of the stand-in: {:.3}", recall(&truth, &approximate, &base, &queries));
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Tie-aware recall: the fraction of returned ids no farther than the true k-th neighbour.
fn recall(truth: &Neighbors, found: &Neighbors, base: &Matrix, queries: &Matrix) -> f64 {
    let mut hits = 0usize;
    for q in 0..truth.queries {
        let kth = *truth.distances_of(q).last().expect("k >= 1");
        let query = queries.view().row(q);
        for &id in found.indices_of(q) {
            let Some(row) = ((id as usize) < base.rows()).then(|| base.view().row(id as usize)) else { continue };
            let d = query.iter().zip(row).map(|(a, b)| (a - b) as f64 * (a - b) as f64).sum::<f64>().sqrt();
            hits += usize::from(d as f32 <= kth);
        }
    }
    hits as f64 / (truth.queries * truth.k) as f64
}

/// `n` x `d` uniform values from a deterministic sequence seeded by `seed`.
fn random(n: usize, d: usize, seed: u64) -> Matrix {
    let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let values = (0..n * d)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Matrix::new(values, n, d).expect("n x d values")
}
