//! The intrinsic dimension of a data set, estimated from a sample, for the planner's choice
//! of the cover tree.
//!
//! TwoNN (Facco, d'Errico, Rodriguez and Laio, 2017): for a point, the ratio mu = r2 / r1 of
//! the distances to its second and first nearest neighbours follows a Pareto law whose
//! exponent is the intrinsic dimension m, whatever the density, so m = (s - 1) / sum(ln mu)
//! over s points. It needs only two neighbours of each sampled point, and the ratio does not
//! depend on the scale, so neighbours within an evenly spaced sample serve: the estimate is
//! then the dimension at the sample's scale, which is also the scale at which the tree's
//! upper levels must separate points. Duplicates are left out (r1 over distinct points).

use rayon::prelude::*;

use super::space::Space;
use crate::data::MatrixRef;
use crate::metric::Metric;

/// Rows in the sample: its cost is SAMPLE^2 distances.
const SAMPLE: usize = 1024;

/// The TwoNN estimate of the intrinsic dimension of `data`'s rows under `metric` (cosine
/// and correlation: of the rows scaled to unit length); `None` where fewer than three
/// distinct rows are sampled.
pub(crate) fn intrinsic_dimension(data: MatrixRef<'_>, metric: Metric) -> Option<f64> {
    let (n, d) = (data.rows(), data.cols());
    let s = n.min(SAMPLE);
    let space = Space::new(metric, d, 0.0);
    let mut sample = vec![0f32; s * d];
    for (i, out) in sample.chunks_mut(d.max(1)).enumerate() {
        space.place(data.row(i * n / s), out);
    }
    let row = |i: usize| &sample[i * d..][..d];
    let logs: Vec<f64> = (0..s)
        .into_par_iter()
        .filter_map(|i| {
            let (mut r1, mut r2) = (f64::INFINITY, f64::INFINITY);
            for j in (0..s).filter(|&j| j != i) {
                let sq = space.sq(row(i), row(j));
                if sq == 0.0 {
                    continue;
                }
                if sq < r1 {
                    (r1, r2) = (sq, r1);
                } else if sq < r2 {
                    r2 = sq;
                }
            }
            // ln(r2 / r1) of the distances, from their squares.
            r2.is_finite().then(|| 0.5 * (r2 / r1).ln())
        })
        .collect();
    let sum: f64 = logs.iter().sum();
    (logs.len() >= 3 && sum > 0.0).then(|| (logs.len() - 1) as f64 / sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points filling a square, a cube and a 6-cube embedded in 40 columns by a fixed
    /// linear map: estimates near 2, 3 and 6.
    #[test]
    fn estimates_the_dimension_of_linear_embeddings() {
        let mut uniform = super::super::uniform(0x2545F4914F6CDD1D);
        let d = 40;
        let map: Vec<f32> = (0..6 * d).map(|_| uniform() - 0.5).collect();
        for m in [2usize, 3, 6] {
            let n = 4000;
            let mut values = Vec::with_capacity(n * d);
            for _ in 0..n {
                let z: Vec<f32> = (0..m).map(|_| uniform()).collect();
                values.extend((0..d).map(|c| (0..m).map(|a| z[a] * map[a * d + c]).sum::<f32>()));
            }
            let data = MatrixRef::new(&values, n, d).unwrap();
            let estimate = intrinsic_dimension(data, Metric::Euclidean).unwrap();
            assert!((estimate - m as f64).abs() < 0.25 * m as f64, "m = {m}: estimated {estimate}");
        }
    }
}
