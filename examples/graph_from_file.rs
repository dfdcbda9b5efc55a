//! The kNN graph of a file, as `knng graph` computes it, from Rust: read any supported input
//! (.npy, .fvecs, .fbin, .csv, ...), build the graph, write it as `.npz`.
//!
//! cargo run --release --example graph_from_file -- data.npy 15 graph.npz
//!
//! Without arguments it writes a small `.npy` of two clusters to a temporary directory first
//! and builds the graph of that.

use std::path::PathBuf;

use knng::{io, Knn, Matrix, Metric, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scratch = std::env::temp_dir().join(format!("knng-example-{}", std::process::id()));
    let (input, k, output) = match args.as_slice() {
        [input, k, output] => (input.clone(), k.parse::<usize>()?, PathBuf::from(output)),
        [] => {
            std::fs::create_dir_all(&scratch)?;
            let input = scratch.join("clusters.npy");
            io::write_matrix_npy(&input, &two_clusters(500, 8))?;
            (input.to_string_lossy().into_owned(), 10, scratch.join("graph.npz"))
        }
        _ => return Err("usage: graph_from_file [INPUT K OUTPUT.npz]".into()),
    };

    // Binary inputs are memory-mapped and converted to f32; errors name the file and what is
    // wrong with it.
    let data = io::read_matrix(&input)?;
    println!("{input}: {} rows x {} columns", data.rows(), data.cols());

    let knn = Knn::new(Options::default())?;
    let graph = knn.graph(data.view(), k, Metric::Euclidean)?;
    println!("backend {}: row 0's neighbours {:?}", knn.description(), graph.indices_of(0));

    // The output appears whole or not at all; the third argument is the number of corpus rows.
    io::write_neighbors(&output, &graph, data.rows())?;
    println!("wrote {} (arrays `indices` int64 and `distances` float32, {} x {k})", output.display(), data.rows());
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// `n` points of dimension `d` in two well separated clusters (a deterministic sequence).
fn two_clusters(n: usize, d: usize) -> Matrix {
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let values = (0..n * d).map(|i| next() + if i / d < n / 2 { 0.0 } else { 10.0 }).collect();
    Matrix::new(values, n, d).expect("n x d values")
}
