//! `knng`: exact k-nearest neighbours and kNN graphs from the command line.
//!
//! Every failure ends as one `error: ...` line on stderr and exit status 1 (2 for usage
//! errors, as clap reports them); outputs are checked before any work and written whole or
//! not at all.

mod commands;
mod demo;
mod progress;
mod ranks;
mod synth;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use knng::{Backend, Metric};

#[derive(Parser)]
#[command(
    name = "knng",
    version,
    about = "Exact k-nearest neighbours and kNN graphs on any GPU (wgpu), with an exact CPU backend",
    after_help = "Inputs: .npy, .fvecs/.bvecs/.ivecs, .fbin/.u8bin/.i8bin/.ibin, .csv/.tsv, .hdf5/.h5 \
                  (FILE.hdf5:DATASET; default dataset train).\n\
                  Outputs: .npz (indices int64, distances float32), .ivecs (+ .fvecs of distances), \
                  .csv edge list, .mtx Matrix Market."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The kNN graph of a file: for every row, its k nearest other rows.
    Graph(GraphArgs),
    /// For every row of QUERIES, its k nearest rows of CORPUS (a vector file, or an index
    /// that `knng index build` saved).
    Search(SearchArgs),
    /// Builds an index of a file and saves it, to be searched again and again; or says what
    /// an index holds.
    #[command(subcommand)]
    Index(IndexCommand),
    /// Lists the GPU adapters wgpu sees and the one `--backend auto` would use.
    Info,
    /// Builds the kNN graph of seeded synthetic data, checks it against a float64 brute
    /// force and reports the speed.
    Demo(DemoArgs),
    /// Times a graph or search on seeded synthetic data.
    Bench(BenchArgs),
}

/// How and where the work runs.
#[derive(Args, Clone)]
struct EngineArgs {
    /// auto (a hardware GPU if there is one, else the CPU), gpu, or cpu.
    #[arg(long, default_value = "auto", value_name = "auto|gpu|cpu")]
    backend: Backend,
    /// GPU adapter to use: its index in `knng info` or part of its name.
    #[arg(long, value_name = "NAME-OR-INDEX")]
    adapter: Option<String>,
    /// GPU devices that share a graph, as indices or names from `knng info`, comma-separated;
    /// repeats open an adapter more than once (`0,0`). The graph is cut into blocks of rows
    /// that go to whichever device is free. Default: every GPU identical to the one `auto`
    /// chooses (one GPU with --adapter).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    devices: Vec<String>,
    /// Rows per block of a partitioned graph (default: about a million, at least two blocks
    /// a device). Setting it partitions the graph even on one device.
    #[arg(long, value_name = "ROWS", value_parser = at_least(1))]
    block_rows: Option<u64>,
    /// How the neighbours are found: brute (every distance computed, on the GPU or the CPU),
    /// kdtree (a kd-tree on the CPU's threads: euclidean and sqeuclidean, 1 to 8 dimensions),
    /// hybrid (a GPU grid for dense regions beside the kd-tree: 1 to 6 dimensions), covertree
    /// (a cover tree, built on the GPU where there is one and queried on the CPU's threads or,
    /// for graphs on hosts of few threads, the GPU: any dimension, for data of low intrinsic dimension; not inner products), or auto (the kd-tree for few dimensions, brute force
    /// otherwise). The answer is the same.
    #[arg(long, default_value = "auto", value_name = "auto|brute|covertree|hybrid|kdtree")]
    algorithm: knng::Algorithm,
    /// Use the select without subgroup operations (its merge has no ballots) even where the
    /// adapter has them.
    #[arg(long)]
    no_subgroups: bool,
    /// How each row's candidates are picked from a tile of distances: quick (quick
    /// multi-select), sort (batch index sort: the tile's keys sorted, then by row), or auto
    /// (the planner's choice; today quick). The answer is the same.
    #[arg(long, default_value = "auto", value_name = "auto|quick|sort")]
    select: knng::Select,
    /// Depth of the distance kernel's workgroup tiles (4, 8, 16 or 32), for tuning.
    #[arg(long, value_name = "DEPTH", hide = true)]
    tile_depth: Option<u32>,
    /// Graphs in symmetric blocks: on, off, or chosen by the planner (default), for tuning.
    #[arg(long, value_name = "ON|OFF", hide = true, value_parser = on_off)]
    symmetric: Option<bool>,
    /// Graphs with long lists swept under sampled bounds: on, off, or chosen by the planner
    /// (default), for tuning.
    #[arg(long, value_name = "ON|OFF", hide = true, value_parser = on_off)]
    bounded_sweep: Option<bool>,
    /// Largest query tile in rows (a symmetric sweep's tile count follows), for tuning.
    #[arg(long, value_name = "ROWS", hide = true, value_parser = at_least(1))]
    query_tile: Option<u64>,
    /// GPU memory knng may allocate: a size such as 16GiB or 512MiB, or a number of MiB
    /// (default: 7/8 of the memory budget a discrete GPU's Vulkan driver reports, else 4GiB on
    /// discrete GPUs and 1GiB on others; `knng info` shows it). Larger values mean fewer, larger
    /// tiles; an out-of-memory error halves it and retries.
    #[arg(long, value_name = "SIZE", value_parser = memory_size)]
    gpu_memory: Option<u64>,
    /// Host memory the run may use: a size such as 2GiB, or a number of MiB (default: what
    /// the machine has available). A run estimated to need more is refused before it reads
    /// its inputs.
    #[arg(long, value_name = "SIZE", value_parser = memory_size)]
    max_memory: Option<u64>,
    /// CPU threads (default: one per logical CPU; at most four per logical CPU).
    #[arg(long, value_name = "N", value_parser = at_least(1))]
    threads: Option<u64>,
    /// No progress bar and no status lines.
    #[arg(long, short)]
    quiet: bool,
    /// The ranks of the MPI job sharing a graph, where there are several.
    #[arg(skip)]
    cluster: Option<std::sync::Arc<dyn knng::Cluster>>,
}

/// What to compute.
#[derive(Args, Clone)]
struct Problem {
    /// Neighbours per row.
    #[arg(short = 'k', value_name = "K", value_parser = at_least(1))]
    k: u64,
    /// euclidean (l2), sqeuclidean, cosine, correlation (pearson), or inner_product (ip).
    /// Default: euclidean, or the metric an index was built for.
    #[arg(long, short = 'm', value_name = "METRIC")]
    metric: Option<Metric>,
    /// Output file: .npz, .ivecs (distances go to a .fvecs beside it), .csv or .mtx.
    #[arg(long, short = 'o', value_name = "OUT")]
    output: PathBuf,
}

#[derive(Args)]
struct GraphArgs {
    /// Input vectors (a path, or FILE.hdf5:DATASET).
    #[arg(value_name = "INPUT")]
    input: String,
    #[command(flatten)]
    problem: Problem,
    /// Count each point as its own nearest neighbour (k may then be n).
    #[arg(long)]
    include_self: bool,
    /// Record every finished block in DIR, so that the same command run again after a kill
    /// resumes where it stopped. DIR is removed once the output is written.
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// Where candidate lists that do not fit --max-memory are spilled while the graph is
    /// built (default: the output's directory). The files are removed as they are used.
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Args)]
struct SearchArgs {
    /// Vectors to search (a path, or FILE.hdf5:DATASET).
    #[arg(value_name = "CORPUS")]
    corpus: String,
    /// Vectors whose neighbours are wanted (a path, or FILE.hdf5:DATASET).
    #[arg(long, value_name = "QUERIES")]
    queries: String,
    #[command(flatten)]
    problem: Problem,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Subcommand)]
enum IndexCommand {
    /// Builds an index of INPUT and saves it to a .knng file: with --algorithm covertree a
    /// cover tree over the rows, with brute the rows alone, with auto (the default) a cover
    /// tree where the data's estimated intrinsic dimension is low. `knng search FILE.knng
    /// --queries Q` searches it.
    Build(IndexBuildArgs),
    /// Says what an index file holds, after checking it.
    Info {
        /// The index file.
        #[arg(value_name = "INDEX")]
        index: PathBuf,
    },
}

#[derive(Args)]
struct IndexBuildArgs {
    /// Input vectors (a path, or FILE.hdf5:DATASET).
    #[arg(value_name = "INPUT")]
    input: String,
    /// The metric its searches use (see `knng graph --help`).
    #[arg(long, short = 'm', default_value = "euclidean", value_name = "METRIC")]
    metric: Metric,
    /// The index file to write (*.knng).
    #[arg(long, short = 'o', value_name = "OUT")]
    output: PathBuf,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Args)]
struct DemoArgs {
    /// Points (default: 20000 on the CPU, 100000 on a GPU).
    #[arg(long, value_parser = at_least(2))]
    n: Option<u64>,
    /// Dimension.
    #[arg(long, default_value_t = 256, value_parser = at_least(1))]
    d: u64,
    /// Neighbours per point.
    #[arg(short = 'k', default_value_t = 15, value_parser = at_least(1))]
    k: u64,
    /// Distance (see `knng graph --help`).
    #[arg(long, short = 'm', default_value = "euclidean", value_name = "METRIC")]
    metric: Metric,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Rows checked against the float64 brute force.
    #[arg(long, default_value_t = 64)]
    check: usize,
    /// Also write the graph here (.npz, .ivecs, .csv or .mtx).
    #[arg(long, short = 'o', value_name = "OUT")]
    output: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum What {
    Graph,
    Search,
    /// The GPU selection kernel alone, on --rows x --cols uniform random keys.
    Select,
    /// The GPU distance kernel alone: --rows query rows against --cols corpus rows of
    /// dimension --d.
    Distance,
    /// The GPU radix sort alone: --n pairs of random f32 keys and u32 values.
    Sort,
}

#[derive(Args)]
struct BenchArgs {
    /// Corpus rows.
    #[arg(long, default_value_t = 20000, value_parser = at_least(2))]
    n: u64,
    /// Dimension.
    #[arg(long, default_value_t = 128, value_parser = at_least(1))]
    d: u64,
    /// Neighbours per row.
    #[arg(short = 'k', default_value_t = 10, value_parser = at_least(1))]
    k: u64,
    /// Distance (see `knng graph --help`).
    #[arg(long, short = 'm', default_value = "euclidean", value_name = "METRIC")]
    metric: Metric,
    /// graph (self-join of the n rows), search (--queries rows against the n rows), select
    /// (the GPU selection kernel alone: the k smallest of --rows rows of --cols random keys), or
    /// distance (the GPU distance kernel alone: --rows x --cols keys of dimension --d), or sort
    /// (the GPU radix sort alone: --n pairs of random f32 keys and u32 values).
    #[arg(long, value_enum, default_value_t = What::Graph)]
    what: What,
    /// Rows of keys for `--what select` and `--what distance`.
    #[arg(long, default_value_t = 8192, value_parser = at_least(1))]
    rows: u64,
    /// Keys per row for `--what select` and `--what distance`.
    #[arg(long, default_value_t = 65536, value_parser = at_least(1))]
    cols: u64,
    /// Query rows for `--what search`.
    #[arg(long, default_value_t = 1000, value_parser = at_least(1))]
    queries: u64,
    /// Timed runs (the report gives the fastest, and the first). A graph or search writes
    /// into the answer arrays of the run before it, as `Knn::graph_into` does.
    #[arg(long, default_value_t = 1, value_parser = at_least(1))]
    repeat: u64,
    /// Every graph or search writes its answer into memory fresh from the system, as
    /// `Knn::graph` does, not into the arrays of the run before.
    #[arg(long)]
    fresh_answers: bool,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Time every GPU kernel with timestamp queries (adds a synchronisation per submission).
    #[arg(long)]
    profile: bool,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

/// The largest memory size flags take, in MiB (16 TiB): larger values would overflow bytes.
const MAX_MIB: u64 = 1 << 24;

/// A memory size in bytes: a number with a unit (`B`; `K`, `M`, `G`, `T` and `KiB` ... `TiB`
/// in powers of 1024; `KB` ... `TB` in powers of 1000), or a bare number of MiB. From 1 MiB
/// to 16 TiB.
fn memory_size(s: &str) -> Result<u64, String> {
    let text = s.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "m" | "mib" => (1u64 << 20) as f64,
        "b" => 1.0,
        "k" | "kib" => 1024.0,
        "g" | "gib" => (1u64 << 30) as f64,
        "t" | "tib" => (1u64 << 40) as f64,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use e.g. 512MiB, 16GiB, 2GB, or a number of MiB)")),
    };
    let value: f64 =
        number.parse().map_err(|_| format!("{s:?} is not a size (e.g. 512MiB, 16GiB, or a number of MiB)"))?;
    let bytes = value * scale;
    if bytes < (1u64 << 20) as f64 {
        return Err(format!("{s} is too small: at least 1MiB"));
    }
    if bytes > (MAX_MIB << 20) as f64 {
        return Err(format!("{s} is too large: at most 16TiB"));
    }
    Ok(bytes as u64)
}

/// A whole-number argument of at least `min`, with a message that says so.
fn at_least(min: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().parse::<u64>() {
        Ok(v) if v >= min => Ok(v),
        Ok(v) => Err(format!("{v} is too small: must be at least {min}")),
        Err(_) => Err(format!("{s:?} is not a whole number (at least {min})")),
    }
}

/// A failure to report: one line, no backtrace.
#[derive(Debug)]
pub struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

pub type Outcome<T = ()> = Result<T, Failure>;

/// Prints a line on stdout; a closed pipe (`knng info | head`) is not an error.
pub fn say(line: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Prints a line on stderr in one write, so that the lines of the ranks of an MPI job,
/// which share one terminal, are not cut into each other.
pub fn tell(line: impl std::fmt::Display) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

fn main() -> ExitCode {
    quiet_headless_probes();
    // Ctrl-C, SIGTERM and SIGHUP: remove partial outputs, then end as an interrupted
    // process would. A handler that cannot be installed leaves the default behaviour.
    let _ = ctrlc::set_handler(|| {
        knng::io::remove_partial_outputs();
        tell(format_args!("error: interrupted; no output was written"));
        std::process::exit(130);
    });
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        tell(format_args!("error: internal error: {what}{place} (this is a bug in knng; please report it)"));
    }));
    let cli = Cli::parse();
    // After the panic hook: MPI's own hook, which ends every rank, follows it.
    let ranks = match ranks::Ranks::start() {
        Ok(ranks) => ranks,
        Err(Failure(message)) => {
            tell(format_args!("error: {message}"));
            return ExitCode::from(1);
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ranks = &ranks;
        let engine = match &cli.command {
            Command::Graph(a) => Some(&a.engine),
            Command::Search(a) => Some(&a.engine),
            Command::Demo(a) => Some(&a.engine),
            Command::Bench(a) => Some(&a.engine),
            Command::Index(IndexCommand::Build(a)) => Some(&a.engine),
            Command::Info | Command::Index(IndexCommand::Info { .. }) => None,
        };
        if let Some(engine) = engine {
            engine.size_thread_pool()?;
        }
        match cli.command {
            Command::Graph(a) => commands::graph(a, ranks),
            Command::Search(a) => commands::search(a, ranks),
            Command::Info => commands::info(ranks),
            // An index is built and described by rank 0 of a job alone.
            Command::Index(_) if !ranks.leads() => Ok(()),
            Command::Index(IndexCommand::Build(a)) => commands::index_build(a),
            Command::Index(IndexCommand::Info { index }) => commands::index_info(&index),
            // Demos and benchmarks run on rank 0 of a job alone.
            _ if !ranks.leads() => Ok(()),
            Command::Demo(a) => demo::demo(a),
            Command::Bench(a) => demo::bench(a),
        }
    }));
    // `ranks` is dropped (MPI finalised) as `main` returns.
    match outcome {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(Failure(message))) => {
            // One line, whatever a library's message looks like.
            let line: Vec<&str> = message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            ranks.fail(&line.join(" "))
        }
        // The hook has already said what happened.
        Err(_) => ExitCode::from(1),
    }
}

/// Gives Mesa's EGL and Wayland probes the runtime directory they expect: without one, every
/// command that looks for GPUs on a headless machine prints "XDG_RUNTIME_DIR is invalid or
/// not set" to stderr, which reads as a failure. Runs before any thread starts.
fn quiet_headless_probes() {
    let valid = std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir());
    if valid {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("knng-runtime-{uid}"));
        if std::fs::create_dir_all(&dir).is_ok() {
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
            // No other thread exists yet: changing the environment races with nothing.
            std::env::set_var("XDG_RUNTIME_DIR", &dir);
        }
    }
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap checks its definitions (unique short flags among them) only in debug builds, and
    /// only for the subcommand a run parses: every subcommand's short flags, in every build.
    #[test]
    fn short_flags_are_unique_in_every_subcommand() {
        use clap::CommandFactory;
        let cli = Cli::command();
        for command in std::iter::once(&cli).chain(cli.get_subcommands()) {
            let mut shorts: Vec<char> = command.get_arguments().filter_map(|a| a.get_short()).collect();
            shorts.sort_unstable();
            let repeated: Vec<char> = shorts.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
            assert!(repeated.is_empty(), "`knng {}` repeats short flags {repeated:?}", command.get_name());
        }
        cli.debug_assert();
    }

    #[test]
    fn memory_sizes_take_units_or_mib() {
        assert_eq!(memory_size("512"), Ok(512 << 20));
        assert_eq!(memory_size("128MiB"), Ok(128 << 20));
        assert_eq!(memory_size("2GiB"), Ok(2 << 30));
        assert_eq!(memory_size("2g"), Ok(2 << 30));
        assert_eq!(memory_size("1.5G"), Ok(3 << 29));
        assert_eq!(memory_size("2GB"), Ok(2_000_000_000));
        assert_eq!(memory_size("1048576B"), Ok(1 << 20));
        for (bad, needle) in
            [("2XB", "unknown unit"), ("G", "not a size"), ("1KiB", "too small"), ("17TiB", "too large")]
        {
            let message = memory_size(bad).unwrap_err();
            assert!(message.contains(needle), "{bad}: {message}");
        }
    }
}
