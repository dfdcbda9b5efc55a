//! Delimited text: `.csv` and `.tsv` matrices in, CSV edge lists out.

use std::io::{self, Write};
use std::path::Path;

use super::binary::map_file;
use crate::data::{Matrix, Neighbors};
use crate::error::{Error, Result};

/// Reads one vector per line. A first line with any field that is not a number is taken as
/// a header and skipped; lines starting with `#` (NumPy's `savetxt` header) and blank lines
/// are ignored. Every other line must have the same number of fields, each a number
/// (`nan` and `inf` parse; the search rejects them with their row and column).
pub(crate) fn read(path: &Path, delimiter: u8) -> Result<Matrix> {
    let map = map_file(path)?;
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(&map[..]);
    let mut values: Vec<f32> = Vec::new();
    let mut cols = 0;
    let mut first_line = 0;
    let mut rows = 0;
    let mut record = csv::ByteRecord::new();
    let mut seen_first = false;
    loop {
        let more = reader.read_byte_record(&mut record).map_err(|e| {
            let line = e.position().map(|p| format!("line {}: ", p.line())).unwrap_or_default();
            Error::file(path, format!("{line}{e}"))
        })?;
        if !more {
            break;
        }
        let line = record.position().map_or(0, |p| p.line());
        if record.len() == 1 && record[0].is_empty() {
            continue;
        }
        if !seen_first {
            seen_first = true;
            if record.iter().any(|f| parse(f).is_none()) {
                continue;
            }
        }
        if rows == 0 {
            cols = record.len();
            first_line = line;
        } else if record.len() != cols {
            return Err(Error::file(
                path,
                format!(
                    "line {line} has {} field{}, but line {first_line} has {cols}",
                    record.len(),
                    if record.len() == 1 { "" } else { "s" }
                ),
            ));
        }
        for (j, field) in record.iter().enumerate() {
            let v = parse(field).ok_or_else(|| {
                let text = String::from_utf8_lossy(field);
                let what = if text.is_empty() { "is empty".to_string() } else { format!("{text:?} is not a number") };
                Error::file(path, format!("line {line}, column {}: {what}", j + 1))
            })?;
            values.push(v);
        }
        rows += 1;
    }
    Matrix::new(values, rows, cols)
}

fn parse(field: &[u8]) -> Option<f32> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Writes `query,neighbor,distance` lines, nearest first within each query.
pub(crate) fn write_edges<W: Write>(w: &mut W, nb: &Neighbors) -> io::Result<()> {
    writeln!(w, "query,neighbor,distance")?;
    for q in 0..nb.queries {
        for (&i, &d) in nb.indices_of(q).iter().zip(nb.distances_of(q)) {
            writeln!(w, "{q},{i},{d:?}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{read_matrix, write_neighbors};

    fn read_text(name: &str, text: &str) -> crate::error::Result<crate::data::Matrix> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        read_matrix(p.to_str().unwrap())
    }

    #[test]
    fn round_trip_with_and_without_header() {
        let m = read_text("a.csv", "1,2.5,-3\n4e2, 5 ,6\n").unwrap();
        assert_eq!((m.rows(), m.cols()), (2, 3));
        assert_eq!(m.as_slice(), &[1.0, 2.5, -3.0, 400.0, 5.0, 6.0]);
        let m2 = read_text("b.csv", "x,y,z\n1,2.5,-3\n\n4e2,5,6\n").unwrap();
        assert_eq!(m, m2);
        let m3 = read_text("c.tsv", "# made by savetxt\n1\t2.5\t-3\r\n400\t5\t6\r\n").unwrap();
        assert_eq!(m, m3);
        let m4 = read_text("d.csv", "id,0.5\n1,2.5\n").unwrap();
        assert_eq!(m4.as_slice(), &[1.0, 2.5]);
    }

    #[test]
    fn written_values_read_back_exactly() {
        let m = sample(3, 4);
        let text: String = (0..3)
            .map(|i| m.view().row(i).iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(",") + "\n")
            .collect();
        assert_eq!(read_text("e.csv", &text).unwrap(), m);
        let awkward = [0.1f32, 1e-30, f32::MAX, -f32::from_bits(5)];
        let text = awkward.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(",");
        assert_eq!(read_text("f.csv", &text).unwrap().as_slice(), &awkward);
    }

    #[test]
    fn nan_and_inf_are_values() {
        let m = read_text("n.csv", "1,nan\ninf,-Infinity\n").unwrap();
        assert!(m.as_slice()[1].is_nan());
        assert_eq!(m.as_slice()[2], f32::INFINITY);
        assert_eq!(m.as_slice()[3], f32::NEG_INFINITY);
    }

    #[test]
    fn bad_text_names_line_column_and_text() {
        let msg = message(read_text("bad.csv", "1,2,3\n4,five,6\n").unwrap_err());
        assert!(msg.contains("bad.csv") && msg.contains("line 2, column 2") && msg.contains("\"five\""), "{msg}");
        let msg = message(read_text("bad.csv", "a,b\n1,2\n3,\n").unwrap_err());
        assert!(msg.contains("line 3, column 2") && msg.contains("empty"), "{msg}");
        let msg = message(read_text("bad.tsv", "1\t2\n3,4\t5\n").unwrap_err());
        assert!(msg.contains("line 2, column 1") && msg.contains("\"3,4\""), "{msg}");
    }

    #[test]
    fn ragged_rows_are_refused() {
        let msg = message(read_text("r.csv", "h1,h2\n1,2\n3,4\n5,6,7\n").unwrap_err());
        assert!(msg.contains("r.csv") && msg.contains("line 4 has 3 fields, but line 2 has 2"), "{msg}");
    }

    #[test]
    fn binary_junk_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.csv");
        let junk: Vec<u8> = (0..200u32).map(|i| (i * 7919 % 251) as u8).collect();
        std::fs::write(&p, &junk).unwrap();
        assert!(read_matrix(p.to_str().unwrap()).is_err());
    }

    #[test]
    fn edge_list_output() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.csv");
        let nb = sample_neighbors();
        write_neighbors(&p, &nb, 5).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 12);
        assert_eq!(lines[0], "query,neighbor,distance");
        assert_eq!(lines[1], "0,1,0.5");
        assert_eq!(lines[6], "1,0,1e-7");
        for (n, line) in lines[1..].iter().enumerate() {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f[0].parse::<usize>().unwrap(), n / 3);
            assert_eq!(f[1].parse::<u32>().unwrap(), nb.indices[n]);
            assert_eq!(f[2].parse::<f32>().unwrap(), nb.distances[n]);
        }
    }
}
