//! Lists the GPU adapters wgpu sees, then runs a small search on each of them and on the CPU.
//!
//! cargo run --release --example choose_adapter

use knng::{adapters, Backend, Knn, Matrix, Metric, Options};

fn main() -> Result<(), knng::Error> {
    let corpus = Matrix::from_rows(&[[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])?;
    let queries = Matrix::from_rows(&[[0.9f32, 0.1], [4.0, 4.0]])?;

    let list = adapters();
    if list.is_empty() {
        println!("no GPU adapter found; only the CPU backend is available");
    }
    let mut engines = vec![Options { backend: Backend::Cpu, ..Options::default() }];
    for a in &list {
        println!("{a}");
        engines.push(Options { backend: Backend::Gpu, adapter: Some(a.index.to_string()), ..Options::default() });
    }
    for options in engines {
        let knn = Knn::new(options)?;
        let found = knn.search(corpus.view(), queries.view(), 2, Metric::Euclidean)?;
        println!("{}: {:?} {:?}", knn.description(), found.indices, found.distances);
    }
    Ok(())
}
