//! Distance metrics: names, parsing and the exact float64 distance used to rank candidates.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// How the distance between two vectors is measured. Names follow scipy and scikit-learn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// `sqrt(sum (x - y)^2)`. Alias `l2`.
    Euclidean,
    /// `sum (x - y)^2`.
    SqEuclidean,
    /// `1 - x.y / (|x| |y|)`. Undefined for zero vectors.
    Cosine,
    /// `1 - r`, Pearson's r between the two vectors. Alias `pearson`. Undefined for constant
    /// vectors.
    Correlation,
    /// The inner product `x.y`; neighbours are the largest values. Alias `ip`.
    InnerProduct,
}

impl Metric {
    /// Every metric, in documentation order.
    pub const ALL: [Metric; 5] =
        [Metric::Euclidean, Metric::SqEuclidean, Metric::Cosine, Metric::Correlation, Metric::InnerProduct];

    /// The canonical name (`euclidean`, `sqeuclidean`, `cosine`, `correlation`, `inner_product`).
    pub fn name(self) -> &'static str {
        match self {
            Metric::Euclidean => "euclidean",
            Metric::SqEuclidean => "sqeuclidean",
            Metric::Cosine => "cosine",
            Metric::Correlation => "correlation",
            Metric::InnerProduct => "inner_product",
        }
    }

    /// True when larger values are nearer (inner product).
    pub fn larger_is_nearer(self) -> bool {
        self == Metric::InnerProduct
    }

    /// The exact distance in float64 between two f32 vectors, in the form that is reported.
    ///
    /// This is the ranking key of the final answer: candidates found in fp32 are re-ranked
    /// with it, so results match a float64 brute force.
    pub fn distance_f64(self, x: &[f32], y: &[f32]) -> f64 {
        match self {
            Metric::Euclidean => sq_euclidean_f64(x, y).sqrt(),
            Metric::SqEuclidean => sq_euclidean_f64(x, y),
            Metric::Cosine => cosine_distance_f64(x, y),
            Metric::Correlation => correlation_distance_f64(x, y),
            Metric::InnerProduct => dot_f64(x, y),
        }
    }

    /// The distance as an ascending ranking key: smaller is nearer for every metric.
    pub(crate) fn rank_key_f64(self, x: &[f32], y: &[f32]) -> f64 {
        match self {
            // sqrt is monotone: rank on the squared form, report the root.
            Metric::Euclidean | Metric::SqEuclidean => sq_euclidean_f64(x, y),
            Metric::InnerProduct => -dot_f64(x, y),
            m => m.distance_f64(x, y),
        }
    }

    /// Turns a ranking key from [`Metric::rank_key_f64`] into the reported distance.
    pub(crate) fn key_to_distance(self, key: f64) -> f32 {
        match self {
            Metric::Euclidean => key.max(0.0).sqrt() as f32,
            Metric::InnerProduct => (-key) as f32,
            _ => key as f32,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Metric {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "euclidean" | "l2" => Ok(Metric::Euclidean),
            "sqeuclidean" => Ok(Metric::SqEuclidean),
            "cosine" => Ok(Metric::Cosine),
            "correlation" | "pearson" => Ok(Metric::Correlation),
            "inner_product" | "ip" => Ok(Metric::InnerProduct),
            _ => Err(Error::arg(
                "metric",
                format!(
                    "unknown metric {s:?}; expected one of euclidean (l2), sqeuclidean, cosine, \
                     correlation (pearson), inner_product (ip)"
                ),
            )),
        }
    }
}

/// Partial sums kept per element pair: each is a chain of dependent additions, so one sum
/// runs at the adder's latency; eight run side by side in vector registers.
const SUM_LANES: usize = 8;

/// `S` float64 sums over the element pairs of `x` and `y` of `terms(x[i], y[i])`, each in
/// [`SUM_LANES`] partial sums added pairwise at the end. The order of the additions is fixed
/// by the length alone, so a key does not depend on where it is computed.
#[inline(always)]
fn pair_sums<A: Copy + Into<f64>, B: Copy + Into<f64>, const S: usize>(
    x: &[A],
    y: &[B],
    terms: impl Fn(f64, f64) -> [f64; S],
) -> [f64; S] {
    debug_assert_eq!(x.len(), y.len());
    let mut partial = [[0.0f64; SUM_LANES]; S];
    let (xs, ys) = (x.chunks_exact(SUM_LANES), y.chunks_exact(SUM_LANES));
    let (x_tail, y_tail) = (xs.remainder(), ys.remainder());
    for (a, b) in xs.zip(ys) {
        for t in 0..SUM_LANES {
            let v = terms(a[t].into(), b[t].into());
            for s in 0..S {
                partial[s][t] += v[s];
            }
        }
    }
    let mut sums = [0.0f64; S];
    for s in 0..S {
        let p = &partial[s];
        sums[s] = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
    }
    for (&a, &b) in x_tail.iter().zip(y_tail) {
        let v = terms(a.into(), b.into());
        for s in 0..S {
            sums[s] += v[s];
        }
    }
    sums
}

pub(crate) fn dot_f64(x: &[f32], y: &[f32]) -> f64 {
    pair_sums(x, y, |a, b| [a * b])[0]
}

pub(crate) fn sq_euclidean_f64(x: &[f32], y: &[f32]) -> f64 {
    pair_sums(x, y, |a, b| [(a - b) * (a - b)])[0]
}

/// [`sq_euclidean_f64`] to a row held in float64 (an f32 row's values, converted): the same
/// key, bit for bit, read from another copy of the row.
pub(crate) fn sq_euclidean_f64_to(x: &[f32], y: &[f64]) -> f64 {
    pair_sums(x, y, |a, b| [(a - b) * (a - b)])[0]
}

/// `sqrt(xx * yy)` rather than `sqrt(xx) * sqrt(yy)`: for a row and its duplicate the three
/// sums are equal, and sqrt(a * a) is a exactly in binary floating point, so the distance is
/// exactly 0 (the product stays within f64's range for values f32 distances accept).
fn cosine_distance_f64(x: &[f32], y: &[f32]) -> f64 {
    let [xy, xx, yy] = pair_sums(x, y, |a, b| [a * b, a * a, b * b]);
    1.0 - xy / (xx * yy).sqrt()
}

fn correlation_distance_f64(x: &[f32], y: &[f32]) -> f64 {
    let n = x.len() as f64;
    let [sx, sy] = pair_sums(x, y, |a, b| [a, b]);
    let (mx, my) = (sx / n, sy / n);
    let [sxy, sxx, syy] = pair_sums(x, y, |a, b| {
        let (a, b) = (a - mx, b - my);
        [a * b, a * a, b * b]
    });
    // As for cosine: exactly 0 for duplicates.
    1.0 - sxy / (sxx * syy).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded values of many magnitudes (no RNG dependency in unit tests).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        (0..n)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                unit * 10f32.powi((i % 9) as i32 - 4)
            })
            .collect()
    }

    #[test]
    fn a_row_and_its_duplicate_are_exactly_zero_apart() {
        // sqrt(s) * sqrt(s) differs from s for about half of all s: many rows, so that a
        // formula built that way would fail here.
        for seed in 0..300 {
            let len = [1, 3, 8, 13, 128, 961][seed as usize % 6];
            let x = values(len, seed);
            for metric in [Metric::Euclidean, Metric::SqEuclidean, Metric::Cosine, Metric::Correlation] {
                if metric == Metric::Correlation && len == 1 {
                    continue; // a single value has no spread: undefined
                }
                assert_eq!(metric.distance_f64(&x, &x), 0.0, "{metric} of a row of {len} values with itself");
            }
        }
    }

    #[test]
    fn sums_match_a_sequential_float64_reference() {
        for (len, seed) in [(1, 7), (7, 8), (8, 9), (9, 10), (100, 11), (1000, 12)] {
            let (x, y) = (values(len, seed), values(len, seed + 100));
            let pairs = || x.iter().zip(&y).map(|(&a, &b)| (a as f64, b as f64));
            let dot: f64 = pairs().map(|(a, b)| a * b).sum();
            let sq: f64 = pairs().map(|(a, b)| (a - b) * (a - b)).sum();
            let (xx, yy): (f64, f64) = (pairs().map(|(a, _)| a * a).sum(), pairs().map(|(_, b)| b * b).sum());
            let close = |got: f64, want: f64, scale: f64| (got - want).abs() <= 1e-13 * scale;
            assert!(close(dot_f64(&x, &y), dot, (xx * yy).sqrt()), "dot, {len} values");
            assert!(close(sq_euclidean_f64(&x, &y), sq, xx + yy), "squared euclidean, {len} values");
            let cosine = 1.0 - dot / (xx.sqrt() * yy.sqrt());
            assert!(close(Metric::Cosine.distance_f64(&x, &y), cosine, 1.0), "cosine, {len} values");
        }
    }
}
