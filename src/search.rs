//! The public entry points: validate, find fp32 candidates on a backend, re-rank exactly.

use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use rayon::prelude::*;

use crate::answer_file::AnswerFile;
use crate::cluster::Cluster;
use crate::cpu::CpuEngine;
use crate::data::{AnswerMemory, FinishedRows, Matrix, MatrixRef, Neighbors};
use crate::engine::{retry_smaller, Engine};
use crate::error::{check_interrupt, Error, Result};
use crate::gpu::{GpuEngine, GpuSettings, GpuTimes, MAX_CERTIFY_KC};
use crate::lowdim::hybrid;
use crate::lowdim::job::{Answers, TreeJob};
use crate::lowdim::{covertree, kdtree};
use crate::metric::Metric;
use crate::partition::{self, checkpoint, BlockPlan, RowSink};
use crate::prepare::{self, RowStats};
use crate::refine::{self, write_row, Candidates, Certify, Query, NONE};
use crate::strategy::{self, Problem, Strategy};

/// Which engine computes the candidates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// A hardware GPU adapter when there is one, else the CPU. Software adapters (lavapipe,
    /// llvmpipe) are slower than the CPU backend and are only used when forced. A problem too
    /// large for the GPU's buffers (a huge k) is computed on the CPU instead.
    #[default]
    Auto,
    /// A GPU adapter (software ones included); an error when there is none.
    Gpu,
    /// The CPU backend.
    Cpu,
}

impl FromStr for Backend {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Backend::Auto),
            "gpu" => Ok(Backend::Gpu),
            "cpu" => Ok(Backend::Cpu),
            _ => Err(Error::arg("backend", format!("unknown backend {s:?}; expected auto, gpu or cpu"))),
        }
    }
}

/// How each row's candidates are picked from a tile of distances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Select {
    /// The planner's choice.
    #[default]
    Auto,
    /// Quick multi-select (Komarov, Dashti and D'Souza): each row's best found by sampled
    /// pivots, without ordering the rest.
    Quick,
    /// Batch index sort (Dashti's thesis, section 3.3): every key of a tile sorted, then
    /// sorted again by row, keeping the order; each row's first keys are its best. On the CPU
    /// backend, each row's candidates are sorted in full.
    Sort,
}

impl FromStr for Select {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Select::Auto),
            "quick" => Ok(Select::Quick),
            "sort" => Ok(Select::Sort),
            _ => Err(Error::arg("select", format!("unknown selector {s:?}; expected auto, quick or sort"))),
        }
    }
}

/// Which algorithm finds the neighbours. The answer is the same whichever runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algorithm {
    /// The planner's choice: for euclidean and squared euclidean distances in a few
    /// dimensions the kd-tree, or the hybrid join where a GPU engine was found (see the
    /// README for the rule); brute force otherwise, and always where [`Backend::Gpu`] is
    /// asked for.
    #[default]
    Auto,
    /// Every distance computed, on the GPU (a matrix product and a select a tile) or on the
    /// CPU's threads: any dimension, any metric.
    Brute,
    /// A kd-tree over the corpus, queried on the CPU's threads in float64: euclidean and
    /// squared euclidean distances in 1 to 8 dimensions. Elsewhere brute force runs, and
    /// [`Options::notice`] says so. Graphs asked to be partitioned ([`Options::block_rows`],
    /// [`Options::checkpoint`], [`Options::cluster`]) or whose tree does not fit
    /// [`Options::max_host_memory`] are computed by brute force; a graph whose answer alone
    /// does not fit is handed over in blocks of rows ([`Knn::graph_streamed`]).
    KdTree,
    /// The GPU grid and the kd-tree together (Gowanlock's HybridKNN-Join): the GPU answers
    /// query rows in dense regions from a grid of the corpus, the CPU's threads the rest by
    /// the kd-tree, from the two ends of one queue. Euclidean and squared euclidean distances
    /// in 1 to 6 dimensions; without a GPU engine the kd-tree answers every row, and
    /// elsewhere as [`Algorithm::KdTree`].
    Hybrid,
    /// A cover tree over the corpus, built on the GPU of a GPU engine (where the points fit
    /// its budget and one binding; else on the CPU's threads) and queried on the CPU's
    /// threads, or for a graph on that GPU (see [`Options::cover_sets_on_gpu`]): any dimension,
    /// every metric but the inner product (cosine and correlation on rows scaled to unit
    /// length). Its cost follows the data's intrinsic dimension rather than its number of
    /// columns: it wins on points with few degrees of freedom in many coordinates and loses
    /// to brute force on data that fills its space. Elsewhere, and for graphs asked to be
    /// partitioned, brute force runs, as for [`Algorithm::KdTree`].
    CoverTree,
}

impl Algorithm {
    /// Whether the algorithm answers from a tree over the corpus (or the grid beside one)
    /// rather than by brute force.
    pub(crate) fn is_tree(self) -> bool {
        matches!(self, Algorithm::KdTree | Algorithm::Hybrid | Algorithm::CoverTree)
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Algorithm::Auto),
            "brute" => Ok(Algorithm::Brute),
            "kdtree" | "kd-tree" | "kd_tree" => Ok(Algorithm::KdTree),
            "hybrid" => Ok(Algorithm::Hybrid),
            "covertree" | "cover-tree" | "cover_tree" => Ok(Algorithm::CoverTree),
            _ => Err(Error::arg(
                "algorithm",
                format!("unknown algorithm {s:?}; expected auto, brute, covertree, hybrid or kdtree"),
            )),
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Algorithm::Auto => "auto",
            Algorithm::Brute => "brute force",
            Algorithm::KdTree => "kd-tree",
            Algorithm::Hybrid => "hybrid GPU grid and kd-tree",
            Algorithm::CoverTree => "cover tree",
        })
    }
}

/// Progress callback: `(done, total)` query rows.
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// Receives messages a run has for its user, such as `resuming: 3 of 10 blocks done`.
pub type Notice = Arc<dyn Fn(&str) + Send + Sync>;

/// How a [`Knn`] runs.
#[derive(Clone, Default)]
pub struct Options {
    /// Which engine to use.
    pub backend: Backend,
    /// Which algorithm finds the neighbours (default: the planner's choice by dimension and
    /// metric).
    pub algorithm: Algorithm,
    /// GPU adapter to use: its index in [`adapters`](crate::adapters) or part of its name.
    pub adapter: Option<String>,
    /// Select and merge without subgroup operations even when the adapter has them.
    pub no_subgroups: bool,
    /// How each row's candidates are picked from a tile of distances (default: the
    /// planner's choice). Answers are the same whichever runs.
    pub select: Select,
    /// In [`Knn::graph`], count each point as its own nearest neighbour: it comes first in its
    /// own list, before exact duplicates at the same distance 0. Under
    /// [`Metric::InnerProduct`] a point is ranked by its product like any other row.
    pub include_self: bool,
    /// GPU memory the engine may allocate, in bytes. Default: on a discrete GPU whose Vulkan
    /// driver reports a memory budget, 7/8 of it (engines opened on one adapter split it);
    /// 4 GiB on other discrete GPUs; 1 GiB on other adapters, which share the host's memory
    /// ([`Knn::gpu_memory_budgets`] says what was chosen). An allocation that fails halves
    /// it and runs again.
    pub memory_budget: Option<u64>,
    /// Host memory a run may allocate beyond its inputs, in bytes (default: what the machine
    /// has available). A run whose estimate ([`host_memory_estimate`](crate::host_memory_estimate))
    /// exceeds it is refused with [`Error::HostMemory`] before it allocates anything.
    pub max_host_memory: Option<u64>,
    /// Called as query rows are finished. A graph swept in symmetric blocks finishes its rows
    /// only at the end; the sweep before reports up to 90% of them as it goes.
    pub progress: Option<Progress>,
    /// Time every GPU kernel with timestamp queries (where the adapter supports them inside
    /// compute passes) and report the times in [`RunStats::gpu`]. The host then waits for each
    /// submission to read its timestamps, which an unprofiled run never does (it queues the
    /// next work first), so profiled runs take longer.
    pub profile: bool,
    /// Cap on workgroups per dispatch dimension (default: the adapter's limit, 65535).
    /// Lower values force the 2-D dispatch path on small problems, for tests.
    pub max_workgroups_per_dimension: Option<u32>,
    /// Cap on corpus rows per GPU distance tile (default: 16384, or 65536 for lists of more
    /// than 256 candidates, which select every tile densely). Lower values give small
    /// problems many tiles, so that tests reach the merges and shortlists of large ones.
    pub max_column_tile: Option<usize>,
    /// Cap on query rows per GPU query tile (default: what the memory budget allows). Lower
    /// values cut small graphs into several tiles, so that tests reach symmetric blocks.
    pub max_query_tile: Option<usize>,
    /// Cap on the bytes of one GPU storage binding (default: the adapter's limit). Lower values
    /// cut small corpora into several resident chunks, so that tests reach what large ones do.
    pub max_binding: Option<u64>,
    /// Whether graphs are swept in symmetric blocks (each distance computed once for both
    /// rows): `None` lets the backend decide (on the GPU, where memory allows and k is small
    /// relative to n and d; on the CPU, for lists of up to 256 candidates with at least two
    /// blocks of 1024 rows a thread), `Some` forces it on or off. `Some(true)` also has a GPU
    /// compute every pair of blocks of a partitioned graph two-sided wherever it fits.
    pub symmetric_graphs: Option<bool>,
    /// Whether graphs with long candidate lists (k above about 200) are swept on the GPU over
    /// the upper triangle of the distance matrix under bounds from a sample of the rows (each
    /// distance computed once): `None` lets the planner decide, `Some` forces it on (wherever
    /// it fits) or off.
    pub bounded_sweeps: Option<bool>,
    /// Whether a cover tree's graph queries run on the GPU, a group of neighbouring points
    /// against one cover set at a time: `None` lets the planner decide (where the host has
    /// few threads and the data's intrinsic dimension is low), `Some` forces it on (wherever
    /// it fits) or off.
    pub cover_sets_on_gpu: Option<bool>,
    /// GPU devices to share the work of a graph: adapter indices or names as in
    /// [`adapters`](crate::adapters), repeats allowed (`["0", "0"]` opens adapter 0 twice).
    /// Empty (the default): every GPU of the machine identical to the one
    /// [`Backend::Auto`] chooses (one adapter where [`Options::adapter`] names it). With more
    /// than one, a graph is cut
    /// into blocks of rows and the blocks are dealt to whichever device is free; the answer is
    /// the same as on one device. Searches run on the first.
    pub devices: Vec<String>,
    /// Rows per block of a partitioned graph (default: blocks of about a million rows, and at
    /// least two a device). Setting it partitions a graph even on one device.
    pub block_rows: Option<usize>,
    /// A directory in which a partitioned graph records every finished block, so that the
    /// same graph run again after a kill resumes where it stopped (see
    /// [`Knn::graph`]). Refused when it holds blocks of other data or arguments.
    pub checkpoint: Option<std::path::PathBuf>,
    /// Where a partitioned graph spills the candidate lists that do not fit
    /// [`Options::max_host_memory`], and a graph ranked on one GPU keeps answers that do not
    /// (default: the system's temporary directory). The files are removed as they are read
    /// back and when the run ends.
    pub scratch: Option<std::path::PathBuf>,
    /// Whether a graph computed whole on one GPU that ranks rows on the device writes its
    /// answers to [`Options::scratch`] as they are ranked and hands them over in order at
    /// the end, holding little more than a few bytes a row: `None` where
    /// [`Options::max_host_memory`] cannot hold them otherwise, `Some` forces it on (where the
    /// device ranks the graph) or off.
    pub answers_on_disk: Option<bool>,
    /// Receives messages for the user, such as how much of a checkpoint was resumed.
    pub notice: Option<Notice>,
    /// Most blocks of rows whose merged candidate lists a partitioned graph holds at once
    /// (default: as many as [`Options::max_host_memory`] allows); the lists of later blocks
    /// are spilled to [`Options::scratch`] until their rows are finished.
    pub lists_in_memory: Option<usize>,
    /// The processes of a job that build each graph together ([`Cluster`]; `Mpi`
    /// with the `mpi` feature), where there are several. Every rank calls the same method
    /// with the same data and arguments; the graph is then always partitioned, each rank
    /// computing its share of the blocks on its own devices ([`Options::devices`]), and rank 0
    /// alone receives the rows: on the other ranks [`Knn::graph`] returns an answer of no rows
    /// and [`Knn::graph_streamed`] hands over nothing. A checkpoint keeps each rank's blocks
    /// in a directory of its own inside [`Options::checkpoint`]. A search is shared by
    /// rows of queries: each rank answers an equal run of them, and rank 0 receives every
    /// row.
    pub cluster: Option<Arc<dyn Cluster>>,
    /// Depth of the distance kernel's workgroup tiles: 4, 8, 16 (default) or 32. For tuning.
    ///
    /// This and the caps and switches above it override the planner's choices, for tests that
    /// must reach the paths of large problems on small ones and for tuning; answers are the
    /// same whatever they are set to.
    pub distance_tile_depth: Option<u32>,
    /// Set to `true` (from any thread, such as a signal handler's) to stop the runs of this
    /// [`Knn`]: a running search or graph ends with [`Error::Interrupted`] within one round,
    /// tile or block of its work, and calls made while it is set end the same way. Clear it
    /// before the next call.
    pub interrupt: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("backend", &self.backend)
            .field("algorithm", &self.algorithm)
            .field("adapter", &self.adapter)
            .field("no_subgroups", &self.no_subgroups)
            .field("select", &self.select)
            .field("include_self", &self.include_self)
            .field("memory_budget", &self.memory_budget)
            .field("max_host_memory", &self.max_host_memory)
            .field("progress", &self.progress.is_some())
            .field("profile", &self.profile)
            .field("max_workgroups_per_dimension", &self.max_workgroups_per_dimension)
            .field("max_column_tile", &self.max_column_tile)
            .field("max_binding", &self.max_binding)
            .field("max_query_tile", &self.max_query_tile)
            .field("symmetric_graphs", &self.symmetric_graphs)
            .field("bounded_sweeps", &self.bounded_sweeps)
            .field("cover_sets_on_gpu", &self.cover_sets_on_gpu)
            .field("devices", &self.devices)
            .field("block_rows", &self.block_rows)
            .field("scratch", &self.scratch)
            .field("lists_in_memory", &self.lists_in_memory)
            .field("checkpoint", &self.checkpoint)
            .field("notice", &self.notice.is_some())
            .field("cluster", &self.cluster.as_ref().map(|c| format!("rank {} of {}", c.rank(), c.size())))
            .field("distance_tile_depth", &self.distance_tile_depth)
            .field("interrupt", &self.interrupt)
            .finish()
    }
}

impl Options {
    /// The CPU engine these options ask for.
    fn cpu_engine(&self) -> CpuEngine {
        CpuEngine::new(crate::plan::sorts_tiles(self.select)).interruptible(&self.interrupt)
    }

    /// What a GPU engine reads of these options.
    pub(crate) fn gpu_settings(&self) -> GpuSettings {
        GpuSettings {
            adapter: self.adapter.clone(),
            no_subgroups: self.no_subgroups,
            sort_select: crate::plan::sorts_tiles(self.select),
            profile: self.profile,
            distance_tile_depth: self.distance_tile_depth,
            memory_budget: self.memory_budget,
            engines_on_adapter: 1,
            max_workgroups_per_dimension: self.max_workgroups_per_dimension,
            max_column_tile: self.max_column_tile,
            max_binding: self.max_binding,
            max_query_tile: self.max_query_tile,
            symmetric_graphs: self.symmetric_graphs,
            bounded_sweeps: self.bounded_sweeps,
            interrupt: self.interrupt.clone(),
        }
    }
}

/// How the last search or graph went: how often the fp32 candidates had to be widened.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunStats {
    /// The algorithm that ran: [`Algorithm::Brute`], [`Algorithm::KdTree`],
    /// [`Algorithm::Hybrid`] or [`Algorithm::CoverTree`].
    pub algorithm: Algorithm,
    /// Query rows of a hybrid run that the GPU grid took.
    pub rows_on_grid: usize,
    /// Of [`RunStats::rows_on_grid`], those whose grid candidates proved the answer (the
    /// kd-tree answered the rest).
    pub rows_proven_by_grid: usize,
    /// Of [`RunStats::rows_proven_by_grid`], those ranked and proven on the GPU itself
    /// (adapters with SHADER_F64, k up to 128); the host proved the others.
    pub rows_proven_on_gpu: usize,
    /// Times a hybrid run rebuilt its grid with wider cells, because more than a quarter of
    /// a batch's rows found too few neighbours within a cell's reach.
    pub grid_rebuilds: usize,
    /// Whether the cover tree of a [`Algorithm::CoverTree`] run was built on the GPU.
    pub tree_built_on_gpu: bool,
    /// Query rows of a cover tree's graph answered from the GPU's cover sets (the others by
    /// the CPU's descent).
    pub rows_queried_on_gpu: usize,
    /// Candidate rounds run (1 when every row was proven exact at once).
    pub rounds: usize,
    /// Query rows that needed more than one round (many near-ties at their k-th neighbour).
    pub rows_widened: usize,
    /// Query rows the backend could not finish and that were answered by float64 brute force.
    pub rows_brute_forced: usize,
    /// Candidate lists whose float64 keys were computed on the GPU (adapters with
    /// SHADER_F64) rather than on the host, summed over rounds.
    pub rows_reranked_on_gpu: usize,
    /// Query rows whose candidates from some distance tile came from the GPU's shortlist
    /// (keys under the row's running bound, filtered in the distance kernel) rather than a
    /// selection over the whole tile, summed over rounds.
    pub rows_shortlisted: usize,
    /// Candidate rounds for which the GPU engine allocated its tile buffers instead of
    /// reusing those of its last round or call (allocating a large set costs far more than
    /// reusing one: notes/exactness.md).
    pub tile_buffer_allocations: usize,
    /// Rows of graphs swept in symmetric blocks (each distance computed once, for both rows
    /// of the pair), summed over rounds.
    pub rows_in_symmetric_blocks: usize,
    /// Rows of graphs swept over the upper triangle under sampled bounds (long lists; each
    /// distance computed once), summed over rounds. Rows whose list came out short or
    /// overflowed are searched again and counted in `rows_overflowed` too.
    pub rows_in_bounded_sweeps: usize,
    /// Query rows whose distance tiles after the first were sparse (a small GPU budget
    /// narrowed them: only keys under a row's bound were kept), summed over rounds. Rows
    /// whose shortlist overflowed are searched again and counted in `rows_overflowed` too.
    pub rows_in_sparse_sweeps: usize,
    /// Query rows whose ranked answers reached the host during the next query tile's distance
    /// kernel (which copies them while it computes) rather than in a copy after their
    /// ranking, summed over rounds.
    pub rows_published: usize,
    /// Rows of symmetric blocks whose exact keys were shared with their mutual neighbours
    /// (each pair listed by both its rows computed once; rows of 256 values or more).
    pub rows_sharing_keys: usize,
    /// Rows of a symmetric sweep whose list may have missed keys (a shortlist overflowed on
    /// the column side, where no dense tile was selected) and were searched again.
    pub rows_overflowed: usize,
    /// Query rows whose candidates were ranked and whose certificate was checked on the GPU
    /// (SHADER_F64), so that only k answers came back, summed over rounds.
    pub rows_certified_on_gpu: usize,
    /// Seconds spent on float64 row statistics and on preparing the corpus on the backend.
    pub prepare_seconds: f64,
    /// Seconds spent finding fp32 candidates (GPU or CPU GEMM and selection, with uploads
    /// and read-back).
    pub candidate_seconds: f64,
    /// Seconds spent re-ranking candidates in float64 and checking the certificates.
    pub refine_seconds: f64,
    /// Per-kernel GPU times, with [`Options::profile`] on an adapter that supports it.
    pub gpu: Option<GpuTimes>,
    /// Blocks of a partitioned graph (0 when the graph was not partitioned).
    pub blocks: usize,
    /// Off-diagonal blocks of a partitioned graph computed two-sided: each distance once, for
    /// the rows on both sides (rather than as two searches).
    pub pair_blocks_once: usize,
    /// Off-diagonal blocks of a partitioned graph computed one way: the rows of one block
    /// searched among the other's, whose rows kept the keys under their bounds.
    pub pair_blocks_one_way: usize,
    /// Blocks of a partitioned graph read from its checkpoint rather than computed.
    pub blocks_resumed: usize,
    /// Bytes of candidate lists a partitioned graph spilled to its scratch directory.
    pub bytes_spilled: u64,
    /// Bytes of candidate lists and finished rows this rank of a cluster sent to the others
    /// ([`Options::cluster`]).
    pub bytes_sent: u64,
    /// Rows whose answers left host memory for a scratch file as soon as the device ranked
    /// them ([`Options::answers_on_disk`]).
    pub rows_ranked_to_disk: usize,
    /// Engines (devices) that shared the work.
    pub workers: usize,
}

/// An exact k-nearest-neighbour engine bound to one backend. Create it once and reuse it:
/// opening a GPU device and compiling shaders takes a while.
pub struct Knn {
    engine: Engine,
    /// Further devices of [`Options::devices`], which share partitioned graphs.
    more_engines: Vec<Engine>,
    /// Whether the caller listed the devices (rather than the machine's identical GPUs).
    devices_listed: bool,
    pub(crate) options: Options,
    last: std::sync::Mutex<RunStats>,
}

impl Knn {
    /// Opens the backend that `options` asks for.
    pub fn new(mut options: Options) -> Result<Self> {
        let devices_listed = !options.devices.is_empty();
        // A machine's identical GPUs share its graphs unless one adapter is named.
        if options.devices.is_empty() && options.adapter.is_none() && options.backend != Backend::Cpu {
            options.devices = crate::gpu::identical_gpus().iter().map(|i| i.to_string()).collect();
        }
        if !options.devices.is_empty() {
            if options.backend == Backend::Cpu {
                return Err(Error::arg("devices", "GPU devices were listed for the CPU backend"));
            }
            let mut engines = options
                .devices
                .iter()
                .map(|device| {
                    let on_device = Options { adapter: Some(device.clone()), ..options.clone() };
                    // Repeats of a device share its memory.
                    let engines_on_adapter = options.devices.iter().filter(|&other| other == device).count();
                    let settings = GpuSettings { engines_on_adapter, ..on_device.gpu_settings() };
                    Ok(Engine::Gpu(Box::new(GpuEngine::new(&settings, false)?)))
                })
                .collect::<Result<Vec<_>>>()?;
            let engine = engines.remove(0);
            return Ok(Knn { engine, more_engines: engines, devices_listed, options, last: Default::default() });
        }
        let engine = match options.backend {
            Backend::Cpu => Engine::Cpu(options.cpu_engine()),
            Backend::Gpu => Engine::Gpu(Box::new(GpuEngine::new(&options.gpu_settings(), false)?)),
            Backend::Auto => match GpuEngine::new(&options.gpu_settings(), true) {
                Ok(gpu) => Engine::Gpu(Box::new(gpu)),
                Err(_) => Engine::Cpu(options.cpu_engine()),
            },
        };
        Ok(Knn { engine, more_engines: Vec::new(), devices_listed, options, last: Default::default() })
    }

    /// What runs the work, e.g. `gpu: NVIDIA H200 (Vulkan, subgroup select, size 32)`, with
    /// the further devices of [`Options::devices`] after ` + `.
    pub fn description(&self) -> String {
        let mut text = self.engine.description();
        for more in &self.more_engines {
            text += " + ";
            text += &more.description();
        }
        text
    }

    /// The GPU memory budget of each GPU engine in bytes, and how it was set (the first
    /// engine first); empty on the CPU backend. An out-of-memory error halves an engine's
    /// budget for the rest of its life.
    pub fn gpu_memory_budgets(&self) -> Vec<(u64, crate::gpu::BudgetOrigin)> {
        self.workers()
            .into_iter()
            .filter_map(|engine| match engine {
                Engine::Gpu(g) => Some(g.memory_budget()),
                Engine::Cpu(_) => None,
            })
            .collect()
    }

    /// The engines that share partitioned work.
    fn workers(&self) -> Vec<&Engine> {
        std::iter::once(&self.engine).chain(&self.more_engines).collect()
    }

    /// Statistics of the last completed [`Knn::search`] or [`Knn::graph`].
    pub fn last_run(&self) -> RunStats {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Times the GPU selection kernel alone on `rows` rows of `cols` uniform random keys,
    /// keeping the `k` smallest of each row: (wall seconds, GPU times with
    /// [`Options::profile`]). For `knng bench --what select`; an error on the CPU backend.
    pub fn bench_select(&self, rows: usize, cols: usize, k: usize) -> Result<(f64, Option<GpuTimes>)> {
        match &self.engine {
            Engine::Gpu(g) => g.bench_select(rows, cols, k, 1),
            Engine::Cpu(_) => Err(Error::arg("backend", "the select-only benchmark needs a GPU backend")),
        }
    }

    /// Times the GPU distance kernel alone: euclidean keys of `rows` uniform random query rows
    /// against `cols` corpus rows of dimension `d`: (wall seconds, GPU times with
    /// [`Options::profile`]). For `knng bench --what distance`; an error on the CPU backend.
    pub fn bench_distance(&self, rows: usize, cols: usize, d: usize) -> Result<(f64, Option<GpuTimes>)> {
        match &self.engine {
            Engine::Gpu(g) => g.bench_distance(rows, cols, d, 1),
            Engine::Cpu(_) => Err(Error::arg("backend", "the distance-only benchmark needs a GPU backend")),
        }
    }

    /// Times the GPU radix sort alone: `len` pairs of random f32 keys and u32 values, sorted
    /// stably by key and checked against a sort on the host: (wall seconds, GPU times with
    /// [`Options::profile`]). For `knng bench --what sort`; an error on the CPU backend.
    pub fn bench_sort(&self, len: usize) -> Result<(f64, Option<GpuTimes>)> {
        match &self.engine {
            Engine::Gpu(g) => g.bench_sort(len, 1),
            Engine::Cpu(_) => Err(Error::arg("backend", "the sort benchmark needs a GPU backend")),
        }
    }

    /// True when a GPU adapter does the distance and selection work.
    pub fn is_gpu(&self) -> bool {
        matches!(self.engine, Engine::Gpu(_))
    }

    /// The `k` nearest corpus rows of every query, exact.
    ///
    /// `k` may be anything from 1 to the number of corpus rows.
    pub fn search(&self, corpus: MatrixRef<'_>, queries: MatrixRef<'_>, k: usize, metric: Metric) -> Result<Neighbors> {
        self.search_in(corpus, queries, k, metric, AnswerMemory::default())
    }

    /// [`Knn::search`], writing the answer into `out`'s arrays where they can hold it.
    ///
    /// For callers that search again and again (batches of queries, benchmarks): the arrays of
    /// the previous answer are written in place instead of memory fresh from the system, whose
    /// pages the kernel zeroes on first write (at k=1000, 8 KB of answers a query). `out` may
    /// hold any earlier answer, or be empty; on error it is left empty.
    pub fn search_into(
        &self,
        corpus: MatrixRef<'_>,
        queries: MatrixRef<'_>,
        k: usize,
        metric: Metric,
        out: &mut Neighbors,
    ) -> Result<()> {
        let lent = lend(out);
        *out = self.search_in(corpus, queries, k, metric, lent)?;
        Ok(())
    }

    fn search_in(
        &self,
        corpus: MatrixRef<'_>,
        queries: MatrixRef<'_>,
        k: usize,
        metric: Metric,
        answers: AnswerMemory,
    ) -> Result<Neighbors> {
        self.workers().iter().for_each(|w| w.start_call());
        let shift = self.validate_corpus("corpus", corpus, metric)?;
        prepare::validate("queries", queries, metric)?;
        if corpus.cols() != queries.cols() {
            return Err(Error::DimensionMismatch { corpus: corpus.cols(), queries: queries.cols() });
        }
        check_k(k, corpus.rows(), "the number of corpus rows")?;
        check_rows("corpus", corpus.rows())?;
        let algorithm = self.choose_algorithm(metric, corpus, false, false);
        if let Some(c) = self.cluster() {
            return self.search_shared(c, algorithm, corpus, queries, shift, k, metric);
        }
        let exclude = vec![NONE; queries.rows()];
        self.run(&Task { algorithm, corpus, queries, shift, exclude, k, metric, answers, on_disk: None })
    }

    /// [`Knn::search`] over the ranks of a cluster: rank r answers the r-th of R equal runs of
    /// query rows against the whole corpus, and rank 0 receives the others' answers in order.
    /// The other ranks return an answer of no rows.
    #[allow(clippy::too_many_arguments)]
    fn search_shared(
        &self,
        c: &dyn Cluster,
        algorithm: Algorithm,
        corpus: MatrixRef<'_>,
        queries: MatrixRef<'_>,
        shift: Vec<f32>,
        k: usize,
        metric: Metric,
    ) -> Result<Neighbors> {
        let (nq, ranks) = (queries.rows(), c.size());
        let share = |r: usize| (r * nq.div_ceil(ranks)).min(nq)..((r + 1) * nq.div_ceil(ranks)).min(nq);
        let mine = share(c.rank());
        let answer = if mine.is_empty() {
            Neighbors { k, ..Neighbors::default() }
        } else {
            let queries = queries.slice_rows(mine.clone());
            let exclude = vec![NONE; queries.rows()];
            let answers = AnswerMemory::default();
            self.run(&Task { algorithm, corpus, queries, shift, exclude, k, metric, answers, on_disk: None })?
        };
        if c.rank() != 0 {
            let mut bytes = Vec::with_capacity(answer.indices.len() * 8);
            bytes.extend_from_slice(bytemuck::cast_slice(&answer.indices));
            bytes.extend_from_slice(bytemuck::cast_slice(&answer.distances));
            c.send(0, &bytes)?;
            return Ok(Neighbors { k, ..Neighbors::default() });
        }
        let Neighbors { mut indices, mut distances, .. } = answer;
        for r in 1..ranks {
            let bytes = c.receive(r)?;
            let values = share(r).len() * k;
            if bytes.len() != values * 8 {
                return Err(Error::Cluster(format!(
                    "answers of rank {r}: {} bytes where {} were due",
                    bytes.len(),
                    values * 8
                )));
            }
            indices.extend(bytemuck::pod_collect_to_vec::<u8, u32>(&bytes[..values * 4]));
            distances.extend(bytemuck::pod_collect_to_vec::<u8, f32>(&bytes[values * 4..]));
        }
        Ok(Neighbors { indices, distances, queries: nq, k })
    }

    /// The exact kNN graph of `data`: for every row its `k` nearest other rows (itself
    /// included only with [`Options::include_self`]).
    ///
    /// `k` may be anything from 1 to n - 1 (n with `include_self`).
    ///
    /// With several devices ([`Options::devices`]), a checkpoint ([`Options::checkpoint`]) or
    /// [`Options::block_rows`], the rows are cut into blocks and the pairs of blocks are
    /// dealt to the devices; the answer is the same. With a checkpoint, the same call on the
    /// same data after a crash or kill computes only the blocks not yet recorded, and says so
    /// through [`Options::notice`]; remove the directory afterwards
    /// ([`remove_checkpoint`](crate::remove_checkpoint)).
    ///
    /// ```
    /// use knng::{Backend, Knn, Matrix, Metric, Options};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let checkpoint = dir.path().join("graph.ckpt");
    /// let data = Matrix::from_rows(&[[0.0f32], [1.0], [3.0], [7.0], [8.0]])?;
    /// let options = Options { backend: Backend::Cpu, block_rows: Some(2), checkpoint: Some(checkpoint.clone()), ..Options::default() };
    /// let graph = Knn::new(options)?.graph(data.view(), 1, Metric::Euclidean)?;
    /// assert_eq!(graph.indices, [1, 0, 1, 4, 3]);
    /// knng::remove_checkpoint(&checkpoint)?;
    /// # Ok::<(), knng::Error>(())
    /// ```
    pub fn graph(&self, data: MatrixRef<'_>, k: usize, metric: Metric) -> Result<Neighbors> {
        self.graph_in(data, k, metric, AnswerMemory::default())
    }

    /// [`Knn::graph`], writing the answer into `out`'s arrays where they can hold it.
    ///
    /// For callers that build graphs again and again (many data sets of one size,
    /// benchmarks): the arrays of the previous answer are written in place instead of memory
    /// fresh from the system, whose pages the kernel zeroes on first write (n=65536 k=1000:
    /// 524 MB). `out` may hold any earlier answer, or be empty; on error it is left empty.
    ///
    /// ```
    /// use knng::{Backend, Knn, Matrix, Metric, Neighbors, Options};
    ///
    /// let knn = Knn::new(Options { backend: Backend::Cpu, ..Options::default() })?;
    /// let mut graph = Neighbors::default();
    /// for shift in [0.0f32, 10.0] {
    ///     let data = Matrix::from_rows(&[[shift, 0.0], [shift + 1.0, 0.0], [shift + 3.0, 0.0]])?;
    ///     knn.graph_into(data.view(), 1, Metric::Euclidean, &mut graph)?;
    ///     assert_eq!(graph.indices, [1, 0, 1]);
    /// }
    /// # Ok::<(), knng::Error>(())
    /// ```
    pub fn graph_into(&self, data: MatrixRef<'_>, k: usize, metric: Metric, out: &mut Neighbors) -> Result<()> {
        let lent = lend(out);
        *out = self.graph_in(data, k, metric, lent)?;
        Ok(())
    }

    /// [`Knn::graph`], handing the answer to `sink` in pieces of whole rows, in row order,
    /// as they are finished, rather than returning it: for graphs whose answer need not, or
    /// cannot, be held in memory at once. Partitioned graphs ([`Options::block_rows`],
    /// several devices, a checkpoint) hand over each block of rows once it is finished; other
    /// graphs hand over every row at the end. An error returned by `sink` stops the run and
    /// is returned.
    ///
    /// ```
    /// use knng::{Backend, Knn, Matrix, Metric, Options};
    ///
    /// let data = Matrix::from_rows(&[[0.0f32], [1.0], [3.0], [7.0], [8.0]])?;
    /// let knn = Knn::new(Options { backend: Backend::Cpu, block_rows: Some(2), ..Options::default() })?;
    /// let mut nearest = Vec::new();
    /// knn.graph_streamed(data.view(), 1, Metric::Euclidean, &mut |rows| {
    ///     assert_eq!(rows.first, nearest.len());
    ///     nearest.extend_from_slice(rows.indices);
    ///     Ok(())
    /// })?;
    /// assert_eq!(nearest, [1, 0, 1, 4, 3]);
    /// # Ok::<(), knng::Error>(())
    /// ```
    pub fn graph_streamed(
        &self,
        data: MatrixRef<'_>,
        k: usize,
        metric: Metric,
        sink: &mut dyn FnMut(FinishedRows<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut hand_over =
            |first: usize, indices: &mut [u32], distances: &mut [f32]| sink(FinishedRows { first, indices, distances });
        if let Some(answer) = self.graph_or_stream(data, k, metric, AnswerMemory::default(), 0, &mut hand_over)? {
            let Neighbors { mut indices, mut distances, .. } = answer;
            hand_over(0, &mut indices, &mut distances)?;
        }
        Ok(())
    }

    fn graph_in(&self, data: MatrixRef<'_>, k: usize, metric: Metric, answers: AnswerMemory) -> Result<Neighbors> {
        // The answer returned is held whole whatever the strategy: it must fit, and what it
        // leaves of the limit is the run's.
        let held = crate::memory::answer_bytes(data.rows(), k);
        let limit = self.options.max_host_memory.or_else(crate::memory::available_host_memory);
        crate::memory::check_answers(data.rows(), k, limit, self.options.max_host_memory.is_some())?;
        let (mut indices, mut distances) = (Vec::new(), Vec::new());
        let mut collect = |_: usize, ids: &mut [u32], dists: &mut [f32]| {
            indices.extend_from_slice(ids);
            distances.extend_from_slice(dists);
            Ok(())
        };
        match self.graph_or_stream(data, k, metric, answers, held, &mut collect)? {
            Some(answer) => Ok(answer),
            // Ranks of a cluster other than 0 receive no rows.
            None => Ok(Neighbors { queries: indices.len() / k.max(1), indices, distances, k }),
        }
    }

    /// The graph of `data`: returned whole, or handed to `sink` block by block where it is
    /// partitioned. `held`: bytes of host memory the caller holds meanwhile.
    fn graph_or_stream(
        &self,
        data: MatrixRef<'_>,
        k: usize,
        metric: Metric,
        answers: AnswerMemory,
        held: u64,
        sink: &mut RowSink<'_>,
    ) -> Result<Option<Neighbors>> {
        crate::trace::mark(|| format!("graph of {} x {} rows, k = {k}", data.rows(), data.cols()));
        check_rows("data", data.rows())?;
        let workers = self.workers();
        workers.iter().for_each(|w| w.start_call());
        let options = &self.options;
        let kc = partition::initial_candidates_of(k, data.rows(), options.include_self);
        let asked = strategy::Asked {
            block_rows: options.block_rows,
            checkpoint: options.checkpoint.is_some(),
            devices_listed: self.devices_listed,
            memory: options
                .max_host_memory
                .or_else(crate::memory::available_host_memory)
                .map(|m| m.saturating_sub(held)),
            ranks_on_device: options.answers_on_disk != Some(false)
                && self.engine.ranks_graph_on_device(data.rows(), data.cols()),
            answers_on_disk: options.answers_on_disk == Some(true),
            ranks: self.cluster().map_or(1, |c| c.size()),
            device_rows: self.engine.device_block_rows(data.rows(), data.cols()),
            two_sided_rows: self.engine.two_sided_block_rows(data.rows(), data.cols(), kc),
            whole_sweep_twice: self.engine.graph_sweep_computes_keys_twice(data.rows(), data.cols(), kc),
        };
        let problem = Problem { n: data.rows(), d: data.cols(), k };
        let strategy = strategy::choose(problem, workers.len(), asked);
        // The kd-tree holds the whole data: where its tree does not fit the memory limit, or
        // blocks are asked for, the graph is partitioned by brute force. Where only its
        // answer does not fit, the tree hands rows over in blocks.
        let tree_bytes = match options.algorithm {
            Algorithm::CoverTree => covertree::tree_bytes(problem.n, problem.d),
            Algorithm::KdTree | Algorithm::Hybrid => kdtree::tree_bytes(problem.n, problem.d),
            Algorithm::Auto | Algorithm::Brute => {
                covertree::tree_bytes(problem.n, problem.d).max(kdtree::tree_bytes(problem.n, problem.d))
            }
        };
        let tree_rows = tree_block_rows(problem, tree_bytes, asked.memory);
        let partitioned = asked.block_rows.is_some() || asked.checkpoint || asked.ranks > 1 || tree_rows.is_none();
        let algorithm = self.choose_algorithm(metric, data, partitioned, true);
        if algorithm.is_tree() && strategy != Strategy::Single {
            let rows = tree_rows.expect("a tree that fits");
            self.graph_low_dim_in_blocks(algorithm, data, k, metric, rows, sink)?;
            return Ok(None);
        }
        let mut on_disk = None;
        match strategy {
            Strategy::Single => {}
            Strategy::SingleOnDisk => {
                let dir = self.options.scratch.clone().unwrap_or_else(std::env::temp_dir);
                on_disk = Some(AnswerFile::new(&dir, data.rows(), k)?);
            }
            Strategy::Partitioned { plan, workers, lists_in_memory } => {
                let lists_in_memory = options.lists_in_memory.map_or(lists_in_memory, |l| l.clamp(1, lists_in_memory));
                self.graph_partitioned(data, k, metric, Blocks { plan, workers, lists_in_memory }, sink)?;
                return Ok(None);
            }
        }
        let shift = self.validate_corpus("data", data, metric)?;
        self.check_graph_k(data.rows(), k)?;
        crate::trace::mark(|| "validated, mean".into());
        let exclude: Vec<u32> =
            if self.options.include_self { vec![NONE; data.rows()] } else { (0..data.rows() as u32).collect() };
        let task = Task {
            algorithm,
            corpus: data,
            queries: data,
            shift,
            exclude,
            k,
            metric,
            answers,
            on_disk: on_disk.as_ref(),
        };
        let answer = self.run(&task)?;
        match &on_disk {
            None => Ok(Some(answer)),
            Some(file) => {
                drop(answer);
                self.hand_over_from_disk(file, data.rows(), k, metric, sink)?;
                Ok(None)
            }
        }
    }

    /// Hands the rows of a graph answered on disk to `sink` in order, a few MiB at a time.
    fn hand_over_from_disk(
        &self,
        file: &AnswerFile,
        n: usize,
        k: usize,
        metric: Metric,
        sink: &mut RowSink<'_>,
    ) -> Result<()> {
        let rows = ((16 << 20) / (k * 8)).clamp(1, n);
        let (mut indices, mut distances) = (Vec::new(), Vec::new());
        for first in (0..n).step_by(rows) {
            let count = rows.min(n - first);
            file.read_rows(first, count, &mut indices, &mut distances)?;
            if self.options.include_self && metric != Metric::InnerProduct {
                put_self_first(first, k, &mut indices, &distances);
            }
            sink(first, &mut indices, &mut distances)?;
        }
        Ok(())
    }

    /// `k` between 1 and the rows a point may list: n - 1, or n with `include_self`.
    fn check_graph_k(&self, n: usize, k: usize) -> Result<()> {
        if self.options.include_self {
            check_k(k, n, "the number of rows")
        } else {
            check_k(k, n.saturating_sub(1), "the number of rows - 1 (the point itself is excluded)")
        }
    }

    /// [`Knn::graph`] in blocks of rows dealt to every engine (`partition/`).
    fn graph_partitioned(
        &self,
        data: MatrixRef<'_>,
        k: usize,
        metric: Metric,
        blocks: Blocks,
        sink: &mut RowSink<'_>,
    ) -> Result<()> {
        let Blocks { mut plan, workers, lists_in_memory } = blocks;
        let (n, d) = (data.rows(), data.cols());
        let mut shift = prepare::validate_corpus("data", data, metric)?;
        let cluster = self.cluster();
        if let Some(c) = cluster {
            // The ranks must cut the data alike and compute keys with the same shift (each
            // chose from its own devices and memory): rank 0's choice holds.
            (plan, shift) = agree_on_blocks(c, plan, shift)?;
        }
        self.check_graph_k(n, k)?;
        let problem = Problem { n, d, k };
        let limit = self.options.max_host_memory;
        crate::memory::check_partitioned(problem, plan.rows, workers, lists_in_memory, limit)?;
        let scratch = if lists_in_memory < plan.count {
            let dir = self.options.scratch.clone().unwrap_or_else(std::env::temp_dir);
            partition::check_scratch(&dir)?;
            Some(dir)
        } else {
            None
        };
        let include_self = self.options.include_self;
        let checkpoint = match &self.options.checkpoint {
            Some(dir) => {
                let manifest = checkpoint::Manifest::new(data, k, metric, include_self, plan);
                let dir = match cluster {
                    Some(c) => dir.join(format!("rank-{}-of-{}", c.rank(), c.size())),
                    None => dir.clone(),
                };
                Some(checkpoint::Checkpoint::open(&dir, &manifest, plan)?)
            }
            None => None,
        };
        let workers = &self.workers()[..workers];
        let task = partition::GraphTask {
            data,
            shift: &shift,
            k,
            metric,
            include_self,
            plan,
            symmetric: self.options.symmetric_graphs,
            lists_in_memory,
            scratch,
            cluster,
        };
        let mut stats = RunStats { algorithm: Algorithm::Brute, workers: workers.len(), ..RunStats::default() };
        let notice = |blocks: usize, done: usize| {
            if let (Some(notice), true) = (&self.options.notice, done > 0) {
                notice(&format!("resuming: {done} of {blocks} blocks done"));
            }
        };
        let mut sink = |first: usize, indices: &mut [u32], distances: &mut [f32]| {
            if include_self && metric != Metric::InnerProduct {
                put_self_first(first, k, indices, distances);
            }
            sink(first, indices, distances)
        };
        let progress = self.options.progress.as_ref();
        partition::graph(workers, &task, checkpoint.as_ref(), progress, &notice, &mut stats, &mut sink)?;
        if let Some(p) = progress {
            p(n as u64, n as u64);
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = stats;
        Ok(())
    }

    /// The ranks sharing graphs, where there are more than one.
    fn cluster(&self) -> Option<&dyn Cluster> {
        self.options.cluster.as_deref().filter(|c| c.size() > 1)
    }

    /// [`prepare::validate_corpus`]; a GPU engine allocates the corpus's buffers and writes
    /// its rows meanwhile.
    fn validate_corpus(&self, what: &'static str, corpus: MatrixRef<'_>, metric: Metric) -> Result<Vec<f32>> {
        match &self.engine {
            Engine::Gpu(g) => {
                // A failure here is left to `open`, which retries with a smaller budget.
                let caller = std::thread::current().id();
                let (shift, _staged) =
                    rayon::join(|| prepare::validate_corpus(what, corpus, metric), || g.stage(corpus, caller));
                shift
            }
            Engine::Cpu(_) => prepare::validate_corpus(what, corpus, metric),
        }
    }

    fn run(&self, task: &Task<'_>) -> Result<Neighbors> {
        let (n, nq, d) = (task.corpus.rows(), task.queries.rows(), task.corpus.cols());
        if task.on_disk.is_none() {
            crate::memory::check_host_memory(n, nq, d, task.k, 0, self.options.max_host_memory)?;
        }
        let mut answer = match task.algorithm {
            a if a.is_tree() => self.run_low_dim(task)?,
            _ => self.run_any(task)?,
        };
        if self.options.include_self && task.metric != Metric::InnerProduct && task.on_disk.is_none() {
            put_self_first(0, answer.k, &mut answer.indices, &answer.distances);
        }
        Ok(answer)
    }

    /// The algorithm for a problem over `corpus` under `metric` (`partitioned`: the caller
    /// asked for a partitioned graph; `amortized`: a graph or a saved index, whose tree
    /// answers as many queries as the corpus has rows), told through [`Options::notice`]
    /// where it is not brute force or where the tree asked for cannot run.
    pub(crate) fn choose_algorithm(
        &self,
        metric: Metric,
        corpus: MatrixRef<'_>,
        partitioned: bool,
        amortized: bool,
    ) -> Algorithm {
        let mut asked = strategy::AlgorithmAsked {
            algorithm: self.options.algorithm,
            metric,
            d: corpus.cols(),
            gpu: self.is_gpu(),
            gpu_forced: self.options.backend == Backend::Gpu,
            partitioned,
            rows: corpus.rows(),
            amortized,
            intrinsic: None,
        };
        if strategy::wants_intrinsic_dimension(&asked) {
            asked.intrinsic = covertree::intrinsic_dimension(corpus, metric);
            crate::trace::mark(|| format!("intrinsic dimension {:?}", asked.intrinsic));
        }
        let (chosen, why) = strategy::choose_algorithm(asked);
        if let (Some(notice), Some(why)) = (&self.options.notice, why) {
            notice(&why);
        }
        chosen
    }

    /// [`Knn::run`] by a tree: the kd-tree, the hybrid join or the cover tree.
    fn run_low_dim(&self, task: &Task<'_>) -> Result<Neighbors> {
        let (nq, k) = (task.queries.rows(), task.k);
        let (mut indices, mut distances) = task.answers.take(nq * k);
        let job = TreeJob {
            corpus: task.corpus,
            queries: task.queries,
            exclude: &task.exclude,
            k,
            metric: task.metric,
            interrupt: self.options.interrupt.clone(),
        };
        let answers = Answers::Whole { indices: &mut indices, distances: &mut distances };
        self.answer_low_dim(task.algorithm, &job, None, answers)?;
        Ok(Neighbors { indices, distances, queries: nq, k })
    }

    /// Where a cover tree over `corpus` is built: on the GPU of a GPU engine, where it fits.
    pub(crate) fn cover_tree_builder<'e>(&self, engine: &'e Engine, corpus: MatrixRef<'_>) -> covertree::Builder<'e> {
        match engine {
            Engine::Gpu(gpu) if strategy::cover_tree_on_gpu(gpu, corpus) => covertree::Builder::Gpu(gpu),
            _ => covertree::Builder::Cpu,
        }
    }

    /// The engine's builder of cover trees over `corpus` ([`Knn::cover_tree_builder`]).
    pub(crate) fn own_cover_tree_builder(&self, corpus: MatrixRef<'_>) -> covertree::Builder<'_> {
        self.cover_tree_builder(&self.engine, corpus)
    }

    /// [`Knn::search`] of `corpus` by `tree`, a cover tree built over it under `metric`; the
    /// corpus's rows were checked when the tree was built or loaded.
    pub(crate) fn search_tree(
        &self,
        tree: covertree::TreeRef<'_>,
        corpus: MatrixRef<'_>,
        queries: MatrixRef<'_>,
        k: usize,
        metric: Metric,
    ) -> Result<Neighbors> {
        prepare::validate("queries", queries, metric)?;
        if corpus.cols() != queries.cols() {
            return Err(Error::DimensionMismatch { corpus: corpus.cols(), queries: queries.cols() });
        }
        check_k(k, corpus.rows(), "the number of corpus rows")?;
        let nq = queries.rows();
        crate::memory::check_host_memory(0, nq, corpus.cols(), k, 0, self.options.max_host_memory)?;
        let exclude = vec![NONE; nq];
        let job = TreeJob { corpus, queries, exclude: &exclude, k, metric, interrupt: self.options.interrupt.clone() };
        let (mut indices, mut distances) = AnswerMemory::default().take(nq * k);
        let answers = Answers::Whole { indices: &mut indices, distances: &mut distances };
        self.answer_low_dim(Algorithm::CoverTree, &job, Some(tree), answers)?;
        Ok(Neighbors { indices, distances, queries: nq, k })
    }

    /// The graph of `data` by a tree (the kd-tree, the hybrid join or the cover tree),
    /// handed to `sink` in blocks of `rows` rows as they are answered, for graphs whose
    /// answer does not fit host memory whole.
    fn graph_low_dim_in_blocks(
        &self,
        algorithm: Algorithm,
        data: MatrixRef<'_>,
        k: usize,
        metric: Metric,
        rows: usize,
        sink: &mut RowSink<'_>,
    ) -> Result<()> {
        prepare::validate_corpus("data", data, metric)?;
        self.check_graph_k(data.rows(), k)?;
        let n = data.rows();
        let include_self = self.options.include_self;
        let exclude: Vec<u32> = if include_self { vec![NONE; n] } else { (0..n as u32).collect() };
        let mut hand_over = |first: usize, indices: &mut [u32], distances: &mut [f32]| {
            if include_self && metric != Metric::InnerProduct {
                put_self_first(first, k, indices, distances);
            }
            sink(first, indices, distances)
        };
        let job = TreeJob {
            corpus: data,
            queries: data,
            exclude: &exclude,
            k,
            metric,
            interrupt: self.options.interrupt.clone(),
        };
        self.answer_low_dim(algorithm, &job, None, Answers::Blocks { rows, sink: &mut hand_over })
    }

    /// Answers `job` by `algorithm` (the kd-tree, the cover tree, or the hybrid join where
    /// the engine is a GPU), reporting progress and recording the run's statistics; the
    /// cover tree is `tree` where one was built before.
    fn answer_low_dim(
        &self,
        algorithm: Algorithm,
        job: &TreeJob<'_>,
        tree: Option<covertree::TreeRef<'_>>,
        answers: Answers<'_>,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let nq = job.queries.rows();
        let progress = self.options.progress.clone();
        let report = move |done: usize| {
            if let Some(p) = &progress {
                p(done as u64, nq as u64)
            }
        };
        let mut stats = RunStats { algorithm, rounds: 1, workers: 1, ..RunStats::default() };
        match (&self.engine, algorithm) {
            (Engine::Gpu(gpu), Algorithm::Hybrid) => {
                let run = hybrid::knn(job, gpu, answers, &report)?;
                if let (Some(notice), Some(e)) = (&self.options.notice, &run.gpu_error) {
                    notice(&format!("the GPU grid stopped ({e}); the kd-tree answered the rest"));
                }
                if let (Some(notice), true) = (&self.options.notice, run.gpu_rows_unanswered > 0) {
                    notice(&format!(
                        "the driver ended the GPU grid's loops early for {} rows (llvmpipe stops an invocation after \
                         65535 loop steps); the kd-tree answered them",
                        run.gpu_rows_unanswered
                    ));
                }
                stats.rows_on_grid = run.gpu_rows;
                stats.rows_proven_by_grid = run.gpu_proven;
                stats.rows_proven_on_gpu = run.gpu_proven_on_gpu;
                stats.grid_rebuilds = run.grid_rebuilds;
            }
            (engine, Algorithm::CoverTree) => {
                let on = self.cover_tree_builder(engine, job.corpus);
                let graph = std::ptr::eq(job.queries.as_slice(), job.corpus.as_slice());
                let gpu_queries = match engine {
                    Engine::Gpu(gpu) if graph && strategy::cover_sets_fit(gpu, job.corpus, job.k) => {
                        let wanted = self.options.cover_sets_on_gpu.unwrap_or_else(|| {
                            let threads = rayon::current_num_threads();
                            strategy::cover_sets_may_pay(threads, None)
                                && strategy::cover_sets_may_pay(
                                    threads,
                                    covertree::intrinsic_dimension(job.corpus, job.metric),
                                )
                        });
                        wanted.then_some(&**gpu)
                    }
                    _ => None,
                };
                let run = covertree::knn(job, tree, on, gpu_queries, answers, &report)?;
                stats.rows_queried_on_gpu = run.rows_queried_on_gpu;
                if let (Some(notice), Some(e)) = (&self.options.notice, &run.gpu_query_error) {
                    notice(&format!("the cover tree's GPU queries stopped ({e}); the CPU answered the rest"));
                }
                if let Some((on_gpu, gpu_error)) = run.built {
                    stats.tree_built_on_gpu = on_gpu;
                    if let (Some(notice), Some(e)) = (&self.options.notice, gpu_error) {
                        notice(&format!("the cover tree's GPU build stopped ({e}); built on the CPU"));
                    }
                }
            }
            _ => {
                stats.algorithm = Algorithm::KdTree;
                kdtree::knn(job, answers, &report)?;
            }
        }
        stats.candidate_seconds = started.elapsed().as_secs_f64();
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = stats;
        Ok(())
    }

    fn run_any(&self, task: &Task<'_>) -> Result<Neighbors> {
        match self.run_on(&self.engine, task) {
            // A problem the GPU cannot hold (a k whose candidate lists exceed its largest
            // buffer) still has an answer: with `auto`, compute it on the CPU.
            Err(Error::TooLargeForDevice(_)) if self.options.backend == Backend::Auto => {
                self.run_on(&Engine::Cpu(self.options.cpu_engine()), task)
            }
            other => other,
        }
    }

    fn run_on(&self, engine: &Engine, task: &Task<'_>) -> Result<Neighbors> {
        let Task { corpus, queries, k, metric, .. } = *task;
        let (shift, exclude) = (&task.shift[..], &task.exclude[..]);
        let started = std::time::Instant::now();
        let d = corpus.cols();
        // A graph's queries are its corpus: one float64 pass serves both, and the GPU copies
        // the prepared corpus rows instead of preparing them again.
        let same_rows = queries.rows() == corpus.rows() && std::ptr::eq(queries.as_slice(), corpus.as_slice());
        let mut session = match engine {
            Engine::Cpu(c) => Session::Cpu(c.open(corpus, shift, metric, self.options.symmetric_graphs)),
            Engine::Gpu(g) => Session::Gpu(retry_smaller(g, || g.open(corpus, shift, metric))?),
        };
        crate::trace::mark(|| "corpus prepared (submitted)".into());
        // The statistics are first needed once candidates exist: computed on first use, which
        // on the GPU comes after the distance work is queued, so they overlap it.
        let row_stats = OnceLock::new();
        let row_stats = || {
            row_stats.get_or_init(|| {
                let corpus_stats = prepare::row_stats(corpus, shift, metric);
                let corpus_max = corpus_stats.max();
                let query_stats = if same_rows { corpus_stats } else { prepare::row_stats(queries, shift, metric) };
                crate::trace::mark(|| "row statistics".into());
                (corpus_max, query_stats)
            })
        };
        let nq = queries.rows();
        // Answers are written into the output as rows are proven; `pending` lists the others.
        // The output's arrays come from the first round: the GPU's ranked rows, or else
        // `task.answers`.
        let (mut indices, mut distances) = (Vec::new(), Vec::new());
        let mut pending: Vec<usize> = (0..nq).collect();
        let mut kc = initial_candidates(k);
        let total = nq as u64;

        let mut stats = RunStats {
            algorithm: Algorithm::Brute,
            prepare_seconds: started.elapsed().as_secs_f64(),
            ..RunStats::default()
        };
        // With the answers on disk: rows whose answers are in memory rather than there.
        let mut rewritten: Vec<usize> = Vec::new();
        let ranked_to_disk = std::sync::atomic::AtomicUsize::new(0);
        while !pending.is_empty() {
            check_interrupt(&self.options.interrupt)?;
            stats.rounds += 1;
            if stats.rounds == 2 {
                stats.rows_widened = pending.len();
            }
            let available = |i: usize| corpus.rows() - usize::from(exclude[i] != NONE);
            let max_available = pending.iter().map(|&i| available(i)).max().unwrap_or(0);
            kc = kc.min(max_available).max(k);
            let (sub_queries, sub_exclude);
            let (q_view, ex_view): (MatrixRef<'_>, &[u32]) = if pending.len() == nq {
                (queries, exclude)
            } else {
                sub_queries = gather_rows(queries, &pending);
                sub_exclude = pending.iter().map(|&i| exclude[i]).collect::<Vec<_>>();
                (sub_queries.view(), &sub_exclude)
            };
            let progress = self.options.progress.clone();
            let done_before = total - pending.len() as u64;
            let report = move |done: usize| {
                if let Some(p) = &progress {
                    p(done_before + done as u64, total)
                }
            };
            let clock = std::time::Instant::now();
            // Not inside parallel loops: a rayon worker waiting on a `OnceLock` that it is
            // itself initialising would deadlock.
            let error_bound = |(corpus_max, query_stats): &(f64, RowStats), i: usize| {
                prepare::key_error_bound(metric, d, query_stats.scale[i], *corpus_max)
            };
            let all_rows = same_rows && pending.len() == nq;
            if pending.len() == nq && !indices.is_empty() {
                // No row was proven: this round rewrites the whole answer, in the same arrays.
                task.answers.lend(std::mem::take(&mut indices), std::mem::take(&mut distances));
            }
            let mut cands: Candidates = match &mut session {
                Session::Cpu(s) => s.candidates(q_view, all_rows, ex_view, kc, &report),
                Session::Gpu(s) => {
                    let Engine::Gpu(g) = engine else { unreachable!("a GPU session has a GPU engine") };
                    // The GPU may rank and certify rows itself, as `refine::refine` would.
                    let error_bounds = OnceLock::<Vec<f64>>::new();
                    let error_bounds = || -> &[f64] {
                        error_bounds.get_or_init(|| {
                            let facts = row_stats();
                            pending.par_iter().map(|&i| error_bound(facts, i)).collect()
                        })
                    };
                    // Rows ranked in a tile of the first round go to disk and leave memory at once.
                    let to_disk = |first: usize, ids: &mut [u32], distances: &mut [f32]| -> Result<()> {
                        if let Some(file) = task.on_disk {
                            file.write_rows(first, ids, distances)?;
                            ranked_to_disk.fetch_add(ids.len() / k, std::sync::atomic::Ordering::Relaxed);
                            crate::data::release_pages(ids);
                            crate::data::release_pages(distances);
                        }
                        Ok(())
                    };
                    let certify = Certify {
                        k,
                        error_bounds: &error_bounds,
                        floor_zero: metric != Metric::InnerProduct,
                        answers: &task.answers,
                        tile_ranked: (task.on_disk.is_some() && stats.rounds == 1).then_some(&to_disk),
                    };
                    retry_smaller(g, || s.candidates(q_view, all_rows, ex_view, kc, Some(&certify), &report))?
                }
            };
            stats.candidate_seconds += clock.elapsed().as_secs_f64();
            // The CPU's threads skip the blocks left after an interrupt: these lists are partial.
            check_interrupt(&self.options.interrupt)?;
            crate::trace::mark(|| format!("round {}: candidates of {} rows", stats.rounds, pending.len()));
            if cands.exact.is_some() || cands.ranked.is_some() {
                stats.rows_reranked_on_gpu += pending.len();
            }
            if cands.ranked.is_some() {
                stats.rows_certified_on_gpu += pending.len();
            }
            stats.rows_shortlisted += cands.shortlisted;
            stats.tile_buffer_allocations += cands.buffers_allocated as usize;
            if cands.symmetric {
                stats.rows_in_symmetric_blocks += pending.len();
            }
            if cands.bounded {
                stats.rows_in_bounded_sweeps += pending.len();
            }
            if cands.sparse {
                stats.rows_in_sparse_sweeps += pending.len();
            }
            if cands.shared_keys {
                stats.rows_sharing_keys += pending.len();
            }
            stats.rows_published += cands.published;
            let clock = std::time::Instant::now();
            let facts = row_stats();
            let brute_forced = std::sync::atomic::AtomicUsize::new(0);
            let overflowed = std::sync::atomic::AtomicUsize::new(0);
            // Answers ranked on the GPU are already rows of the output: in a round over every
            // row they become the output (rows not proven are rewritten by later rounds).
            let mut ranked = cands.ranked.take();
            let in_place = pending.len() == nq && ranked.is_some();
            if let (true, Some(r)) = (in_place, ranked.as_mut()) {
                indices = std::mem::take(&mut r.ids);
                distances = std::mem::take(&mut r.distances);
            } else if indices.is_empty() {
                (indices, distances) = task.answers.take(nq * k);
            }
            if task.on_disk.is_some() && stats.rounds == 1 {
                // Rows of the first round that went to disk ranked stay there; the others are
                // written at the end, as later rounds or the host answer them.
                let on_disk = |i: usize| {
                    !cands.failed[i]
                        && cands.incomplete.get(i) != Some(&true)
                        && ranked.as_ref().is_some_and(|r| r.found(i).is_some())
                };
                rewritten = (0..nq).filter(|&i| !on_disk(i)).collect();
            }
            let mut slot_of = vec![NONE; nq];
            for (slot, &i) in pending.iter().enumerate() {
                slot_of[i] = slot as u32;
            }
            pending = indices
                .par_chunks_mut(k)
                .zip(distances.par_chunks_mut(k))
                .enumerate()
                .filter(|(i, _)| slot_of[*i] != NONE)
                .filter_map(|(i, (row_ids, row_dists))| {
                    let slot = slot_of[i] as usize;
                    let q = Query { corpus, vector: queries.row(i), metric, k, exclude: exclude[i] };
                    if cands.incomplete.get(slot) == Some(&true) {
                        overflowed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return Some(i);
                    }
                    // Not proven although every row was a candidate: keys that overflowed f32
                    // tie with the padding and the query itself (`key_error_bound`), so the
                    // list may still miss rows. The host answers such a row.
                    let unproven = || {
                        if kc < max_available {
                            return None;
                        }
                        brute_forced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Some(refine::brute_force(q))
                    };
                    let ranked = if cands.failed[slot] {
                        brute_forced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        refine::brute_force(q)
                    } else if let Some(ranked) = &ranked {
                        let Some(m) = ranked.found(slot) else {
                            let Some(answer) = unproven() else { return Some(i) };
                            write_row(metric, answer.into_iter(), row_ids, row_dists);
                            return None;
                        };
                        if !in_place {
                            let (ids, dists) = ranked.row(slot, m);
                            row_ids[..m].copy_from_slice(ids);
                            row_dists[..m].copy_from_slice(dists);
                            row_ids[m..].fill(0);
                            row_dists[m..].fill(0.0);
                        }
                        return None;
                    } else {
                        let range = slot * cands.kc..(slot + 1) * cands.kc;
                        let exact = cands.exact.as_ref().map(|e| &e[range.clone()]);
                        let bound = error_bound(facts, i);
                        match refine::refine(
                            q,
                            &cands.keys[range.clone()],
                            &cands.ids[range],
                            exact,
                            available(i),
                            bound,
                        )
                        .or_else(unproven)
                        {
                            Some(ranked) => ranked,
                            None => return Some(i),
                        }
                    };
                    write_row(metric, ranked.into_iter(), row_ids, row_dists);
                    None
                })
                .collect();
            stats.rows_brute_forced += brute_forced.into_inner();
            stats.rows_overflowed += overflowed.into_inner();
            stats.refine_seconds += clock.elapsed().as_secs_f64();
            // Rows whose certificate failed have many near-ties around their k-th neighbour:
            // ask for more candidates; once kc covers the corpus the answer is complete.
            kc = kc.saturating_mul(4);
        }
        if let Some(file) = task.on_disk {
            write_rows_to_disk(file, &rewritten, k, &indices, &distances)?;
            stats.rows_ranked_to_disk = ranked_to_disk.into_inner();
        }
        if let Some(p) = &self.options.progress {
            p(total, total);
        }
        if let Engine::Gpu(g) = engine {
            stats.gpu = g.take_profile();
        }
        crate::trace::mark(|| format!("done, {} rounds", stats.rounds));
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = stats;

        Ok(Neighbors { indices, distances, queries: nq, k })
    }
}

/// The planner's partition of a graph (`Strategy::Partitioned`).
struct Blocks {
    plan: BlockPlan,
    workers: usize,
    lists_in_memory: usize,
}

/// One validated search: every query's `k` nearest corpus rows, `exclude` per query a corpus
/// row that may not be its answer (itself, in a graph) or `NONE`.
struct Task<'a> {
    /// [`Algorithm::Brute`] or [`Algorithm::KdTree`], as chosen.
    algorithm: Algorithm,
    corpus: MatrixRef<'a>,
    queries: MatrixRef<'a>,
    /// From `prepare::validate_corpus`.
    shift: Vec<f32>,
    exclude: Vec<u32>,
    k: usize,
    metric: Metric,
    /// Where the answer is written.
    answers: AnswerMemory,
    /// Where set, every row's answer is also written here as it is ranked, and the answer's
    /// arrays hold only the rows being ranked (`Strategy::SingleOnDisk`).
    on_disk: Option<&'a AnswerFile>,
}

/// Writes `rows` (ascending) of an answer to `file`, runs of consecutive rows at once.
fn write_rows_to_disk(file: &AnswerFile, rows: &[usize], k: usize, indices: &[u32], distances: &[f32]) -> Result<()> {
    let mut at = 0;
    while at < rows.len() {
        let first = rows[at];
        let run = rows[at..].iter().enumerate().take_while(|&(j, &i)| i == first + j).count();
        let range = first * k..(first + run) * k;
        file.write_rows(first, &indices[range.clone()], &distances[range])?;
        at += run;
    }
    Ok(())
}

/// Lends `out`'s arrays to a run, leaving `out` empty until the run's answer replaces it.
fn lend(out: &mut Neighbors) -> AnswerMemory {
    let lent = AnswerMemory::lent(std::mem::take(&mut out.indices), std::mem::take(&mut out.distances));
    (out.queries, out.k) = (0, 0);
    lent
}

enum Session<'a> {
    Cpu(crate::cpu::CorpusSession<'a>),
    Gpu(crate::gpu::CorpusSession<'a>),
}

/// Candidates per query for the first round: a margin above k so that the certificate
/// usually holds, small enough that re-ranking stays cheap. A list that would just pass a
/// multiple of the GPU ranking's run (`MAX_CERTIFY_KC`, 1024 candidates sorted by one
/// workgroup) stops at it where that still leaves 16 candidates of margin: k=1000 then ranks
/// one run of 1024 instead of two runs and their merge for 1250. Rows the smaller margin
/// leaves unproven (near-ties at the k-th key) take a second round in the first's buffers.
pub(crate) fn initial_candidates(k: usize) -> usize {
    let kc = k + (k / 4).max(16);
    let whole_runs = kc / MAX_CERTIFY_KC * MAX_CERTIFY_KC;
    if whole_runs >= k + 16 {
        whole_runs
    } else {
        kc
    }
}

/// The most corpus rows knng takes: ids are 32-bit, and `u32::MAX`, which no row of so many
/// can have, means "no row".
pub const MAX_ROWS: usize = NONE as usize;

fn check_rows(what: &str, rows: usize) -> Result<()> {
    if rows > MAX_ROWS {
        return Err(Error::arg(
            what,
            format!("{rows} rows are more than knng supports: at most {MAX_ROWS} (ids are 32-bit)"),
        ));
    }
    Ok(())
}

/// In a graph that counts each point as its own neighbour, the point comes first among the
/// rows at its distance 0 (exact duplicates), as scikit-learn users expect, rather than
/// after duplicates of smaller index. Rows are otherwise unchanged: (distance, index) order.
/// Puts each row of a graph first in its own list where it ties with the first neighbour: the
/// rows `first..` of the graph, `k` neighbours each.
fn put_self_first(first: usize, k: usize, indices: &mut [u32], distances: &[f32]) {
    indices.par_chunks_mut(k).zip(distances.par_chunks(k)).enumerate().for_each(|(r, (ids, dists))| {
        let i = first + r;
        if ids[0] as usize == i {
            return;
        }
        let ties = dists.iter().take_while(|&&d| d == dists[0]).count();
        match ids[..ties].iter().position(|&id| id as usize == i) {
            Some(at) => ids[..=at].rotate_right(1),
            // More exact duplicates than k, all of smaller index: the point replaces the
            // last of them (every one of them ties with it).
            None if ties == k => {
                ids.rotate_right(1);
                ids[0] = i as u32;
            }
            None => {}
        }
    });
}

/// Query rows a block of a kd-tree graph's answers under the host memory limit `memory`,
/// beside its tree (at most the rows of 64 MiB of answers, at least one); `None` where the
/// tree itself does not fit.
fn tree_block_rows(p: Problem, tree_bytes: u64, memory: Option<u64>) -> Option<usize> {
    let row_bytes = (p.k as u64 * 8).max(1);
    let most = ((64u64 << 20) / row_bytes).max(1) as usize;
    let Some(memory) = memory else { return Some(most.min(p.n)) };
    let left = memory.checked_sub(tree_bytes)?;
    // The block's answers, the caller's copy as it writes them, and the order the block's
    // rows are answered in.
    let rows = (left / (2 * row_bytes + kdtree::ORDER_BYTES_PER_ROW)) as usize;
    (rows >= 1).then(|| rows.min(most).min(p.n))
}

fn check_k(k: usize, max: usize, what: &str) -> Result<()> {
    if k == 0 {
        return Err(Error::arg("k", "k must be at least 1"));
    }
    if k > max {
        return Err(Error::arg("k", format!("k = {k} is larger than {what} ({max})")));
    }
    Ok(())
}

fn gather_rows(m: MatrixRef<'_>, rows: &[usize]) -> Matrix {
    let mut data = Vec::with_capacity(rows.len() * m.cols());
    for &i in rows {
        data.extend_from_slice(m.row(i));
    }
    Matrix::new(data, rows.len(), m.cols()).expect("gathered rows have the right length")
}

/// [`Knn::search`] with default options (the best available backend).
pub fn search(corpus: MatrixRef<'_>, queries: MatrixRef<'_>, k: usize, metric: Metric) -> Result<Neighbors> {
    Knn::new(Options::default())?.search(corpus, queries, k, metric)
}

/// Rank 0's rows a block and centring shift, on every rank of `c`.
fn agree_on_blocks(c: &dyn Cluster, plan: BlockPlan, shift: Vec<f32>) -> Result<(BlockPlan, Vec<f32>)> {
    let mut mine = (plan.rows as u64).to_le_bytes().to_vec();
    mine.extend_from_slice(bytemuck::cast_slice(&shift));
    let agreed = crate::cluster::agree(c, mine)?;
    if agreed.len() != 8 + shift.len() * 4 {
        return Err(Error::Cluster(format!(
            "rank 0 cut data of {} columns into blocks with a shift of {} bytes: do all ranks read the same input?",
            shift.len(),
            agreed.len().saturating_sub(8)
        )));
    }
    let rows = u64::from_le_bytes(agreed[..8].try_into().expect("8 bytes")) as usize;
    Ok((BlockPlan::new(plan.n, rows), bytemuck::pod_collect_to_vec(&agreed[8..])))
}

/// [`Knn::graph`] with default options (the best available backend).
pub fn graph(data: MatrixRef<'_>, k: usize, metric: Metric) -> Result<Neighbors> {
    Knn::new(Options::default())?.graph(data, k, metric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_round_lists_keep_a_margin_and_stop_at_whole_ranking_runs() {
        for k in 1..=9000 {
            let kc = initial_candidates(k);
            assert!(kc >= k + 16, "k={k}: {kc} candidates leave less than 16 of margin");
            assert!(kc <= k + (k / 4).max(16), "k={k}: {kc} candidates, more than the usual margin");
        }
        assert_eq!(initial_candidates(10), 26);
        assert_eq!(initial_candidates(512), 640);
        // Two runs of the ranking's sort and their merge for 1250; one run for 1024.
        assert_eq!(initial_candidates(1000), 1024);
        assert_eq!(initial_candidates(1008), 1024);
        assert_eq!(initial_candidates(1009), 1261);
        assert_eq!(initial_candidates(2048), 2560);
        assert_eq!(initial_candidates(4000), 4096);
    }
}
