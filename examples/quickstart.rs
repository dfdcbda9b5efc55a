//! The kNN graph of a small random data set on the best available backend, checked against a
//! brute force for one row.
//!
//! cargo run --release --example quickstart

use knng::{Knn, Matrix, Metric, Options};

fn main() -> Result<(), knng::Error> {
    let (n, d, k) = (2000, 32, 10);
    // A deterministic pseudo-random matrix (no extra dependency needed for an example).
    let mut state = 0x9E3779B97F4A7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let data = Matrix::new((0..n * d).map(|_| next()).collect(), n, d)?;

    let knn = Knn::new(Options::default())?;
    println!("backend: {}", knn.description());
    let graph = knn.graph(data.view(), k, Metric::Euclidean)?;
    println!("row 0: neighbours {:?}", graph.indices_of(0));
    println!("row 0: distances  {:?}", graph.distances_of(0));

    let mut brute: Vec<(f64, usize)> = (1..n)
        .map(|j| {
            let d2: f64 = (0..d).map(|c| (data.as_slice()[c] as f64 - data.as_slice()[j * d + c] as f64).powi(2)).sum();
            (d2, j)
        })
        .collect();
    brute.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(graph.indices_of(0), brute[..k].iter().map(|e| e.1 as u32).collect::<Vec<_>>());
    println!("row 0 matches a float64 brute force; {:?}", knn.last_run());
    Ok(())
}
