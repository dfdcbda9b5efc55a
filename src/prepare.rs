//! Input validation and the float64 statistics that the exactness argument needs.
//!
//! Candidates are found in fp32 (GPU or CPU GEMM) and then re-ranked exactly in float64; a row
//! is accepted only when an error bound proves that no point outside its candidates can be
//! nearer than its k-th neighbour (see `refine`). This module computes, in one float64 pass
//! over each input, what that bound is made of: the centring shift, each row's norm after the
//! metric's transformation, and how much fp32 rounding can move it.

use rayon::prelude::*;

use crate::data::MatrixRef;
use crate::error::{Error, Result};
use crate::metric::Metric;

/// Unit roundoff of f32.
const U32: f64 = 1.0 / 16_777_216.0;
/// Values beyond this make squared distances overflow f32.
const MAX_ABS: f32 = 1e18;

/// `gamma(m)` of Higham's error analysis: the relative error bound of an m-term fp32 sum of
/// products, whatever the summation order (blocked GEMM, FMA, tree reductions all obey it).
pub(crate) fn gamma(m: usize) -> f64 {
    let mu = m as f64 * U32;
    mu / (1.0 - mu)
}

/// Per-input facts used to build fp32 operands and to bound their error.
#[derive(Clone, Debug)]
pub(crate) struct RowStats {
    /// The metric-dependent magnitude of each row: |x - shift|^2 for the euclidean family,
    /// |x| for inner product, and for cosine/correlation the relative error of the fp32 unit
    /// vector (larger when centring cancels most of a row).
    pub scale: Vec<f64>,
}

impl RowStats {
    pub fn max(&self) -> f64 {
        self.scale.iter().copied().fold(0.0, f64::max)
    }
}

/// Checks that every value is finite and usable, naming the first bad row and column.
pub(crate) fn validate(what: &'static str, m: MatrixRef<'_>, metric: Metric) -> Result<()> {
    check_shape(what, m)?;
    // Parallel scan, but report the first offending row, as a sequential reader would.
    match (0..m.rows()).into_par_iter().find_first(|&i| bad_row(m.row(i), metric)) {
        Some(i) => Err(row_error(what, m, i, metric)),
        None => Ok(()),
    }
}

/// [`validate`] for a corpus, which also returns the translation applied before the fp32
/// GEMM: the corpus column mean for the euclidean family (distances are translation
/// invariant, and centring removes the large common offset that makes |x|^2 + |y|^2 - 2x.y
/// cancel), zero otherwise. One pass over the corpus: for large inputs each would be a read of
/// the whole matrix.
pub(crate) fn validate_corpus(what: &'static str, corpus: MatrixRef<'_>, metric: Metric) -> Result<Vec<f32>> {
    check_shape(what, corpus)?;
    let d = corpus.cols();
    let centre = centred(metric);
    let zeros = || vec![0.0f64; if centre { d } else { 0 }];
    // Block by block, so that a mapped input larger than memory is not all resident at once.
    let (first_bad, sums) = corpus
        .in_blocks(|first, block| {
            (0..block.rows())
                .into_par_iter()
                .fold(
                    || (usize::MAX, zeros()),
                    |(first_bad, mut acc), i| {
                        let row = block.row(i);
                        for (a, &v) in acc.iter_mut().zip(row) {
                            *a += v as f64;
                        }
                        // A fold sees its rows in increasing order: its first bad row is its least.
                        let bad = first_bad == usize::MAX && bad_row(row, metric);
                        (if bad { first + i } else { first_bad }, acc)
                    },
                )
                .reduce(|| (usize::MAX, zeros()), add_sums)
        })
        .into_iter()
        .fold((usize::MAX, zeros()), add_sums);
    if first_bad != usize::MAX {
        return Err(row_error(what, corpus, first_bad, metric));
    }
    Ok(if centre { sums.iter().map(|s| (s / corpus.rows() as f64) as f32).collect() } else { vec![0.0; d] })
}

fn check_shape(what: &'static str, m: MatrixRef<'_>) -> Result<()> {
    if m.rows() == 0 || m.cols() == 0 {
        return Err(Error::Empty { what, rows: m.rows(), cols: m.cols() });
    }
    Ok(())
}

fn bad_row(row: &[f32], metric: Metric) -> bool {
    // One comparison a value without an early exit, so that it vectorizes: NaN and the
    // infinities fail it too. (`any` with `is_finite` was bound by its branches:
    // notes/performance.md, "The host and the GPU in step".)
    let usable = row.iter().fold(true, |ok, v| ok & (v.abs() <= MAX_ABS));
    !usable || degenerate(row, metric)
}

/// The error for row `i`, which `bad_row` refused: its first bad column, or why the row
/// itself is unusable under `metric`.
fn row_error(what: &'static str, m: MatrixRef<'_>, i: usize, metric: Metric) -> Error {
    let row = m.row(i);
    if let Some((col, &value)) = row.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Error::NonFinite { what, row: i, col, value };
    }
    if let Some((col, &value)) = row.iter().enumerate().find(|(_, v)| v.abs() > MAX_ABS) {
        return Error::TooLarge { what, row: i, col, value };
    }
    let problem = if row.iter().all(|&v| v == 0.0) {
        "a zero vector"
    } else if tiny(row) {
        "a zero vector in f32 arithmetic (every value is below 1.2e-38, f32's smallest normal magnitude)"
    } else {
        "constant (zero variance)"
    };
    Error::DegenerateRow { what, row: i, problem, metric: metric.name() }
}

/// The euclidean family is centred on the corpus mean before the fp32 GEMM.
fn centred(metric: Metric) -> bool {
    matches!(metric, Metric::Euclidean | Metric::SqEuclidean)
}

fn degenerate(row: &[f32], metric: Metric) -> bool {
    match metric {
        Metric::Cosine => tiny(row),
        Metric::Correlation => row.iter().all(|&v| v == row[0]) || tiny(row),
        _ => false,
    }
}

/// No value of normal f32 magnitude (zero or subnormal): a GPU that flushes subnormals sees a
/// zero vector, whose direction is undefined.
fn tiny(row: &[f32]) -> bool {
    row.iter().all(|&v| v.abs() < f32::MIN_POSITIVE)
}

/// One row transformed for the fp32 GEMM, computed in float64 and rounded once.
pub(crate) fn prepare_row(row: &[f32], shift: &[f32], metric: Metric, out: &mut [f32]) {
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => {
            for ((o, &v), &s) in out.iter_mut().zip(row).zip(shift) {
                *o = (v as f64 - s as f64) as f32;
            }
        }
        Metric::InnerProduct => out[..row.len()].copy_from_slice(row),
        Metric::Cosine | Metric::Correlation => {
            let mean = if metric == Metric::Correlation {
                row.iter().map(|&v| v as f64).sum::<f64>() / row.len() as f64
            } else {
                0.0
            };
            let norm = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>().sqrt();
            for (o, &v) in out.iter_mut().zip(row) {
                *o = ((v as f64 - mean) / norm) as f32;
            }
        }
    }
}

/// The float64 norm of each row, for cosine keys computed from one sum on the GPU.
pub(crate) fn row_norms(m: MatrixRef<'_>) -> Vec<f64> {
    let mut norms = Vec::with_capacity(m.rows());
    m.in_blocks(|_, block| norms.par_extend((0..block.rows()).into_par_iter().map(|i| norm(block.row(i)))));
    norms
}

/// Sums of two parts of the rows: the first bad row of either, and the column sums.
fn add_sums((bad_a, mut a): (usize, Vec<f64>), (bad_b, b): (usize, Vec<f64>)) -> (usize, Vec<f64>) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
    (bad_a.min(bad_b), a)
}

/// |row| in float64.
fn norm(row: &[f32]) -> f64 {
    row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt()
}

/// The float64 statistics of each row (see [`RowStats::scale`]).
pub(crate) fn row_stats(m: MatrixRef<'_>, shift: &[f32], metric: Metric) -> RowStats {
    let d = m.cols();
    let mut scale = Vec::with_capacity(m.rows());
    m.in_blocks(|_, block| {
        scale.par_extend((0..block.rows()).into_par_iter().map(|i| {
            let row = block.row(i);
            match metric {
                Metric::Euclidean | Metric::SqEuclidean => {
                    row.iter().zip(shift).map(|(&v, &s)| (v as f64 - s as f64).powi(2)).sum::<f64>()
                }
                Metric::InnerProduct => norm(row),
                // The GPU normalises in f32 (`norms.wgsl`): |x|^2 carries gamma(d) relative
                // error, half of it after the square root; 1 / sqrt and the scaling add a few
                // ULP (Vulkan allows 2-3 for each function): 32 units of roundoff cover 16 ULP.
                // The host rounds a float64 unit vector once.
                Metric::Cosine => 0.5 * gamma(d + 4) + 32.0 * U32,
                Metric::Correlation => {
                    let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
                    let centred = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>().sqrt();
                    let raw = norm(row);
                    3.0 * gamma(d + 4) * (1.0 + raw / centred)
                }
            }
        }))
    });
    RowStats { scale }
}

/// A bound on |fp32 ranking key - exact ranking key| for every pair (query i, any corpus row),
/// in the units of `Metric::rank_key_f64`, with a safety factor of two.
pub(crate) fn key_error_bound(metric: Metric, d: usize, query_scale: f64, corpus_max: f64) -> f64 {
    let g = gamma(d + 4);
    // Higham's gamma assumes no underflow. A product, square or sum below f32's smallest
    // normal magnitude may be flushed to zero (GPUs flush subnormals), and so may a subnormal
    // operand, losing up to that magnitude times the other operand: over d terms at most
    // 2^-126 (d + |x|_1 + |y|_1) <= 2^-126 d (1 + |x| + |y|) per sum, and a key has three
    // such sums. Negligible for ordinary data; for rows of 1e-25 it is what keeps their
    // all-zero fp32 keys from certifying anything.
    let norms = match metric {
        Metric::Euclidean | Metric::SqEuclidean => query_scale.sqrt() + corpus_max.sqrt(),
        Metric::InnerProduct => query_scale + corpus_max,
        // Unit vectors.
        Metric::Cosine | Metric::Correlation => 2.0,
    };
    let underflow = 3.0 * f32::MIN_POSITIVE as f64 * (d + 4) as f64 * (1.0 + norms);
    // Nor does it allow overflow: a norm, dot product or key beyond f32's range is infinite
    // or NaN (|q|^2 + |c|^2 - 2 q.c of two huge, close rows is inf - inf), however near the
    // rows are. Where the float64 magnitudes allow that, nothing is proven from fp32 keys.
    let may_overflow = match metric {
        Metric::Euclidean | Metric::SqEuclidean => 2.0 * (query_scale + corpus_max),
        Metric::InnerProduct => query_scale * corpus_max,
        Metric::Cosine | Metric::Correlation => 0.0,
    } >= f32::MAX as f64 / 4.0;
    if may_overflow {
        return f64::INFINITY;
    }
    let bound = match metric {
        // |x|^2, |y|^2 and x.y each carry gamma(d) relative error, the centring subtraction
        // and the final additions a few units of roundoff of |x|^2 + |y|^2.
        Metric::Euclidean | Metric::SqEuclidean => (2.0 * g + 8.0 * U32) * (query_scale + corpus_max),
        // Unit vectors off by delta_x and delta_y, then a dot product with gamma(d) error.
        Metric::Cosine | Metric::Correlation => query_scale + corpus_max + 2.0 * g,
        Metric::InnerProduct => g * query_scale * corpus_max,
    };
    2.0 * (bound + underflow)
}
