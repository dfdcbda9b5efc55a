//! Row-major matrices in and neighbour lists out.

use crate::error::{Error, Result};

/// A borrowed row-major matrix of `rows x cols` f32 values (`cols` innermost).
#[derive(Clone, Copy, Debug)]
pub struct MatrixRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    /// The values lie in a read-only map of a file, whose pages can be given back to the
    /// page cache once read ([`MatrixRef::release_rows`]).
    file_mapped: bool,
}

impl<'a> MatrixRef<'a> {
    /// Views `data` as `rows x cols`, row-major. Fails if the length does not match.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Result<Self> {
        match rows.checked_mul(cols) {
            Some(len) if len == data.len() => Ok(MatrixRef { data, rows, cols, file_mapped: false }),
            _ => Err(Error::arg(
                "data",
                format!("{} values cannot be viewed as {rows} rows x {cols} columns", data.len()),
            )),
        }
    }

    /// Number of rows (vectors).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (the dimension).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// All values, row-major.
    pub fn as_slice(&self) -> &'a [f32] {
        self.data
    }

    /// Rows `range`, a view of the same memory.
    pub fn slice_rows(&self, range: std::ops::Range<usize>) -> MatrixRef<'a> {
        let data = &self.data[range.start * self.cols..range.end * self.cols];
        MatrixRef { data, rows: range.len(), cols: self.cols, file_mapped: self.file_mapped }
    }

    /// Marks the values as a read-only, shared map of a file.
    ///
    /// # Safety
    /// `data` must lie in a read-only shared file mapping (`memmap2::Mmap`) that outlives
    /// the view: [`MatrixRef::release_rows`] drops its pages, which is harmless there and
    /// would zero memory of any other kind.
    pub(crate) unsafe fn file_mapped(self) -> Self {
        MatrixRef { file_mapped: true, ..self }
    }

    /// Gives the whole pages of rows `range` back to the page cache where the values are
    /// a file map, so that a pass over data larger than the memory limit does not keep it
    /// resident; later reads fault them in again. Does nothing for values in memory.
    pub(crate) fn release_rows(&self, range: std::ops::Range<usize>) {
        #[cfg(target_os = "linux")]
        if self.file_mapped && !range.is_empty() {
            let bytes: &[u8] = bytemuck::cast_slice(&self.data[range.start * self.cols..range.end * self.cols]);
            let page = 4096;
            let first = bytes.as_ptr() as usize;
            let (start, end) = (first.next_multiple_of(page), (first + bytes.len()) / page * page);
            if end > start {
                // SAFETY: whole pages of a read-only shared file map (`file_mapped`): the
                // kernel unmaps them and later reads see the file's contents again.
                unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = range;
    }

    /// Runs `pass` over blocks of about `BLOCK_BYTES` of rows in order, each block's first
    /// row and rows, releasing the block's pages after it (see [`MatrixRef::release_rows`]).
    pub(crate) fn in_blocks<T>(&self, mut pass: impl FnMut(usize, MatrixRef<'a>) -> T) -> Vec<T> {
        const BLOCK_BYTES: usize = 16 << 20;
        let rows = (BLOCK_BYTES / (self.cols * 4).max(1)).clamp(1, self.rows.max(1));
        (0..self.rows)
            .step_by(rows)
            .map(|first| {
                let range = first..(first + rows).min(self.rows);
                let out = pass(first, self.slice_rows(range.clone()));
                self.release_rows(range);
                out
            })
            .collect()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &'a [f32] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

/// An owned row-major matrix of `rows x cols` f32 values.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    data: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl Matrix {
    /// Takes ownership of `data` as `rows x cols`, row-major.
    pub fn new(data: Vec<f32>, rows: usize, cols: usize) -> Result<Self> {
        MatrixRef::new(&data, rows, cols)?;
        Ok(Matrix { data, rows, cols })
    }

    /// Builds a matrix from equal-length rows.
    pub fn from_rows<R: AsRef<[f32]>>(rows: &[R]) -> Result<Self> {
        let cols = rows.first().map_or(0, |r| r.as_ref().len());
        let mut data = Vec::with_capacity(rows.len() * cols);
        for (i, r) in rows.iter().enumerate() {
            let r = r.as_ref();
            if r.len() != cols {
                return Err(Error::arg("rows", format!("row {i} has {} values but row 0 has {cols}", r.len())));
            }
            data.extend_from_slice(r);
        }
        Ok(Matrix { data, rows: rows.len(), cols })
    }

    /// Borrows the matrix.
    pub fn view(&self) -> MatrixRef<'_> {
        MatrixRef { data: &self.data, rows: self.rows, cols: self.cols, file_mapped: false }
    }

    /// Number of rows (vectors).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (the dimension).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// All values, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// Gives the values back, row-major.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
}

impl<'a> From<&'a Matrix> for MatrixRef<'a> {
    fn from(m: &'a Matrix) -> Self {
        m.view()
    }
}

/// The k nearest neighbours of each query.
///
/// `indices` and `distances` are both `queries x k`, row-major (`k` innermost). Each row is
/// sorted by (distance, index) ascending; for [`Metric::InnerProduct`](crate::Metric) the
/// distance is the inner product and rows are sorted by descending value, then index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Neighbors {
    /// Corpus row of each neighbour, `queries x k`.
    pub indices: Vec<u32>,
    /// Distance (or inner product) of each neighbour, `queries x k`.
    pub distances: Vec<f32>,
    /// Number of queries (rows).
    pub queries: usize,
    /// Neighbours per query.
    pub k: usize,
}

impl Neighbors {
    /// Neighbour indices of query `i`.
    pub fn indices_of(&self, i: usize) -> &[u32] {
        &self.indices[i * self.k..(i + 1) * self.k]
    }

    /// Neighbour distances of query `i`.
    pub fn distances_of(&self, i: usize) -> &[f32] {
        &self.distances[i * self.k..(i + 1) * self.k]
    }
}

/// Whole rows of an answer handed over before the rest is finished
/// ([`Knn::graph_streamed`](crate::Knn::graph_streamed)): rows `first..first + rows` of the
/// graph, `rows x k` values each, in the layout of [`Neighbors`].
#[derive(Debug)]
pub struct FinishedRows<'a> {
    /// The first row's number in the graph.
    pub first: usize,
    /// Neighbour indices, `rows x k`.
    pub indices: &'a [u32],
    /// Neighbour distances, `rows x k`.
    pub distances: &'a [f32],
}

/// Where a run's answers are written: the arrays of an earlier answer that the caller lends
/// ([`Knn::graph_into`](crate::Knn::graph_into)), or else memory fresh from the system.
///
/// Fresh pages cost the host more than the copies into them: the kernel zeroes each page on
/// its first write (n=65536 k=1000: 524 MB of answers, 250 huge-page faults). Lent arrays of
/// the right size are written in place, their pages already mapped. Every entry of the
/// answer is written by the run either way, so nothing of the lent contents survives.
#[derive(Default)]
pub(crate) struct AnswerMemory(std::sync::Mutex<Option<(Vec<u32>, Vec<f32>)>>);

impl AnswerMemory {
    /// Lends `indices` and `distances` (of any length) to the next [`AnswerMemory::take`].
    pub(crate) fn lent(indices: Vec<u32>, distances: Vec<f32>) -> Self {
        let memory = AnswerMemory::default();
        memory.lend(indices, distances);
        memory
    }

    /// Lends `indices` and `distances` again (a round that rewrites every row of the answer).
    pub(crate) fn lend(&self, indices: Vec<u32>, distances: Vec<f32>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((indices, distances));
    }

    /// Arrays of `len` entries for the answers: the lent ones where they can hold `len`
    /// (once), fresh zeroed memory otherwise.
    pub(crate) fn take(&self, len: usize) -> (Vec<u32>, Vec<f32>) {
        let lent = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        match lent {
            Some((mut indices, mut distances)) if indices.capacity() >= len && distances.capacity() >= len => {
                indices.resize(len, 0);
                distances.resize(len, 0.0);
                (indices, distances)
            }
            _ => (zeroed_answers(len), zeroed_answers(len)),
        }
    }
}

/// `len` zeros, for the large arrays that answers are written into. Past
/// [`FRESH_ZEROED_BYTES`], memory fresh from the system, which on Linux the kernel is asked
/// to back with 2 MiB pages (where transparent huge pages are on or `madvise`): writing a
/// large k's answers touches every page first, and with 4 KiB pages those faults cost the
/// host more than the copies themselves (notes/exactness.md, "Answer arrays on 2 MiB pages").
/// Smaller arrays may come from memory the allocator reuses, which it would zero on this one
/// thread: every core zeroes them instead.
pub(crate) fn zeroed_answers<T: bytemuck::Zeroable + Send>(len: usize) -> Vec<T> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    if (PARALLEL_ZEROED_BYTES..FRESH_ZEROED_BYTES).contains(&bytes) {
        use rayon::prelude::*;
        let mut answers = Vec::with_capacity(len);
        (0..len).into_par_iter().map(|_| T::zeroed()).collect_into_vec(&mut answers);
        return answers;
    }
    let answers = bytemuck::zeroed_vec(len);
    advise_huge_pages(&answers);
    answers
}

/// Allocations at least this large always come fresh from the system (glibc's largest
/// threshold for mapping them apart; below it, the threshold follows the sizes freed).
const FRESH_ZEROED_BYTES: usize = 32 << 20;

/// Arrays zeroed by every core rather than by the allocator's memset.
const PARALLEL_ZEROED_BYTES: usize = 1 << 20;

/// `len` zeros in memory fresh from the system, untouched (its pages are faulted in by
/// whoever writes them first, on any thread), or `None` where the system has not that much.
pub(crate) fn try_zeroed<T: bytemuck::Zeroable>(len: usize) -> Option<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    if layout.size() == 0 {
        return Some(bytemuck::zeroed_vec(len));
    }
    // SAFETY: a layout of non-zero size; all-zero bytes are a valid `T` (`Zeroable`); the
    // vector takes the allocation with the layout it was made with (capacity `len` of `T`).
    unsafe {
        let memory = std::alloc::alloc_zeroed(layout).cast::<T>();
        (!memory.is_null()).then(|| Vec::from_raw_parts(memory, len, len))
    }
}

#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(memory: &[T]) {
    const HUGE_PAGE: usize = 2 << 20;
    let first = memory.as_ptr() as usize;
    let start = first.next_multiple_of(HUGE_PAGE);
    let end = (first + std::mem::size_of_val(memory)) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: advice on whole pages inside an allocation the caller owns; the kernel may
        // ignore it, and the memory's contents are the same either way.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_: &[T]) {}

/// Zeroes `memory` by handing its whole pages back to the system (the partial pages at
/// either end are zeroed by hand), so that answers already written elsewhere stop counting
/// in the process's resident memory until they are touched again.
pub(crate) fn release_pages<T: bytemuck::Pod>(memory: &mut [T]) {
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(memory);
    let page = 4096;
    let first = bytes.as_ptr() as usize;
    let start = first.next_multiple_of(page) - first;
    let end = ((first + bytes.len()) / page * page).saturating_sub(first).max(start);
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: whole pages inside memory borrowed mutably here: nothing else reads them
        // meanwhile. Private pages given back this way read as zeros afterwards, which is what
        // the slice is set to (`fill` below covers the other cases).
        let done = unsafe {
            libc::madvise(bytes.as_mut_ptr().add(start) as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
        };
        if done == 0 {
            bytes[..start].fill(0);
            bytes[end..].fill(0);
            return;
        }
    }
    bytes.fill(0);
}

/// Copies `src` into `dst` with streaming (non-temporal) stores where the CPU has them
/// (x86-64): the answers are written into fresh pages once and not read again by the copy, and
/// ordinary stores would first read every line of those pages into the cache, a quarter of a
/// copy-out's memory traffic.
pub(crate) fn stream_copy<T: bytemuck::Pod>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len(), "a copy between slices of one length");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let src: &[u8] = bytemuck::cast_slice(src);
        // Streaming stores take whole 16-byte aligned blocks; the ends are copied as usual.
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        let blocks = (dst.len() - head) / 16;
        let tail = head + blocks * 16;
        dst[..head].copy_from_slice(&src[..head]);
        for block in 0..blocks {
            let at = head + block * 16;
            // SAFETY: SSE2 is part of x86-64; both ranges lie inside the slices, the store's
            // address is 16-byte aligned and the load is unaligned.
            unsafe {
                let v = _mm_loadu_si128(src.as_ptr().add(at).cast::<__m128i>());
                _mm_stream_si128(dst.as_mut_ptr().add(at).cast::<__m128i>(), v);
            }
        }
        // SAFETY: SSE2; orders the streaming stores before any later store of this thread (and
        // so before the thread's completion is seen by whoever joins it).
        unsafe { _mm_sfence() };
        dst[tail..].copy_from_slice(&src[tail..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_copy_copies_every_element_at_any_alignment() {
        let src: Vec<u32> = (0..300).map(|i| i * 2654435761u32).collect();
        for start in 0..6 {
            for len in [0, 1, 3, 4, 5, 17, 64, 250] {
                let mut dst = vec![7u32; 310];
                stream_copy(&mut dst[start..start + len], &src[start..start + len]);
                assert_eq!(&dst[start..start + len], &src[start..start + len], "start {start} len {len}");
                assert!(dst[..start].iter().chain(&dst[start + len..]).all(|&v| v == 7), "start {start} len {len}");
            }
        }
    }
}
