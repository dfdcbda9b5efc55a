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
fn pair_sums<const S: usize>(x: &[f32], y: &[f32], terms: impl Fn(f64, f64) -> [f64; S]) -> [f64; S] {
    debug_assert_eq!(x.len(), y.len());
    let mut partial = [[0.0f64; SUM_LANES]; S];
    let (xs, ys) = (x.chunks_exact(SUM_LANES), y.chunks_exact(SUM_LANES));
    let (x_tail, y_tail) = (xs.remainder(), ys.remainder());
    for (a, b) in xs.zip(ys) {
        for t in 0..SUM_LANES {
            let v = terms(a[t] as f64, b[t] as f64);
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
        let v = terms(a as f64, b as f64);
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

fn cosine_distance_f64(x: &[f32], y: &[f32]) -> f64 {
    let [xy, xx, yy] = pair_sums(x, y, |a, b| [a * b, a * a, b * b]);
    1.0 - xy / (xx.sqrt() * yy.sqrt())
}

fn correlation_distance_f64(x: &[f32], y: &[f32]) -> f64 {
    let n = x.len() as f64;
    let [sx, sy] = pair_sums(x, y, |a, b| [a, b]);
    let (mx, my) = (sx / n, sy / n);
    let [sxy, sxx, syy] = pair_sums(x, y, |a, b| {
        let (a, b) = (a - mx, b - my);
        [a * b, a * a, b * b]
    });
    1.0 - sxy / (sxx.sqrt() * syy.sqrt())
}
