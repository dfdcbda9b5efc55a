//! NumPy `.npy` arrays: read through a memory map, written as little-endian float32.

use std::io::{self, Write};
use std::path::Path;

use npyz::{DType, Endianness, NpyHeader, Order, TypeChar};

use super::binary::{map_file, Mapped};
use super::{atomic, Elem};
use crate::data::Matrix;
use crate::error::{Error, Result};

/// Opens a `.npy` file whose array has two or more axes; axes after the first are flattened
/// in C order, so an `(n, 28, 28)` stack of images reads as `n x 784`.
///
/// One-dimensional arrays are refused rather than guessed at: `(n,)` may be n points of
/// dimension 1 or one point of dimension n.
pub(crate) fn open(path: &Path) -> Result<Mapped> {
    let map = map_file(path)?;
    check_header(&map).map_err(|why| Error::file(path, why))?;
    let mut rest: &[u8] = &map;
    let header = NpyHeader::from_reader(&mut rest).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::file(path, format!("not a valid .npy file: the header is truncated ({} bytes in all)", map.len()))
        } else {
            // The header parser's message draws the header over several lines: its first says
            // what and where.
            let what = e.to_string();
            let first = what.lines().next().unwrap_or_default().replace(" error:  --> ", " error at line:column ");
            Error::file(path, format!("not a valid .npy file: {}", first.trim_end_matches([' ', ':'])))
        }
    })?;
    let data_offset = map.len() - rest.len();
    let dtype = header.dtype();
    let (elem, big_endian) = element_type(&dtype).ok_or_else(|| {
        Error::file(path, format!("dtype {} is not supported; expected a float, integer or bool array", dtype.descr()))
    })?;
    let shape = header.shape();
    let shown = format!("{shape:?}").replace('[', "(").replace(']', if shape.len() == 1 { ",)" } else { ")" });
    match shape.len() {
        0 => return Err(Error::file(path, "holds a scalar, not a matrix of vectors")),
        1 => {
            return Err(Error::file(
                path,
                format!(
                    "holds a 1-D array of shape {shown}; save a 2-D array instead: \
                     x.reshape(-1, 1) for points of dimension 1, or x.reshape(1, -1) for a single point"
                ),
            ))
        }
        _ => {}
    }
    let too_big = || Error::file(path, format!("shape {shown} is too large"));
    let rows = usize::try_from(shape[0]).map_err(|_| too_big())?;
    let cols = shape[1..]
        .iter()
        .try_fold(1usize, |acc, &s| usize::try_from(s).ok().and_then(|s| acc.checked_mul(s)))
        .ok_or_else(too_big)?;
    if rows == 0 || cols == 0 {
        // Checked here, not only by the caller: with no rows the file's size says nothing
        // about the columns, whose count would size the layout below.
        return Err(Error::file(path, format!("holds no vectors ({rows} rows x {cols} columns)")));
    }
    let size = elem.size();
    let expected = data_offset as u128 + rows as u128 * cols as u128 * size as u128;
    if expected != map.len() as u128 {
        let how = if (map.len() as u128) < expected { "truncated: " } else { "" };
        return Err(Error::file(
            path,
            format!(
                "{how}an array of shape {shown} and dtype {} needs {expected} bytes with its header, \
                 but the file has {} bytes",
                dtype.descr().trim_matches('\''),
                map.len()
            ),
        ));
    }
    let (row_bytes, col_offsets) = match header.order() {
        Order::C => (cols * size, None),
        Order::Fortran => (size, Some(fortran_column_offsets(&shape[1..], rows, size))),
    };
    Ok(Mapped {
        map,
        path: path.to_path_buf(),
        elem,
        big_endian,
        rows,
        cols,
        base: data_offset,
        row_bytes,
        col_offsets,
        row_dim: None,
    })
}

/// The longest header NumPy itself reads (`max_header_size` of `numpy.lib.format`); a plain
/// array's is 128 bytes.
const MAX_HEADER_BYTES: usize = 10_000;

/// The deepest bracket nesting let through to the header parser: a plain array's header has 2
/// (`{'shape': (...)}`), only a structured dtype's (a list of fields) more.
const MAX_HEADER_NESTING: usize = 2;

/// Checks the header of a `.npy` file for what npyz's parser does not survive, before it
/// runs; the rest (magic, version, syntax, dtype) it checks itself:
///
/// - a header length past the end of the file, which npyz allocates before reading;
/// - a header past NumPy's limit, or nested deeper than [`MAX_HEADER_NESTING`]: its Python
///   literal parser backtracks, so that each unclosed bracket multiplies its time by about
///   four, and it is slow even on flat lists of thousands of numbers;
/// - numbers whose product overflows 64 bits, which npyz multiplies unchecked into the
///   element count and the strides (a panic in debug builds).
///
/// The checks are conservative: they look at the text, not at the parsed dict, so a header
/// they pass cannot parse into anything worse.
fn check_header(file: &[u8]) -> std::result::Result<(), String> {
    if file.len() < 10 || !file.starts_with(b"\x93NUMPY") {
        return Ok(());
    }
    let (len, start) = match (file[6], file[7]) {
        (1, 0) => (u16::from_le_bytes([file[8], file[9]]) as usize, 10usize),
        (2 | 3, 0) if file.len() >= 12 => (u32::from_le_bytes(file[8..12].try_into().unwrap()) as usize, 12),
        _ => return Ok(()),
    };
    if start + len > file.len() {
        return Err(format!(
            "not a valid .npy file: the header is truncated (it claims {len} bytes after the {start}-byte \
             preamble, but the file has {} bytes in all)",
            file.len()
        ));
    }
    if len > MAX_HEADER_BYTES {
        return Err(format!(
            "the .npy header is {len} bytes; NumPy itself reads headers of at most {MAX_HEADER_BYTES} bytes"
        ));
    }
    let text = &file[start..start + len];
    // Without escapes a string runs from a quote to the next quote of the same kind, which
    // is what the parser makes of every part of the header it gets through.
    if text.contains(&b'\\') {
        return Err("the .npy header has escape sequences (backslashes), which NumPy never writes".into());
    }
    let depth = header_nesting(text);
    if depth > MAX_HEADER_NESTING {
        return Err(format!(
            "the .npy header nests brackets {depth} deep, as only a structured dtype's does; \
             expected a float, integer or bool array"
        ));
    }
    if header_numbers_overflow(text) {
        return Err("the .npy header gives dimensions whose product overflows 64 bits".into());
    }
    Ok(())
}

/// The deepest nesting of brackets outside quotes.
fn header_nesting(text: &[u8]) -> usize {
    let (mut depth, mut deepest, mut quote) = (0usize, 0usize, None);
    for &c in text {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(c),
            (None, b'(' | b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (None, b')' | b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// True unless every product of integers the header can spell fits 64 bits: the product
/// of all its integer literals (decimal, hexadecimal, octal or binary, with `_`), zeros left
/// out. Where `+` or `-` appear (the parser adds and subtracts literals), each counts as at
/// least 2, since `a + b <= max(a, 2) * max(b, 2)`.
fn header_numbers_overflow(text: &[u8]) -> bool {
    let sums = text.iter().any(|&c| c == b'+' || c == b'-');
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
    let mut product: u64 = 1;
    let mut i = 0;
    while i < text.len() {
        if !text[i].is_ascii_digit() || (i > 0 && word(text[i - 1])) {
            i += 1;
            continue;
        }
        let end = text[i..].iter().position(|&c| !word(c)).map_or(text.len(), |n| i + n);
        let token = std::str::from_utf8(&text[i..end]).unwrap_or("");
        i = end;
        let (digits, radix) = match token.get(..2) {
            Some("0x" | "0X") => (&token[2..], 16),
            Some("0o" | "0O") => (&token[2..], 8),
            Some("0b" | "0B") => (&token[2..], 2),
            _ => (token, 10),
        };
        let digits: String = digits.chars().filter(|&c| c != '_').collect();
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            continue; // a float, or not a number the parser takes
        }
        let Ok(value) = u64::from_str_radix(&digits, radix) else { return true };
        if value == 0 {
            continue;
        }
        match product.checked_mul(if sums { value.max(2) } else { value }) {
            Some(p) => product = p,
            None => return true,
        }
    }
    false
}

/// Byte offset, from the start of a row, of each column of a C-flattened Fortran array.
fn fortran_column_offsets(trailing: &[u64], rows: usize, size: usize) -> Vec<usize> {
    let mut strides = Vec::with_capacity(trailing.len());
    let mut stride = rows;
    for &s in trailing {
        strides.push(stride);
        stride *= s as usize;
    }
    let cols: usize = trailing.iter().map(|&s| s as usize).product();
    (0..cols)
        .map(|j| {
            let mut rem = j;
            let mut offset = 0;
            for (axis, &s) in trailing.iter().enumerate().rev() {
                let s = s as usize;
                offset += (rem % s) * strides[axis];
                rem /= s;
            }
            offset * size
        })
        .collect()
}

fn element_type(dtype: &DType) -> Option<(Elem, bool)> {
    let DType::Plain(ts) = dtype else { return None };
    let elem = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 2) => Elem::F16,
        (TypeChar::Float, 4) => Elem::F32,
        (TypeChar::Float, 8) => Elem::F64,
        (TypeChar::Int, 1) => Elem::I8,
        (TypeChar::Int, 2) => Elem::I16,
        (TypeChar::Int, 4) => Elem::I32,
        (TypeChar::Int, 8) => Elem::I64,
        (TypeChar::Uint, 1) => Elem::U8,
        (TypeChar::Uint, 2) => Elem::U16,
        (TypeChar::Uint, 4) => Elem::U32,
        (TypeChar::Uint, 8) => Elem::U64,
        (TypeChar::Bool, 1) => Elem::Bool,
        _ => return None,
    };
    Some((elem, ts.endianness() == Endianness::Big))
}

/// The header of a version 1.0 `.npy` file for a C-ordered array.
pub(crate) fn header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|s| s.to_string()).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // NumPy aligns the data to 64 bytes: 10 bytes of preamble, the dict, spaces, a newline.
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    dict.extend(std::iter::repeat_n(' ', total - 10 - dict.len() - 1));
    dict.push('\n');
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Writes `values` as little-endian bytes, a block at a time.
pub(crate) fn write_values<W: Write, T: Copy, const N: usize>(
    w: &mut W,
    values: &[T],
    to_bytes: impl Fn(T) -> [u8; N],
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(8192 * N);
    for block in values.chunks(8192) {
        buf.clear();
        for &v in block {
            buf.extend_from_slice(&to_bytes(v));
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

/// Writes `m` as a `rows x cols` float32 `.npy` file (replacing `path` only when complete).
pub fn write_matrix_npy(path: &Path, m: &Matrix) -> Result<()> {
    atomic::write(path, |w| {
        w.write_all(&header("<f4", &[m.rows(), m.cols()]))?;
        write_values(w, m.as_slice(), f32::to_le_bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{read_matrix, MatrixFile};
    use super::*;

    fn npy_bytes(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut dict = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + dict.len() + 1) % 64 != 0 {
            dict.push(' ');
        }
        dict.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    }

    #[test]
    fn round_trip_f32() {
        let dir = tempfile::tempdir().unwrap();
        let m = sample(9, 7);
        let p = dir.path().join("m.npy");
        write_matrix_npy(&p, &m).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]) as usize + 10, 128);
        // What npyz itself makes of the file.
        let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
        assert_eq!(npy.shape(), &[9, 7]);
        assert_eq!(npy.into_vec::<f32>().unwrap(), m.as_slice());
        assert_eq!(read_matrix(p.to_str().unwrap()).unwrap(), m);
    }

    #[test]
    fn float64_values_beyond_f32_are_named_not_called_infinite() {
        let dir = tempfile::tempdir().unwrap();
        let values = [1.0f64, 2.0, 1e39, 4.0];
        for (descr, fortran, row, col) in [("<f8", false, 1, 0), (">f8", false, 1, 0), ("<f8", true, 0, 1)] {
            let data: Vec<u8> = values
                .iter()
                .flat_map(|v| if descr.starts_with('>') { v.to_be_bytes() } else { v.to_le_bytes() })
                .collect();
            let p = write(dir.path(), "big.npy", &npy_bytes(descr, fortran, "(2, 2)", &data));
            let msg = read_matrix(&p).unwrap_err().to_string();
            assert!(msg.contains("big.npy") && msg.contains(&format!("row {row}, column {col}")), "{msg}");
            assert!(msg.contains("1e39") && msg.contains("overflows float32") && !msg.contains("non-finite"), "{msg}");
        }
        // A true infinity is left to the search, which names it as non-finite.
        let data: Vec<u8> = [1.0f64, f64::INFINITY].iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = write(dir.path(), "inf.npy", &npy_bytes("<f8", false, "(1, 2)", &data));
        assert!(read_matrix(&p).unwrap().as_slice()[1].is_infinite());
    }

    #[test]
    fn converts_every_numeric_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let want = [1.0f32, -2.0, 3.0, 4.5];
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("<f8", want.iter().flat_map(|&v| (v as f64).to_le_bytes()).collect()),
            (">f8", want.iter().flat_map(|&v| (v as f64).to_be_bytes()).collect()),
            (">f4", want.iter().flat_map(|&v| v.to_be_bytes()).collect()),
            ("<f2", vec![0x00, 0x3c, 0x00, 0xc0, 0x00, 0x42, 0x80, 0x44]),
        ];
        for (descr, data) in cases {
            let p = write(dir.path(), "f.npy", &npy_bytes(descr, false, "(2, 2)", &data));
            assert_eq!(read_matrix(&p).unwrap().as_slice(), &want, "{descr}");
        }
        let ints = [1i64, -2, 3, 100];
        let as_f32: Vec<f32> = ints.iter().map(|&v| v as f32).collect();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("|i1", ints.iter().map(|&v| v as i8 as u8).collect()),
            ("<i2", ints.iter().flat_map(|&v| (v as i16).to_le_bytes()).collect()),
            ("<i4", ints.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()),
            ("<i8", ints.iter().flat_map(|&v| v.to_le_bytes()).collect()),
            (">i8", ints.iter().flat_map(|&v| v.to_be_bytes()).collect()),
        ];
        for (descr, data) in cases {
            let p = write(dir.path(), "i.npy", &npy_bytes(descr, false, "(2, 2)", &data));
            assert_eq!(read_matrix(&p).unwrap().as_slice(), as_f32.as_slice(), "{descr}");
        }
        let uints = [1u64, 2, 3, 200];
        let as_f32: Vec<f32> = uints.iter().map(|&v| v as f32).collect();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("|u1", uints.iter().map(|&v| v as u8).collect()),
            ("<u2", uints.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect()),
            ("<u4", uints.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect()),
            ("<u8", uints.iter().flat_map(|&v| v.to_le_bytes()).collect()),
        ];
        for (descr, data) in cases {
            let p = write(dir.path(), "u.npy", &npy_bytes(descr, false, "(2, 2)", &data));
            assert_eq!(read_matrix(&p).unwrap().as_slice(), as_f32.as_slice(), "{descr}");
        }
        let p = write(dir.path(), "b.npy", &npy_bytes("|b1", false, "(1, 3)", &[1, 0, 1]));
        assert_eq!(read_matrix(&p).unwrap().as_slice(), &[1.0, 0.0, 1.0]);
    }

    #[test]
    fn fortran_order_is_transposed() {
        let dir = tempfile::tempdir().unwrap();
        // [[1, 2, 3], [4, 5, 6]] stored column by column.
        let data: Vec<u8> = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = write(dir.path(), "f.npy", &npy_bytes("<f4", true, "(2, 3)", &data));
        assert_eq!(read_matrix(&p).unwrap().as_slice(), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(MatrixFile::open(&p).unwrap().read_rows(1..2).unwrap().as_slice(), &[4.0, 5.0, 6.0]);

        // Shape (2, 2, 3): element (i, a, b) = 100 i + 10 a + b sits at i + 2 a + 4 b.
        let mut stored = [0.0f32; 12];
        for i in 0..2 {
            for a in 0..2 {
                for b in 0..3 {
                    stored[i + 2 * a + 4 * b] = (100 * i + 10 * a + b) as f32;
                }
            }
        }
        let data: Vec<u8> = stored.iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = write(dir.path(), "f3.npy", &npy_bytes("<f4", true, "(2, 2, 3)", &data));
        let m = read_matrix(&p).unwrap();
        assert_eq!((m.rows(), m.cols()), (2, 6));
        assert_eq!(m.as_slice(), &[0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 100.0, 101.0, 102.0, 110.0, 111.0, 112.0]);
    }

    #[test]
    fn trailing_axes_are_flattened() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..12).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let p = write(dir.path(), "c3.npy", &npy_bytes("<f4", false, "(2, 3, 2)", &data));
        let m = read_matrix(&p).unwrap();
        assert_eq!((m.rows(), m.cols()), (2, 6));
        assert_eq!(m.as_slice()[6], 6.0);
    }

    #[test]
    fn refusals_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..4).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let p = write(dir.path(), "one.npy", &npy_bytes("<f4", false, "(4,)", &data));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(
            msg.contains("one.npy") && msg.contains("1-D") && msg.contains("(4,)") && msg.contains("reshape(-1, 1)"),
            "{msg}"
        );

        let p = write(dir.path(), "c.npy", &npy_bytes("<c8", false, "(2, 1)", &[0; 16]));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("c8") && msg.contains("not supported"), "{msg}");

        let p = write(dir.path(), "t.npy", &npy_bytes("<f4", false, "(3, 2)", &data[..16]));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(
            msg.contains("t.npy") && msg.contains("truncated") && msg.contains("152") && msg.contains("144"),
            "{msg}"
        );

        let p = write(dir.path(), "junk.npy", b"PK\x03\x04 this is a zip, not an npy");
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("junk.npy") && msg.contains("not a valid .npy"), "{msg}");

        let p = write(dir.path(), "huge.npy", &npy_bytes("<f4", false, "(4294967296, 4294967296)", &data));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("huge.npy") && msg.contains("overflows"), "{msg}");
        let p = write(dir.path(), "huge.npy", &npy_bytes("<f4", false, "(99999999999999999999, 1)", &data));
        assert!(read_matrix(&p).is_err());

        let p = write(dir.path(), "z.npy", &npy_bytes("<f4", false, "(0, 5)", &[]));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("no vectors"), "{msg}");
    }

    /// An .npy file of version `major`.0 whose header is `dict` as given, then `data`.
    fn raw_npy(major: u8, dict: &[u8], data: &[u8]) -> Vec<u8> {
        let mut out = vec![0x93, b'N', b'U', b'M', b'P', b'Y', major, 0];
        if major == 1 {
            out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(dict);
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn header_length_is_checked_before_it_is_read() {
        // A 4 GiB header length in a 14-byte file was allocated in full before reading.
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "len.npy", b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}");
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("len.npy") && msg.contains("4294967295"), "{msg}");
        // NumPy reads no header over 10000 bytes (`max_header_size`), and parsing one can
        // take seconds per kilobyte.
        let mut dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }".to_vec();
        dict.resize(10_100, b' ');
        dict.push(b'\n');
        let p = write(dir.path(), "long.npy", &raw_npy(2, &dict, &[0; 4]));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("long.npy") && msg.contains("10101") && msg.contains("10000"), "{msg}");
    }

    #[test]
    fn zero_rows_with_huge_columns_are_refused() {
        // No data bytes are needed for zero rows, so the columns went unchecked: a Fortran
        // array allocated an offset per column, a C array overflowed the row size.
        let dir = tempfile::tempdir().unwrap();
        for (fortran, shape) in [(true, "(0, 4611686018427387904)"), (false, "(0, 4611686018427387904)")] {
            let p = write(dir.path(), "zero.npy", &npy_bytes("<f8", fortran, shape, &[]));
            let msg = message(read_matrix(&p).unwrap_err());
            assert!(msg.contains("zero.npy") && msg.contains("no vectors"), "{msg}");
        }
    }

    #[test]
    fn shapes_npyz_would_overflow_on_are_refused() {
        // npyz multiplies the dimensions (and their prefixes) unchecked; the old textual
        // check saw only decimal numbers after a single-quoted 'shape', in order.
        let dir = tempfile::tempdir().unwrap();
        let big = "9223372036854775808";
        let shapes = [
            format!("(0, {big}, {big})"),
            "(0x100000000, 0x100000000)".to_string(),
            "(4294967296, 4294967295 + 4294967295)".to_string(),
            format!("(1 - -{big}, 3)"),
        ];
        for shape in &shapes {
            let p = write(dir.path(), "o.npy", &npy_bytes("<f4", false, shape, &[0; 16]));
            let msg = message(read_matrix(&p).unwrap_err());
            assert!(msg.contains("o.npy") && msg.contains("overflows"), "{shape}: {msg}");
        }
        let dict = format!("{{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (4294967296, {big})}}\n");
        let p = write(dir.path(), "dq.npy", &raw_npy(1, dict.as_bytes(), &[0; 16]));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("dq.npy") && msg.contains("overflows"), "{msg}");
        // Numbers a valid header may hold still read.
        let p = write(dir.path(), "ok.npy", &npy_bytes("<f4", false, "(0x2, 1 + 1)", &[0; 16]));
        assert_eq!(read_matrix(&p).unwrap().rows(), 2);
    }

    #[test]
    fn deeply_nested_headers_are_refused_quickly() {
        // The header parser backtracks: each unclosed bracket multiplied its time by about
        // four, so 24 of them in a 100-byte file never finished.
        let dir = tempfile::tempdir().unwrap();
        let mut cases = Vec::new();
        for opener in ["[", "(", "{", "([{"] {
            let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {}}}\n", opener.repeat(24));
            cases.push(raw_npy(1, dict.as_bytes(), &[]));
        }
        let nested =
            format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {}1{}, }}\n", "[".repeat(24), "]".repeat(24));
        cases.push(raw_npy(1, nested.as_bytes(), &[]));
        let (done, finished) = std::sync::mpsc::channel();
        let dir_path = dir.path().to_path_buf();
        std::thread::spawn(move || {
            for (i, bytes) in cases.iter().enumerate() {
                let p = write(&dir_path, &format!("deep{i}.npy"), bytes);
                let msg = message(read_matrix(&p).unwrap_err());
                done.send(msg).unwrap();
            }
        });
        for _ in 0..5 {
            let msg = finished.recv_timeout(std::time::Duration::from_secs(10)).expect("the header is refused in time");
            assert!(msg.contains("deep") && msg.contains("nest"), "{msg}");
        }
        // A structured dtype is the one thing NumPy nests deeper; it was refused all along.
        let dict = b"{'descr': [('a', '<f4'), ('b', '<i2')], 'fortran_order': False, 'shape': (2, 1), }\n";
        let p = write(dir.path(), "s.npy", &raw_npy(1, dict, &[0; 12]));
        let msg = message(read_matrix(&p).unwrap_err());
        assert!(msg.contains("s.npy") && msg.contains("structured dtype"), "{msg}");
    }

    #[test]
    fn header_is_aligned_for_any_shape() {
        for shape in [[1usize, 1], [123456789, 4096], [usize::MAX, 1]] {
            let h = header("<i8", &shape);
            assert_eq!(h.len() % 64, 0);
            assert_eq!(*h.last().unwrap(), b'\n');
            let parsed = NpyHeader::from_reader(&h[..]).unwrap();
            assert_eq!(parsed.shape(), &[shape[0] as u64, shape[1] as u64]);
        }
    }
}
