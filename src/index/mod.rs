//! Saved indexes: a corpus and what was built over it, kept in a file to be searched again
//! and again without building anything.
//!
//! `file.rs` lays the index out on disk. An [`Index`] holds its arrays in memory once built,
//! or in a read-only map of its file once loaded, and searches use them in place.

mod file;

use std::borrow::Cow;
use std::path::Path;

use crate::data::{MatrixRef, Neighbors};
use crate::error::{Error, Result};
use crate::lowdim::covertree::{self, Tree, TreeRef};
use crate::metric::Metric;
use crate::search::{Algorithm, Knn};

/// A corpus made ready to be searched again and again, and saved to a file: the rows alone
/// (searched by brute force, or by whatever [`Options::algorithm`](crate::Options::algorithm)
/// chooses), or the rows and a cover tree over them ([`Algorithm::CoverTree`]).
///
/// Built by [`Knn::build_index`], written by [`Index::save`], read back by [`Index::load`],
/// which maps the file and checks it (its format version, its size, a checksum of every
/// array) rather than copying it; searched by [`Knn::search_index`].
///
/// ```
/// use knng::{Algorithm, Backend, Index, Knn, Matrix, Metric, Options};
///
/// let data = Matrix::from_rows(&[[0.0f32, 0.0], [1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [8.0, 0.0]])?;
/// let knn = Knn::new(Options { backend: Backend::Cpu, algorithm: Algorithm::CoverTree, ..Options::default() })?;
/// let index = knn.build_index(data.view(), Metric::Euclidean)?;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("points.knng");
/// index.save(&path)?;
/// let index = Index::load(&path)?;
/// assert_eq!(index.algorithm(), Algorithm::CoverTree);
///
/// let queries = Matrix::from_rows(&[[3.9f32, 0.0]])?;
/// let found = knn.search_index(&index, queries.view(), 2)?;
/// assert_eq!(found.indices_of(0), &[3, 2]);
/// # Ok::<(), knng::Error>(())
/// ```
pub struct Index {
    algorithm: Algorithm,
    metric: Metric,
    rows: usize,
    cols: usize,
    held: Held,
}

/// Where an index's arrays lie.
enum Held {
    /// `corpus`: the rows as [`Index::stored_corpus`] lays them out.
    Built { corpus: Vec<f32>, tree: Option<Tree> },
    /// The first `len` bytes of `bytes` (a map, or a copy in 8-byte aligned memory): a file
    /// that `file::read` has checked.
    File { bytes: Bytes, len: usize },
}

enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u64>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Read(words) => bytemuck::cast_slice(words),
        }
    }
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("algorithm", &self.algorithm)
            .field("metric", &self.metric)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish_non_exhaustive()
    }
}

impl Index {
    /// Reads the index file at `path`, mapped rather than copied. A file that is not an
    /// index, was written in another format version, is truncated, or fails a checksum is
    /// refused with an error that names it and says which.
    pub fn load(path: impl AsRef<Path>) -> Result<Index> {
        let path = path.as_ref();
        let map = crate::io::map_file(path)?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Normal);
        let len = map.len();
        Index::from_file_bytes(Bytes::Mapped(map), len, |message| Error::file(path, message))
    }

    /// Whether the file at `path` is an index file (begins as [`Index::save`] writes one);
    /// false where it cannot be read.
    pub fn is_index_file(path: impl AsRef<Path>) -> bool {
        use std::io::Read;
        let mut start = [0u8; 8];
        std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut start)).is_ok() && file::is_index(&start)
    }

    /// An index from the bytes of an index file ([`Index::save`]'s), copied; checked as
    /// [`Index::load`] checks a file.
    pub fn from_bytes(bytes: &[u8]) -> Result<Index> {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Index::from_file_bytes(Bytes::Read(words), bytes.len(), |message| Error::arg("index", message))
    }

    fn from_file_bytes(bytes: Bytes, len: usize, refused: impl Fn(String) -> Error) -> Result<Index> {
        let contents = file::read(&bytes.as_slice()[..len], true).map_err(&refused)?;
        let (algorithm, metric, rows, cols) = (contents.algorithm, contents.metric, contents.rows, contents.cols);
        // Its rows are checked once, here, as a corpus passed to a search would be on every call.
        let corpus = MatrixRef::new(contents.corpus, rows, cols)?;
        crate::prepare::validate("corpus", corpus, metric).map_err(|e| refused(format!("its corpus: {e}")))?;
        Ok(Index { algorithm, metric, rows, cols, held: Held::File { bytes, len } })
    }

    /// Writes the index to `path`, whole or not at all: a file that [`Index::load`] reads.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        file::write(path.as_ref(), &self.contents())
    }

    /// How the index answers: [`Algorithm::CoverTree`], or [`Algorithm::Brute`] for an
    /// index of the rows alone.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The metric the index was built for, and its searches use.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Rows and columns of the corpus.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The corpus rows, row-major, [`Index::shape`] of them: borrowed from the index, or
    /// gathered from it into their own order where a euclidean cover tree holds them in the
    /// tree's order (so that the index holds each row once).
    pub fn corpus(&self) -> Cow<'_, [f32]> {
        let contents = self.contents();
        match contents.tree.filter(|_| self.holds_rows_in_node_order()) {
            None => Cow::Borrowed(contents.corpus),
            Some(tree) => {
                let d = self.cols;
                let mut rows = vec![0f32; self.rows * d];
                for (values, &r) in contents.corpus.chunks_exact(d).zip(tree.rows) {
                    rows[r as usize * d..][..d].copy_from_slice(values);
                }
                Cow::Owned(rows)
            }
        }
    }

    /// Whether the corpus rows are held in the cover tree's node order, the tree reading its
    /// points from them.
    fn holds_rows_in_node_order(&self) -> bool {
        self.algorithm == Algorithm::CoverTree && covertree::places_rows_as_given(self.metric)
    }

    /// The corpus rows as the index holds them: in their own order, or in the tree's
    /// ([`Index::holds_rows_in_node_order`]).
    fn stored_corpus(&self) -> MatrixRef<'_> {
        MatrixRef::new(self.contents().corpus, self.rows, self.cols).expect("checked when built or loaded")
    }

    /// Distinct points of the corpus (rows equal to others count once) in a cover-tree
    /// index; `None` in an index of the rows alone.
    pub fn points(&self) -> Option<usize> {
        self.contents().tree.map(|t| t.nodes.len())
    }

    fn contents(&self) -> file::Contents<'_> {
        match &self.held {
            Held::Built { corpus, tree } => file::Contents {
                algorithm: self.algorithm,
                metric: self.metric,
                rows: self.rows,
                cols: self.cols,
                corpus,
                tree: tree.as_ref().map(|t| t.view().parts()),
            },
            Held::File { bytes, len } => file::read(&bytes.as_slice()[..*len], false).expect("checked when loaded"),
        }
    }

    fn tree(&self) -> Option<TreeRef<'_>> {
        let contents = self.contents();
        contents.tree.as_ref().map(|parts| TreeRef::of(parts, contents.corpus))
    }
}

impl Knn {
    /// An index of `data` under `metric`, to be saved and searched again and again.
    ///
    /// [`Options::algorithm`](crate::Options::algorithm) says what it holds:
    /// [`Algorithm::CoverTree`] a cover tree over the rows (every metric but inner
    /// products), [`Algorithm::Brute`] the rows alone, and [`Algorithm::Auto`] a cover tree
    /// where the estimate of the data's intrinsic dimension says it beats brute force on
    /// this engine, else the rows alone. The kd-tree and the hybrid join are built by each
    /// search in milliseconds: build an index of the rows alone for them.
    pub fn build_index(&self, data: MatrixRef<'_>, metric: Metric) -> Result<Index> {
        crate::prepare::validate_corpus("data", data, metric)?;
        let algorithm = match self.options.algorithm {
            Algorithm::Brute => Algorithm::Brute,
            Algorithm::CoverTree if !covertree::handles(metric) => {
                return Err(Error::arg(
                    "algorithm",
                    format!(
                        "the cover tree does not take {metric} distances; build an index of the rows alone (brute)"
                    ),
                ));
            }
            Algorithm::CoverTree => Algorithm::CoverTree,
            Algorithm::Auto => match self.choose_algorithm(metric, data, false, true) {
                Algorithm::CoverTree => Algorithm::CoverTree,
                _ => Algorithm::Brute,
            },
            a @ (Algorithm::KdTree | Algorithm::Hybrid) => {
                let name = if a == Algorithm::KdTree { "kdtree" } else { "hybrid" };
                return Err(Error::arg(
                    "algorithm",
                    format!(
                        "an index holds a cover tree or the rows alone; {name} is built by each search: build the \
                         index with brute and search it with {name}"
                    ),
                ));
            }
        };
        let tree = match algorithm {
            Algorithm::CoverTree => {
                let exclude = vec![crate::refine::NONE; 0];
                let job = crate::lowdim::job::TreeJob {
                    corpus: data,
                    queries: data.slice_rows(0..0),
                    exclude: &exclude,
                    k: 1,
                    metric,
                    interrupt: self.options.interrupt.clone(),
                };
                match covertree::build(&job, self.own_cover_tree_builder(data))? {
                    Some(built) => Some(built.tree),
                    None => return Err(Error::Interrupted),
                }
            }
            _ => None,
        };
        let (corpus, tree) = match tree {
            Some(mut tree) => match tree.rows_in_node_order(data) {
                Some(rows) => (rows, Some(tree)),
                None => (data.as_slice().to_vec(), Some(tree)),
            },
            None => (data.as_slice().to_vec(), None),
        };
        Ok(Index { algorithm, metric, rows: data.rows(), cols: data.cols(), held: Held::Built { corpus, tree } })
    }

    /// The `k` nearest corpus rows of every query in `index`, exact, under the index's
    /// metric: the same answer as [`Knn::search`] of the index's rows.
    ///
    /// A cover-tree index answers by its tree where [`Options::algorithm`](crate::Options::algorithm)
    /// is [`Algorithm::Auto`] or [`Algorithm::CoverTree`]; any other algorithm, and an index
    /// of the rows alone, search the rows as [`Knn::search`] does.
    pub fn search_index(&self, index: &Index, queries: MatrixRef<'_>, k: usize) -> Result<Neighbors> {
        let metric = index.metric();
        let tree = index.tree().filter(|_| matches!(self.options.algorithm, Algorithm::Auto | Algorithm::CoverTree));
        let Some(tree) = tree else {
            let corpus = index.corpus();
            return self.search(MatrixRef::new(&corpus, index.rows, index.cols)?, queries, k, metric);
        };
        self.search_tree(tree, index.stored_corpus(), queries, k, metric)
    }
}
