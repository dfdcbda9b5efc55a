//! The planner's first decisions: which algorithm (brute force, or a kd-tree or the hybrid
//! join for data of a few dimensions), then for brute force one pass over the whole data on one engine, or the
//! partitioned graph of P x P blocks dealt to several workers.

use crate::data::MatrixRef;
use crate::lowdim::{covertree, hybrid, kdtree};
use crate::memory;
use crate::metric::Metric;
use crate::partition::BlockPlan;
use crate::plan::ALIGN_ROWS;
use crate::search::Algorithm;

/// Most dimensions for which [`Algorithm::Auto`] takes the kd-tree where the engine is the
/// CPU: there brute force costs n^2 d and the tree about n log n 2^d (`notes/lowdim.md`).
const AUTO_KD_TREE_DIM_CPU: usize = 6;

/// Most dimensions for which [`Algorithm::Auto`] takes the kd-tree, on the host's threads,
/// where the engine is a GPU that the caller did not ask for by name; from there to
/// [`AUTO_HYBRID_DIM_GPU`] it takes the hybrid join (`notes/lowdim.md`: in 2-D the two take
/// the same time, from 3-D on the hybrid is faster).
const AUTO_KD_TREE_DIM_GPU: usize = 2;

/// Most dimensions for which [`Algorithm::Auto`] takes the hybrid join where the engine is a
/// GPU that the caller did not ask for by name: every dimension the grid takes (at 6-D it
/// beat GPU brute force 2.5x and the kd-tree 1.1-1.7x).
const AUTO_HYBRID_DIM_GPU: usize = crate::gpu::GRID_MAX_DIMS;

/// Most intrinsic dimension (TwoNN, `lowdim::covertree::intrinsic`) for which
/// [`Algorithm::Auto`] takes the cover tree where the engine is the CPU, and fewest rows:
/// below them brute force is as fast (`notes/covertree.md`).
const AUTO_COVER_TREE_DIM: f64 = 4.5;
const AUTO_COVER_TREE_ROWS: usize = 50_000;

/// The same where the engine is a GPU, for graphs and saved indexes: a tree built on the GPU
/// and queried on the CPU's threads against GPU brute force, the tree won on manifolds of
/// intrinsic dimension 2 from 10^5 rows (0.79-0.99x there, 0.20-0.86x at 10^6) and lost or
/// tied from 3 on (`notes/covertree.md`).
const AUTO_COVER_TREE_DIM_GPU: f64 = 2.5;
const AUTO_COVER_TREE_ROWS_GPU: usize = 100_000;

/// What the caller asked for that bears on the algorithm.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AlgorithmAsked {
    /// `Options::algorithm`.
    pub algorithm: Algorithm,
    pub metric: Metric,
    /// Columns of the data.
    pub d: usize,
    /// The engine is a GPU.
    pub gpu: bool,
    /// The caller asked for the GPU backend ([`crate::Backend::Gpu`]): `Auto` then keeps the
    /// work on it.
    pub gpu_forced: bool,
    /// The graph is partitioned (the caller asked for blocks, a checkpoint or ranks of a
    /// cluster, or the kd-tree would not fit host memory), which only brute force does.
    pub partitioned: bool,
    /// Rows of the corpus.
    pub rows: usize,
    /// A tree would answer at least as many queries as the corpus has rows: a graph, or an
    /// index saved to be searched again and again.
    pub amortized: bool,
    /// The corpus's intrinsic dimension where [`wants_intrinsic_dimension`] asked for it.
    pub intrinsic: Option<f64>,
}

/// Whether [`choose_algorithm`] would read the data's intrinsic dimension: where `auto`
/// may take the cover tree (a metric it takes, enough rows, neither the kd-tree's nor the
/// hybrid join's case, no partitioned graph; beside a GPU not asked for by name, only for
/// graphs and indexes).
pub(crate) fn wants_intrinsic_dimension(asked: &AlgorithmAsked) -> bool {
    let low_dim = kdtree::handles(asked.metric, asked.d);
    let engine_fits = if asked.gpu {
        asked.amortized
            && !asked.gpu_forced
            && asked.rows >= AUTO_COVER_TREE_ROWS_GPU
            && !(low_dim && asked.d <= AUTO_HYBRID_DIM_GPU)
    } else {
        asked.rows >= AUTO_COVER_TREE_ROWS && !(low_dim && asked.d <= AUTO_KD_TREE_DIM_CPU)
    };
    asked.algorithm == Algorithm::Auto && !asked.partitioned && covertree::handles(asked.metric) && engine_fits
}

/// Most intrinsic dimension for which `auto` takes the cover tree on the engine asked about.
fn cover_tree_dim(asked: &AlgorithmAsked) -> f64 {
    if asked.gpu {
        AUTO_COVER_TREE_DIM_GPU
    } else {
        AUTO_COVER_TREE_DIM
    }
}

/// The algorithm that runs (brute force, the kd-tree or the hybrid join), and a message for
/// the user where it is not brute force or differs from the one asked for.
pub(crate) fn choose_algorithm(asked: AlgorithmAsked) -> (Algorithm, Option<String>) {
    let AlgorithmAsked { algorithm, metric, d, gpu, gpu_forced, partitioned, intrinsic, .. } = asked;
    let tree_takes = kdtree::handles(metric, d);
    let chosen = |why: String| (Algorithm::KdTree, Some(format!("algorithm: kd-tree on the CPU's threads ({why})")));
    let unpartitioned = |tree: &str| {
        let why = "does not partition a graph into blocks (asked for, or needed to fit the memory limit)";
        (Algorithm::Brute, Some(format!("algorithm: brute force, as the {tree} {why}")))
    };
    match algorithm {
        Algorithm::Brute => (Algorithm::Brute, None),
        Algorithm::KdTree if partitioned => unpartitioned("kd-tree"),
        Algorithm::KdTree if !tree_takes => (
            Algorithm::Brute,
            Some(format!(
                "algorithm: brute force, as the kd-tree takes euclidean and sqeuclidean distances in 1 to {} \
                 dimensions, not {metric} in {d}",
                kdtree::MAX_DIM
            )),
        ),
        Algorithm::KdTree => chosen("asked for".into()),
        Algorithm::Hybrid if partitioned => unpartitioned("hybrid join"),
        Algorithm::Hybrid if !hybrid::handles(metric, d) => (
            Algorithm::Brute,
            Some(format!(
                "algorithm: brute force, as the hybrid join takes euclidean and sqeuclidean distances in 1 to {} \
                 dimensions, not {metric} in {d}",
                crate::gpu::GRID_MAX_DIMS
            )),
        ),
        Algorithm::Hybrid if !gpu => {
            chosen("the hybrid join asked for, with no GPU engine: the kd-tree does all".into())
        }
        Algorithm::CoverTree if partitioned => unpartitioned("cover tree"),
        Algorithm::CoverTree if !covertree::handles(metric) => (
            Algorithm::Brute,
            Some(format!("algorithm: brute force, as the cover tree does not take {metric} distances")),
        ),
        Algorithm::CoverTree => (Algorithm::CoverTree, Some("algorithm: cover tree (asked for)".into())),
        Algorithm::Hybrid => (
            Algorithm::Hybrid,
            Some(
                "algorithm: hybrid, the GPU grid for dense regions and the kd-tree on the CPU's threads (asked for)"
                    .into(),
            ),
        ),
        Algorithm::Auto => {
            let why = format!("{d} dimension{}, {metric}", if d == 1 { "" } else { "s" });
            let most = if gpu { AUTO_KD_TREE_DIM_GPU } else { AUTO_KD_TREE_DIM_CPU };
            let kd_tree = tree_takes && !partitioned && !gpu_forced;
            if kd_tree && d <= most {
                chosen(why)
            } else if let Some(m) =
                intrinsic.filter(|&m| wants_intrinsic_dimension(&asked) && m <= cover_tree_dim(&asked))
            {
                let place =
                    if gpu { "on the CPU's threads, built on the GPU where it fits" } else { "on the CPU's threads" };
                (
                    Algorithm::CoverTree,
                    Some(format!("algorithm: cover tree {place} ({why}, intrinsic dimension about {m:.1})")),
                )
            } else if kd_tree && gpu && d <= AUTO_HYBRID_DIM_GPU && hybrid::handles(metric, d) {
                (
                    Algorithm::Hybrid,
                    Some(format!(
                        "algorithm: hybrid, the GPU grid for dense regions and the kd-tree on the CPU's threads ({why})"
                    )),
                )
            } else {
                (Algorithm::Brute, None)
            }
        }
    }
}

/// How a graph is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// The whole data on one engine, which sweeps it plainly, in symmetric blocks or under
    /// bounds (`plan.rs`).
    Single,
    /// The whole data on one engine that ranks its rows on the device, with the answers
    /// written to a scratch file as query tiles are ranked and handed to the caller in order
    /// at the end: for a graph whose answers the host memory limit cannot hold, at the speed
    /// of [`Strategy::Single`].
    SingleOnDisk,
    /// Blocks of rows, the blocks with I <= J dealt to the first `workers` engines
    /// (`partition/`); the merged lists of at most `lists_in_memory` blocks of rows are held
    /// at once, and those of later blocks spilled to the scratch directory.
    Partitioned { plan: BlockPlan, workers: usize, lists_in_memory: usize },
}

/// Rows a block aims for when the partition is not asked for by size: a block pair of
/// this many rows is a few seconds of a large GPU, short enough for a checkpoint to lose
/// little and for workers to finish close together.
const DEFAULT_BLOCK_ROWS: usize = 1 << 20;

/// Fewest rows a block is cut to in order to fit a memory limit: smaller blocks cost more in
/// per-job overhead than they save.
const MIN_BLOCK_ROWS: usize = 256;

/// Fewest rows for which devices that the caller did not list share a graph: below it one
/// device's symmetric sweep, which computes each key once, is about as fast as blocks over
/// two, which compute the off-diagonal keys twice (notes/partition.md).
const DEFAULT_SHARED_ROWS: usize = 1 << 20;

/// Fewest rows of a block cut to fit the device: below it, per-job costs outweigh ranking
/// on the device, and the whole data streamed through it is the better choice.
const MIN_DEVICE_BLOCK_ROWS: usize = 4096;

/// Fewest rows of a block cut so that the device computes pairs of blocks two-sided (each
/// distance once, for both sides): a smaller block's GPU job is mostly fixed costs
/// (notes/partition.md: at 8192 rows a side a job ran at a small share of the GPU's
/// arithmetic, at 2^19 faster per key than the whole-data sweep).
const MIN_TWO_SIDED_BLOCK_ROWS: usize = 1 << 17;

/// Fewest rows for which one engine whose sweep of the whole graph computes every key twice
/// takes blocks whose pairs compute each key once (the diagonal blocks swept symmetrically)
/// instead: smaller graphs take a few seconds, where each block's fixed costs weigh more
/// (notes/partition.md, "One GPU in blocks at 2^22").
const MIN_KEYS_ONCE_ROWS: usize = 1 << 20;

/// The graph to plan: `n` rows of `d` values, `k` neighbours a row.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Problem {
    pub n: usize,
    pub d: usize,
    pub k: usize,
}

/// What the caller asked for that bears on the choice.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Asked {
    /// `Options::block_rows`.
    pub block_rows: Option<usize>,
    /// A checkpoint directory, which needs blocks to record.
    pub checkpoint: bool,
    /// The devices were listed by the caller rather than found.
    pub devices_listed: bool,
    /// Host memory the run may hold, in bytes (`Options::max_host_memory`, else what the
    /// machine has available); `None` where unknown.
    pub memory: Option<u64>,
    /// The first engine ranks and certifies a whole graph of this problem on its device, so
    /// that rows can leave host memory as they are ranked.
    pub ranks_on_device: bool,
    /// `Options::answers_on_disk` forced on.
    pub answers_on_disk: bool,
    /// Processes sharing the graph (ranks of a cluster), each with its own workers; the
    /// graph is partitioned whenever there are more than one.
    pub ranks: usize,
    /// Most rows of a block that the first engine keeps on its device with what it needs to
    /// rank them there, where that is fewer than the data's; `None` for any number (the
    /// CPU, or a device that holds the whole data).
    pub device_rows: Option<usize>,
    /// Most rows of a block for which the first engine computes a pair of blocks two-sided
    /// on its device; `None` for any number (the CPU) or none.
    pub two_sided_rows: Option<usize>,
    /// The first engine's sweep of the whole graph would compute every key twice, once for
    /// each of its rows (`Engine::graph_sweep_computes_keys_twice`).
    pub whole_sweep_twice: bool,
}

/// Chooses how to compute the graph of `p` on `workers` engines.
pub(crate) fn choose(p: Problem, workers: usize, asked: Asked) -> Strategy {
    let fits_whole = asked.memory.is_none_or(|m| memory::host_memory_estimate(p.n, p.n, p.d, p.k) <= m);
    let share = workers > 1 && (asked.devices_listed || p.n >= DEFAULT_SHARED_ROWS);
    let ranks = asked.ranks.max(1);
    // Data that the device cannot rank whole is cut into blocks that it can.
    let device_rows = asked.device_rows.filter(|&r| r < p.n && r >= MIN_DEVICE_BLOCK_ROWS);
    let two_sided_rows = asked.two_sided_rows.filter(|&r| r >= MIN_TWO_SIDED_BLOCK_ROWS);
    // A whole-data sweep that computes every key twice gives way to blocks whose pairs are
    // computed once, where the device computes pairs of blocks that large two-sided (and so
    // one way too, given their rows' bounds).
    let keys_once_in_blocks = asked.whole_sweep_twice && p.n >= MIN_KEYS_ONCE_ROWS && two_sided_rows.is_some();
    if asked.block_rows.is_none() && !share && !asked.checkpoint && ranks == 1 && !keys_once_in_blocks {
        let on_disk_fits = asked.memory.is_none_or(|m| memory::on_disk_estimate(p) <= m);
        if asked.ranks_on_device && (asked.answers_on_disk || !fits_whole) && on_disk_fits {
            return Strategy::SingleOnDisk;
        }
        if fits_whole && device_rows.is_none() {
            return Strategy::Single;
        }
    }
    let workers = if share { workers } else { 1 };
    let rows = asked.block_rows.unwrap_or_else(|| {
        // Two blocks a worker at least, so that there are more jobs (P (P + 1) / 2) than
        // workers; blocks the device ranks; smaller blocks where the memory limit asks.
        // Large blocks are whole tiles (a two-sided GPU block is split on a tile boundary):
        // under limits of whole tiles too, rounding up keeps them.
        let whole_tiles = |r: usize| if r >= MIN_DEVICE_BLOCK_ROWS { r / ALIGN_ROWS * ALIGN_ROWS } else { r };
        let blocks = (2 * workers * ranks)
            .max(p.n.div_ceil(DEFAULT_BLOCK_ROWS))
            .max(device_rows.map_or(1, |r| p.n.div_ceil(whole_tiles(r))))
            .max(two_sided_rows.map_or(1, |r| p.n.div_ceil(whole_tiles(r))));
        let mut rows = p.n.div_ceil(blocks);
        if rows >= MIN_DEVICE_BLOCK_ROWS {
            rows = rows.next_multiple_of(ALIGN_ROWS);
        }
        while rows > MIN_BLOCK_ROWS
            && asked.memory.is_some_and(|m| memory::partitioned_estimate(p, rows, workers, 2) > m)
        {
            rows = rows.div_ceil(2);
        }
        rows
    });
    let plan = BlockPlan::new(p.n, rows);
    let lists_in_memory = match asked.memory {
        None => plan.count,
        Some(m) => {
            let held = |blocks: usize| memory::partitioned_estimate(p, plan.rows, workers, blocks);
            let per_block = (held(1) - held(0)).max(1);
            (m.saturating_sub(held(0)) / per_block).clamp(1, plan.count as u64) as usize
        }
    };
    Strategy::Partitioned { plan, workers, lists_in_memory }
}

/// Whether a cover tree over `corpus` is built on `gpu` (the GPU engine's own): where its
/// points and the build's arrays fit the device's budget, and its points the bindings the
/// adapter gives the build.
pub(crate) fn cover_tree_on_gpu(gpu: &crate::gpu::GpuEngine, corpus: MatrixRef<'_>) -> bool {
    let (n, d) = (corpus.rows(), corpus.cols());
    crate::gpu::GpuEngine::cover_tree_bytes(n, d) <= gpu.budget().budget && gpu.cover_tree_chunk_rows(n, d).is_some()
}

/// Most CPU threads, and most intrinsic dimension, for which a cover tree's graph queries go
/// to the GPU's cover sets. Against the queries on the CPU's threads (10^6 rows, k = 10, H100
/// beside 2, 4 and 16 threads, `notes/covertree.md`): a flat 2-manifold 0.46x, 0.55x, 0.80x;
/// a folded one 0.61x, 0.73x, 1.51x; a 4-manifold several times slower at any count.
const COVER_SETS_MAX_THREADS: usize = 8;
const COVER_SETS_MAX_DIM: f64 = 2.5;

/// Whether the GPU's cover sets may answer a cover tree's graph faster than the CPU's `threads`
/// threads, for data of intrinsic dimension `intrinsic` (`None`: not known yet, as far as the
/// threads tell).
pub(crate) fn cover_sets_may_pay(threads: usize, intrinsic: Option<f64>) -> bool {
    threads <= COVER_SETS_MAX_THREADS && intrinsic.is_none_or(|m| m <= COVER_SETS_MAX_DIM)
}

/// Whether a cover tree's graph queries fit the GPU of a GPU engine: the tree's vectors in one
/// binding, and beside them batches of groups within the budget.
pub(crate) fn cover_sets_fit(gpu: &crate::gpu::GpuEngine, corpus: MatrixRef<'_>, k: usize) -> bool {
    let budget = gpu.budget();
    let vectors = (corpus.rows() * corpus.cols() * 4) as u64;
    let batch = crate::gpu::COVER_SET_MEMBERS as u64 * crate::gpu::GpuEngine::cover_set_member_bytes(k);
    vectors <= budget.max_binding && vectors + 4 * batch <= budget.budget
}

#[cfg(test)]
mod tests {
    use super::*;

    fn algorithm(algorithm: Algorithm, metric: Metric, d: usize, gpu: bool, partitioned: bool) -> (Algorithm, bool) {
        let asked = AlgorithmAsked {
            algorithm,
            metric,
            d,
            gpu,
            gpu_forced: false,
            partitioned,
            rows: 1000,
            amortized: true,
            intrinsic: None,
        };
        let (chosen, note) = choose_algorithm(asked);
        (chosen, note.is_some())
    }

    #[test]
    fn auto_takes_the_cover_tree_for_data_of_low_intrinsic_dimension_on_the_cpu() {
        use Algorithm::{Auto, Brute, CoverTree};
        let asked = |d, gpu, rows, intrinsic, metric| AlgorithmAsked {
            algorithm: Auto,
            metric,
            d,
            gpu,
            gpu_forced: false,
            partitioned: false,
            rows,
            amortized: true,
            intrinsic,
        };
        let many = AUTO_COVER_TREE_ROWS;
        assert!(wants_intrinsic_dimension(&asked(64, false, many, None, Metric::Euclidean)));
        assert!(wants_intrinsic_dimension(&asked(4, false, many, None, Metric::Cosine)));
        assert!(!wants_intrinsic_dimension(&asked(64, true, many, None, Metric::Euclidean)));
        assert!(!wants_intrinsic_dimension(&asked(64, false, many - 1, None, Metric::Euclidean)));
        assert!(!wants_intrinsic_dimension(&asked(4, false, many, None, Metric::Euclidean)));
        assert!(!wants_intrinsic_dimension(&asked(64, false, many, None, Metric::InnerProduct)));
        let low = Some(AUTO_COVER_TREE_DIM);
        assert_eq!(choose_algorithm(asked(64, false, many, low, Metric::Euclidean)).0, CoverTree);
        assert_eq!(choose_algorithm(asked(300, false, many, low, Metric::Correlation)).0, CoverTree);
        assert_eq!(choose_algorithm(asked(64, false, many, low.map(|m| m + 0.5), Metric::Euclidean)).0, Brute);
        assert_eq!(choose_algorithm(asked(64, false, many, None, Metric::Euclidean)).0, Brute);
        assert_eq!(choose_algorithm(asked(64, true, many, low, Metric::Euclidean)).0, Brute);
    }

    #[test]
    fn auto_takes_the_cover_tree_beside_a_gpu_for_graphs_of_intrinsic_dimension_two() {
        use Algorithm::{Auto, Brute, CoverTree, Hybrid};
        let many = AUTO_COVER_TREE_ROWS_GPU;
        let asked = |d, rows, amortized, gpu_forced, intrinsic| AlgorithmAsked {
            algorithm: Auto,
            metric: Metric::Euclidean,
            d,
            gpu: true,
            gpu_forced,
            partitioned: false,
            rows,
            amortized,
            intrinsic,
        };
        assert!(wants_intrinsic_dimension(&asked(64, many, true, false, None)));
        assert!(!wants_intrinsic_dimension(&asked(64, many - 1, true, false, None)));
        assert!(!wants_intrinsic_dimension(&asked(64, many, false, false, None)), "a search builds its tree");
        assert!(!wants_intrinsic_dimension(&asked(64, many, true, true, None)), "--backend gpu keeps brute force");
        assert!(!wants_intrinsic_dimension(&asked(6, many, true, false, None)), "the hybrid join's case");
        let two = Some(AUTO_COVER_TREE_DIM_GPU);
        let (chosen, note) = choose_algorithm(asked(64, many, true, false, two));
        assert_eq!(chosen, CoverTree);
        assert!(note.unwrap().contains("built on the GPU"));
        assert_eq!(choose_algorithm(asked(64, many, true, false, two.map(|m| m + 0.5))).0, Brute);
        assert_eq!(choose_algorithm(asked(64, many, false, false, two)).0, Brute);
        assert_eq!(choose_algorithm(asked(6, many, true, false, two)).0, Hybrid);
    }

    #[test]
    fn cover_sets_go_to_the_gpu_beside_few_threads_for_intrinsic_dimension_two() {
        assert!(cover_sets_may_pay(4, None));
        assert!(cover_sets_may_pay(2, Some(1.9)));
        assert!(cover_sets_may_pay(COVER_SETS_MAX_THREADS, Some(COVER_SETS_MAX_DIM)));
        assert!(!cover_sets_may_pay(COVER_SETS_MAX_THREADS + 1, Some(1.9)));
        assert!(!cover_sets_may_pay(16, None));
        assert!(!cover_sets_may_pay(4, Some(3.6)));
    }

    #[test]
    fn auto_keeps_a_forced_gpu_backend_on_the_gpu() {
        let asked = |algorithm| AlgorithmAsked {
            algorithm,
            metric: Metric::Euclidean,
            d: 2,
            gpu: true,
            gpu_forced: true,
            partitioned: false,
            rows: 1000,
            amortized: true,
            intrinsic: None,
        };
        assert_eq!(choose_algorithm(asked(Algorithm::Auto)), (Algorithm::Brute, None));
        assert_eq!(choose_algorithm(asked(Algorithm::KdTree)).0, Algorithm::KdTree);
    }

    #[test]
    fn auto_takes_the_kd_tree_or_the_hybrid_for_few_dimensions_and_euclidean_distances() {
        use Algorithm::{Auto, Brute, Hybrid, KdTree};
        for metric in [Metric::Euclidean, Metric::SqEuclidean] {
            assert_eq!(algorithm(Auto, metric, 2, false, false), (KdTree, true));
            assert_eq!(algorithm(Auto, metric, AUTO_KD_TREE_DIM_CPU, false, false), (KdTree, true));
            assert_eq!(algorithm(Auto, metric, AUTO_KD_TREE_DIM_CPU + 1, false, false), (Brute, false));
            assert_eq!(algorithm(Auto, metric, AUTO_KD_TREE_DIM_GPU, true, false), (KdTree, true));
            assert_eq!(algorithm(Auto, metric, AUTO_KD_TREE_DIM_GPU + 1, true, false), (Hybrid, true));
            assert_eq!(algorithm(Auto, metric, AUTO_HYBRID_DIM_GPU, true, false), (Hybrid, true));
            assert_eq!(algorithm(Auto, metric, AUTO_HYBRID_DIM_GPU + 1, true, false), (Brute, false));
            assert_eq!(algorithm(Auto, metric, 2, false, true), (Brute, false));
        }
        for metric in [Metric::Cosine, Metric::Correlation, Metric::InnerProduct] {
            assert_eq!(algorithm(Auto, metric, 2, false, false), (Brute, false));
        }
        assert_eq!(algorithm(Auto, Metric::Euclidean, 128, true, false), (Brute, false));
    }

    #[test]
    fn the_hybrid_asked_for_runs_beside_a_gpu_and_says_what_runs_elsewhere() {
        use Algorithm::{Brute, Hybrid, KdTree};
        let most = crate::gpu::GRID_MAX_DIMS;
        assert_eq!(algorithm(Hybrid, Metric::SqEuclidean, most, true, false), (Hybrid, true));
        assert_eq!(algorithm(Hybrid, Metric::Euclidean, 2, false, false), (KdTree, true));
        assert_eq!(algorithm(Hybrid, Metric::Euclidean, most + 1, true, false), (Brute, true));
        assert_eq!(algorithm(Hybrid, Metric::Cosine, 2, true, false), (Brute, true));
        assert_eq!(algorithm(Hybrid, Metric::Euclidean, 2, true, true), (Brute, true));
    }

    #[test]
    fn a_kd_tree_asked_for_runs_where_it_can_and_says_why_where_it_cannot() {
        use Algorithm::{Brute, KdTree};
        assert_eq!(algorithm(KdTree, Metric::Euclidean, kdtree::MAX_DIM, true, false), (KdTree, true));
        assert_eq!(algorithm(KdTree, Metric::Euclidean, kdtree::MAX_DIM + 1, false, false), (Brute, true));
        assert_eq!(algorithm(KdTree, Metric::Cosine, 2, false, false), (Brute, true));
        assert_eq!(algorithm(KdTree, Metric::Euclidean, 2, false, true), (Brute, true));
        assert_eq!(algorithm(Brute, Metric::Euclidean, 2, false, false), (Brute, false));
    }

    const LISTED: Asked = Asked {
        block_rows: None,
        checkpoint: false,
        devices_listed: true,
        memory: None,
        ranks_on_device: false,
        answers_on_disk: false,
        ranks: 1,
        device_rows: None,
        two_sided_rows: None,
        whole_sweep_twice: false,
    };

    fn problem(n: usize) -> Problem {
        Problem { n, d: 128, k: 16 }
    }

    fn partitioned(strategy: Strategy) -> (BlockPlan, usize, usize) {
        match strategy {
            Strategy::Partitioned { plan, workers, lists_in_memory } => (plan, workers, lists_in_memory),
            other => panic!("not partitioned: {other:?}"),
        }
    }

    #[test]
    fn one_engine_without_a_checkpoint_takes_the_whole_data() {
        assert_eq!(choose(problem(1 << 24), 1, Asked::default()), Strategy::Single);
    }

    #[test]
    fn ranks_of_a_cluster_always_take_blocks_two_a_worker() {
        let asked = Asked { ranks: 3, ..Asked::default() };
        let (plan, workers, _) = partitioned(choose(problem(1000), 1, asked));
        assert_eq!((plan.count, workers), (6, 1));
        // Each rank's own devices are its workers.
        let (plan, workers, _) = partitioned(choose(problem(1 << 20), 2, Asked { devices_listed: true, ..asked }));
        assert_eq!((plan.count, workers), (12, 2));
    }

    #[test]
    fn several_workers_or_a_checkpoint_take_blocks() {
        let (plan, workers, lists) = partitioned(choose(problem(1000), 2, LISTED));
        assert_eq!((plan.count, plan.rows, workers, lists), (4, 250, 2, 4));
        let asked = Asked { checkpoint: true, ..Asked::default() };
        let (plan, workers, _) = partitioned(choose(problem(3 << 20), 1, asked));
        assert_eq!((plan.count, workers), (3, 1));
        let asked = Asked { block_rows: Some(30), ..Asked::default() };
        let (plan, workers, _) = partitioned(choose(problem(100), 1, asked));
        assert_eq!((plan.count, plan.rows, workers), (4, 30, 1));
    }

    #[test]
    fn devices_found_rather_than_listed_share_only_large_graphs() {
        assert_eq!(choose(problem(100_000), 4, Asked::default()), Strategy::Single);
        let (plan, workers, _) = partitioned(choose(problem(1 << 21), 4, Asked::default()));
        assert_eq!((plan.count, workers), (8, 4));
        // A small graph with a checkpoint is cut for the checkpoint alone.
        let asked = Asked { checkpoint: true, ..Asked::default() };
        let (plan, workers, _) = partitioned(choose(problem(100_000), 4, asked));
        assert_eq!((plan.count, workers), (2, 1));
    }

    #[test]
    fn data_the_device_cannot_rank_whole_takes_blocks_it_can() {
        let p = Problem { n: 1 << 18, d: 4096, k: 512 };
        let asked = Asked { device_rows: Some(100_000), ..Asked::default() };
        let (plan, workers, _) = partitioned(choose(p, 1, asked));
        assert_eq!((plan.count, workers), (3, 1));
        assert!(plan.rows <= 100_000, "{plan:?}");
        // Blocks the device holds whole are no reason to cut, nor are very small ones.
        let whole = Asked { device_rows: Some(1 << 18), ..Asked::default() };
        assert_eq!(choose(p, 1, whole), Strategy::Single);
        let tiny = Asked { device_rows: Some(MIN_DEVICE_BLOCK_ROWS - 1), ..Asked::default() };
        assert_eq!(choose(p, 1, tiny), Strategy::Single);
        // Several devices take blocks of at most that size too.
        let (plan, workers, _) = partitioned(choose(p, 4, Asked { devices_listed: true, ..asked }));
        assert_eq!(workers, 4);
        assert!(plan.rows <= 100_000 && plan.count >= 8, "{plan:?}");
    }

    #[test]
    fn devices_take_blocks_they_compute_two_sided_unless_those_are_small() {
        let p = problem((1 << 23) + 1000);
        let asked = Asked { two_sided_rows: Some(600_000), ..LISTED };
        let (plan, workers, _) = partitioned(choose(p, 4, asked));
        assert_eq!(workers, 4);
        assert!(plan.rows <= 600_000 && plan.rows.is_multiple_of(ALIGN_ROWS), "{plan:?}");
        let small = Asked { two_sided_rows: Some(MIN_TWO_SIDED_BLOCK_ROWS - 1), ..LISTED };
        let (plan, _, _) = partitioned(choose(p, 4, small));
        assert!(plan.rows > 1 << 19 && plan.rows <= DEFAULT_BLOCK_ROWS, "{plan:?}");
        // One device that holds the whole data takes it whole.
        assert_eq!(choose(p, 1, Asked { two_sided_rows: Some(600_000), ..Asked::default() }), Strategy::Single);
    }

    #[test]
    fn one_device_whose_whole_sweep_computes_keys_twice_takes_blocks_it_computes_once() {
        let asked = Asked { whole_sweep_twice: true, two_sided_rows: Some(1 << 21), ..Asked::default() };
        let (plan, workers, _) = partitioned(choose(problem(1 << 22), 1, asked));
        assert_eq!((plan.count, plan.rows, workers), (4, 1 << 20, 1));
        // Blocks no larger than the device computes two-sided.
        let narrow = Asked { two_sided_rows: Some(600_000), ..asked };
        let (plan, _, _) = partitioned(choose(problem(1 << 22), 1, narrow));
        assert!(plan.rows <= 600_000 && plan.count == 7, "{plan:?}");
        // Two blocks at least, where the graph has fewer rows than a default block.
        let (plan, _, _) = partitioned(choose(problem(1 << 20), 1, asked));
        assert_eq!(plan.count, 2);
        // Small graphs, pairs the device computes only as two searches, and sweeps that
        // compute each key once keep the whole data.
        assert_eq!(choose(problem((1 << 20) - 1), 1, asked), Strategy::Single);
        assert_eq!(choose(problem(1 << 22), 1, Asked { two_sided_rows: None, ..asked }), Strategy::Single);
        let small = Asked { two_sided_rows: Some(MIN_TWO_SIDED_BLOCK_ROWS - 1), ..asked };
        assert_eq!(choose(problem(1 << 22), 1, small), Strategy::Single);
        let once = Asked { whole_sweep_twice: false, ..asked };
        assert_eq!(choose(problem(1 << 22), 1, once), Strategy::Single);
    }

    #[test]
    fn a_graph_larger_than_the_memory_limit_takes_blocks_that_fit_it() {
        let p = problem(1 << 22);
        let limit = 256 << 20;
        assert!(memory::host_memory_estimate(p.n, p.n, p.d, p.k) > limit);
        let (plan, workers, lists) = partitioned(choose(p, 1, Asked { memory: Some(limit), ..Asked::default() }));
        assert_eq!(workers, 1);
        assert!(plan.rows < 1 << 20 && plan.rows >= MIN_BLOCK_ROWS, "{plan:?}");
        assert!(lists >= 2 && lists < plan.count, "{lists} of {} blocks", plan.count);
        assert!(memory::partitioned_estimate(p, plan.rows, 1, lists) <= limit);
        // An engine that ranks on its device keeps only the rows' statistics.
        let ranks = Asked { memory: Some(limit), ranks_on_device: true, ..Asked::default() };
        assert_eq!(choose(p, 1, ranks), Strategy::SingleOnDisk);
        let too_tight = Asked { memory: Some(memory::on_disk_estimate(p) - 1), ..ranks };
        assert!(matches!(choose(p, 1, too_tight), Strategy::Partitioned { .. }));
        // With room for everything, every block's lists stay in memory.
        let asked = Asked { memory: Some(1 << 40), checkpoint: true, ..Asked::default() };
        let (plan, _, lists) = partitioned(choose(p, 1, asked));
        assert_eq!(lists, plan.count);
    }
}
