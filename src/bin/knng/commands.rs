//! `graph`, `search`, `index` and `info`.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use knng::io::{self, MatrixFile};
use knng::{Error, Index, Knn, Matrix, MatrixRef, Metric, Options};

use crate::progress::Bar;
use crate::ranks::Ranks;
use crate::{say, EngineArgs, Failure, GraphArgs, IndexBuildArgs, Outcome, SearchArgs};

impl EngineArgs {
    /// Opens the backend, reporting progress through `bar`.
    pub fn open(&self, include_self: bool, bar: &Bar) -> Outcome<Knn> {
        self.open_with(include_self, false, Places::default(), bar)
    }

    /// Sizes rayon's global pool: before anything of the command runs, since the first
    /// parallel loop (reading a file, generating data) starts the pool at its default size.
    pub fn size_thread_pool(&self) -> Outcome {
        if let Some(threads) = self.threads {
            // More threads than cores only contend (5000 threads turned a 10 ms run into
            // minutes); a few per core still lets a user oversubscribe on purpose.
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
            if threads > 4 * cpus {
                return Err(Failure(format!(
                    "--threads {threads} is too many: this machine has {cpus} logical CPU{}, so at most {} \
                     (omit --threads for one per CPU)",
                    plural(cpus as usize),
                    4 * cpus
                )));
            }
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads as usize)
                .build_global()
                .map_err(|e| Failure(format!("--threads {threads}: {e}")))?;
        }
        Ok(())
    }

    /// [`EngineArgs::open`], optionally timing every GPU kernel, and with the directories of
    /// a partitioned graph.
    pub fn open_with(&self, include_self: bool, profile: bool, places: Places<'_>, bar: &Bar) -> Outcome<Knn> {
        let quiet = self.quiet;
        let notice: knng::Notice = Arc::new(move |message: &str| {
            if !quiet {
                crate::tell(message);
            }
        });
        let options = Options {
            backend: self.backend,
            algorithm: self.algorithm,
            adapter: self.adapter.clone(),
            no_subgroups: self.no_subgroups,
            select: self.select,
            memory_budget: self.gpu_memory,
            max_host_memory: self.max_memory,
            include_self,
            progress: bar.callback(),
            profile,
            distance_tile_depth: self.tile_depth,
            symmetric_graphs: self.symmetric,
            bounded_sweeps: self.bounded_sweep,
            max_query_tile: self.query_tile.map(|rows| rows as usize),
            devices: self.devices.clone(),
            block_rows: self.block_rows.map(|rows| rows as usize),
            checkpoint: places.checkpoint.map(Path::to_path_buf),
            scratch: places.scratch.map(Path::to_path_buf),
            notice: Some(notice),
            cluster: self.cluster.clone(),
            ..Options::default()
        };
        Ok(Knn::new(options)?)
    }

    pub fn status(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            crate::tell(line);
        }
    }

    /// These arguments for this rank of an MPI job: the job's ranks share the work, the
    /// rank's default devices are its share of the host's GPUs, and ranks other than 0 report
    /// nothing (rank 0 receives every row and writes the output).
    fn for_rank(&self, ranks: &Ranks) -> EngineArgs {
        let mut engine = self.clone();
        engine.quiet |= !ranks.leads();
        engine.cluster = ranks.cluster();
        if engine.devices.is_empty() && engine.backend != knng::Backend::Cpu {
            engine.devices = ranks.default_devices(engine.adapter.as_deref());
        }
        engine
    }

    /// Says why `--backend auto` runs on the CPU of a machine that shows a GPU.
    pub fn explain_backend(&self, knn: &Knn) {
        if self.backend == knng::Backend::Auto && !knn.is_gpu() {
            if let Some(hint) = knng::missing_gpu_hint(&knng::adapters()) {
                crate::tell(format_args!("warning: {hint}; running on the CPU"));
            }
        }
    }

    /// Refuses, before it is read, an input that the machine's memory cannot hold, and leaves
    /// the rest of the limit to the run.
    fn check_input_memory(&mut self, what: &str, inputs: u64) -> Outcome {
        let (limit, source) = match self.max_memory {
            Some(limit) => (limit, "--max-memory"),
            None => match knng::available_host_memory() {
                Some(available) => (available, "the memory available"),
                None => return Ok(()),
            },
        };
        if inputs > limit {
            return Err(Failure(format!(
                "{what} takes {} as 32-bit floats, more than {source} ({}); store it as .npy, .fbin or .fvecs \
                 of float32, which are read in place",
                in_mib(inputs),
                in_mib(limit)
            )));
        }
        self.max_memory = self.max_memory.map(|limit| limit - inputs);
        Ok(())
    }

    /// Refuses, before any input is read, a run that the machine's memory cannot hold.
    fn check_memory(&self, corpus_rows: usize, query_rows: usize, dim: usize, k: usize, inputs: u64) -> Outcome {
        let limit = self.max_memory;
        Ok(knng::check_host_memory(corpus_rows, query_rows, dim, k, inputs, limit)?)
    }
}

/// `bytes` in MiB, as `--max-memory` takes them.
fn in_mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Where a partitioned graph keeps its files.
#[derive(Clone, Copy, Default)]
pub struct Places<'a> {
    /// `--checkpoint DIR`.
    pub checkpoint: Option<&'a Path>,
    /// Where lists that do not fit the memory limit are spilled.
    pub scratch: Option<&'a Path>,
}

/// "s" after a count other than one.
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Refuses inputs with more rows than knng's 32-bit ids can number, before they are read.
fn check_rows(spec: &str, rows: usize) -> Outcome {
    if rows > knng::MAX_ROWS {
        return Err(Failure(format!(
            "{spec}: {rows} rows are more than knng supports (at most {}: ids are 32-bit)",
            knng::MAX_ROWS
        )));
    }
    Ok(())
}

pub fn seconds(t: f64) -> String {
    if t < 0.01 {
        // Single kernels and small runs take a few milliseconds: whole ones would hide changes.
        format!("{:.2} ms", t * 1e3)
    } else if t < 1.0 {
        format!("{:.0} ms", t * 1e3)
    } else {
        format!("{t:.2} s")
    }
}

/// Names the input file in errors about values, which the library can only place by row.
fn in_file(e: Error, files: &[(&str, &str)]) -> Failure {
    let what = match &e {
        Error::NonFinite { what, .. } | Error::TooLarge { what, .. } | Error::DegenerateRow { what, .. } => Some(*what),
        Error::Empty { what, .. } => Some(*what),
        _ => None,
    };
    match what.and_then(|w| files.iter().find(|(name, _)| *name == w)) {
        Some((_, file)) => Failure(format!("{file}: {e}")),
        None => Failure(e.to_string()),
    }
}

/// Opens an input, saying on stderr which first line of a text file was skipped as a header
/// (the rows are numbered from the line after it).
fn open(spec: &str) -> Outcome<MatrixFile> {
    let file = MatrixFile::open(spec)?;
    if let Some(header) = file.skipped_header() {
        crate::tell(format_args!("note: {spec}: skipped the first line as a header: {header:?}"));
    }
    check_rows(spec, file.rows())?;
    Ok(file)
}

/// Bytes of f32 rows an input takes once read.
/// Host memory an input takes once read: none where its rows are used in place.
fn input_bytes(file: &MatrixFile) -> u64 {
    if file.f32_rows().is_some() {
        return 0;
    }
    (file.rows() as u64).saturating_mul(file.cols() as u64).saturating_mul(4)
}

/// An input's rows: in place where the file stores them as f32, else read and converted.
enum Input<'f> {
    Mapped(MatrixRef<'f>),
    Read(Matrix),
}

impl Input<'_> {
    fn view(&self) -> MatrixRef<'_> {
        match self {
            Input::Mapped(m) => *m,
            Input::Read(m) => m.view(),
        }
    }
}

fn read<'f>(file: &'f MatrixFile, spec: &str, engine: &EngineArgs) -> Outcome<Input<'f>> {
    let shape =
        |m: MatrixRef<'_>| format!("{} row{} x {} column{}", m.rows(), plural(m.rows()), m.cols(), plural(m.cols()));
    if let Some(rows) = file.f32_rows() {
        engine.status(format!("mapped {spec}: {} of f32, used in place", shape(rows)));
        return Ok(Input::Mapped(rows));
    }
    let start = Instant::now();
    let m = file.read_rows(0..file.rows())?;
    engine.status(format!("read {spec}: {} in {}", shape(m.view()), seconds(start.elapsed().as_secs_f64())));
    Ok(Input::Read(m))
}

/// A partitioned graph's blocks, e.g. `136 blocks (120 pairs computed two-sided, 0 one way)`.
pub fn blocks_summary(stats: &knng::RunStats) -> String {
    let resumed = if stats.blocks_resumed > 0 { format!(", {} resumed", stats.blocks_resumed) } else { String::new() };
    format!(
        "{} blocks ({} pairs computed two-sided, {} one way{resumed})",
        stats.blocks, stats.pair_blocks_once, stats.pair_blocks_one_way
    )
}

fn finish(engine: &EngineArgs, knn: &Knn, summary: String, rows: usize, elapsed: f64, out: &Path) {
    let stats = knn.last_run();
    let mut widened = if stats.rows_widened > 0 {
        format!(", {} rows needed more candidates", stats.rows_widened)
    } else {
        String::new()
    };
    if stats.blocks > 0 {
        widened += &format!(", {}", blocks_summary(&stats));
    }
    if stats.bytes_spilled > 0 {
        widened += &format!(", {} of lists spilled to disk", in_mib(stats.bytes_spilled));
    }
    if stats.bytes_sent > 0 {
        widened += &format!(", {} sent to other ranks", in_mib(stats.bytes_sent));
    }
    if stats.rows_ranked_to_disk > 0 {
        widened += ", answers held on disk until written";
    }
    if stats.algorithm == knng::Algorithm::KdTree {
        widened += ", by the kd-tree";
    }
    if stats.algorithm == knng::Algorithm::CoverTree {
        widened += ", by the cover tree";
    }
    if stats.algorithm == knng::Algorithm::Hybrid {
        let rebuilt = match stats.grid_rebuilds {
            0 => String::new(),
            n => format!(", its cells widened {n} time{}", plural(n)),
        };
        widened += &format!(
            ", by the GPU grid ({} of {} rows it took{rebuilt}) and the kd-tree",
            stats.rows_proven_by_grid, stats.rows_on_grid
        );
    }
    engine.status(format!(
        "{summary} in {} ({:.0} rows/s{widened}); wrote {}",
        seconds(elapsed),
        rows as f64 / elapsed.max(1e-9),
        out.display()
    ));
}

pub fn graph(a: GraphArgs, ranks: &Ranks) -> Outcome {
    let out = &a.problem.output;
    io::check_output_path(out)?;
    let k = a.problem.k as usize;
    let metric = a.problem.metric.unwrap_or(Metric::Euclidean);
    let file = open(&a.input)?;
    io::refuse_overwriting_inputs(out, &[file.path()])?;
    let n = file.rows();
    let max = if a.include_self { n } else { n - 1 };
    if k > max {
        let rule =
            if a.include_self { "k <= n with --include-self" } else { "k <= n - 1: a point is not its own neighbour" };
        return Err(Failure(format!(
            "-k {k} is too large: {} has {n} rows, so at most {max} neighbours per row ({rule})",
            a.input
        )));
    }
    io::check_output_space(out, n, k)?;
    // A graph too large for memory is partitioned, its lists spilled and its rows written as
    // they are finished: only the input must fit, and what it leaves is the run's.
    let mut engine = a.engine.for_rank(ranks);
    engine.check_input_memory(&a.input, input_bytes(&file))?;
    let data = read(&file, &a.input, &engine)?;
    let bar = Bar::new(engine.quiet, "graph");
    let beside_output = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let places =
        Places { checkpoint: a.checkpoint.as_deref(), scratch: Some(a.scratch.as_deref().unwrap_or(beside_output)) };
    let knn = engine.open_with(a.include_self, false, places, &bar)?;
    engine.explain_backend(&knn);
    engine.status(format!("backend {}", knn.description()));
    if let Some(c) = &engine.cluster {
        engine.status(format!("shared by {} ranks of an MPI job", c.size()));
    }
    let start = Instant::now();
    let mut writer = if ranks.leads() { Some(io::NeighborWriter::create(out, n, k, n)?) } else { None };
    knn.graph_streamed(data.view(), k, metric, &mut |rows| match writer.as_mut() {
        Some(writer) => writer.write_rows(rows.indices, rows.distances),
        None => Ok(()),
    })
    .map_err(|e| in_file(e, &[("data", &a.input)]))?;
    let elapsed = start.elapsed().as_secs_f64();
    drop(bar);
    let Some(writer) = writer else {
        return Ok(());
    };
    writer.finish()?;
    // Every other rank has sent its last rows: its part of the checkpoint is no longer read.
    if let Some(dir) = &a.checkpoint {
        knng::remove_checkpoint(dir)?;
    }
    finish(&engine, &knn, format!("graph: {n} row{}, k = {k}, {metric}", plural(n)), n, elapsed, out);
    Ok(())
}

pub fn search(a: SearchArgs, ranks: &Ranks) -> Outcome {
    if Index::is_index_file(&a.corpus) {
        return search_index(a, ranks);
    }
    let out = &a.problem.output;
    io::check_output_path(out)?;
    let k = a.problem.k as usize;
    let metric = a.problem.metric.unwrap_or(Metric::Euclidean);
    let corpus_file = open(&a.corpus)?;
    let query_file = open(&a.queries)?;
    io::refuse_overwriting_inputs(out, &[corpus_file.path(), query_file.path()])?;
    if corpus_file.cols() != query_file.cols() {
        return Err(Failure(format!(
            "dimension mismatch: corpus {} has {} columns but queries {} have {}",
            a.corpus,
            corpus_file.cols(),
            a.queries,
            query_file.cols()
        )));
    }
    let n = corpus_file.rows();
    if k > n {
        return Err(Failure(format!("-k {k} is too large: corpus {} has only {n} rows", a.corpus)));
    }
    io::check_output_space(out, query_file.rows(), k)?;
    let inputs = input_bytes(&corpus_file).saturating_add(input_bytes(&query_file));
    let engine = a.engine.for_rank(ranks);
    engine.check_memory(n, query_file.rows(), corpus_file.cols(), k, inputs)?;
    let corpus = read(&corpus_file, &a.corpus, &engine)?;
    let queries = read(&query_file, &a.queries, &engine)?;
    let bar = Bar::new(engine.quiet, "search");
    let knn = engine.open(false, &bar)?;
    engine.explain_backend(&knn);
    engine.status(format!("backend {}", knn.description()));
    if let Some(c) = &engine.cluster {
        engine.status(format!("queries shared by {} ranks of an MPI job", c.size()));
    }
    answer_search(&engine, ranks, &knn, bar, &a, n, metric, |knn| knn.search(corpus.view(), queries.view(), k, metric))
}

/// Runs `search` on `knn`, then writes its answer and says how it went (rank 0 of a job).
#[allow(clippy::too_many_arguments)]
fn answer_search(
    engine: &EngineArgs,
    ranks: &Ranks,
    knn: &Knn,
    bar: Bar,
    a: &SearchArgs,
    n: usize,
    metric: Metric,
    search: impl FnOnce(&Knn) -> knng::Result<knng::Neighbors>,
) -> Outcome {
    let (out, k) = (&a.problem.output, a.problem.k as usize);
    let start = Instant::now();
    let nb = search(knn).map_err(|e| in_file(e, &[("corpus", &a.corpus), ("queries", &a.queries)]))?;
    let elapsed = start.elapsed().as_secs_f64();
    drop(bar);
    if !ranks.leads() {
        return Ok(());
    }
    io::write_neighbors(out, &nb, n)?;
    let nq = nb.queries;
    let summary =
        format!("search: {nq} quer{} in {n} row{}, k = {k}, {metric}", if nq == 1 { "y" } else { "ies" }, plural(n));
    finish(engine, knn, summary, nq, elapsed, out);
    Ok(())
}

/// `knng search INDEX.knng`: the queries against a saved index, under its metric.
fn search_index(a: SearchArgs, ranks: &Ranks) -> Outcome {
    let out = &a.problem.output;
    io::check_output_path(out)?;
    let k = a.problem.k as usize;
    let start = Instant::now();
    let index = Index::load(&a.corpus)?;
    let metric = index.metric();
    if let Some(asked) = a.problem.metric.filter(|&m| m != metric) {
        return Err(Failure(format!(
            "{} was built for {metric} distances, not {asked}: leave out --metric, or build an index for {asked}",
            a.corpus
        )));
    }
    let engine = a.engine.for_rank(ranks);
    engine.status(format!("loaded {}: {} in {}", a.corpus, describe(&index), seconds(start.elapsed().as_secs_f64())));
    let query_file = open(&a.queries)?;
    io::refuse_overwriting_inputs(out, &[Path::new(&a.corpus), query_file.path()])?;
    let (n, d) = index.shape();
    if query_file.cols() != d {
        return Err(Failure(format!(
            "dimension mismatch: index {} has {d} columns but queries {} have {}",
            a.corpus,
            a.queries,
            query_file.cols()
        )));
    }
    if k > n {
        return Err(Failure(format!("-k {k} is too large: index {} has only {n} rows", a.corpus)));
    }
    io::check_output_space(out, query_file.rows(), k)?;
    engine.check_memory(0, query_file.rows(), d, k, input_bytes(&query_file))?;
    let queries = read(&query_file, &a.queries, &engine)?;
    let bar = Bar::new(engine.quiet, "search");
    let knn = engine.open(false, &bar)?;
    engine.explain_backend(&knn);
    engine.status(format!("backend {}", knn.description()));
    answer_search(&engine, ranks, &knn, bar, &a, n, metric, |knn| knn.search_index(&index, queries.view(), k))
}

/// What an index holds, e.g. `a cover tree over 1000 rows (998 distinct) x 64 columns, cosine`.
fn describe(index: &Index) -> String {
    let ((n, d), metric) = (index.shape(), index.metric());
    match index.points() {
        Some(points) => {
            format!("a cover tree over {n} row{} ({points} distinct) x {d} column{}, {metric}", plural(n), plural(d))
        }
        None => format!("{n} row{} x {d} column{} (no tree), {metric}", plural(n), plural(d)),
    }
}

/// `knng index build`.
pub fn index_build(a: IndexBuildArgs) -> Outcome {
    let out = &a.output;
    io::check_index_path(out)?;
    let file = open(&a.input)?;
    io::refuse_overwriting_inputs(out, &[file.path()])?;
    let mut engine = a.engine.clone();
    engine.check_input_memory(&a.input, input_bytes(&file))?;
    let data = read(&file, &a.input, &engine)?;
    let bar = Bar::new(engine.quiet, "index");
    let knn = engine.open(false, &bar)?;
    let start = Instant::now();
    let index = knn.build_index(data.view(), a.metric).map_err(|e| in_file(e, &[("data", &a.input)]))?;
    let built = start.elapsed().as_secs_f64();
    index.save(out)?;
    drop(bar);
    engine.status(format!("index: {} built in {}; wrote {}", describe(&index), seconds(built), out.display()));
    Ok(())
}

/// `knng index info`.
pub fn index_info(path: &Path) -> Outcome {
    let index = Index::load(path)?;
    say(format_args!("{}: {}", path.display(), describe(&index)));
    Ok(())
}

pub fn info(ranks: &Ranks) -> Outcome {
    if let Some(c) = ranks.cluster() {
        // Every rank's report, printed by rank 0 in rank order.
        let mut report = Vec::new();
        write_info(&mut report, ranks.host_name())?;
        if c.rank() != 0 {
            c.send(0, &report)?;
            return Ok(());
        }
        say(format!("MPI job of {} ranks", c.size()));
        for rank in 0..c.size() {
            let text = if rank == 0 { std::mem::take(&mut report) } else { c.receive(rank)? };
            say(format!("== rank {rank}"));
            std::io::stdout().write_all(&text).map_err(|e| Failure(format!("writing to stdout: {e}")))?;
        }
        return Ok(());
    }
    let mut report = Vec::new();
    write_info(&mut report, None)?;
    std::io::stdout().write_all(&report).map_err(|e| Failure(format!("writing to stdout: {e}")))?;
    Ok(())
}

/// The memory budget a GPU engine on adapter `index` takes without `--gpu-memory`.
fn budget_line(index: usize) -> String {
    let options = knng::Options { backend: knng::Backend::Gpu, adapter: Some(index.to_string()), ..Default::default() };
    match knng::Knn::new(options).map(|knn| knn.gpu_memory_budgets()) {
        Ok(budgets) => match budgets.first() {
            Some(&(bytes, origin)) => {
                format!(
                    "  GPU memory budget {:.1} GiB ({origin}); --gpu-memory sets it",
                    bytes as f64 / (1u64 << 30) as f64
                )
            }
            None => "  GPU memory budget: no GPU engine was opened".into(),
        },
        Err(e) => format!("  GPU memory budget unknown: the adapter could not be opened: {e}"),
    }
}

/// What `knng info` says of this process: its host (for a rank of a job), the adapters, and
/// what `--backend auto` chooses.
fn write_info(out: &mut Vec<u8>, host: Option<String>) -> Outcome {
    let mut say = |line: String| {
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    };
    if let Some(host) = host {
        say(format!("host {host}"));
    }
    say(format!("knng {}", env!("CARGO_PKG_VERSION")));
    let adapters = knng::adapters();
    if adapters.is_empty() {
        say("GPU adapters: none found by wgpu".into());
    } else {
        say(format!("GPU adapters ({}):", adapters.len()));
        for a in &adapters {
            say(a.to_string());
        }
    }
    let cpu = format!("the CPU backend ({} threads)", rayon::current_num_threads());
    match adapters.iter().find(|a| a.auto_choice) {
        Some(a) => {
            say(format!("--backend auto uses adapter [{}] {}; --backend cpu uses {cpu}", a.index, a.info.name));
            say(budget_line(a.index));
        }
        None => say(format!("--backend auto uses {cpu}: no hardware GPU adapter")),
    }
    if let Some(hint) = knng::missing_gpu_hint(&adapters) {
        say(format!("warning: {hint}"));
    }
    Ok(())
}
