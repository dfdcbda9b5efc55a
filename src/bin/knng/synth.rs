//! Seeded synthetic data for `demo` and `bench`, and the float64 check of `demo`.

use rayon::prelude::*;

use knng::{Matrix, Metric, Neighbors};

/// SplitMix64: tiny, fast, and good enough for test data; every stream is fixed by its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller; one of the pair is enough here).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform();
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Points with known cluster labels.
pub struct Synthetic {
    pub data: Matrix,
    pub labels: Vec<u32>,
    pub clusters: usize,
    pub latent: usize,
}

/// `n` points in `d` dimensions: Gaussian clusters in a low-dimensional latent space, mapped
/// into `d` dimensions by a fixed random map with a smooth nonlinearity, plus a little noise.
/// Real embeddings look like this (much less than `d` intrinsic dimensions, clustered), and
/// uniform noise, where all distances are nearly equal, would not.
pub fn clustered(n: usize, d: usize, seed: u64) -> Synthetic {
    let latent = d.clamp(1, 8);
    let clusters = 12;
    let mut rng = Rng::new(seed);
    let centres: Vec<f64> = (0..clusters * latent).map(|_| 3.0 * rng.normal()).collect();
    let scale = 1.0 / (latent as f64).sqrt();
    let linear: Vec<f64> = (0..d * latent).map(|_| scale * rng.normal()).collect();
    let bend: Vec<f64> = (0..d * latent).map(|_| scale * rng.normal()).collect();
    let phase: Vec<f64> = (0..d).map(|_| std::f64::consts::TAU * rng.uniform()).collect();
    let mut data = vec![0.0f32; n * d];
    let mut labels = vec![0u32; n];
    data.par_chunks_mut(d).zip(labels.par_iter_mut()).enumerate().for_each(|(i, (row, label))| {
        // One stream per row, so the data do not depend on the thread count.
        let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0xd134_2543_de82_ef95).wrapping_add(1));
        let c = (rng.next_u64() % clusters as u64) as usize;
        *label = c as u32;
        let z: Vec<f64> = (0..latent).map(|t| centres[c * latent + t] + 0.6 * rng.normal()).collect();
        for (j, x) in row.iter_mut().enumerate() {
            let a: f64 = (0..latent).map(|t| linear[j * latent + t] * z[t]).sum();
            let b: f64 = (0..latent).map(|t| bend[j * latent + t] * z[t]).sum();
            *x = (a + 0.5 * (b + phase[j]).sin() + 0.02 * rng.normal()) as f32;
        }
    });
    Synthetic { data: Matrix::new(data, n, d).expect("n x d values"), labels, clusters, latent }
}

/// Checks row `i` of a kNN graph against a float64 brute force. Ties closer than f32
/// rounding may be broken either way, so the comparison is of the sorted float64 distances
/// of the returned set against the true k smallest, not of the indices.
pub fn check_row(data: &Matrix, nb: &Neighbors, i: usize, metric: Metric, include_self: bool) -> Result<(), String> {
    let x = data.view().row(i);
    let sign = if metric.larger_is_nearer() { -1.0 } else { 1.0 };
    let key = |j: usize| sign * metric.distance_f64(x, data.view().row(j));
    let mut all: Vec<f64> = (0..data.rows()).filter(|&j| include_self || j != i).map(key).collect();
    let k = nb.k;
    all.select_nth_unstable_by(k - 1, f64::total_cmp);
    let mut truth = all[..k].to_vec();
    truth.sort_by(f64::total_cmp);
    let mut got: Vec<f64> = nb.indices_of(i).iter().map(|&j| key(j as usize)).collect();
    got.sort_by(f64::total_cmp);
    let mut seen = nb.indices_of(i).to_vec();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != k {
        return Err(format!("row {i}: the same neighbour is listed twice"));
    }
    if !include_self && nb.indices_of(i).contains(&(i as u32)) {
        return Err(format!("row {i}: lists itself"));
    }
    for r in 0..k {
        let tol = 1e-6 * truth[r].abs().max(1e-3);
        if (got[r] - truth[r]).abs() > tol {
            return Err(format!(
                "row {i}: neighbour {r} is at {} but the float64 brute force has {}",
                sign * got[r],
                sign * truth[r]
            ));
        }
    }
    for (&j, &reported) in nb.indices_of(i).iter().zip(nb.distances_of(i)) {
        let exact = metric.distance_f64(x, data.view().row(j as usize));
        if (reported as f64 - exact).abs() > 1e-5 * exact.abs().max(1e-3) {
            return Err(format!("row {i}: distance to {j} is reported as {reported}, exactly {exact}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_are_seeded_and_shaped() {
        let a = clustered(50, 16, 7);
        let b = clustered(50, 16, 7);
        assert_eq!(a.data, b.data);
        assert_eq!((a.data.rows(), a.data.cols()), (50, 16));
        assert_ne!(clustered(50, 16, 8).data, a.data);
        assert!(a.data.as_slice().iter().all(|v| v.is_finite()));
    }

    #[test]
    fn normal_has_unit_variance() {
        let mut rng = Rng::new(3);
        let xs: Vec<f64> = (0..20000).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "{mean} {var}");
    }
}
