//! Delimited text: `.csv` and `.tsv` matrices in, CSV edge lists out.

use std::io::{self, Write};
use std::path::Path;

use super::binary::map_file;
use crate::data::Matrix;
use crate::error::{Error, Result};

/// A text matrix and the header line skipped at its top, if any.
pub(crate) struct TextMatrix {
    pub(crate) matrix: Matrix,
    /// The first line, when it was taken as a header rather than as data.
    pub(crate) header: Option<String>,
}

/// Reads one vector per line; lines starting with `#` (NumPy's `savetxt` header) and blank
/// lines are ignored. Every other line must have the same number of fields, each a number
/// (`nan` and `inf` parse; the search rejects them with their row and column).
///
/// The first line is a header when its fields that are not numbers all look like names
/// (they start with a letter or `_`) and, if it has as many fields as the data, no more than
/// half of its fields are numbers. Anything else that fails to parse there (`2.0.`, `0x10`,
/// an empty field from a trailing comma) is a malformed row and an error: a data row taken
/// for a header would shift every index by one.
pub(crate) fn read(path: &Path, delimiter: u8) -> Result<TextMatrix> {
    let map = map_file(path)?;
    let text: &[u8] = &map;
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text);
    let line_at = |byte: u64| line_number(text, byte as usize);
    let mut values: Vec<f32> = Vec::new();
    let mut cols = 0;
    let mut first_byte = 0;
    let mut rows = 0usize;
    let mut record = csv::ByteRecord::new();
    // The first record, while it may still be a header: decided by the record after it.
    let mut maybe_header: Option<(csv::ByteRecord, usize)> = None;
    let mut header = None;
    let mut seen_first = false;
    loop {
        let more = reader.read_byte_record(&mut record).map_err(|e| {
            let line = e.position().map(|p| format!("line {}: ", line_at(p.byte()))).unwrap_or_default();
            Error::file(path, format!("{line}{e}"))
        })?;
        if !more {
            break;
        }
        if record.len() == 1 && record[0].is_empty() {
            continue;
        }
        let byte = record.position().map_or(0, |p| p.byte());
        if !seen_first {
            seen_first = true;
            if !record.iter().all(|f| parse(f).is_some()) && record.iter().all(|f| parse(f).is_some() || is_name(f)) {
                maybe_header = Some((record.clone(), byte as usize));
                continue;
            }
        }
        if let Some((first, first_at)) = maybe_header.take() {
            let numbers = first.iter().filter(|f| parse(f).is_some()).count();
            if first.len() == record.len() && 2 * numbers > first.len() {
                // Mostly numbers, and as many fields as the data: a malformed row.
                parse_into(&first, &mut Vec::new(), path, line_at(first_at as u64), text, first_at)?;
            }
            header = Some(join_fields(&first, delimiter));
        }
        if rows == 0 {
            cols = record.len();
            first_byte = byte;
        } else if record.len() != cols {
            if let Some(problem) = unclosed_quote(text, byte as usize) {
                return Err(Error::file(path, format!("line {}: {problem}", line_at(byte))));
            }
            return Err(Error::file(
                path,
                format!(
                    "line {} has {} field{}, but line {} has {cols}",
                    line_at(byte),
                    record.len(),
                    if record.len() == 1 { "" } else { "s" },
                    line_at(first_byte)
                ),
            ));
        }
        parse_into(&record, &mut values, path, line_at(byte), text, byte as usize)?;
        rows += 1;
    }
    if let Some((first, _)) = maybe_header {
        // Only the first line: the file holds no data rows, which `MatrixFile` reports.
        header = Some(join_fields(&first, delimiter));
    }
    Ok(TextMatrix { matrix: Matrix::new(values, rows, cols)?, header })
}

/// Appends a record's values, or names the line, column and text of the first that is not a
/// number.
fn parse_into(
    record: &csv::ByteRecord,
    values: &mut Vec<f32>,
    path: &Path,
    line: usize,
    text: &[u8],
    byte: usize,
) -> Result<()> {
    for (j, field) in record.iter().enumerate() {
        let v = parse(field).ok_or_else(|| {
            if let Some(problem) = unclosed_quote(text, byte) {
                return Error::file(path, format!("line {line}: {problem}"));
            }
            let shown = String::from_utf8_lossy(field);
            let what = if shown.is_empty() { "is empty".to_string() } else { format!("{shown:?} is not a number") };
            Error::file(path, format!("line {line}, column {}: {what}", j + 1))
        })?;
        values.push(v);
    }
    Ok(())
}

fn parse(field: &[u8]) -> Option<f32> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// A header's column name: it starts with a letter or `_` (not a digit, sign, dot or nothing,
/// which are numbers gone wrong).
fn is_name(field: &[u8]) -> bool {
    std::str::from_utf8(field).ok().and_then(|s| s.chars().next()).is_some_and(|c| c.is_alphabetic() || c == '_')
}

fn join_fields(record: &csv::ByteRecord, delimiter: u8) -> String {
    let fields: Vec<String> = record.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect();
    fields.join(&(delimiter as char).to_string())
}

/// The 1-based line of a record that the reader places at byte `at`: lines end with `\n`,
/// `\r\n` or a lone `\r`. The reader places a record after comment and blank lines at their
/// start, so those are skipped first.
fn line_number(text: &[u8], at: usize) -> usize {
    let mut at = at.min(text.len());
    while at < text.len() && matches!(text[at], b'#' | b'\n' | b'\r') {
        let rest = &text[at..];
        let end = if text[at] == b'#' {
            rest.iter().position(|&c| c == b'\n' || c == b'\r').unwrap_or(rest.len())
        } else {
            0
        };
        at += end;
        // One line break: `\r\n` counts once.
        if text.get(at) == Some(&b'\r') && text.get(at + 1) == Some(&b'\n') {
            at += 2;
        } else if at < text.len() {
            at += 1;
        }
    }
    let head = &text[..at];
    let breaks =
        head.iter().enumerate().filter(|&(i, &c)| c == b'\n' || (c == b'\r' && head.get(i + 1) != Some(&b'\n')));
    1 + breaks.count()
}

/// Says so when a record starting at byte `at` opens a quote that the rest of the file never
/// closes (the reader then takes everything after it as one field).
fn unclosed_quote(text: &[u8], at: usize) -> Option<String> {
    let rest = &text[at.min(text.len())..];
    let quotes = rest.iter().filter(|&&c| c == b'"').count();
    (quotes % 2 == 1).then(|| "a quoted field (\") opens here and is never closed".to_string())
}

/// Writes `query,neighbor,distance` lines, nearest first within each query.
/// The header line of a CSV edge list.
pub(crate) fn write_edges_header<W: Write>(w: &mut W) -> io::Result<()> {
    writeln!(w, "query,neighbor,distance")
}

/// One edge per line, nearest first, for whole rows of `k` neighbours; the first is row
/// `first_row` of the output.
pub(crate) fn write_edges<W: Write>(
    w: &mut W,
    first_row: usize,
    indices: &[u32],
    distances: &[f32],
    k: usize,
) -> io::Result<()> {
    for (q, (row, dist)) in (first_row..).zip(indices.chunks_exact(k).zip(distances.chunks_exact(k))) {
        for (&i, &d) in row.iter().zip(dist) {
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

    fn header_of(name: &str, text: &str) -> Option<String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        super::super::MatrixFile::open(p.to_str().unwrap()).unwrap().skipped_header().map(str::to_string)
    }

    #[test]
    fn skipped_headers_are_reported() {
        assert_eq!(header_of("h.csv", "x, y ,z\n1,2,3\n").as_deref(), Some("x,y,z"));
        assert_eq!(header_of("h.tsv", "# comment\nid\t0.5\n1\t2\n").as_deref(), Some("id\t0.5"));
        assert_eq!(header_of("n.csv", "1,2,3\n4,5,6\n"), None);
    }

    #[test]
    fn malformed_first_rows_are_errors_not_headers() {
        // Each of these used to be dropped silently as a header, shifting every index by one.
        for (text, wanted) in [
            ("1.0,2.0.,3.0\n4,5,6\n", "line 1, column 2: \"2.0.\" is not a number"),
            ("0x10,1\n2,3\n", "line 1, column 1: \"0x10\" is not a number"),
            ("1,2,\n3,4,\n", "line 1, column 3: is empty"),
            ("# made by hand\nx,1,2,3\n4,5,6,7\n", "line 2, column 1: \"x\" is not a number"),
        ] {
            let msg = message(read_text("m.csv", text).unwrap_err());
            assert!(msg.contains("m.csv") && msg.contains(wanted), "{text:?}: {msg}");
        }
    }

    #[test]
    fn lone_carriage_returns_end_lines() {
        let m = read_text("cr.csv", "1,2\r3,4\r5,6\r").unwrap();
        assert_eq!(m.as_slice(), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let msg = message(read_text("cr.csv", "1,2\r3,4\r5,x\r").unwrap_err());
        assert!(msg.contains("line 3, column 2"), "{msg}");
        let msg = message(read_text("cr.csv", "1,2\r3,4\r5,6,7\r").unwrap_err());
        assert!(msg.contains("line 3 has 3 fields, but line 1 has 2"), "{msg}");
    }

    #[test]
    fn unterminated_quotes_are_named() {
        let msg = message(read_text("q.csv", "1,2\n\"3,4\n5,6\n").unwrap_err());
        assert!(msg.contains("line 2") && msg.contains("never closed"), "{msg}");
        let m = read_text("q.csv", "\"1\",2\n3,\"4\"\n").unwrap();
        assert_eq!(m.as_slice(), &[1.0, 2.0, 3.0, 4.0]);
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
