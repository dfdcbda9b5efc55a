//! The GPU backend: WGSL kernels through wgpu.
//!
//! Per query tile and corpus chunk, one submission runs, for every distance tile:
//! `distance_tile` (norms + GEMM; from the second tile on it also appends each row's keys
//! under its running bound to a shortlist) -> `select_rows` on the dense tile (the first
//! tile, and rows whose shortlist overflowed) -> a merge into the running kc best. Then
//! `exact_keys` computes float64 keys of the final candidates and `certify_rows` ranks them
//! and checks each row's certificate (lists longer than 1024: `sort_runs` and `certify_runs`),
//! so that only k answers per row come back; without SHADER_F64 the candidate lists come back
//! and the host does both (`refine`).
//!
//! `engine` holds the engine (device, kernels, memory budget, cached buffers); `budget` its
//! default memory budget; `kernels` every kernel with its parameters, bindings and pipelines;
//! `submit` the submission of dispatches; `profile` kernel times; `transfer` buffers, uploads
//! and read-backs; `session` a prepared corpus and the candidate search against it; `context`
//! adapter discovery and error capture; `shaders` the WGSL sources; `sort` the radix sort
//! other kernels' drivers call; `grid` the low-dimensional grid; `bench` the benchmarks of one
//! kernel alone.

mod bench;
mod budget;
mod context;
mod cover_tree;
mod cover_tree_query;
mod diagnose;
mod engine;
mod grid;
mod kernels;
mod profile;
mod session;
pub mod shaders;
mod sort;
mod submit;
mod transfer;

pub use budget::BudgetOrigin;
pub(crate) use context::identical_gpus;
pub use context::{adapters, AdapterReport};
pub(crate) use cover_tree::BuiltSet;
pub(crate) use cover_tree_query::{CoverSetBounds, CoverSets, TreeOnGpu, COVER_SET_MEMBERS};
pub use diagnose::missing_gpu_hint;
pub(crate) use engine::{GpuEngine, GpuSettings};
pub(crate) use grid::{GpuGrid, GridAnswers, GridCells, GridProof, GridProven, GridRows};
pub(crate) use kernels::MAX_CERTIFY_KC;
pub(crate) use kernels::{GRID_FAILED, GRID_MAX_DIMS, GRID_PROVEN, GRID_PROVE_MAX_KC, GRID_UNANSWERED};
pub use profile::GpuTimes;
pub(crate) use session::{ColumnLists, CorpusSession};
