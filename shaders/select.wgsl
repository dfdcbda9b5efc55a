// Quick multi-select: the `need` smallest (value, index) pairs of each row, one workgroup per
// row, after Komarov, Dashti and D'Souza's GPU quick multi-select.
//
// Each pass moves part of the current segment into an auxiliary array. Only which elements
// are kept matters, not their order, so every kept element takes its slot from a workgroup
// counter per side (`append_slots`): no barrier or scan inside a pass, and no work at all for
// the many elements a pass drops. (Reserving a subgroup's slots with one atomic add, ranking
// the lanes by ballot and popcount, measured 3x slower: that work is done for every element.)
// The entry point `select_rows` is declared by select_entry_subgroup.wgsl or select_entry_workgroup.wgsl,
// whichever the host appends.
//
// Passes (the whole loop runs on the GPU, no host round trip):
// - FILTER around a sampled pivot p: elements < p packed from the left, elements == p from the
//   right end, elements > p not written at all. The pivot is the sample just above the
//   need/len quantile of 64 evenly spaced samples, so usually at least `need` elements fall
//   below it and the segment shrinks to a few times `need` for the cost of one read.
// - PARTITION (Komarov's two-sided pass, `<=` p left, > p right) when the filter found fewer
//   than `need` elements <= p: the left part is kept and the search goes on to the right.
// - BAND, when the first FILTER of a dense row found too few: the row is read again for the
//   elements between p and a higher pivot, appended to those kept, so that the segment holds
//   everything under the higher pivot (a PARTITION would write the whole row); again with a
//   higher pivot while still too few.
// - THRESHOLD, first on a distance tile after the first: the running list's largest key is a
//   bound, and only elements below it are written; usually almost none are.
// - A segment that would take a FILTER and holds at most TAIL_LEN elements (usually what the
//   first FILTER of a row keeps) is finished at once by `tail_select`: a histogram of its
//   values finds the bin of the need-th element, and only that bin is ranked exactly.
// Kept parts are not copied: a small stack remembers (array, start, length) and the answer is
// gathered from it once at the end.
//
// Input is either a dense row of f32 keys (index = col_base + position) or two lists of pairs
// already in the output buffer (merging a tile's candidates into the running list). The
// output buffer holds the running lists of all rows first, so that they can be read back in
// one contiguous copy, then the latest tile's lists.
//
// Shortlists (shortlist_cap > 0, distance tiles after a query tile's first): the distance
// kernel has already appended each row's keys below its bound to the row's shortlist. The
// dense select then only serves rows whose shortlist overflowed, and the merge takes the
// shortlist as its second list where it did not. Whatever writes a running list lowers the
// row's bound to its largest key; the merge empties the shortlist. Rows whose bound comes
// from the host (`queries_bounded` plans) start with lists of +inf and have every distance
// tile sparse.
// A row that does not finish within MAX_PASSES sets its flag; the host then answers that row
// another way, so a pathological row is slow but never wrong.

struct Params {
    rows: u32,           // rows in this dispatch
    len: u32,            // input elements per row
    in_stride: u32,      // dense input: its row stride (a multiple of 4); pairs input: where the second list starts (NONE: only shortlists)
    col_base: u32,       // global index of a dense row's first element
    need: u32,           // how many to select
    scratch_stride: u32, // row stride of the auxiliary arrays (>= len)
    out_stride: u32,     // row stride of the output, in pairs
    out_offset: u32,     // first pair of the output region (0: the running lists)
    dense: u32,          // 1: dense f32 input; 0: pairs at the start of the output row
    groups_x: u32,
    rows_per_group: u32, // rows per workgroup of select_rows_per_subgroup
    shortlist_cap: u32,  // pairs per row of the shortlists; 0: not used
}

const WG: u32 = 256u;
const MAX_PASSES: u32 = 48u;
const NONE: u32 = 0xffffffffu;
const INF_BITS: u32 = 0x7f800000u;
// Where a segment lives: the input row or one of the two auxiliary arrays.
const SRC_INPUT: u32 = 0u;
const SRC_A: u32 = 1u;
const SRC_B: u32 = 2u;
// Pass kinds.
const FILTER: u32 = 0u;
const PARTITION: u32 = 1u;
const THRESHOLD: u32 = 2u;
const SPLIT: u32 = 3u;
const BAND: u32 = 4u;
const SAMPLES: u32 = 64u;
// The first pivot of a dense row is checked against 16 runs of 128 neighbouring keys, two
// vec4 loads per invocation, and placed three standard deviations of that sample's count
// above `need` (with one load and two deviations, 1 row in 100 took a BAND pass at 3%
// wanted; now 1 in 250, keeping 4.4% of the row as before).
const LOW_SAMPLES: u32 = 8u;
const WIDE_SAMPLE_RUNS: u32 = 16u;
const WIDE_STEPS: u32 = 2u;
const WIDE_SIGMAS: f32 = 3.0;
const WIDE_SAMPLES: u32 = 4u * WG * WIDE_STEPS;
// A FILTER segment of up to TAIL_LEN elements is finished by `tail_select`: BINS bins of its
// value range, and up to WG elements of one bin ranked exactly.
const TAIL_LEN: u32 = 4096u;
const BINS: u32 = 256u;
const BIN_GROUP: u32 = 16u;

@group(0) @binding(0) var<uniform> params: Params;
// Dense input rows start at whole vec4s (`in_stride` is a multiple of 4).
@group(0) @binding(1) var<storage, read> dense_in: array<vec4<f32>>;
// The auxiliary arrays keep keys and indices apart, 4 bytes a slot in each binding, so that a
// tile of rows of 65536 keys may have up to 8191 rows (a binding holds under 2^31 bytes)
// rather than the 4095 that (key, index) pairs allowed: fewer, fuller dispatches
// (`notes/select.md`, version 14).
@group(0) @binding(2) var<storage, read_write> aux_a_keys: array<u32>;
@group(0) @binding(3) var<storage, read_write> aux_a_ids: array<u32>;
@group(0) @binding(4) var<storage, read_write> aux_b_keys: array<u32>;
@group(0) @binding(5) var<storage, read_write> aux_b_ids: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<vec2<u32>>;
@group(0) @binding(7) var<storage, read_write> failed: array<u32>;
// Per row: (corpus index to exclude, bits of the shortlist bound); see distance.wgsl.
@group(0) @binding(8) var<storage, read_write> row_state: array<vec2<u32>>;
@group(0) @binding(9) var<storage, read_write> shortlist_len: array<u32>;
@group(0) @binding(10) var<storage, read> shortlist: array<vec2<u32>>;

// Whether this invocation's row merges with its shortlist rather than the tile's list.
var<private> from_shortlist: bool;

var<workgroup> seg_src: u32;
var<workgroup> seg_start: u32;
var<workgroup> seg_len: u32;
var<workgroup> seg_need: u32;
var<workgroup> seg_kind: u32;
var<workgroup> pivot_bits: u32;
// The lower end of a BAND pass (its pivot is the upper end).
var<workgroup> band_low_bits: u32;
// Upper ends of BAND passes: the pivot samples of ranks 7, 15, 31 and 63 (of SAMPLES), each
// tried after the one before left too few.
var<workgroup> band_uppers: array<f32, 4>;
var<workgroup> stack_top: u32;
var<workgroup> stack_src: array<u32, 64>;
var<workgroup> stack_start: array<u32, 64>;
var<workgroup> stack_len: array<u32, 64>;
// Pivot samples; in `tail_select`, the keys of the bin it ranks.
var<workgroup> samples: array<f32, WG>;
// The smallest of the pivot's samples, and how many of a larger sample fall below each.
var<workgroup> low_samples: array<f32, LOW_SAMPLES>;
var<workgroup> below_low: array<atomic<u32>, LOW_SAMPLES>;
// The rank in the wide sample the first pivot should have, where the pivot samples are too
// coarse to interpolate; NONE otherwise.
var<workgroup> low_rank: u32;
var<workgroup> row_count: u32;
// `tail_select`: the segment's least and largest key (order-preserving bits), a histogram of
// its values, partial sums of BIN_GROUP bins, the bin that holds the need-th element with the
// count below it, and that bin's elements.
var<workgroup> tail_low: atomic<u32>;
var<workgroup> tail_high: atomic<u32>;
var<workgroup> histogram: array<atomic<u32>, BINS>;
var<workgroup> bin_group_sums: array<u32, BINS / BIN_GROUP>;
var<workgroup> tail_bin: u32;
var<workgroup> tail_below: u32;
var<workgroup> tail_in_bin: u32;
var<workgroup> band_ids: array<u32, WG>;
// Length of the answer `tail_select` wrote straight into the output row after the stack's
// segments (0: none; the stack holds the whole answer), and where it starts.
var<workgroup> in_place_len: u32;
var<workgroup> stacked_len: u32;
// Elements appended to the left (a) and right (b) side in the current pass.
var<workgroup> appended_a: atomic<u32>;
var<workgroup> appended_b: atomic<u32>;

fn load_pair(src: u32, row: u32, i: u32) -> vec2<u32> {
    if (src == SRC_A) {
        let at = row * params.scratch_stride + i;
        return vec2<u32>(aux_a_keys[at], aux_a_ids[at]);
    }
    if (src == SRC_B) {
        let at = row * params.scratch_stride + i;
        return vec2<u32>(aux_b_keys[at], aux_b_ids[at]);
    }
    if (params.dense == 1u) {
        let at = row * params.in_stride + i;
        return vec2<u32>(bitcast<u32>(dense_in[at / 4u][at % 4u]), params.col_base + i);
    }
    // Merging: the running list (row's slot of the first region), then the tile's list (row's
    // slot of the region that starts at in_stride), `need` pairs each.
    if (i < params.need) {
        return out[row * params.out_stride + i];
    }
    if (from_shortlist) {
        return shortlist[row * params.shortlist_cap + (i - params.need)];
    }
    return out[params.in_stride + row * params.out_stride + (i - params.need)];
}

fn store_pair(dst: u32, row: u32, i: u32, e: vec2<u32>) {
    let at = row * params.scratch_stride + i;
    if (dst == SRC_A) {
        aux_a_keys[at] = e.x;
        aux_a_ids[at] = e.y;
    } else {
        aux_b_keys[at] = e.x;
        aux_b_ids[at] = e.y;
    }
}

fn push_segment(src: u32, start: u32, len: u32) {
    let t = stack_top;
    stack_src[t] = src;
    stack_start[t] = start;
    stack_len[t] = len;
    stack_top = t + 1u;
}

// Chooses the pivot for the segment from SAMPLES evenly spaced samples and the kind of the
// pass. While `need` is a small part of the segment: a FILTER pivot a little above the
// need/len quantile, so that at least `need` elements fall below it with high probability.
// Once the filter would keep most of the segment it drops only a few elements a pass, so the
// pass becomes a SPLIT around a pivot a little below the quantile: the elements under it are
// all wanted and kept, and the search goes on among the few above.
fn choose_pivot(lid: u32, row: u32, src: u32, start: u32, len: u32, need: u32) {
    let n_samples = min(len, SAMPLES);
    let stride = max(len / SAMPLES, 1u);
    if (lid < SAMPLES) {
        var v = bitcast<f32>(INF_BITS);
        if (lid < n_samples) {
            v = bitcast<f32>(load_pair(src, row, start + lid * stride).x);
        }
        samples[lid] = v;
    }
    var target_rank = need;
    var kind = FILTER;
    if (len > SAMPLES) {
        let q = f32(need) / f32(len) * f32(SAMPLES);
        let above = q + 2.0 * sqrt(q) + 2.0;
        if (above < 0.5 * f32(SAMPLES)) {
            target_rank = u32(above);
        } else {
            // Two standard deviations of the sample quantile below it.
            let below = q - 2.0 * sqrt(q * (f32(SAMPLES) - q) / f32(SAMPLES)) - 1.0;
            target_rank = u32(max(below, 0.0));
            kind = SPLIT;
        }
    }
    workgroupBarrier();
    if (lid < n_samples) {
        let mine = samples[lid];
        let rank = rank_in_samples(lid, SAMPLES);
        if (rank == target_rank) {
            pivot_bits = bitcast<u32>(mine);
        }
        if (rank < LOW_SAMPLES) {
            low_samples[rank] = mine;
        }
        if (rank == 7u || rank == 15u || rank == 31u || rank == 63u) {
            band_uppers[firstTrailingBit(rank + 1u) - 3u] = mine;
        }
    }
    if (lid == 0u) {
        seg_kind = kind;
    }
    workgroupBarrier();
}

// The rank of `samples[lid]` among the first `count` samples, ties ordered by position.
fn rank_in_samples(lid: u32, count: u32) -> u32 {
    let mine = samples[lid];
    var rank = 0u;
    for (var j = 0u; j < count; j++) {
        let other = samples[j];
        rank += select(0u, 1u, other < mine || (other == mine && j < lid));
    }
    return rank;
}

// Whether a pass over this segment is the first over a dense row long enough (64 keys an
// invocation) for `lower_first_pivot`, whose samples a BAND pass after it also uses.
fn first_dense_pass(src: u32, start: u32, len: u32) -> bool {
    return src == SRC_INPUT && params.dense == 1u && start == 0u && len >= 64u * WG;
}

// This invocation's keys of the wide sample in `step`: runs of neighbouring keys, each step
// one vec4 further along its run.
fn wide_sample(row: u32, at: u32, step: u32) -> vec4<f32> {
    return dense_in[(row * params.in_stride + at + step * 4u * (WG / WIDE_SAMPLE_RUNS)) / 4u];
}

// The first FILTER over a dense row keeps everything under its pivot, which 64 samples place
// well above the need/len quantile (at 2048 of 65536 keys, about 10% of the row is kept for
// 3% wanted). A wider sample (WIDE_SAMPLES keys) counts how many keys fall below each of the
// smallest pivot samples; the pivot becomes the point where that count, interpolated between
// the samples, leaves `need` below it with WIDE_SIGMAS of confidence. Where even the least
// pivot sample has more than enough below it, the wide sample's keys under it are ranked and
// the pivot is the one of the wanted rank.
// Any pivot gives the same answer: one too low only costs a BAND pass.
fn lower_first_pivot(lid: u32, row: u32, len: u32, need: u32) {
    if (lid < LOW_SAMPLES) {
        atomicStore(&below_low[lid], 0u);
    }
    workgroupBarrier();
    let run = lid / (WG / WIDE_SAMPLE_RUNS);
    let run_start = (len / WIDE_SAMPLE_RUNS * run) & ~3u;
    let at = run_start + 4u * (lid % (WG / WIDE_SAMPLE_RUNS));
    for (var step = 0u; step < WIDE_STEPS; step++) {
        let keys = wide_sample(row, at, step);
        for (var j = 0u; j < LOW_SAMPLES; j++) {
            let c = low_samples[j];
            let n = dot(select(vec4<u32>(0u), vec4<u32>(1u), keys < vec4<f32>(c)), vec4<u32>(1u));
            if (n != 0u) {
                atomicAdd(&below_low[j], n);
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        low_rank = NONE;
        let q = f32(need) / f32(len) * f32(WIDE_SAMPLES);
        let wanted = q + WIDE_SIGMAS * sqrt(q) + 2.0;
        var under = 0.0;
        var c_under = 0.0;
        for (var j = 0u; j < LOW_SAMPLES; j++) {
            let c = low_samples[j];
            let count = f32(atomicLoad(&below_low[j]));
            if (count >= wanted) {
                // Between the last candidate with too few below it and this one, the count
                // is taken to grow linearly.
                var p = c;
                if (j > 0u && count > under && c_under < c) {
                    p = max(c_under + (c - c_under) * ((wanted - under) / (count - under)), c_under);
                }
                if (j == 0u && count <= f32(WG)) {
                    low_rank = u32(ceil(wanted));
                }
                if (p < bitcast<f32>(pivot_bits)) {
                    pivot_bits = bitcast<u32>(p);
                }
                break;
            }
            under = count;
            c_under = c;
        }
    }
    // Even the least pivot sample has more than enough below it (1 row in 18 at 3% wanted;
    // interpolation had no lower point, so such rows kept up to 10% of the row and 1 in 40
    // rows over TAIL_LEN): rank the wide sample's keys under it instead.
    let rank = workgroupUniformLoad(&low_rank);
    if (rank == NONE) {
        return;
    }
    // below_low[0], counted, now gives the slots of the keys under c0.
    if (lid == 0u) {
        atomicStore(&below_low[0], 0u);
    }
    workgroupBarrier();
    let c0 = low_samples[0];
    for (var step = 0u; step < WIDE_STEPS; step++) {
        let keys = wide_sample(row, at, step);
        for (var e = 0u; e < 4u; e++) {
            if (keys[e] < c0) {
                samples[atomicAdd(&below_low[0], 1u)] = keys[e];
            }
        }
    }
    workgroupBarrier();
    let under_c0 = atomicLoad(&below_low[0]);
    if (lid < under_c0 && rank < under_c0 && rank_in_samples(lid, under_c0) == rank) {
        let p = samples[lid];
        if (p < bitcast<f32>(pivot_bits)) {
            pivot_bits = bitcast<u32>(p);
        }
    }
    workgroupBarrier();
}

// The largest key of the running list at the start of the output row, into pivot_bits:
// nothing at or above it can improve the list.
fn running_bound(lid: u32, row: u32) {
    var m = bitcast<f32>(0xff800000u);
    for (var i = lid; i < params.need; i += WG) {
        m = max(m, bitcast<f32>(out[row * params.out_stride + i].x));
    }
    samples[lid] = m;
    workgroupBarrier();
    if (lid == 0u) {
        var all = m;
        for (var j = 1u; j < WG; j++) {
            all = max(all, samples[j]);
        }
        pivot_bits = bitcast<u32>(all);
    }
    workgroupBarrier();
}

// (slot among this pass's `a` elements, slot among its `b` elements); only the slot of a
// true predicate is meaningful.
fn append_slots(a: bool, b: bool) -> vec2<u32> {
    var r = vec2<u32>(0u);
    if (a) {
        r.x = atomicAdd(&appended_a, 1u);
    }
    if (b) {
        r.y = atomicAdd(&appended_b, 1u);
    }
    return r;
}

// Sends element `e` of the current segment (`start`, `len`) to its side for a pass of `kind`
// around `pivot` (a BAND pass: between `low` and `pivot`): `a` elements packed from the left
// of the destination, `b` from the right.
fn place(kind: u32, pivot: f32, low: f32, e: vec2<u32>, valid: bool, dst: u32, row: u32, start: u32, len: u32) {
    let v = bitcast<f32>(e.x);
    var a = v < pivot;
    var b = v == pivot;
    if (kind == BAND) {
        a = a && v >= low;
        b = false;
    } else if (kind == PARTITION) {
        a = v <= pivot;
        b = v > pivot;
    } else if (kind == SPLIT) {
        b = v > pivot || b;
    } else if (kind == THRESHOLD) {
        b = false;
    }
    a = a && valid;
    b = b && valid;
    let r = append_slots(a, b);
    if (a) {
        store_pair(dst, row, start + r.x, e);
    }
    if (b) {
        store_pair(dst, row, start + len - 1u - r.y, e);
    }
}

// `place` for a FILTER pass over the input, whose destination is `aux_a`: keys below the
// pivot packed from the left, keys equal to it from the right.
fn filter_dense(v: f32, col: u32, valid: bool, pivot: f32, row: u32, start: u32, len: u32) {
    if (valid && v < pivot) {
        let at = row * params.scratch_stride + start + atomicAdd(&appended_a, 1u);
        aux_a_keys[at] = bitcast<u32>(v);
        aux_a_ids[at] = col;
    } else if (valid && v == pivot) {
        let at = row * params.scratch_stride + start + len - 1u - atomicAdd(&appended_b, 1u);
        aux_a_keys[at] = bitcast<u32>(v);
        aux_a_ids[at] = col;
    }
}

// The next pass is a BAND from the current pivot up to `upper`, appending after the `kept`
// elements already in `aux_a`. Called by invocation 0.
fn start_band(upper: f32, kept: u32) {
    band_low_bits = pivot_bits;
    pivot_bits = bitcast<u32>(upper);
    seg_kind = BAND;
    atomicStore(&appended_a, kept);
}

// f32 bits as a u32 in the same order (negative keys included).
fn ordered_bits(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

fn from_ordered_bits(u: u32) -> f32 {
    return bitcast<f32>(select(~u, u & 0x7fffffffu, (u & 0x80000000u) != 0u));
}

// Finishes a FILTER segment of at most TAIL_LEN elements without further passes: a histogram
// of BINS bins between its least and largest key finds the bin of the need-th element, the
// elements below that bin are written to the answer, and those in it (a few, on data without
// long runs of ties) are ranked exactly in workgroup memory. Three reads of the segment (from L2:
// this workgroup has just written it) and no writes but the answer, where each FILTER or
// SPLIT pass would read and write it and choose a pivot. The elements are read again rather
// than held in a private array: one in registers cost the whole kernel occupancy, one in
// local memory slowed the graphs' other kernels (notes/select.md).
// Returns true when done: the answer goes straight into the output row after the stack's
// segments (`in_place_len`), or, where the output row still holds this merge's input, to
// `dst` from `start` as a stack segment. Returns false when the bin holds more than WG
// elements (ties, or a skewed bin): the segment state then describes that bin, written at
// the right end of `dst`, for the usual passes.
fn tail_select(lid: u32, row: u32, src: u32, start: u32, len: u32, need: u32, dst: u32) -> bool {
    var low = 0xffffffffu;
    var high = 0u;
    for (var i = lid; i < len; i += WG) {
        let key = ordered_bits(bitcast<f32>(load_pair(src, row, start + i).x));
        low = min(low, key);
        high = max(high, key);
    }
    if (lid == 0u) {
        atomicStore(&tail_low, 0xffffffffu);
        atomicStore(&tail_high, 0u);
    }
    atomicStore(&histogram[lid], 0u);
    workgroupBarrier();
    if (low != 0xffffffffu) {
        atomicMin(&tail_low, low);
        atomicMax(&tail_high, high);
    }
    workgroupBarrier();
    let least = from_ordered_bits(atomicLoad(&tail_low));
    let span = from_ordered_bits(atomicLoad(&tail_high)) - least;
    // Infinite or NaN spans put everything in bin 0, which the fallback handles.
    let scale = select(0.0, f32(BINS) / span, span > 0.0 && span < bitcast<f32>(INF_BITS));
    for (var i = lid; i < len; i += WG) {
        let key = bitcast<f32>(load_pair(src, row, start + i).x);
        atomicAdd(&histogram[min(u32(max((key - least) * scale, 0.0)), BINS - 1u)], 1u);
    }
    workgroupBarrier();
    if (lid < BINS / BIN_GROUP) {
        var sum = 0u;
        for (var b = 0u; b < BIN_GROUP; b++) {
            sum += atomicLoad(&histogram[lid * BIN_GROUP + b]);
        }
        bin_group_sums[lid] = sum;
    }
    workgroupBarrier();
    if (lid == 0u) {
        // Every element of the segment is in a bin and the segment holds at least `need`, so
        // the searches stop inside the histogram; the limits make the loops end by
        // construction (the module is built without wgpu's loop counters).
        var below = 0u;
        var g = 0u;
        while (g + 1u < BINS / BIN_GROUP && below + bin_group_sums[g] < need) {
            below += bin_group_sums[g];
            g++;
        }
        var bin = g * BIN_GROUP;
        while (bin + 1u < BINS && below + atomicLoad(&histogram[bin]) < need) {
            below += atomicLoad(&histogram[bin]);
            bin++;
        }
        tail_bin = bin;
        tail_below = below;
        tail_in_bin = atomicLoad(&histogram[bin]);
        atomicStore(&appended_a, 0u);
        atomicStore(&appended_b, 0u);
        // Once the input has been read, the output row is free: the answer written there
        // needs no gather. The stack's segments go before it.
        in_place_len = 0u;
        if (tail_in_bin <= WG && (params.dense == 1u || src != SRC_INPUT)) {
            in_place_len = need;
        }
        var stacked = 0u;
        for (var s = 0u; s < stack_top; s++) {
            stacked += stack_len[s];
        }
        stacked_len = stacked;
    }
    let bin = workgroupUniformLoad(&tail_bin);
    let below = workgroupUniformLoad(&tail_below);
    let in_bin = workgroupUniformLoad(&tail_in_bin);
    let in_place = workgroupUniformLoad(&in_place_len) != 0u;
    let answer_at = row * params.out_stride + params.out_offset + workgroupUniformLoad(&stacked_len);
    for (var i = lid; i < len; i += WG) {
        let e = load_pair(src, row, start + i);
        let b = min(u32(max((bitcast<f32>(e.x) - least) * scale, 0.0)), BINS - 1u);
        if (b < bin) {
            let slot = atomicAdd(&appended_a, 1u);
            if (in_place) {
                out[answer_at + slot] = e;
            } else {
                store_pair(dst, row, start + slot, e);
            }
        } else if (b == bin) {
            let slot = atomicAdd(&appended_b, 1u);
            if (in_bin <= WG) {
                samples[slot] = bitcast<f32>(e.x);
                band_ids[slot] = e.y;
            } else {
                store_pair(dst, row, start + len - 1u - slot, e);
            }
        }
    }
    workgroupBarrier();
    if (in_bin > WG) {
        if (lid == 0u) {
            atomicStore(&appended_a, 0u);
            atomicStore(&appended_b, 0u);
            if (below > 0u) {
                push_segment(dst, start, below);
            }
            seg_src = dst;
            seg_start = start + len - in_bin;
            seg_len = in_bin;
            seg_need = need - below;
            seg_kind = FILTER;
        }
        workgroupBarrier();
        return false;
    }
    // The bin's elements ranked by (key, slot); the first need - below are wanted.
    if (lid < in_bin) {
        let rank = rank_in_samples(lid, in_bin);
        if (rank < need - below) {
            let e = vec2<u32>(bitcast<u32>(samples[lid]), band_ids[lid]);
            if (in_place) {
                out[answer_at + below + rank] = e;
            } else {
                store_pair(dst, row, start + below + rank, e);
            }
        }
    }
    if (lid == 0u) {
        atomicStore(&appended_a, 0u);
        atomicStore(&appended_b, 0u);
        if (!in_place) {
            push_segment(dst, start, need);
        }
        seg_need = 0u;
    }
    storageBarrier();
    workgroupBarrier();
    return true;
}

// Input length of a row; for a merge with shortlists, also decides where its second list is.
fn row_length(row: u32) -> u32 {
    from_shortlist = false;
    if (params.dense == 0u && params.shortlist_cap != 0u) {
        let count = shortlist_len[row];
        if (count <= params.shortlist_cap) {
            from_shortlist = true;
            return params.need + count;
        }
    }
    return params.len;
}

// A merge without a tile's list to fall back on (the column side of symmetric blocks) whose
// shortlist overflowed: keys under the bound were lost, so the row's list may be incomplete.
// Bit 2 of its flags sends it to the host's next, wider round, which does not trust its
// certificate. The list and bound stand (still an upper bound on the row's true list), and
// later tiles' shortlists start empty.
fn mark_incomplete(row: u32) {
    failed[row] = failed[row] | 4u;
    shortlist_len[row] = 0u;
}

// A row's bound after its running list was written with largest key `largest`. A list of
// fewer than kc candidates has +inf as its largest key; the row's bound then stands (rows that
// start with a bound from the host keep it until kc keys under it have been met).
fn lowered_bound(row: u32, largest: f32) -> u32 {
    return bitcast<u32>(min(largest, bitcast<f32>(row_state[row].y)));
}

// After a merge: the shortlist is consumed, start the next tile's empty. Bit 1 of the row's
// flags records that a shortlist was used, for the host's statistics.
fn end_merge(row: u32) {
    if (params.dense == 0u && params.shortlist_cap != 0u) {
        shortlist_len[row] = 0u;
        if (from_shortlist) {
            failed[row] = failed[row] | 2u;
        }
    }
}

// The body of the `select_rows` entry point, which the rank file declares because only it
// knows whether subgroup built-ins exist.
fn select_row(lid: u32, wid: vec3<u32>) {
    let row = wid.x + wid.y * params.groups_x;
    if (row >= params.rows) {
        return;
    }
    if (params.dense == 1u && params.shortlist_cap != 0u) {
        if (lid == 0u) {
            row_count = shortlist_len[row];
        }
        if (workgroupUniformLoad(&row_count) <= params.shortlist_cap) {
            // The merge takes this row's shortlist.
            return;
        }
    }
    if (params.dense == 0u && params.shortlist_cap != 0u) {
        if (lid == 0u) {
            row_count = shortlist_len[row];
        }
        let count = workgroupUniformLoad(&row_count);
        if (count == 0u) {
            // Nothing under the bound in this tile: the running list and bound stand.
            if (lid == 0u) {
                failed[row] = failed[row] | 2u;
            }
            return;
        }
        if (count > params.shortlist_cap && params.in_stride == NONE) {
            if (lid == 0u) {
                mark_incomplete(row);
            }
            return;
        }
    }
    let row_len = row_length(row);
    // After the first distance tile the running list bounds what is worth keeping.
    var first_kind = FILTER;
    if (params.dense == 1u && params.out_offset != 0u) {
        // Leaves the bound in pivot_bits for the first pass.
        running_bound(lid, row);
        first_kind = THRESHOLD;
    }
    if (lid == 0u) {
        seg_src = SRC_INPUT;
        seg_start = 0u;
        seg_len = row_len;
        seg_need = params.need;
        seg_kind = first_kind;
        stack_top = 0u;
        atomicStore(&appended_a, 0u);
        atomicStore(&appended_b, 0u);
        in_place_len = 0u;
    }
    workgroupBarrier();

    var finished = false;
    var tail_tried = false;
    for (var pass_no = 0u; pass_no < MAX_PASSES; pass_no++) {
        let need = workgroupUniformLoad(&seg_need);
        let len = workgroupUniformLoad(&seg_len);
        let src = workgroupUniformLoad(&seg_src);
        let start = workgroupUniformLoad(&seg_start);
        var kind = workgroupUniformLoad(&seg_kind);
        if (need == 0u) {
            finished = true;
            break;
        }
        if (len <= need && kind != THRESHOLD) {
            if (lid == 0u) {
                push_segment(src, start, len);
                seg_need = 0u;
            }
            finished = true;
            break;
        }
        if (kind == FILTER && len <= TAIL_LEN && !tail_tried) {
            // Once only: a segment it hands back (one crowded bin) goes through the passes,
            // which settle ties.
            tail_tried = true;
            let dst = select(SRC_A, SRC_B, src == SRC_A);
            if (tail_select(lid, row, src, start, len, need, dst)) {
                finished = true;
                break;
            }
            continue;
        }
        if (kind == FILTER) {
            choose_pivot(lid, row, src, start, len, need);
            kind = workgroupUniformLoad(&seg_kind);
            if (kind == FILTER && first_dense_pass(src, start, len)) {
                lower_first_pivot(lid, row, len, need);
            }
        }
        let pivot = bitcast<f32>(workgroupUniformLoad(&pivot_bits));
        var low = pivot;
        if (kind == BAND) {
            low = bitcast<f32>(workgroupUniformLoad(&band_low_bits));
        }
        let dst = select(SRC_A, SRC_B, src == SRC_A);

        if (src == SRC_INPUT && params.dense == 1u && start % 4u == 0u) {
            // A dense row (the first pass over a distance tile reads every key): four
            // neighbouring keys per invocation and load, so that each load moves 16 bytes and
            // four times as many bytes are in flight as with one key per load.
            let first = (row * params.in_stride + start) / 4u;
            let col = params.col_base + start;
            if (kind == FILTER) {
                // The pass every key of a dense row goes through: `place` for a FILTER into
                // `aux_a` (where a pass over the input writes), without its other kinds; two
                // loads in flight per step, since little else is done per key.
                for (var base = 0u; base < len; base += 8u * WG) {
                    let i = base + 4u * lid;
                    let j = i + 4u * WG;
                    var keys = vec4<f32>(0.0);
                    var more = vec4<f32>(0.0);
                    if (i < len) {
                        keys = dense_in[first + i / 4u];
                    }
                    if (j < len) {
                        more = dense_in[first + j / 4u];
                    }
                    if (i < len) {
                        filter_dense(keys.x, col + i, true, pivot, row, start, len);
                        filter_dense(keys.y, col + i + 1u, i + 1u < len, pivot, row, start, len);
                        filter_dense(keys.z, col + i + 2u, i + 2u < len, pivot, row, start, len);
                        filter_dense(keys.w, col + i + 3u, i + 3u < len, pivot, row, start, len);
                    }
                    if (j < len) {
                        filter_dense(more.x, col + j, true, pivot, row, start, len);
                        filter_dense(more.y, col + j + 1u, j + 1u < len, pivot, row, start, len);
                        filter_dense(more.z, col + j + 2u, j + 2u < len, pivot, row, start, len);
                        filter_dense(more.w, col + j + 3u, j + 3u < len, pivot, row, start, len);
                    }
                }
            } else {
                for (var base = 0u; base < len; base += 4u * WG) {
                    let i = base + 4u * lid;
                    if (i < len) {
                        let keys = dense_in[first + i / 4u];
                        place(kind, pivot, low, vec2<u32>(bitcast<u32>(keys.x), col + i), true, dst, row, start, len);
                        place(kind, pivot, low, vec2<u32>(bitcast<u32>(keys.y), col + i + 1u), i + 1u < len, dst, row, start, len);
                        place(kind, pivot, low, vec2<u32>(bitcast<u32>(keys.z), col + i + 2u), i + 2u < len, dst, row, start, len);
                        place(kind, pivot, low, vec2<u32>(bitcast<u32>(keys.w), col + i + 3u), i + 3u < len, dst, row, start, len);
                    }
                }
            }
        } else {
            for (var base = 0u; base < len; base += WG) {
                let i = base + lid;
                let valid = i < len;
                var e = vec2<u32>(INF_BITS, NONE);
                if (valid) {
                    e = load_pair(src, row, start + i);
                }
                place(kind, pivot, low, e, valid, dst, row, start, len);
            }
        }
        storageBarrier();
        workgroupBarrier();

        if (lid == 0u) {
            let n_a = atomicLoad(&appended_a);
            let n_b = atomicLoad(&appended_b);
            atomicStore(&appended_a, 0u);
            atomicStore(&appended_b, 0u);
            if (kind == THRESHOLD) {
                seg_src = dst;
                seg_kind = FILTER;
                if (n_a <= need) {
                    // Everything below the bound fits: the rest of the row is padding.
                    push_segment(dst, start, n_a);
                    seg_need = 0u;
                } else {
                    seg_len = n_a;
                }
            } else if (kind == PARTITION && n_a >= need) {
                // Reached from a SPLIT whose pivot was the segment's least element: what is
                // <= the pivot equals it, and any `need` of those will do.
                push_segment(dst, start, need);
                seg_need = 0u;
            } else if (kind == PARTITION) {
                // n_a < need elements are <= the pivot: keep them, search the rest.
                push_segment(dst, start, n_a);
                seg_src = dst;
                seg_need = need - n_a;
                seg_start = start + n_a;
                seg_len = len - n_a;
                seg_kind = FILTER;
            } else if (kind == SPLIT) {
                seg_src = dst;
                if (n_a == 0u) {
                    // The pivot is the least element: split around `<=` it instead, which
                    // also settles a segment of ties.
                    seg_kind = PARTITION;
                } else if (n_a > need) {
                    seg_len = n_a;
                    seg_kind = FILTER;
                } else {
                    // Everything below the pivot is wanted.
                    push_segment(dst, start, n_a);
                    seg_need = need - n_a;
                    seg_start = start + n_a;
                    seg_len = len - n_a;
                    seg_kind = FILTER;
                }
            } else if (kind == BAND) {
                if (n_a >= need) {
                    // What is under the band's pivot, the first FILTER's keys included.
                    seg_src = dst;
                    seg_len = n_a;
                    seg_kind = FILTER;
                } else {
                    // Still too few (1 row in 2000 at 3% wanted): another band up to the next
                    // upper end, a read of the row where a PARTITION would write all of it;
                    // past the largest sample, partition the row around this band's lower end.
                    let upper = bitcast<f32>(pivot_bits);
                    var next = upper;
                    for (var u = 0u; u < 4u; u++) {
                        if (band_uppers[u] > upper) {
                            next = band_uppers[u];
                            break;
                        }
                    }
                    if (next > upper) {
                        start_band(next, n_a);
                    } else {
                        pivot_bits = band_low_bits;
                        seg_kind = PARTITION;
                    }
                }
            } else if (n_a >= need) {
                seg_src = dst;
                seg_len = n_a;
            } else if (n_a + n_b >= need) {
                // All below the pivot, and enough of those equal to it.
                if (n_a > 0u) {
                    push_segment(dst, start, n_a);
                }
                push_segment(dst, start + len - (need - n_a), need - n_a);
                seg_need = 0u;
            } else if (first_dense_pass(src, start, len) && band_uppers[0] > bitcast<f32>(pivot_bits)) {
                // The first pivot of a dense row (lowered by `lower_first_pivot`) left fewer
                // than `need` under it. A PARTITION would write the whole row, and that one
                // row would finish long after the rest of its dispatch; instead read the row
                // again for the keys between this pivot and the eighth pivot sample, after
                // those already kept.
                start_band(band_uppers[0], n_a);
            } else {
                // Too few at or below the pivot: split the segment around it, both sides.
                seg_kind = PARTITION;
            }
        }
        workgroupBarrier();
    }

    if (!finished) {
        if (lid == 0u) {
            failed[row] = failed[row] | 1u;
            end_merge(row);
        }
        return;
    }

    // Gather the kept segments into the output row, then pad rows shorter than `need`.
    let top = workgroupUniformLoad(&stack_top);
    var written = 0u;
    let out_base = row * params.out_stride + params.out_offset;
    for (var s = 0u; s < top; s++) {
        let src = workgroupUniformLoad(&stack_src[s]);
        let start = workgroupUniformLoad(&stack_start[s]);
        let len = workgroupUniformLoad(&stack_len[s]);
        for (var i = lid; i < len; i += WG) {
            let e = load_pair(src, row, start + i);
            out[out_base + written + i] = e;
        }
        written += len;
    }
    written += workgroupUniformLoad(&in_place_len);
    // All reads of an input held in the output row are done before it is overwritten.
    storageBarrier();
    for (var i = written + lid; i < params.need; i += WG) {
        out[out_base + i] = vec2<u32>(INF_BITS, NONE);
    }
    if (params.out_offset == 0u) {
        // The running list is complete: its largest key bounds the next tile's shortlist.
        storageBarrier();
        running_bound(lid, row);
        if (lid == 0u) {
            row_state[row].y = lowered_bound(row, bitcast<f32>(pivot_bits));
        }
    }
    if (lid == 0u) {
        end_merge(row);
    }
}
