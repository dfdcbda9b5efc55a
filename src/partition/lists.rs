//! Each row's candidate list, merged across the blocks that hold the row.

use rayon::prelude::*;

use crate::refine::{Candidates, NONE};

/// Candidate lists a block found for rows (slots) of the merge: `rows x kc` keys and ids, ids
/// already numbered in the whole data. Row r is slot `first + r`, or `slots[r]` where given.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Part {
    pub first: usize,
    pub slots: Option<Vec<u32>>,
    pub rows: usize,
    pub kc: usize,
    pub keys: Vec<f32>,
    pub ids: Vec<u32>,
    /// Per row, the backend's verdict: bit 0, the row failed (it is brute-forced); bit 1, its
    /// list may have missed keys (it is searched again).
    pub flags: Vec<u8>,
    /// The candidates' float64 keys, where the backend computed them (GPUs with f64).
    pub exact: Option<Vec<f64>>,
}

pub(crate) const FAILED: u8 = 1;
pub(crate) const INCOMPLETE: u8 = 2;

impl Part {
    /// The lists of `cands` (rows of one backend call) for slots `first..`, their ids shifted
    /// by `id_offset` into the whole data.
    pub fn from_candidates(first: usize, cands: Candidates, id_offset: usize) -> Self {
        let rows = cands.failed.len();
        let mut ids = cands.ids;
        ids.par_iter_mut().filter(|id| **id != NONE).for_each(|id| *id += id_offset as u32);
        let flags = (0..rows)
            .map(|r| {
                u8::from(cands.failed[r]) * FAILED
                    + u8::from(cands.incomplete.get(r).copied().unwrap_or(false)) * INCOMPLETE
            })
            .collect();
        Part { first, slots: None, rows, kc: cands.kc, keys: cands.keys, ids, flags, exact: cands.exact }
    }

    /// Lists of no candidates.
    pub fn empty(first: usize, rows: usize, kc: usize) -> Self {
        let (keys, ids) = (vec![f32::INFINITY; rows * kc], vec![NONE; rows * kc]);
        Part { first, slots: None, rows, kc, keys, ids, flags: vec![0; rows], exact: None }
    }

    /// The largest key of row `r`'s list where it holds `kc` candidates, else +inf.
    pub fn worst_key(&self, r: usize) -> f32 {
        let row = r * self.kc..(r + 1) * self.kc;
        match self.ids[row.clone()].contains(&NONE) {
            true => f32::INFINITY,
            false => self.keys[row].iter().copied().fold(f32::NEG_INFINITY, f32::max),
        }
    }

    fn lists_any(&self) -> bool {
        self.ids.iter().any(|&id| id != NONE)
    }

    /// The same lists, each padded with `NONE` to `kc` candidates.
    pub fn padded(self, kc: usize) -> Self {
        if self.kc == kc {
            return self;
        }
        let mut out = Part::empty(self.first, self.rows, kc);
        let mut exact = self.exact.as_ref().map(|_| vec![f64::INFINITY; self.rows * kc]);
        for r in 0..self.rows {
            let (from, to) = (r * self.kc..(r + 1) * self.kc, r * kc..r * kc + self.kc);
            out.keys[to.clone()].copy_from_slice(&self.keys[from.clone()]);
            out.ids[to.clone()].copy_from_slice(&self.ids[from.clone()]);
            if let (Some(e), Some(mine)) = (exact.as_mut(), &self.exact) {
                e[to].copy_from_slice(&mine[from]);
            }
        }
        Part { slots: self.slots, flags: self.flags, exact, ..out }
    }
}

impl Part {
    /// Appends the lists to `bytes`: first and rows (u64), keys, ids, flags, then 1 and the
    /// float64 keys or 0, little-endian.
    pub fn encode(&self, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(&(self.first as u64).to_le_bytes());
        bytes.extend_from_slice(&(self.rows as u64).to_le_bytes());
        bytes.extend_from_slice(bytemuck::cast_slice(&self.keys));
        bytes.extend_from_slice(bytemuck::cast_slice(&self.ids));
        bytes.extend_from_slice(&self.flags);
        bytes.push(u8::from(self.exact.is_some()));
        if let Some(exact) = &self.exact {
            bytes.extend_from_slice(bytemuck::cast_slice(exact));
        }
    }

    /// Reads lists of `kc` that [`Part::encode`] wrote, taking bytes from `take`; an error
    /// says what is wrong with them.
    pub fn decode<'b>(
        kc: usize,
        take: &mut dyn FnMut(usize) -> std::result::Result<&'b [u8], String>,
    ) -> std::result::Result<Part, String> {
        let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
        let (first, rows) = (u64_at(take(8)?), u64_at(take(8)?));
        let values = rows.checked_mul(kc).filter(|v| v.checked_mul(8).is_some()).ok_or("a list size that overflows")?;
        let keys: Vec<f32> = bytemuck::pod_collect_to_vec(take(values * 4)?);
        let ids: Vec<u32> = bytemuck::pod_collect_to_vec(take(values * 4)?);
        let flags = take(rows)?.to_vec();
        let exact = match take(1)?[0] {
            0 => None,
            1 => Some(bytemuck::pod_collect_to_vec::<u8, f64>(take(values * 8)?)),
            other => return Err(format!("float64 keys marked {other}")),
        };
        Ok(Part { first, slots: None, rows, kc, keys, ids, flags, exact })
    }
}

/// The `kc` best (key, id) pairs of every row seen so far, in (key, id) order, `NONE` after
/// the last. Every (row, column) pair comes from exactly one block, and the order is total,
/// so the lists do not depend on the order in which blocks arrive.
pub(crate) struct RowLists {
    kc: usize,
    keys: Vec<f32>,
    ids: Vec<u32>,
    flags: Vec<u8>,
    /// The candidates' float64 keys while every part that lists candidates brought them.
    exact: Option<Vec<f64>>,
}

impl RowLists {
    pub fn new(rows: usize, kc: usize) -> Self {
        let exact = Some(vec![f64::INFINITY; rows * kc]);
        RowLists { kc, keys: vec![f32::INFINITY; rows * kc], ids: vec![NONE; rows * kc], flags: vec![0; rows], exact }
    }

    /// The largest key of row `r`'s list where it holds `kc` candidates, else +inf.
    pub fn worst_key(&self, r: usize) -> f32 {
        match self.ids[(r + 1) * self.kc - 1] {
            NONE => f32::INFINITY,
            _ => self.keys[(r + 1) * self.kc - 1],
        }
    }

    pub fn merge(&mut self, part: &Part) {
        assert_eq!(part.kc, self.kc, "blocks of one round share their list length");
        if part.exact.is_none() && part.lists_any() {
            self.exact = None;
        }
        let kc = self.kc;
        let empty = vec![f64::INFINITY; kc];
        let exact_row = |r: usize| part.exact.as_ref().map_or(&empty[..], |e| &e[r * kc..(r + 1) * kc]);
        if let Some(slots) = &part.slots {
            let mut scratch = MergeScratch::default();
            for (r, &slot) in slots.iter().enumerate() {
                let (at, from) = (slot as usize * kc..(slot as usize + 1) * kc, r * kc..(r + 1) * kc);
                let exact = self.exact.as_mut().map(|e| &mut e[at.clone()]);
                let row = Row { keys: &mut self.keys[at.clone()], ids: &mut self.ids[at], exact };
                merge_row(row, &part.keys[from.clone()], &part.ids[from], exact_row(r), &mut scratch);
                self.flags[slot as usize] |= part.flags[r];
            }
            return;
        }
        let span = part.first * kc..(part.first + part.rows) * kc;
        let mut exact_rows: Vec<Option<&mut [f64]>> = match self.exact.as_mut() {
            Some(e) => e[span.clone()].chunks_mut(kc).map(Some).collect(),
            None => (0..part.rows).map(|_| None).collect(),
        };
        self.keys[span.clone()]
            .par_chunks_mut(kc)
            .zip(self.ids[span].par_chunks_mut(kc))
            .zip(exact_rows.par_iter_mut())
            .enumerate()
            .for_each_init(MergeScratch::default, |scratch, (r, ((keys, ids), exact))| {
                let row = Row { keys, ids, exact: exact.as_deref_mut() };
                let (new_keys, new_ids) = (&part.keys[r * kc..(r + 1) * kc], &part.ids[r * kc..(r + 1) * kc]);
                merge_row(row, new_keys, new_ids, exact_row(r), scratch);
            });
        for (flag, new) in self.flags[part.first..part.first + part.rows].iter_mut().zip(&part.flags) {
            *flag |= new;
        }
    }

    /// The merged lists as one part, for every row from slot 0.
    pub fn into_part(self) -> Part {
        let rows = self.flags.len();
        Part {
            first: 0,
            slots: None,
            rows,
            kc: self.kc,
            keys: self.keys,
            ids: self.ids,
            flags: self.flags,
            exact: self.exact,
        }
    }

    /// The merged lists in the form the exact finish takes.
    pub fn into_candidates(self) -> Candidates {
        let failed = self.flags.iter().map(|f| f & FAILED != 0).collect();
        let incomplete = self.flags.iter().map(|f| f & INCOMPLETE != 0).collect();
        Candidates { failed, incomplete, ..Candidates::from_lists(self.kc, self.keys, self.ids, self.exact) }
    }
}

/// One row of the merged lists.
struct Row<'a> {
    keys: &'a mut [f32],
    ids: &'a mut [u32],
    exact: Option<&'a mut [f64]>,
}

/// A candidate in a merge: key, id, float64 key (+inf where not known).
type Entry = (f32, u32, f64);

/// A merging thread's lists of a row, kept from row to row.
#[derive(Default)]
struct MergeScratch {
    old: Vec<Entry>,
    new: Vec<Entry>,
}

/// Merges candidates in any order into a row's list, sorted by key then id: its `kc` best.
fn merge_row(row: Row<'_>, new_keys: &[f32], new_ids: &[u32], new_exact: &[f64], scratch: &mut MergeScratch) {
    let by_key_then_id = |a: &Entry, b: &Entry| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    let MergeScratch { old, new } = scratch;
    new.clear();
    new.extend((0..new_ids.len()).filter(|&s| new_ids[s] != NONE).map(|s| (new_keys[s], new_ids[s], new_exact[s])));
    new.sort_unstable_by(by_key_then_id);
    let Row { keys, ids, mut exact } = row;
    old.clear();
    old.extend(
        (0..ids.len())
            .take_while(|&s| ids[s] != NONE)
            .map(|s| (keys[s], ids[s], exact.as_ref().map_or(f64::INFINITY, |e| e[s]))),
    );
    let (mut a, mut b) = (old.iter().copied().peekable(), new.iter().copied().peekable());
    for slot in 0..keys.len() {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => {
                if by_key_then_id(x, y).is_le() {
                    a.next()
                } else {
                    b.next()
                }
            }
            (Some(_), None) => a.next(),
            (None, _) => b.next(),
        };
        let (key, id, exact_key) = next.unwrap_or((f32::INFINITY, NONE, f64::INFINITY));
        (keys[slot], ids[slot]) = (key, id);
        if let Some(e) = exact.as_mut() {
            e[slot] = exact_key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(first: usize, kc: usize, rows: &[&[(f32, u32)]]) -> Part {
        let mut keys = vec![f32::INFINITY; rows.len() * kc];
        let mut ids = vec![NONE; rows.len() * kc];
        for (r, row) in rows.iter().enumerate() {
            for (s, &(k, id)) in row.iter().enumerate() {
                keys[r * kc + s] = k;
                ids[r * kc + s] = id;
            }
        }
        Part { first, slots: None, rows: rows.len(), kc, keys, ids, flags: vec![0; rows.len()], exact: None }
    }

    #[test]
    fn merged_lists_keep_the_best_in_any_order_of_arrival() {
        let a = part(0, 3, &[&[(5.0, 9), (1.0, 4), (3.0, 7)], &[(2.0, 1)]]);
        let b = part(0, 3, &[&[(3.0, 2), (0.5, 11)], &[(2.0, 0), (9.0, 3)]]);
        let mut c = part(1, 3, &[&[(1.0, 20)]]);
        c.flags[0] = INCOMPLETE;
        let orders = [[&a, &b, &c], [&c, &b, &a], [&b, &c, &a]];
        let mut results = Vec::new();
        for order in orders {
            let mut lists = RowLists::new(2, 3);
            for p in order {
                lists.merge(p);
            }
            let cands = lists.into_candidates();
            results.push((cands.keys, cands.ids, cands.incomplete));
        }
        assert_eq!(results[0].1, [11, 4, 2, 20, 0, 1]);
        assert_eq!(results[0].0, [0.5, 1.0, 3.0, 1.0, 2.0, 2.0]);
        assert_eq!(results[0].2, [false, true]);
        assert!(results.iter().all(|r| *r == results[0]));
    }

    #[test]
    fn short_lists_stay_padded() {
        let mut lists = RowLists::new(1, 4);
        lists.merge(&part(0, 4, &[&[(1.0, 3)]]));
        lists.merge(&part(0, 4, &[&[(0.0, 8)]]));
        let mut scattered = part(0, 2, &[&[(0.5, 5)]]).padded(4);
        scattered.slots = Some(vec![0]);
        lists.merge(&scattered);
        let cands = lists.into_candidates();
        assert_eq!(cands.ids, [8, 5, 3, NONE]);
        assert!(cands.exact.is_none(), "parts without float64 keys leave the lists without them");
    }

    #[test]
    fn parts_come_back_from_their_bytes() {
        let mut p = part(7, 3, &[&[(1.5, 2), (0.5, 9)], &[(4.0, 1)]]);
        p.flags[1] = FAILED;
        let q = Part { exact: Some(vec![0.25; 6]), ..p.clone() };
        let mut bytes = Vec::new();
        p.encode(&mut bytes);
        q.encode(&mut bytes);
        let mut at = 0;
        let mut take = |len: usize| {
            let piece = bytes.get(at..at + len).ok_or_else(|| "short".to_string());
            at += len;
            piece
        };
        assert_eq!(Part::decode(3, &mut take).unwrap(), p);
        assert_eq!(Part::decode(3, &mut take).unwrap(), q);
        assert!(Part::decode(3, &mut take).is_err());
    }

    #[test]
    fn float64_keys_travel_with_their_candidates() {
        let mut lists = RowLists::new(1, 2);
        for (k, id) in [(3.0, 7), (1.0, 9), (2.0, 4)] {
            let mut p = part(0, 2, &[&[(k, id)]]);
            p.exact = Some(vec![f64::from(k) + 0.5, f64::INFINITY]);
            lists.merge(&p);
        }
        let cands = lists.into_candidates();
        assert_eq!(cands.ids, [9, 4]);
        assert_eq!(cands.exact.unwrap(), [1.5, 2.5]);
    }
}
