//! Criterion benches of whole kNN graphs: the CPU backend over a grid of sizes, and a small
//! GPU run when an adapter exists (lavapipe counts; larger GPU runs belong to `knng bench`,
//! which prints per-kernel times).
//!
//! cargo bench --bench cpu

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use knng::{Backend, Knn, Matrix, Metric, Options};

/// Seeded uniform data, without an RNG dependency in the bench.
fn data(n: usize, d: usize, seed: u64) -> Matrix {
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

fn graphs(c: &mut Criterion) {
    let cpu = Knn::new(Options { backend: Backend::Cpu, ..Options::default() }).expect("the CPU backend always opens");
    let mut group = c.benchmark_group("cpu graph");
    group.sample_size(10);
    for &(n, d, k) in &[(2000, 32, 10), (5000, 128, 10), (5000, 128, 100)] {
        let m = data(n, d, 1);
        // Distance work of the brute force: n^2 d multiply-adds.
        group.throughput(Throughput::Elements((n * n * d) as u64));
        group.bench_with_input(BenchmarkId::from_parameter(format!("n={n} d={d} k={k}")), &m, |b, m| {
            b.iter(|| cpu.graph(m.view(), k, Metric::Euclidean).expect("valid input"))
        });
    }
    group.finish();

    let Ok(gpu) = Knn::new(Options { backend: Backend::Gpu, ..Options::default() }) else {
        eprintln!("SKIPPED gpu graph benches: no GPU adapter");
        return;
    };
    let mut group = c.benchmark_group(format!("gpu graph [{}]", gpu.description()));
    group.sample_size(10);
    let (n, d, k) = (2000, 32, 10);
    let m = data(n, d, 2);
    group.throughput(Throughput::Elements((n * n * d) as u64));
    group.bench_with_input(BenchmarkId::from_parameter(format!("n={n} d={d} k={k}")), &m, |b, m| {
        b.iter(|| gpu.graph(m.view(), k, Metric::Euclidean).expect("valid input"))
    });
    group.finish();
}

criterion_group!(benches, graphs);
criterion_main!(benches);
