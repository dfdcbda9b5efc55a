//! The GPU grid's plan and proof (Gowanlock's HybridKNN-Join, sections 4.3-4.4): the cell
//! width from a sample of the data's k-th neighbour distances, and whether a query's grid
//! candidates prove its answer.
//!
//! A query's candidates are the `kc` nearest points by f32 key among the 3^d cells around its
//! own (`shaders/grid.wgsl`). Every point outside those cells is at least `reach` away (the
//! cell width less what f32 cell coordinates may be off by), and every point inside them
//! that is not a candidate has an f32 key no smaller than the largest candidate's. The
//! answer is proven when its k-th exact key is below both, the f32 key's own error taken off.

use crate::gpu::{GridCells, GridProof, GridRows, GRID_FAILED};

/// Fraction of the sampled queries whose k-th neighbour lies within the cell width: the
/// grid is sized so that about this many queries succeed on the GPU; the rest (sparse
/// regions) fail and go to the kd-tree.
const SUCCESS_QUANTILE: f64 = 0.8;

/// Query rows sampled for the cell width.
pub(super) const SAMPLE_ROWS: usize = 256;

/// Fewest corpus points the cell width is estimated from (all of them where there are
/// fewer), and at least this many times k + 1.
const SUBSAMPLE_POINTS: usize = 1 << 16;
const SUBSAMPLE_PER_NEIGHBOUR: usize = 64;

/// Most cells a side: the bound below on how far f32 cell coordinates may be off grows with
/// it (`reach`).
const MAX_SIDE: f64 = 65536.0;

/// Most cells in all: ids are 32-bit.
const MAX_CELLS: f64 = 4.0e9;

/// Relative error of an f32 squared distance of `MAX_DIM` terms against the exact one (each
/// difference and fused multiply-add rounds once: (d + 2) 2^-24 < 2^-20), with room for the
/// float64 key's own.
const F32_KEY_ERROR: f64 = 1.0 / (1u64 << 19) as f64;

/// Absolute error of an f32 key whose terms fall to subnormals.
const F32_KEY_FLOOR: f64 = 1e-36;

/// A kept f32 key `key` bounds the exact keys of the points its heap left out from below by
/// `key * KEPT_KEY_SCALE - KEPT_KEY_FLOOR`.
const KEPT_KEY_SCALE: f64 = 1.0 - F32_KEY_ERROR;
const KEPT_KEY_FLOOR: f64 = F32_KEY_FLOOR;

/// The grid of a corpus and what its cells guarantee.
#[derive(Clone, Debug)]
pub(super) struct GridPlan {
    pub(super) cells: GridCells,
    /// Squared distance within which the 3^d cells around a query hold every point.
    pub(super) reach_key: f64,
}

impl GridPlan {
    /// What the GPU needs to prove queries' answers against this grid as [`outside_bound`]
    /// does (`grid_prove.wgsl`): `rows` of each point, each query's excluded row.
    pub(super) fn proof<'a>(&self, rows: &'a GridRows, excluded: &'a [u32], k: usize) -> GridProof<'a> {
        GridProof {
            rows,
            excluded,
            k,
            reach_key: self.reach_key,
            kept_scale: KEPT_KEY_SCALE,
            kept_floor: KEPT_KEY_FLOOR,
        }
    }
}

/// The grid for `points` (distinct corpus points) given the squared k-th neighbour
/// distances of sampled queries, or `None` where no grid of 32-bit cell ids is fine enough
/// to help (every sampled query would fail).
pub(super) fn plan<const K: usize>(points: &[[f64; K]], mut sampled_kth_keys: Vec<f64>) -> Option<GridPlan> {
    if points.is_empty() || sampled_kth_keys.is_empty() {
        return None;
    }
    sampled_kth_keys.sort_unstable_by(f64::total_cmp);
    let at = ((sampled_kth_keys.len() as f64 * SUCCESS_QUANTILE) as usize).min(sampled_kth_keys.len() - 1);
    // The cell width that holds the quantile's k-th neighbour within `reach` (a few per cent
    // less than the width).
    plan_of_width(points, sampled_kth_keys[at].sqrt() * 1.05)
}

/// The grid of `plan` rebuilt with cells `factor` times as wide (section 4.4's re-index, for
/// a grid too fine for the queries it meets, with [`WIDENING`]), or `None` where no wider
/// grid is possible.
pub(super) fn widened<const K: usize>(points: &[[f64; K]], plan: &GridPlan, factor: f64) -> Option<GridPlan> {
    // Two cells a side: the cells around every cell already hold every point.
    if plan.cells.sides.iter().all(|&side| side <= 2) {
        return None;
    }
    let width = 1.0 / f64::from(plan.cells.inv);
    let wider = plan_of_width(points, width * factor)?;
    (wider.cells.inv < plan.cells.inv).then_some(wider)
}

/// Growth of the cell width at a re-index.
pub(super) const WIDENING: f64 = 1.5;

/// The grid of cells of (about) `width` over `points`, no finer than the id's bits and
/// MAX_SIDE allow.
fn plan_of_width<const K: usize>(points: &[[f64; K]], mut width: f64) -> Option<GridPlan> {
    if points.is_empty() {
        return None;
    }
    let lo: [f64; K] = std::array::from_fn(|j| points.iter().map(|p| p[j]).fold(f64::INFINITY, f64::min));
    let hi: [f64; K] = std::array::from_fn(|j| points.iter().map(|p| p[j]).fold(f64::NEG_INFINITY, f64::max));
    let extent = |j: usize| (hi[j] - lo[j]).max(0.0);
    let widest = (0..K).map(extent).fold(0.0, f64::max);
    width = width.max(widest / (MAX_SIDE - 2.0));
    let volume: f64 = (0..K).map(|j| extent(j).max(width)).product();
    width = width.max((volume / MAX_CELLS).powf(1.0 / K as f64) * 1.01);
    if !(width.is_finite() && width > 0.0) {
        return None;
    }
    let inv = (1.0 / width) as f32;
    if !(inv.is_finite() && inv > 0.0) {
        return None;
    }
    let width = 1.0 / f64::from(inv);
    let sides: Vec<u32> = (0..K).map(|j| (extent(j) * f64::from(inv)).floor() as u32 + 1).collect();
    let cells = GridCells { lo: lo.iter().map(|&l| l as f32).collect(), sides, inv };
    cells.strides()?;
    let most = f64::from(*cells.sides.iter().max().expect("K >= 1"));
    // Coordinates computed in f32 are off by less than (side + 2) 3 2^-24 cells; twice that
    // between two points, with room to spare.
    let reach = width * (1.0 - 8.0 * (most + 2.0) / (1u64 << 24) as f64);
    Some(GridPlan { cells, reach_key: reach * reach * (1.0 - F32_KEY_ERROR) })
}

/// The squared distance from each of `queries` within which its k answers lie (k + 1 rows
/// of `points`, one of which may be its own; `rows(p)` is how many rows point p stands for),
/// estimated from an evenly spaced subsample of the points, so that the grid is planned
/// before any tree is built. Exact where the subsample is every point. Otherwise the k + 1
/// nearest distinct points of the subsample are taken (rows are not scaled with it): in a
/// subsample of a fraction f of the points, a ball holding k + 1 of them holds (k + 1) / f
/// points of all, and where the density is even over that ball, the radius that holds
/// k + 1 of all is f^(1/d) as large. An estimate off in either direction costs only speed:
/// the grid's answers are proven one by one.
pub(super) fn estimated_kth_keys<const K: usize>(
    queries: &[[f64; K]],
    points: &[[f64; K]],
    rows: &(dyn Fn(usize) -> usize + Sync),
    k: usize,
) -> Vec<f64> {
    use rayon::prelude::*;
    let m = points.len().min(SUBSAMPLE_POINTS.max(SUBSAMPLE_PER_NEIGHBOUR * (k + 1)));
    let every = m == points.len();
    let chosen: Vec<usize> = (0..m).map(|i| i * points.len() / m).collect();
    let scale = (m as f64 / points.len() as f64).powf(2.0 / K as f64);
    queries
        .par_iter()
        .filter_map(|q| {
            let mut keys: Vec<(f64, usize)> = chosen
                .iter()
                .map(|&p| ((0..K).map(|j| (q[j] - points[p][j]) * (q[j] - points[p][j])).sum(), p))
                .collect();
            if !every {
                return (k < m).then(|| keys.select_nth_unstable_by(k, |a, b| a.0.total_cmp(&b.0)).1 .0 * scale);
            }
            // k + 1 rows lie among the k + 1 nearest points (each stands for a row at least).
            if k + 1 < keys.len() {
                keys.select_nth_unstable_by(k, |a, b| a.0.total_cmp(&b.0));
                keys.truncate(k + 1);
            }
            keys.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
            let mut held = 0;
            keys.iter()
                .find(|&&(_, p)| {
                    held += rows(p);
                    held > k
                })
                .or(keys.last())
                .map(|&(key, _)| key)
        })
        .collect()
}

/// The lower bound on the exact key of every corpus point a query's grid candidates left
/// out: `seen` points were in its cells, `kc` kept, the largest kept with f32 key `largest`;
/// none where the GPU could not answer the query.
pub(super) fn outside_bound(plan: &GridPlan, seen: u32, kc: usize, largest: f32) -> f64 {
    if seen == GRID_FAILED {
        return f64::NEG_INFINITY;
    }
    if (seen as usize) <= kc {
        return plan.reach_key;
    }
    if !largest.is_finite() {
        return f64::NEG_INFINITY;
    }
    let kept = f64::from(largest) * KEPT_KEY_SCALE - KEPT_KEY_FLOOR;
    plan.reach_key.min(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_sized_by_the_sampled_quantile() {
        let points: Vec<[f64; 2]> = (0..100).flat_map(|i| (0..100).map(move |j| [i as f64, j as f64])).collect();
        let keys: Vec<f64> = (1..=10).map(f64::from).collect();
        let plan = plan(&points, keys).unwrap();
        // The 80% quantile of keys 1..10 is 9: width 3 x 1.05.
        let width = 1.0 / f64::from(plan.cells.inv);
        assert!((width - 3.15).abs() < 1e-3, "{width}");
        assert_eq!(plan.cells.sides, vec![32, 32]);
        assert!(plan.reach_key < width * width && plan.reach_key > 0.99 * width * width);
    }

    #[test]
    fn kth_keys_are_exact_over_every_point_and_close_over_a_subsample() {
        let line: Vec<[f64; 1]> = (0..100).map(|i| [f64::from(i)]).collect();
        // k + 1 = 5 rows: points 50, 49, 51, 48, 52.
        assert_eq!(estimated_kth_keys(&[[50.0]], &line, &|_| 1, 4), vec![4.0]);
        // Point 50 stands for 5 rows.
        assert_eq!(estimated_kth_keys(&[[50.0]], &line, &|p| if p == 50 { 5 } else { 1 }, 4), vec![0.0]);
        // Fewer rows than k + 1 in all: the farthest point.
        assert_eq!(estimated_kth_keys(&[[0.0]], &line[..3], &|_| 1, 4), vec![4.0]);
        // A 300 x 300 lattice, subsampled: the 9th nearest point is at squared distance 2.
        let lattice: Vec<[f64; 2]> =
            (0..300).flat_map(|i| (0..300).map(move |j| [f64::from(i), f64::from(j)])).collect();
        let queries = [[150.0, 150.0], [100.0, 200.0], [77.0, 31.0]];
        for key in estimated_kth_keys(&queries, &lattice, &|_| 1, 8) {
            assert!((1.0..=4.0).contains(&key), "{key}");
        }
    }

    #[test]
    fn a_widened_grid_has_wider_cells_until_one_cell_holds_all() {
        let points: Vec<[f64; 2]> = (0..100).flat_map(|i| (0..100).map(move |j| [i as f64, j as f64])).collect();
        let mut plan = plan(&points, vec![1.0]).unwrap();
        let mut steps = 0;
        while let Some(wider) = widened(&points, &plan, WIDENING) {
            assert!(wider.cells.inv < plan.cells.inv && wider.reach_key > plan.reach_key);
            plan = wider;
            steps += 1;
        }
        // From cells of 1.05 to two a side, 1.5x a step.
        assert!(
            (9..=12).contains(&steps) && plan.cells.sides.iter().all(|&s| s <= 2),
            "{steps} {:?}",
            plan.cells.sides
        );
    }

    #[test]
    fn grids_stay_within_32_bit_ids() {
        let points: Vec<[f64; 3]> = vec![[0.0; 3], [1e6, 1e6, 1e6]];
        let plan = plan(&points, vec![0.0]).unwrap();
        let cells: f64 = plan.cells.sides.iter().map(|&s| f64::from(s)).product();
        assert!(cells <= MAX_CELLS && plan.cells.sides.iter().all(|&s| f64::from(s) <= MAX_SIDE));
    }

    #[test]
    fn a_heap_that_overflowed_bounds_what_it_left_out() {
        let points: Vec<[f64; 1]> = (0..10).map(|i| [f64::from(i)]).collect();
        let plan = plan(&points, vec![4.0]).unwrap();
        assert_eq!(outside_bound(&plan, 3, 5, 1.0), plan.reach_key);
        let bound = outside_bound(&plan, 9, 5, 1.0);
        assert!(bound < 1.0 && bound > 0.999);
        assert_eq!(outside_bound(&plan, 9, 5, f32::INFINITY), f64::NEG_INFINITY);
        assert_eq!(outside_bound(&plan, GRID_FAILED, 5, 1.0), f64::NEG_INFINITY);
    }
}
