//! Exact k-nearest neighbours and k-NN graphs on any GPU.
//!
//! knng finds, for every query, the `k` nearest rows of a corpus, or for every row of a data
//! set its `k` nearest other rows (the kNN graph). Distances are computed as norms plus a
//! matrix product in WGSL compute shaders through wgpu (Vulkan, Metal, DX12, GL), candidates
//! are chosen with a GPU quick multi-select, and the final answer is re-ranked in float64 so
//! it equals a float64 brute force, ties aside. An exact CPU backend gives the same answers on
//! machines without a GPU.
//!
//! # Quick start
//!
//! ```
//! use knng::{Backend, Knn, Matrix, Metric, Options};
//!
//! // Five points on a line.
//! let data = Matrix::from_rows(&[[0.0f32, 0.0], [1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [8.0, 0.0]])?;
//! let knn = Knn::new(Options { backend: Backend::Cpu, ..Options::default() })?;
//!
//! let graph = knn.graph(data.view(), 2, Metric::Euclidean)?;
//! assert_eq!(graph.indices_of(0), &[1, 2]);
//! assert_eq!(graph.distances_of(3), &[2.0, 3.0]);
//!
//! let queries = Matrix::from_rows(&[[3.9f32, 0.0]])?;
//! let found = knn.search(data.view(), queries.view(), 1, Metric::Euclidean)?;
//! assert_eq!(found.indices_of(0), &[3]);
//! # Ok::<(), knng::Error>(())
//! ```
//!
//! [`Backend::Auto`] (the default) uses a hardware GPU when wgpu finds one and the CPU
//! otherwise; [`Backend::Gpu`] also accepts software adapters such as Mesa's lavapipe.
//! Data of a few dimensions under euclidean distances (as above) is answered by an exact
//! kd-tree on the CPU's threads unless [`Options::algorithm`] says otherwise ([`Algorithm`]).
//! A corpus searched again and again can be made an [`Index`] once ([`Knn::build_index`]),
//! saved, and mapped back from its file ([`Index::load`]).
//!
//! # Exactness
//!
//! The fp32 form |x|^2 + |y|^2 - 2 x.y loses the nearest neighbours of data with a large
//! common offset. knng centres the data, takes a margin of extra candidates, re-ranks them in
//! float64, and accepts a row only when an error bound proves that no other row can be
//! nearer; other rows are searched again with more candidates.

#![warn(missing_docs)]

mod answer_file;
mod cluster;
mod cpu;
mod data;
mod engine;
mod error;
#[doc(hidden)]
pub mod gpu;
mod index;
pub mod io;
mod lowdim;
mod memory;
mod metric;
mod partition;
mod plan;
mod prepare;
mod refine;
mod search;
mod strategy;
mod trace;

#[cfg(feature = "mpi")]
pub use cluster::Mpi;
pub use cluster::{launched_ranks, Cluster};
pub use data::{FinishedRows, Matrix, MatrixRef, Neighbors};
pub use error::{Error, Result};
pub use gpu::{adapters, missing_gpu_hint, AdapterReport, BudgetOrigin, GpuTimes};
pub use index::Index;
pub use memory::{available_host_memory, check_host_memory, host_memory_estimate};
pub use metric::Metric;
pub use partition::checkpoint::remove as remove_checkpoint;
pub use search::{graph, search, Algorithm, Backend, Knn, Notice, Options, Progress, RunStats, Select, MAX_ROWS};

/// The complete WGSL modules knng builds, for shader validation tests.
#[doc(hidden)]
pub fn gpu_shader_sources() -> Vec<gpu::shaders::ShaderModuleInfo> {
    gpu::shaders::all()
}
