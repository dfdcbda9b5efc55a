//! The order low-dimensional work is done in: along a Morton (Z-order) curve over the
//! corpus's bounding box. Distinct points stored in that order keep neighbours near each
//! other in memory, and queries answered in that order meet the tree nodes, candidate
//! points and grid cells their predecessors just read, so that they come from cache rather
//! than memory; in input order (often random) every one of them is a cache miss.

use rayon::prelude::*;

use crate::data::MatrixRef;

/// Positions along the curve of the cells of a grid over a bounding box: 64 / K bits of
/// each coordinate, interleaved.
#[derive(Clone, Debug)]
pub(super) struct Curve<const K: usize> {
    lo: [f64; K],
    /// Cells per unit of each coordinate.
    scale: [f64; K],
}

impl<const K: usize> Curve<K> {
    const BITS: u32 = 64 / K as u32;

    /// The curve over the bounding box of `rows` (K coordinates each).
    pub(super) fn over(rows: MatrixRef<'_>) -> Self {
        let (lo, hi) = (0..rows.rows())
            .into_par_iter()
            .fold(
                || ([f64::INFINITY; K], [f64::NEG_INFINITY; K]),
                |(mut lo, mut hi), i| {
                    for (j, &x) in rows.row(i).iter().enumerate() {
                        lo[j] = lo[j].min(f64::from(x));
                        hi[j] = hi[j].max(f64::from(x));
                    }
                    (lo, hi)
                },
            )
            .reduce(
                || ([f64::INFINITY; K], [f64::NEG_INFINITY; K]),
                |a, b| (std::array::from_fn(|j| a.0[j].min(b.0[j])), std::array::from_fn(|j| a.1[j].max(b.1[j]))),
            );
        let cells = (1u64 << Self::BITS) as f64;
        let scale = std::array::from_fn(|j| {
            let extent = hi[j] - lo[j];
            if extent.is_finite() && extent > 0.0 {
                cells / extent
            } else {
                0.0
            }
        });
        Curve { lo: lo.map(|l| if l.is_finite() { l } else { 0.0 }), scale }
    }

    /// The position of point `x` (clamped to the box; NaN counts as its low corner).
    pub(super) fn key(&self, x: &[f32]) -> u64 {
        let most = ((1u64 << Self::BITS) - 1) as f64;
        let cell: [u64; K] =
            std::array::from_fn(|j| ((f64::from(x[j]) - self.lo[j]) * self.scale[j]).clamp(0.0, most) as u64);
        let mut key = 0u64;
        for bit in (0..Self::BITS).rev() {
            for c in cell {
                key = (key << 1) | ((c >> bit) & 1);
            }
        }
        key
    }

    /// Rows `first..first + len` of `queries` in the order of their positions (ties by row),
    /// as offsets from `first`.
    pub(super) fn order(&self, queries: MatrixRef<'_>, first: usize, len: usize) -> Vec<u32> {
        let mut keyed: Vec<(u64, u32)> =
            (0..len).into_par_iter().map(|r| (self.key(queries.row(first + r)), r as u32)).collect();
        keyed.par_sort_unstable();
        keyed.into_iter().map(|(_, r)| r).collect()
    }
}

/// The answer slots (k entries a row in each of `indices` and `distances`) of rows `order`,
/// in that order: each row's slots once, so that threads may fill them in any grouping.
pub(super) fn slots_in_order<'o>(
    indices: &'o mut [u32],
    distances: &'o mut [f32],
    k: usize,
    order: &[u32],
) -> Vec<(&'o mut [u32], &'o mut [f32])> {
    let mut slots: Vec<Option<(&mut [u32], &mut [f32])>> =
        indices.chunks_mut(k).zip(distances.chunks_mut(k)).map(Some).collect();
    order.iter().map(|&r| slots[r as usize].take().expect("an order lists each row once")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_curve_visits_quadrants_in_turn_and_lists_every_row_once() {
        let coords = [0.0f32, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.1, 0.1];
        let rows = MatrixRef::new(&coords, 5, 2).unwrap();
        let curve = Curve::<2>::over(rows);
        // (0, 0) and (0.1, 0.1) share the low quadrant, then (0, 1), (1, 0) and (1, 1).
        assert_eq!(curve.order(rows, 0, 5), vec![0, 4, 2, 3, 1]);
        assert_eq!(curve.order(rows, 1, 3), vec![1, 2, 0]);
        let (mut ids, mut dists) = (vec![0u32; 10], vec![0f32; 10]);
        let slots = slots_in_order(&mut ids, &mut dists, 2, &[1, 4, 0, 3, 2]);
        for (n, (ids, _)) in slots.into_iter().enumerate() {
            ids.fill(n as u32);
        }
        assert_eq!(ids, vec![2, 2, 0, 0, 4, 4, 3, 3, 1, 1]);
    }
}
