//! Matrix Market output: the kNN graph as a sparse `queries x corpus` matrix.

use std::io::{self, Write};

/// `coordinate real general`, 1-based, `queries x n_cols` with `queries * k` entries; an
/// entry per neighbour whose value is the distance (see [`write_entries`]).
pub(crate) fn write_header<W: Write>(w: &mut W, queries: usize, k: usize, n_cols: usize) -> io::Result<()> {
    writeln!(w, "%%MatrixMarket matrix coordinate real general")?;
    writeln!(w, "% k-nearest neighbours: row = query, column = neighbour, value = distance")?;
    writeln!(w, "{queries} {n_cols} {}", queries * k)
}

/// The entries of whole rows of `k` neighbours, the first being row `first_row` (0-based).
/// Zero distances (duplicates, or the point itself with `--include-self`) are written
/// explicitly, so the graph keeps every edge.
pub(crate) fn write_entries<W: Write>(
    w: &mut W,
    first_row: usize,
    indices: &[u32],
    distances: &[f32],
    k: usize,
) -> io::Result<()> {
    for (q, (row, dist)) in (first_row..).zip(indices.chunks_exact(k).zip(distances.chunks_exact(k))) {
        for (&i, &d) in row.iter().zip(dist) {
            writeln!(w, "{} {} {d:?}", q + 1, i as u64 + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::write_neighbors;

    #[test]
    fn coordinate_entries_are_one_based() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.mtx");
        let nb = sample_neighbors();
        write_neighbors(&p, &nb, 5).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let mut lines = text.lines().filter(|l| !l.starts_with('%'));
        assert_eq!(lines.next(), Some("4 5 12"));
        let entries: Vec<(usize, u32, f32)> = lines
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap())
            })
            .collect();
        assert_eq!(entries.len(), 12);
        for (n, &(row, col, v)) in entries.iter().enumerate() {
            assert_eq!(row, n / 3 + 1);
            assert_eq!(col, nb.indices[n] + 1);
            assert_eq!(v, nb.distances[n]);
        }
        assert!(text.starts_with("%%MatrixMarket matrix coordinate real general\n"));
    }
}
