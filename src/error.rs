//! One error type for the whole crate.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Everything that can go wrong in knng. Messages name the flag, file, row, column or value
/// at fault so that a user can fix the input without reading the source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is out of range (`k = 0`, `k > n`, an unknown metric name, ...).
    #[error("invalid argument {name}: {message}")]
    InvalidArgument {
        /// The argument or flag, as the user wrote it (`k`, `--metric`).
        name: String,
        /// What is wrong and what would be accepted.
        message: String,
    },
    /// A matrix has no rows or no columns.
    #[error("{what} is empty: {rows} rows x {cols} columns")]
    Empty {
        /// Which input (`corpus`, `queries`, `data`).
        what: &'static str,
        /// Number of rows.
        rows: usize,
        /// Number of columns.
        cols: usize,
    },
    /// Corpus and queries have different dimensions.
    #[error("dimension mismatch: corpus has {corpus} columns but queries have {queries}")]
    DimensionMismatch {
        /// Dimension of the corpus.
        corpus: usize,
        /// Dimension of the queries.
        queries: usize,
    },
    /// A value is NaN or infinite.
    #[error("{what} has a non-finite value {value} at row {row}, column {col}")]
    NonFinite {
        /// Which input.
        what: &'static str,
        /// Row (0-based).
        row: usize,
        /// Column (0-based).
        col: usize,
        /// The offending value.
        value: f32,
    },
    /// A value is so large that squared distances overflow f32.
    #[error(
        "{what} has a value {value} at row {row}, column {col} too large for f32 distances (|v| must be below 1e18)"
    )]
    TooLarge {
        /// Which input.
        what: &'static str,
        /// Row (0-based).
        row: usize,
        /// Column (0-based).
        col: usize,
        /// The offending value.
        value: f32,
    },
    /// A row has no direction (cosine) or no variance (correlation), so the metric is undefined.
    #[error("{what} row {row} is {problem}: the {metric} distance is undefined for it")]
    DegenerateRow {
        /// Which input.
        what: &'static str,
        /// Row (0-based).
        row: usize,
        /// `a zero vector` (also one of subnormal values only) or `constant (zero variance)`.
        problem: &'static str,
        /// The metric's name.
        metric: &'static str,
    },
    /// The GPU backend was requested but no adapter could be used.
    #[error("no usable GPU adapter: {0}")]
    NoAdapter(String),
    /// The GPU ran out of memory even with the smallest tiles.
    #[error("GPU out of memory: {0}")]
    OutOfMemory(String),
    /// The problem cannot be cut into pieces that fit the GPU's limits (for example a k so
    /// large that one query's candidates exceed the largest buffer).
    #[error("too large for this GPU: {0}")]
    TooLargeForDevice(String),
    /// The run would need more host memory than the machine (or the limit set) can give;
    /// nothing was allocated.
    #[error("not enough host memory: {0}")]
    HostMemory(String),
    /// The GPU device was lost (driver reset, removal, timeout).
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    /// Any other error reported by the GPU driver or wgpu validation.
    #[error("GPU error: {0}")]
    Gpu(String),
    /// Reading or writing a file failed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong, including the row or byte offset where known.
        message: String,
    },
    /// A message between the processes of a job that shares a graph ([`Cluster`](crate::Cluster))
    /// could not be sent, received or read.
    #[error("cluster: {0}")]
    Cluster(String),
    /// The run was stopped through [`Options::interrupt`](crate::Options::interrupt).
    #[error("interrupted")]
    Interrupted,
    /// An operating-system I/O error on a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with knng's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn arg(name: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { name: name.to_string(), message: message.into() }
    }

    pub(crate) fn file(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::File { path: path.into(), message: message.into() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

/// Whether the caller asked a run to stop ([`Options::interrupt`](crate::Options::interrupt)).
pub(crate) fn interrupted(flag: &Option<Arc<AtomicBool>>) -> bool {
    flag.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// [`Error::Interrupted`] once the caller asked a run to stop: called between the steps of
/// long loops (rounds, tiles, blocks), so that a run ends within one step of the request.
pub(crate) fn check_interrupt(flag: &Option<Arc<AtomicBool>>) -> Result<()> {
    if interrupted(flag) {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}
