// Ranks each row's candidates by their exact float64 keys and checks the row's certificate
// on the GPU, so that only k neighbours per row are read back instead of every candidate
// (notes/exactness.md). The same decision as `refine::refine` on the host:
// - valid candidates are those with an index that is neither NONE nor the query itself;
// - the answer is the k smallest valid ones by (exact key, index);
// - the list is complete (no outsider can exist) when it holds every available row or has
//   padding and a finite error bound (an infinite one means fp32 keys may overflow, and
//   overflowed keys are +inf like the padding); otherwise it is accepted when the k-th exact
//   key is at most the largest fp32 key of the list minus the row's fp32 error bound
//   (floored at 0 except for inner product).
// Status per row: 0 accepted (k neighbours), 2 + m accepted with only m < k neighbours (all
// there are), 1 not accepted: the row is searched again with more candidates.
// Lists of up to MAX_KC (set by the host) take one workgroup per row (`certify_rows`): the
// row's (exact key, index) pairs are sorted in workgroup memory by a bitonic network over kc
// rounded up to a power of two: O(kc log^2 kc) comparisons, where ranking by counting took
// kc^2 (2.3x slower at kc = 1250, though it kept 10 KiB less workgroup memory). Longer lists
// are cut into runs of MAX_KC slots: `sort_runs` sorts each run in place (a workgroup per run)
// and `certify_runs` (a workgroup per row) finds each pair's rank in the row by binary
// searches in the other runs. Needs SHADER_F64.

struct Params {
    rows: u32,
    kc: u32,
    k: u32,
    corpus_rows: u32,
    groups_x: u32,
    floor_zero: u32, // 1: keys are non-negative (every metric but inner product)
    reported_as: u32, // the reported distance from the key: REPORT_SQRT, REPORT_NEGATED or REPORT_KEY
    _pad1: u32,
}

// Invocations of `certify_runs`, whose binary searches want many.
const WG: u32 = 256u;
// Invocations of the kernels that sort a row in workgroup memory (`sort_pairs`): a trip of the
// sort holds PER pairs an invocation, so MAX_KC / PER invocations keep every pair in registers.
const SORT_WG: u32 = 64u;
// Pairs an invocation holds in registers on one trip through workgroup memory: four stages of
// the network a trip. Literal in the unrolled loops below (16u).
const PER: u32 = 16u;
const NONE: u32 = 0xffffffffu;
// The key of a NONE pair (see `before`).
const NONE_KEY: f64 = 1.0e308lf;
// How a key becomes the reported distance (`Metric::key_to_distance`).
const REPORT_SQRT: u32 = 0u;
const REPORT_NEGATED: u32 = 1u;
const REPORT_KEY: u32 = 2u;
// The longest list sorted at once, and the length of the runs of longer ones; set by the host
// (`MAX_CERTIFY_KC`), a power of two.
override MAX_KC: u32 = 1024u;

@group(0) @binding(0) var<uniform> params: Params;
// Written only by `sort_runs`, which leaves each run's pairs sorted in place.
@group(0) @binding(1) var<storage, read_write> candidates: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> exact: array<f64>;
// Per row: (corpus index to exclude, shortlist bound); only the first is used here.
@group(0) @binding(3) var<storage, read> row_state: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read> error_bounds: array<f64>;
@group(0) @binding(5) var<storage, read_write> ranked_ids: array<u32>;
// The answers' reported distances (`Metric::key_to_distance`), not their keys: 4 bytes an
// answer read back instead of 8.
@group(0) @binding(6) var<storage, read_write> ranked_distances: array<f32>;
@group(0) @binding(7) var<storage, read_write> status: array<u32>;
// Per row and run (`sort_runs`): (valid pairs, bits of the largest fp32 key).
@group(0) @binding(8) var<storage, read_write> run_stats: array<vec2<u32>>;

var<workgroup> valid_count: array<u32, WG>;
// The row's k-th exact key, for `certify_runs`' decision on lists of more than MAX_KC answers.
var<workgroup> kth_key: f64;
var<workgroup> largest: array<f32, WG>;
// The row's exact keys and corpus rows; NONE marks padding and the query itself.
var<workgroup> row_keys: array<f64, MAX_KC>;
var<workgroup> row_ids: array<u32, MAX_KC>;

// Where pair i lives in `row_keys` and `row_ids`: i with its low four bits XORed by a function
// of the bits above, a permutation within each run of 16 slots. The bitonic network's trips at
// strides below 16 have each lane of a half-warp read slots 4h apart (h the stride), which fell
// on the same banks of workgroup memory up to four at a time (two on average for the f64 keys);
// permuted, no two lanes of a half-warp share a bank at any stride for the keys, and at most
// two for the ids (notes/exactness.md, "The ranking's bank conflicts").
fn slot(i: u32) -> u32 {
    let run = i >> 4u;
    return i ^ ((run ^ (run << 2u)) & 15u);
}

// The f32 distance reported for an exact key. The float64 square root of Vulkan is not
// correctly rounded, so a root within an ulp or so of a float32 rounding boundary may round
// the other way from the host's: the reported distance then differs from the host's in its
// last bit, which the contract allows (distances are exact to fp32 rounding).
fn reported(key: f64) -> f32 {
    if (params.reported_as == REPORT_SQRT) {
        return f32(sqrt(max(key, 0.0lf)));
    }
    if (params.reported_as == REPORT_NEGATED) {
        return f32(-key);
    }
    return f32(key);
}

// (a_key, a_id) < (b_key, b_id). NONE pairs come after everything without a test of their own:
// they carry the key `NONE_KEY` (above every exact key: squares of f32 values summed over at
// most 2^32 dimensions stay below 1e87) and the largest index; sorted by index alone (keys
// passed as equal), NONE is the largest index too.
fn before(a_key: f64, a_id: u32, b_key: f64, b_id: u32) -> bool {
    return a_key < b_key || (a_key == b_key && a_id < b_id);
}

@compute @workgroup_size(SORT_WG)
fn certify_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let row = wid.x + wid.y * params.groups_x;
    if (row >= params.rows) {
        return;
    }
    let kc = params.kc;
    let base = row * kc;
    let own = row_state[row].x;

    let summary = load_and_sort(lid, base, kc, own);
    let valid = summary.x;

    for (var r = lid; r < min(params.k, valid); r += SORT_WG) {
        ranked_ids[row * params.k + r] = row_ids[slot(r)];
        ranked_distances[row * params.k + r] = reported(row_keys[slot(r)]);
    }

    if (lid == 0u) {
        status[row] = decide(row, kc, valid, own, bitcast<f32>(summary.y), row_keys[slot(params.k - 1u)]);
    }
}

// The row's status from its valid pairs, its largest fp32 key and its k-th exact key (read
// only when there are k valid pairs); see the head of this file.
fn decide(row: u32, kc: u32, valid: u32, own: u32, top: f32, kth: f64) -> u32 {
    let available = params.corpus_rows - select(0u, 1u, own != NONE);
    let complete = valid >= available || (valid < kc && error_bounds[row] < 1.0e308lf);
    if (valid < params.k) {
        // Fewer than k exist at all (complete), or the list must grow.
        return select(1u, 2u + valid, complete);
    }
    if (complete) {
        return 0u;
    }
    var outside = f64(top) - error_bounds[row];
    if (params.floor_zero == 1u) {
        outside = max(outside, 0.0lf);
    }
    return select(1u, 0u, kth <= outside);
}

// Loads the `len` pairs from slot `base` (padding and the query itself as NONE) into
// workgroup memory and sorts them by (exact key, index). Returns (valid pairs, bits of the
// largest fp32 key, the query itself included as on the host), the same in every invocation.
fn load_and_sort(lid: u32, base: u32, len: u32, own: u32) -> vec2<u32> {
    var count = 0u;
    var top = bitcast<f32>(0xff800000u);
    let sorted = bitonic_length(len);
    for (var i = lid; i < sorted; i += SORT_WG) {
        var id = NONE;
        var key = NONE_KEY;
        if (i < len) {
            let c = candidates[base + i];
            if (c.y != NONE) {
                top = max(top, bitcast<f32>(c.x));
                if (c.y != own) {
                    count += 1u;
                    id = c.y;
                    key = exact[base + i];
                }
            }
        }
        row_ids[slot(i)] = id;
        row_keys[slot(i)] = key;
    }
    valid_count[lid] = count;
    largest[lid] = top;
    workgroupBarrier();
    for (var stride = SORT_WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            valid_count[lid] += valid_count[lid + stride];
            largest[lid] = max(largest[lid], largest[lid + stride]);
        }
        workgroupBarrier();
    }
    let summary = vec2<u32>(valid_count[0], bitcast<u32>(largest[0]));

    sort_pairs(lid, sorted, true);
    return summary;
}

// The pairs a bitonic sort of `len` pairs works on: `len` rounded up to a power of two, at
// least PER (`sort_pairs` starts with PER neighbouring pairs an invocation), the rest padding.
fn bitonic_length(len: u32) -> u32 {
    var sorted = PER;
    while (sorted < len) {
        sorted *= 2u;
    }
    return sorted;
}

// Bitonic sort of the first `sorted` (a power of two, at least PER) pairs of `row_keys` and
// `row_ids`, by (key, index) or, without `by_key`, by index alone (the keys travel along).
// Each trip through workgroup memory runs up to four of the network's stages on PER pairs an
// invocation holds in registers: the first trip every stage of the merges of 2 to 16 pairs,
// each later one four stages of a merge (strides 8h, 4h, 2h and h). A row of 1024 pairs takes
// 15 trips, where two stages a trip took 30 (notes/exactness.md, "The ranking in registers").
fn sort_pairs(lid: u32, sorted: u32, by_key: bool) {
    sort_runs_of_16(lid, sorted, by_key);
    for (var size = 2u * PER; size <= sorted; size *= 2u) {
        var stride = size / 2u;
        loop {
            let stages = min(4u, firstTrailingBit(stride) + 1u);
            let h = stride >> (stages - 1u);
            merge_trip(lid, sorted, size, h, stages, by_key);
            if (h == 1u) {
                break;
            }
            stride = h / 2u;
        }
    }
}

// The first trip of `sort_pairs`: each run of 16 neighbouring pairs sorted in registers,
// ascending and descending in turn, as the merges of 2, 4, 8 and 16 pairs leave them.
fn sort_runs_of_16(lid: u32, sorted: u32, by_key: bool) {
    for (var g = lid; g < sorted / 16u; g += SORT_WG) {
        let s = g * 16u;
        var key: array<f64, 16>;
        var id: array<u32, 16>;
        // unroll(j, 16u)
        for (var j = 0u; j < 16u; j++) {
            key[j] = row_keys[slot(s + j)];
            id[j] = row_ids[slot(s + j)];
        }
        // Merge sizes 2 << a; strides (1 << a) >> b for b <= a.
        // unroll(a, 4u)
        for (var a = 0u; a < 4u; a++) {
            // unroll(b, 4u)
            for (var b = 0u; b < 4u; b++) {
                if (b <= a) {
                    const stride = (1u << a) >> min(b, a);
                    // unroll(j, 16u)
                    for (var j = 0u; j < 16u; j++) {
                        // j | stride is j + stride where it is used, and a valid index in
                        // the branches never taken, which are validated all the same. (The
                        // comparator is written out: naga 30's SPIR-V output fails on
                        // pointers to array elements passed to a function.)
                        if ((j & stride) == 0u) {
                            let o = j | stride;
                            if (swaps(key[j], id[j], key[o], id[o], ((s + j) & (2u << a)) == 0u, by_key)) {
                                let first_key = key[j];
                                let first_id = id[j];
                                key[j] = key[o];
                                id[j] = id[o];
                                key[o] = first_key;
                                id[o] = first_id;
                            }
                        }
                    }
                }
            }
        }
        // unroll(j, 16u)
        for (var j = 0u; j < 16u; j++) {
            row_keys[slot(s + j)] = key[j];
            row_ids[slot(s + j)] = id[j];
        }
    }
    workgroupBarrier();
}

// One trip of a merge of `size` pairs: its `stages` (1 to 4) stages of strides
// h << (stages - 1) down to h, on groups of 1 << stages pairs h apart. A group lies inside
// one run of `size` (it spans twice the largest stride, at most `size`), so all its
// comparators sort the same way.
fn merge_trip(lid: u32, sorted: u32, size: u32, h: u32, stages: u32, by_key: bool) {
    let lh = firstTrailingBit(h);
    let per = 1u << stages;
    for (var g = lid; g < sorted / per; g += SORT_WG) {
        // g with `stages` zero bits inserted at h: the group's first slot.
        let s = ((g >> lh) << (lh + stages)) | (g & (h - 1u));
        let ascending = (s & size) == 0u;
        var key: array<f64, 16>;
        var id: array<u32, 16>;
        // unroll(j, 16u)
        for (var j = 0u; j < 16u; j++) {
            if (j < per) {
                key[j] = row_keys[slot(s + j * h)];
                id[j] = row_ids[slot(s + j * h)];
            }
        }
        // The trip's stages from the top: pairs (j, j + 2^i) for i = stages - 1 down to 0.
        // unroll(level, 4u)
        for (var level = 0u; level < 4u; level++) {
            const i = 3u - level;
            if (i < stages) {
                // unroll(j, 16u)
                for (var j = 0u; j < 16u; j++) {
                    let o = j | (1u << i);
                    if ((j & (1u << i)) == 0u && o < per && swaps(key[j], id[j], key[o], id[o], ascending, by_key)) {
                        let first_key = key[j];
                        let first_id = id[j];
                        key[j] = key[o];
                        id[j] = id[o];
                        key[o] = first_key;
                        id[o] = first_id;
                    }
                }
            }
        }
        // unroll(j, 16u)
        for (var j = 0u; j < 16u; j++) {
            if (j < per) {
                row_keys[slot(s + j * h)] = key[j];
                row_ids[slot(s + j * h)] = id[j];
            }
        }
    }
    workgroupBarrier();
}

// Whether one comparator of the network swaps pairs a and b (a first) to put them in
// `ascending` order, or the reverse.
fn swaps(a_key: f64, a_id: u32, b_key: f64, b_id: u32, ascending: bool, by_key: bool) -> bool {
    let b_first = select(before(0.0lf, b_id, 0.0lf, a_id), before(b_key, b_id, a_key, a_id), by_key);
    return b_first == ascending;
}

// A symmetric sweep's lists (kc <= MAX_KC), before exact keys shared by mutual neighbours
// (`copy_mutual_keys` in refine.wgsl): each row's pairs sorted in place by index, padding
// last, so that any index's slot is found by binary search. The fp32 keys travel along.
@compute @workgroup_size(SORT_WG)
fn sort_by_index(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let row = wid.x + wid.y * params.groups_x;
    if (row >= params.rows) {
        return;
    }
    let base = row * params.kc;
    let sorted = bitonic_length(params.kc);
    for (var i = lid; i < sorted; i += SORT_WG) {
        var c = vec2<u32>(0u, NONE);
        if (i < params.kc) {
            c = candidates[base + i];
        }
        row_ids[slot(i)] = c.y;
        // The fp32 key's bits, exact in f64.
        row_keys[slot(i)] = f64(c.x);
    }
    workgroupBarrier();
    sort_pairs(lid, sorted, false);
    for (var i = lid; i < params.kc; i += SORT_WG) {
        candidates[base + i] = vec2<u32>(u32(row_keys[slot(i)]), row_ids[slot(i)]);
    }
}

// Lists longer than MAX_KC, pass 1: sorts run `wid % runs` of row `wid / runs` in place (its
// valid pairs first, by (exact key, index); the query itself and padding after them, as
// NONE) and records the run's valid pairs and largest fp32 key.
@compute @workgroup_size(SORT_WG)
fn sort_runs(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let runs = (params.kc + MAX_KC - 1u) / MAX_KC;
    let w = wid.x + wid.y * params.groups_x;
    if (w >= params.rows * runs) {
        return;
    }
    let row = w / runs;
    let run = w % runs;
    let start = run * MAX_KC;
    let len = min(MAX_KC, params.kc - start);
    let base = row * params.kc + start;
    let summary = load_and_sort(lid, base, len, row_state[row].x);
    for (var i = lid; i < len; i += SORT_WG) {
        candidates[base + i] = vec2<u32>(0u, row_ids[slot(i)]);
        exact[base + i] = row_keys[slot(i)];
    }
    if (lid == 0u) {
        run_stats[w] = summary;
    }
}

// Pairs of `run` (its first `count` slots, sorted by `sort_runs`) that come before (key, id).
fn rank_in_run(row: u32, run: u32, count: u32, key: f64, id: u32) -> u32 {
    let base = row * params.kc + run * MAX_KC;
    var lo = 0u;
    var hi = count;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (before(exact[base + mid], candidates[base + mid].y, key, id)) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Lists longer than MAX_KC, pass 2: each valid pair's rank in the row is its place in its run
// plus the pairs before it in every other run; the first k are the answer. Then the
// certificate, as `certify_rows` decides it.
@compute @workgroup_size(WG)
fn certify_runs(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let row = wid.x + wid.y * params.groups_x;
    if (row >= params.rows) {
        return;
    }
    let runs = (params.kc + MAX_KC - 1u) / MAX_KC;
    var valid = 0u;
    var top = bitcast<f32>(0xff800000u);
    for (var r = 0u; r < runs; r++) {
        let stats = run_stats[row * runs + r];
        valid += stats.x;
        top = max(top, bitcast<f32>(stats.y));
    }
    for (var i = lid; i < params.kc; i += WG) {
        let run = i / MAX_KC;
        let place = i % MAX_KC;
        if (place >= run_stats[row * runs + run].x) {
            continue;
        }
        let key = exact[row * params.kc + i];
        let id = candidates[row * params.kc + i].y;
        var rank = place;
        for (var r = 0u; r < runs; r++) {
            if (r != run) {
                rank += rank_in_run(row, r, run_stats[row * runs + r].x, key, id);
            }
        }
        if (rank < params.k && params.k <= MAX_KC) {
            row_ids[slot(rank)] = id;
            row_keys[slot(rank)] = key;
        } else if (rank < params.k) {
            ranked_ids[row * params.k + rank] = id;
            ranked_distances[row * params.k + rank] = reported(key);
            if (rank == params.k - 1u) {
                kth_key = key;
            }
        }
    }
    workgroupBarrier();
    if (params.k <= MAX_KC) {
        // Ranks scatter; the answers leave in order, whole rows of neighbouring slots, which
        // matters where the output is host memory (`CertifyBuffers::direct`).
        for (var r = lid; r < min(params.k, valid); r += WG) {
            ranked_ids[row * params.k + r] = row_ids[slot(r)];
            ranked_distances[row * params.k + r] = reported(row_keys[slot(r)]);
        }
    }
    if (lid == 0u) {
        var kth = 0.0lf;
        if (valid >= params.k && params.k <= MAX_KC) {
            kth = row_keys[slot(params.k - 1u)];
        } else if (valid >= params.k) {
            kth = kth_key;
        }
        status[row] = decide(row, params.kc, valid, row_state[row].x, top, kth);
    }
}
