//! Exact re-ranking of fp32 candidates in float64, and the certificate that makes it exact.
//!
//! For query i let A be the fp32 ranking key and E_i a bound on |A - exact| over all corpus
//! rows (`prepare::key_error_bound`). The candidates are the kc smallest A, so every other
//! row z has A(z) >= A_max, the largest candidate key, hence exact(z) >= A_max - E_i. If the
//! k-th smallest exact key among the candidates is at most that, no outside row can be nearer
//! than the k-th neighbour (it can at best tie), and the float64 top-k of the candidates is the
//! float64 top-k of the corpus. Rows without that proof are searched again with more
//! candidates, or brute-forced in float64.

use std::cmp::Ordering;

use rayon::prelude::*;

use crate::data::{AnswerMemory, MatrixRef};
use crate::metric::Metric;

/// Marks a padding slot (fewer rows than candidates) and "no row to exclude".
pub(crate) const NONE: u32 = u32::MAX;

/// The kc best fp32 candidates of each query, as produced by a backend.
#[derive(Debug)]
pub(crate) struct Candidates {
    /// Candidates per query.
    pub kc: usize,
    /// fp32 ranking keys, `queries x kc`, in no particular order.
    pub keys: Vec<f32>,
    /// Corpus rows, `queries x kc`; `NONE` in padding slots.
    pub ids: Vec<u32>,
    /// Rows the backend could not finish; they are answered by brute force.
    pub failed: Vec<bool>,
    /// Rows whose candidate lists may miss keys under their bound (a shortlist of the
    /// symmetric sweep overflowed): not proven, whatever their certificate says. Empty when
    /// no row is.
    pub incomplete: Vec<bool>,
    /// Rows whose candidates came at least once from a shortlist of the GPU's bound filter.
    pub shortlisted: usize,
    /// Whether the backend allocated buffers for this call rather than reusing its last ones.
    pub buffers_allocated: bool,
    /// Whether the graph was swept in symmetric blocks (every distance computed once).
    pub symmetric: bool,
    /// Whether the graph was swept over the upper triangle under sampled bounds (long lists).
    pub bounded: bool,
    /// Whether distance tiles after each query tile's first were sparse (narrow tiles under
    /// a small budget: keys under a row's bound only).
    pub sparse: bool,
    /// Whether pairs listed by both their rows had their exact key computed once.
    pub shared_keys: bool,
    /// Rows whose ranked answers the next query tile's distance kernel published to the host.
    pub published: usize,
    /// Exact float64 ranking keys of the candidates, `queries x kc`, when the backend
    /// computed them (the GPU with SHADER_F64); otherwise the host computes them.
    pub exact: Option<Vec<f64>>,
    /// Each row's answer, ranked and certified by the backend (the GPU with SHADER_F64);
    /// `keys`, `ids` and `exact` are then empty.
    pub ranked: Option<BackendRanked>,
}

impl Candidates {
    /// Lists of `kc` candidates a row made on the host (the CPU backend, merged blocks, a
    /// pair's column lists): no row failed or incomplete, nothing from a GPU sweep.
    pub fn from_lists(kc: usize, keys: Vec<f32>, ids: Vec<u32>, exact: Option<Vec<f64>>) -> Self {
        let rows = ids.len().checked_div(kc).unwrap_or(0);
        Candidates {
            kc,
            keys,
            ids,
            failed: vec![false; rows],
            incomplete: Vec::new(),
            shortlisted: 0,
            buffers_allocated: false,
            symmetric: false,
            bounded: false,
            sparse: false,
            shared_keys: false,
            published: 0,
            exact,
            ranked: None,
        }
    }
}

/// Answers ranked and certified on the backend: the decision of [`refine`] for every row,
/// already in the output's form (rows of `k`, as [`write_row`] leaves them).
#[derive(Debug)]
pub(crate) struct BackendRanked {
    pub k: usize,
    /// `queries x k` corpus rows, ascending by reported distance, then row.
    pub ids: Vec<u32>,
    /// `queries x k` reported distances.
    pub distances: Vec<f32>,
    /// Per row: 0 accepted, 2 + m accepted with only m < k neighbours, 1 not proven.
    pub status: Vec<u32>,
}

impl BackendRanked {
    /// How many neighbours row `slot` has, or `None` when its certificate failed.
    pub fn found(&self, slot: usize) -> Option<usize> {
        found(self.status[slot], self.k)
    }

    /// Row `slot`'s first `m` answers: (corpus rows, distances).
    pub fn row(&self, slot: usize, m: usize) -> (&[u32], &[f32]) {
        let at = slot * self.k;
        (&self.ids[at..at + m], &self.distances[at..at + m])
    }
}

/// How many of `k` neighbours a row with certificate `status` (see [`BackendRanked::status`])
/// has, or `None` when its certificate failed.
pub(crate) fn found(status: u32, k: usize) -> Option<usize> {
    match status {
        0 => Some(k),
        1 => None,
        s => Some((s - 2) as usize),
    }
}

/// Writes one row's answer, given ascending by (exact key, row), as reported distances. The
/// f32 distance is monotone in the key, so rows that round to the same distance are adjacent;
/// they are then listed by index, so that the output is sorted as reported.
pub(crate) fn write_row(metric: Metric, answer: impl Iterator<Item = (f64, u32)>, ids: &mut [u32], dists: &mut [f32]) {
    let mut m = 0;
    for ((id, dist), (key, j)) in ids.iter_mut().zip(dists.iter_mut()).zip(answer) {
        *id = j;
        *dist = metric.key_to_distance(key);
        m += 1;
    }
    order_ties_by_index(&mut ids[..m], &dists[..m]);
    // A row short of k (not reached while k is at most the rows available) ends in zeros,
    // as in fresh memory, whatever memory the answer was lent.
    ids[m..].fill(0);
    dists[m..].fill(0.0);
}

/// Lists the rows of one reported distance by index. `dists` is sorted (f32 distances are
/// monotone in the key), so equal ones are adjacent.
///
/// This runs on every answer of a graph (134 M at n=65536 k=2048), so a row without ties costs
/// one comparison an answer and no call.
pub(crate) fn order_ties_by_index(ids: &mut [u32], dists: &[f32]) {
    let mut start = 0;
    for end in 1..=dists.len() {
        if end == dists.len() || dists[end].to_bits() != dists[start].to_bits() {
            if end - start > 1 {
                ids[start..end].sort_unstable();
            }
            start = end;
        }
    }
}

/// What the backend needs to rank and certify rows itself.
pub(crate) struct Certify<'a> {
    pub k: usize,
    /// Each query's fp32 error bound on keys (`prepare::key_error_bound`), computed on the
    /// first call: the GPU asks once its distance work is queued, so that the host computes
    /// them while the GPU runs.
    pub error_bounds: &'a (dyn Fn() -> &'a [f64] + Sync),
    /// Keys are non-negative: every metric but inner product.
    pub floor_zero: bool,
    /// Where ranked answers of every row are written.
    pub answers: &'a AnswerMemory,
    /// Where set, each query tile's ranked rows are handed here once they are in `answers`:
    /// the tile's first row, its ids and its distances (`k` a row), on the thread that copied
    /// them. Rows the backend could not rank are among them, and are rewritten by later
    /// rounds.
    pub tile_ranked: Option<&'a TileRanked<'a>>,
}

/// What [`Certify::tile_ranked`] calls.
pub(crate) type TileRanked<'a> = dyn Fn(usize, &mut [u32], &mut [f32]) -> crate::error::Result<()> + Sync + 'a;

/// What one query asks.
#[derive(Clone, Copy)]
pub(crate) struct Query<'a> {
    pub corpus: MatrixRef<'a>,
    pub vector: &'a [f32],
    pub metric: Metric,
    pub k: usize,
    /// Corpus row that is the query itself in a kNN graph, or `NONE`.
    pub exclude: u32,
}

/// Candidates ahead of the one being summed whose rows are prefetched.
const PREFETCH_AHEAD: usize = 4;

/// Asks the cache for `row` without waiting for it (x86-64; elsewhere nothing).
#[inline]
fn prefetch(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(16) {
        // SAFETY: a prefetch does not access memory architecturally; the address is in `row`.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// A row's answer: (exact key, corpus row), sorted, k long.
pub(crate) type Ranked = Vec<(f64, u32)>;

fn by_key_then_index(a: &(f64, u32), b: &(f64, u32)) -> Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

fn top_k(mut all: Vec<(f64, u32)>, k: usize) -> Ranked {
    if all.len() > k {
        all.select_nth_unstable_by(k - 1, by_key_then_index);
        all.truncate(k);
    }
    all.sort_unstable_by(by_key_then_index);
    all
}

/// Re-ranks one query's candidates exactly. `None` when the certificate fails.
/// `exact_keys`, when given, holds the float64 keys of the candidates, computed by the backend.
pub(crate) fn refine(
    q: Query<'_>,
    keys: &[f32],
    ids: &[u32],
    exact_keys: Option<&[f64]>,
    available: usize,
    error_bound: f64,
) -> Option<Ranked> {
    let exact: Vec<(f64, u32)> = ids
        .iter()
        .enumerate()
        .filter(|&(_, &j)| j != NONE && j != q.exclude)
        .map(|(slot, &j)| match exact_keys {
            Some(e) => (e[slot], j),
            None => {
                // Candidate rows are scattered over the corpus: ask for a later one while
                // this one is summed, or each key waits for its row's first cache miss.
                if let Some(&ahead) = ids.get(slot + PREFETCH_AHEAD).filter(|&&a| a != NONE) {
                    prefetch(q.corpus.row(ahead as usize));
                }
                (q.metric.rank_key_f64(q.vector, q.corpus.row(j as usize)), j)
            }
        })
        .collect();
    // Padding means the backend found fewer candidates than asked: all there are, unless keys
    // may have overflowed to +inf (an infinite bound), as padding and the query itself are.
    let complete = exact.len() >= available || (exact.len() < ids.len() && error_bound.is_finite());
    if exact.len() < q.k {
        return if complete { Some(top_k(exact, q.k)) } else { None };
    }
    let ranked = top_k(exact, q.k);
    if complete {
        return Some(ranked);
    }
    let largest_candidate =
        keys.iter().zip(ids).filter(|&(_, &j)| j != NONE).map(|(&a, _)| a as f64).fold(f64::NEG_INFINITY, f64::max);
    let floor = if q.metric == Metric::InnerProduct { f64::NEG_INFINITY } else { 0.0 };
    let outside_lower_bound = (largest_candidate - error_bound).max(floor);
    (ranked[q.k - 1].0 <= outside_lower_bound).then_some(ranked)
}

/// The float64 brute force for one query: the answer when nothing cheaper can be proven.
pub(crate) fn brute_force(q: Query<'_>) -> Ranked {
    let all: Vec<(f64, u32)> = (0..q.corpus.rows())
        .into_par_iter()
        .filter(|&j| j as u32 != q.exclude)
        .map(|j| (q.metric.rank_key_f64(q.vector, q.corpus.row(j)), j as u32))
        .collect();
    top_k(all, q.k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Matrix;

    fn line(n: usize) -> Matrix {
        Matrix::new((0..n).map(|i| i as f32).collect(), n, 1).unwrap()
    }

    fn query<'a>(corpus: &'a Matrix, at: &'a [f32], k: usize) -> Query<'a> {
        Query { corpus: corpus.view(), vector: at, metric: Metric::SqEuclidean, k, exclude: NONE }
    }

    #[test]
    fn rows_of_one_distance_are_listed_by_index() {
        // Runs of ties at the start, in the middle and at the end; single answers between.
        let dists = [1.0f32, 1.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0, 5.0];
        let mut ids = [7u32, 2, 9, 8, 1, 5, 0, 6, 3];
        order_ties_by_index(&mut ids, &dists);
        assert_eq!(ids, [2, 7, 9, 1, 5, 8, 0, 3, 6]);
        let mut none: [u32; 0] = [];
        order_ties_by_index(&mut none, &[]);
        let mut one = [4u32];
        order_ties_by_index(&mut one, &[0.5]);
        assert_eq!(one, [4]);
    }

    #[test]
    fn accepts_candidates_that_provably_contain_the_answer() {
        let corpus = line(10);
        let at = [0.0f32];
        // The 4 nearest of 0..10 to 0 are 0,1,2,3 (keys 0,1,4,9); fp32 keys exact here.
        let got = refine(query(&corpus, &at, 2), &[0.0, 1.0, 4.0, 9.0], &[0, 1, 2, 3], None, 10, 1e-6).unwrap();
        assert_eq!(got, vec![(0.0, 0), (1.0, 1)]);
    }

    #[test]
    fn rejects_candidates_when_the_error_bound_allows_a_nearer_outsider() {
        let corpus = line(10);
        let at = [0.0f32];
        // Largest candidate key 9 minus a bound of 8.5 leaves 0.5 < the 2nd exact key (1).
        assert!(refine(query(&corpus, &at, 2), &[0.0, 1.0, 4.0, 9.0], &[0, 1, 2, 3], None, 10, 8.5).is_none());
    }

    #[test]
    fn rejects_candidates_that_miss_a_true_neighbour_within_the_bound() {
        let corpus = line(10);
        let at = [0.0f32];
        // Row 1 is missing: the exact 2nd is row 2 (key 4); keys of 4 and 9 with a bound of 6
        // cannot exclude an outsider at 3 or more.
        assert!(refine(query(&corpus, &at, 2), &[0.0, 4.0, 9.0], &[0, 2, 3], None, 10, 6.0).is_none());
    }

    #[test]
    fn padded_candidate_lists_are_complete() {
        let corpus = line(3);
        let at = [2.5f32];
        let got = refine(query(&corpus, &at, 3), &[0.25, 2.25, 6.25, f32::INFINITY], &[2, 1, 0, NONE], None, 3, 100.0)
            .unwrap();
        assert_eq!(got.iter().map(|e| e.1).collect::<Vec<_>>(), vec![2, 1, 0]);
    }

    #[test]
    fn backend_ranked_rows_decode_by_status() {
        let ranked = BackendRanked {
            k: 2,
            ids: vec![4, 7, 1, 0, 9, 3],
            distances: vec![0.5, 1.5, 2.0, 0.0, 3.0, 4.0],
            status: vec![0, 3, 1],
        };
        assert_eq!(ranked.found(0), Some(2));
        assert_eq!(ranked.row(0, 2), (&[4, 7][..], &[0.5, 1.5][..]));
        assert_eq!(ranked.found(1), Some(1));
        assert_eq!(ranked.row(1, 1), (&[1][..], &[2.0][..]));
        assert_eq!(ranked.found(2), None);
    }

    #[test]
    fn rows_that_round_to_one_distance_are_listed_by_index() {
        let (mut ids, mut dists) = (vec![0u32; 4], vec![0f32; 4]);
        // Ascending exact keys; the first two differ in float64 but not as f32 distances.
        let answer = [(1.0, 9), (1.0 + 1e-12, 4), (4.0, 7), (4.0, 2)];
        write_row(Metric::SqEuclidean, answer.into_iter(), &mut ids, &mut dists);
        assert_eq!(ids, [4, 9, 2, 7]);
        assert_eq!(dists, [1.0, 1.0, 4.0, 4.0]);

        // Inner product: keys are negated products, distances the products, descending.
        write_row(Metric::InnerProduct, [(-3.0, 5), (-3.0, 1), (-2.0, 0)].into_iter(), &mut ids[..3], &mut dists[..3]);
        assert_eq!(ids[..3], [1, 5, 0]);
        assert_eq!(dists[..3], [3.0, 3.0, 2.0]);
    }

    #[test]
    fn brute_force_breaks_ties_by_index_and_skips_self() {
        let corpus = Matrix::new(vec![1.0, 0.0, 2.0, 0.0, 1.0], 5, 1).unwrap();
        let at = [0.0f32];
        let q = Query { exclude: 1, ..query(&corpus, &at, 3) };
        assert_eq!(brute_force(q), vec![(0.0, 3), (1.0, 0), (1.0, 4)]);
    }
}
