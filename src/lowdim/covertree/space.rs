//! The euclidean space a cover tree is built in, and how far its fast distances may be
//! from the true ones.
//!
//! Euclidean and squared euclidean distances live in the rows themselves. Cosine and
//! correlation distances are, for rows scaled to unit length (and centred, for correlation),
//! half the squared euclidean distance: the tree holds those unit rows, and a key `c` of
//! either metric is the chord `sqrt(2 c)`.
//!
//! The tree and its queries compute distances in f32 for speed; the answer is ranked by the
//! float64 keys of `Metric::rank_key_f64`. For the pruning to lose nothing, every f32
//! distance is turned into an interval that holds the true distance between the exact
//! vectors (the original rows, or their exact unit forms), and every float64 key into an
//! upper bound on the true distance of any point whose key is at most it. Each bound below
//! is loose by a factor of two or more: looser bounds only visit a few more nodes.

use rayon::prelude::*;

use crate::data::MatrixRef;
use crate::metric::Metric;

/// Unit roundoff of f32 and of f64.
const U32: f64 = 1.0 / (1u64 << 24) as f64;
const U64: f64 = 1.0 / (1u64 << 53) as f64;

/// The space of one tree: how rows become its vectors and how its distances are bounded.
#[derive(Clone, Copy, Debug)]
pub(super) struct Space {
    metric: Metric,
    d: usize,
    /// The relative error of centring the rows in float64 (correlation only; else 0).
    centring: f64,
    /// Relative error of an f32 sum of squared differences of `d` terms (eight lanes, then
    /// the lanes and the tail): each term rounds at most 3 times, each sum at most d + 24.
    sum_rel: f64,
    /// Absolute error of that sum from terms that underflow into f32's subnormals.
    sum_abs: f64,
    /// How far a tree vector may be from the exact vector it stands for (0 for the rows
    /// themselves).
    vector_err: f64,
    /// How far a float64 key may be above or below the true key, relatively (euclidean
    /// metrics) or absolutely (the others).
    key_err: f64,
}

impl Space {
    /// The space for `metric` over `d` columns, for rows whose centring errs by at most
    /// `centring` ([`Space::centring_of`] of every matrix whose rows are placed in it).
    pub(super) fn new(metric: Metric, d: usize, centring: f64) -> Self {
        let df = d as f64;
        let (vector_err, key_err) = match metric {
            Metric::Euclidean | Metric::SqEuclidean => (0.0, 2.0 * (df + 8.0) * U64),
            Metric::Cosine => (2.0 * U32 + 4.0 * (df + 4.0) * U64, 4.0 * (df + 8.0) * U64),
            _ => (2.0 * U32 + 2.0 * centring, 8.0 * centring + 4.0 * (df + 8.0) * U64),
        };
        Space {
            metric,
            d,
            centring,
            sum_rel: 2.0 * (3.0 * df + 24.0) * U32,
            sum_abs: 2.0 * (df + 1.0) * f64::from(f32::from_bits(1)),
            vector_err,
            key_err,
        }
    }

    /// How far the rows of `m` centred in float64 may be from their exact centred forms,
    /// relative to their length, where `metric` centres them (else 0). Centring errs by
    /// about (d + 2) sqrt(d) u max|x| per row, which can be large beside the centred row's
    /// length where the rows share a large offset: taken from the rows themselves.
    pub(super) fn centring_of(metric: Metric, m: MatrixRef<'_>) -> f64 {
        if metric != Metric::Correlation {
            return 0.0;
        }
        (0..m.rows()).into_par_iter().map(|i| centring_error(m.row(i))).reduce(|| 0.0, f64::max)
    }

    /// This space for distances summed by a device that may flush subnormal values to zero
    /// (a GPU's f32 arithmetic): each term may then lose up to the least normal value.
    pub(super) fn flushing_subnormals(self) -> Self {
        Space { sum_abs: 2.0 * (self.d as f64 + 1.0) * f64::from(f32::MIN_POSITIVE), ..self }
    }

    /// This space's error terms as the GPU's cover-set kernel takes them, rounded up to f32:
    /// thresholds computed from them only decide how much the GPU collects, never the answer.
    pub(super) fn gpu_bounds(&self) -> crate::gpu::CoverSetBounds {
        let up = |x: f64| (x * (1.0 + 1e-6)) as f32;
        crate::gpu::CoverSetBounds {
            euclidean: Space::places_rows_as_given(self.metric),
            sum_rel: up(self.sum_rel),
            sum_abs: up(self.sum_abs),
            vector_err: up(self.vector_err),
            key_err: up(self.key_err),
        }
    }

    /// Whether a row's tree vector is the row itself (euclidean metrics), so that a tree
    /// can read its points from the corpus instead of holding copies.
    pub(crate) fn places_rows_as_given(metric: Metric) -> bool {
        matches!(metric, Metric::Euclidean | Metric::SqEuclidean)
    }

    /// The centring error this space was made for.
    pub(super) fn centring(&self) -> f64 {
        self.centring
    }

    /// This space, its bounds widened to hold for the rows of `queries` too.
    pub(super) fn with_rows_of(self, queries: MatrixRef<'_>) -> Self {
        let centring = Space::centring_of(self.metric, queries);
        if centring <= self.centring {
            return self;
        }
        Space::new(self.metric, self.d, centring)
    }

    /// Writes the tree vector of `row` to `out` (`d` values).
    pub(super) fn place(&self, row: &[f32], out: &mut [f32]) {
        match self.metric {
            _ if Space::places_rows_as_given(self.metric) => out.copy_from_slice(row),
            Metric::Cosine => unit(row.iter().map(|&x| f64::from(x)), row.len(), out),
            _ => {
                let mean = row.iter().map(|&x| f64::from(x)).sum::<f64>() / row.len() as f64;
                unit(row.iter().map(|&x| f64::from(x) - mean), row.len(), out)
            }
        }
    }

    /// The squared distance of two tree vectors, in f32 (in float64 where f32 overflows).
    #[inline]
    pub(super) fn sq(&self, a: &[f32], b: &[f32]) -> f64 {
        let fast = sq_f32(a, b);
        if fast.is_finite() {
            f64::from(fast)
        } else {
            crate::metric::sq_euclidean_f64(a, b)
        }
    }

    /// `sq` of `vector` and each of four tree vectors, the vector read once for the four.
    #[inline]
    pub(super) fn sq4(&self, vector: &[f32], others: [&[f32]; 4]) -> [f64; 4] {
        let fast = sq4_f32(vector, others);
        std::array::from_fn(|i| {
            if fast[i].is_finite() {
                f64::from(fast[i])
            } else {
                crate::metric::sq_euclidean_f64(vector, others[i])
            }
        })
    }

    /// The true distance between the exact vectors behind two tree vectors whose `sq` is
    /// `sq`: at least the first, at most the second.
    #[inline]
    pub(super) fn bounds(&self, sq: f64) -> (f64, f64) {
        let lo = ((sq - self.sum_abs).max(0.0) / (1.0 + self.sum_rel)).sqrt() - 2.0 * self.vector_err;
        let hi = ((sq + self.sum_abs) / (1.0 - self.sum_rel)).sqrt() + 2.0 * self.vector_err;
        (lo, hi)
    }

    /// An upper bound on the true distance of any point whose float64 key is at most `key`.
    #[inline]
    pub(super) fn key_reach(&self, key: f64) -> f64 {
        match self.metric {
            Metric::Euclidean | Metric::SqEuclidean => (key * (1.0 + self.key_err)).sqrt(),
            _ => (2.0 * (key + self.key_err)).max(0.0).sqrt(),
        }
    }

    /// At least the true distance of any point whose float64 key is at most that of some
    /// point at a true distance of at most `distance`: beyond it, no point can have a key
    /// among the k least where k rows lie within `distance`.
    #[inline]
    pub(super) fn reach_of(&self, distance: f64) -> f64 {
        let key = match self.metric {
            Metric::Euclidean | Metric::SqEuclidean => distance * distance * (1.0 + self.key_err),
            _ => 0.5 * distance * distance + self.key_err,
        };
        self.key_reach(key)
    }

    pub(super) fn dims(&self) -> usize {
        self.d
    }

    pub(super) fn metric(&self) -> Metric {
        self.metric
    }
}

/// Writes `values` (of length `len`, computed in float64) scaled to unit length to `out`.
fn unit(values: impl Iterator<Item = f64> + Clone, len: usize, out: &mut [f32]) {
    debug_assert_eq!(out.len(), len);
    let norm = values.clone().map(|v| v * v).sum::<f64>().sqrt();
    for (o, v) in out.iter_mut().zip(values) {
        *o = (v / norm) as f32;
    }
}

/// A bound on how far the centred form of `row` computed in float64 may be from the exact
/// one, relative to its length.
fn centring_error(row: &[f32]) -> f64 {
    let d = row.len() as f64;
    let mean = row.iter().map(|&x| f64::from(x)).sum::<f64>() / d;
    let length = row.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>().sqrt();
    let largest = row.iter().map(|&x| f64::from(x).abs()).fold(0.0, f64::max);
    4.0 * (d + 2.0) * d.sqrt() * U64 * largest / length
}

/// Lanes of the f32 sum: enough for the compiler to keep two vector registers of partial
/// sums.
const LANES: usize = 16;

/// Sum of squared differences in f32, in [`LANES`] partial sums: with AVX2 and FMA where
/// the processor has them (the tree's queries spend most of their time here), else with
/// the target's baseline vectors.
#[inline]
fn sq_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the processor has the features the function is compiled for.
        return unsafe { sq_f32_avx2(a, b) };
    }
    sq_f32_lanes::<false>(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn sq_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    sq_f32_lanes::<true>(a, b)
}

/// [`sq_f32`] of `a` and each of `bs`, with the same lanes and order of additions.
#[inline]
fn sq4_f32(a: &[f32], bs: [&[f32]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the processor has the features the function is compiled for.
        return unsafe { sq4_f32_avx2(a, bs) };
    }
    bs.map(|b| sq_f32_lanes::<false>(a, b))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn sq4_f32_avx2(a: &[f32], bs: [&[f32]; 4]) -> [f32; 4] {
    let (mut s0, mut s1, mut s2, mut s3) = ([0f32; LANES], [0f32; LANES], [0f32; LANES], [0f32; LANES]);
    let xs = a.chunks_exact(LANES);
    let tail = xs.remainder().len();
    let [b0, b1, b2, b3] = bs.map(|b| b.chunks_exact(LANES));
    for ((((x, y0), y1), y2), y3) in xs.zip(b0).zip(b1).zip(b2).zip(b3) {
        for l in 0..LANES {
            let (t0, t1, t2, t3) = (x[l] - y0[l], x[l] - y1[l], x[l] - y2[l], x[l] - y3[l]);
            s0[l] = t0.mul_add(t0, s0[l]);
            s1[l] = t1.mul_add(t1, s1[l]);
            s2[l] = t2.mul_add(t2, s2[l]);
            s3[l] = t3.mul_add(t3, s3[l]);
        }
    }
    let finish = |acc: [f32; LANES], b: &[f32]| {
        let mut sum: f32 = acc.iter().sum();
        for (x, y) in a[a.len() - tail..].iter().zip(&b[b.len() - tail..]) {
            let t = x - y;
            sum += t * t;
        }
        sum
    };
    [finish(s0, bs[0]), finish(s1, bs[1]), finish(s2, bs[2]), finish(s3, bs[3])]
}

/// `FMA`: each square added in one fused step (one rounding fewer; fused multiply-adds are
/// only fast where the processor has them).
#[inline(always)]
fn sq_f32_lanes<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (xs, ys) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (x_tail, y_tail) = (xs.remainder(), ys.remainder());
    for (x, y) in xs.zip(ys) {
        for l in 0..LANES {
            let t = x[l] - y[l];
            acc[l] = if FMA { t.mul_add(t, acc[l]) } else { acc[l] + t * t };
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (x, y) in x_tail.iter().zip(y_tail) {
        let t = x - y;
        sum += t * t;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interval of an f32 distance holds the float64 distance between the exact
    /// vectors, for rows of many magnitudes and for unit rows, and a key's reach holds the
    /// distance of a point at that key.
    #[test]
    fn bounds_hold_the_float64_distances() {
        let mut uniform = super::super::uniform(0x2545F4914F6CDD1D);
        let mut next = || {
            let scale = [1e-20f32, 1e-3, 1.0, 1e4, 1e18][((uniform() * 5.0) as usize).min(4)];
            (uniform() - 0.5) * scale
        };
        for d in [1usize, 7, 64, 1000] {
            let values: Vec<f32> = (0..20 * d).map(|_| next()).collect();
            let rows = MatrixRef::new(&values, 20, d).unwrap();
            for metric in [Metric::Euclidean, Metric::Cosine, Metric::Correlation] {
                if metric == Metric::Correlation && d == 1 {
                    continue;
                }
                let space = Space::new(metric, d, Space::centring_of(metric, rows));
                let chord = |key: f64| match metric {
                    Metric::Euclidean => key.sqrt(),
                    _ => (2.0 * key.max(0.0)).sqrt(),
                };
                let mut placed = vec![0f32; 20 * d];
                for (i, out) in placed.chunks_mut(d).enumerate() {
                    space.place(rows.row(i), out);
                }
                for i in 0..20 {
                    for j in 0..20 {
                        let (lo, hi) = space.bounds(space.sq(&placed[i * d..][..d], &placed[j * d..][..d]));
                        let key = metric.rank_key_f64(rows.row(i), rows.row(j));
                        let exact = chord(key);
                        assert!(
                            lo <= exact * (1.0 + 1e-12) && exact <= hi * (1.0 + 1e-12),
                            "{metric} d={d}: {lo} {exact} {hi}"
                        );
                        assert!(space.key_reach(key) >= exact, "{metric} d={d}");
                        assert!(space.reach_of(exact) >= space.key_reach(key), "{metric} d={d}");
                        // Four at a time, as the queries compute them.
                        let others = [0, 3, 7, j];
                        let four = space.sq4(&placed[i * d..][..d], others.map(|r| &placed[r * d..][..d]));
                        for (sq, other) in four.into_iter().zip(others) {
                            let (lo, hi) = space.bounds(sq);
                            let exact = chord(metric.rank_key_f64(rows.row(i), rows.row(other)));
                            assert!(lo <= exact * (1.0 + 1e-12) && exact <= hi * (1.0 + 1e-12), "{metric} d={d}: four");
                        }
                    }
                }
            }
        }
    }
}
