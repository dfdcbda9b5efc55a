//! Neighbour lists as a NumPy `.npz` archive, as `numpy.savez` writes it (entries stored
//! uncompressed, so `numpy.load(..., mmap_mode=...)`-style readers and fast loading work).

use std::io::{self, Seek, Write};

use npyz::zip::{self, write::FileOptions, CompressionMethod, ZipWriter};

use super::npy::{header, write_values};
use crate::data::Neighbors;

pub(crate) fn write_neighbors<W: Write + Seek>(w: W, nb: &Neighbors) -> io::Result<()> {
    let shape = [nb.queries, nb.k];
    // Never dropped: after a failed write (a full disk) the writer's `Drop` would try to
    // finish the archive again and print its debug text to stderr. On success `finish` has
    // already closed it, and what is left unfreed is its small table of entries.
    let mut never_dropped = std::mem::ManuallyDrop::new(ZipWriter::new(w));
    let zip = &mut *never_dropped;
    let options = |bytes: usize| {
        FileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .large_file(bytes as u64 >= u32::MAX as u64 - 4096)
    };
    zip.start_file("indices.npy", options(nb.indices.len() * 8)).map_err(zip_error)?;
    zip.write_all(&header("<i8", &shape))?;
    write_values(zip, &nb.indices, |i| (i as i64).to_le_bytes())?;
    zip.start_file("distances.npy", options(nb.distances.len() * 4)).map_err(zip_error)?;
    zip.write_all(&header("<f4", &shape))?;
    write_values(zip, &nb.distances, f32::to_le_bytes)?;
    zip.finish().map_err(zip_error)?;
    Ok(())
}

fn zip_error(e: zip::result::ZipError) -> io::Error {
    match e {
        zip::result::ZipError::Io(e) => e,
        e => io::Error::other(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::write_neighbors as write;
    use npyz::npz::NpzArchive;

    #[test]
    fn round_trip_through_npyz() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.npz");
        let nb = sample_neighbors();
        write(&p, &nb, 5).unwrap();
        let mut npz = NpzArchive::open(&p).unwrap();
        let mut names: Vec<_> = npz.array_names().map(String::from).collect();
        names.sort();
        assert_eq!(names, ["distances", "indices"]);
        let idx = npz.by_name("indices").unwrap().unwrap();
        assert_eq!(idx.shape(), &[4, 3]);
        assert_eq!(idx.dtype().descr(), "'<i8'");
        let idx: Vec<i64> = idx.into_vec().unwrap();
        assert_eq!(idx, nb.indices.iter().map(|&i| i as i64).collect::<Vec<_>>());
        let dist = npz.by_name("distances").unwrap().unwrap();
        assert_eq!(dist.shape(), &[4, 3]);
        assert_eq!(dist.into_vec::<f32>().unwrap(), nb.distances);
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nodir").join("g.npz");
        assert!(write(&p, &sample_neighbors(), 5).is_err());
        assert!(!p.exists());
    }
}
