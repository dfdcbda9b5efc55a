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

const WG: u32 = 256u;
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
// Nonzero once a driver ended an invocation's loops early (`certify_runs`).
var<workgroup> loops_cut: atomic<u32>;
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

@compute @workgroup_size(WG)
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

    for (var r = lid; r < min(params.k, valid); r += WG) {
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
    for (var i = lid; i < sorted; i += WG) {
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
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
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
// least 4 (`sort_pairs` takes four at a time), the rest padding.
fn bitonic_length(len: u32) -> u32 {
    var sorted = 4u;
    while (sorted < len) {
        sorted *= 2u;
    }
    return sorted;
}

// Bitonic sort of the first `sorted` (a power of two, at least 4) pairs of `row_keys` and
// `row_ids`, by (key, index) or, without `by_key`, by index alone (the keys travel along).
// Each trip through workgroup memory runs two of the network's stages, strides 2h and h, on
// four slots per invocation held in registers: half the barriers and half the workgroup
// memory traffic of a stage per trip (notes/exactness.md).
fn sort_pairs(lid: u32, sorted: u32, by_key: bool) {
    for (var size = 2u; size <= sorted; size *= 2u) {
        var stride = size / 2u;
        loop {
            let h = max(stride / 2u, 1u);
            // h is a power of two: shifts and masks instead of a division by a variable, which
            // costs a few dozen instructions on GPUs without an integer divider.
            let lh = firstTrailingBit(h);
            for (var g = lid; g < sorted / 4u; g += WG) {
                // g with zero bits inserted at h and 2h: the first of slots s, s + h, s + 2h, s + 3h.
                let s = ((g >> lh) << (lh + 2u)) | (g & (h - 1u));
                var k0 = row_keys[slot(s)];
                var i0 = row_ids[slot(s)];
                var k1 = row_keys[slot(s + h)];
                var i1 = row_ids[slot(s + h)];
                var k2 = row_keys[slot(s + 2u * h)];
                var i2 = row_ids[slot(s + 2u * h)];
                var k3 = row_keys[slot(s + 3u * h)];
                var i3 = row_ids[slot(s + 3u * h)];
                let ascending = (s & size) == 0u;
                if (stride > 1u) {
                    exchange(&k0, &i0, &k2, &i2, ascending, by_key);
                    exchange(&k1, &i1, &k3, &i3, ascending, by_key);
                }
                // With size 2, slots s + 2 and s + 3 belong to the next, descending, pair.
                exchange(&k0, &i0, &k1, &i1, ascending, by_key);
                exchange(&k2, &i2, &k3, &i3, ((s + 2u * h) & size) == 0u, by_key);
                row_keys[slot(s)] = k0;
                row_ids[slot(s)] = i0;
                row_keys[slot(s + h)] = k1;
                row_ids[slot(s + h)] = i1;
                row_keys[slot(s + 2u * h)] = k2;
                row_ids[slot(s + 2u * h)] = i2;
                row_keys[slot(s + 3u * h)] = k3;
                row_ids[slot(s + 3u * h)] = i3;
            }
            workgroupBarrier();
            if (stride <= 2u) {
                break;
            }
            stride /= 4u;
        }
    }
}

// One comparator of the network: slots a and b (a first) in `ascending` order or the reverse.
fn exchange(
    a_key: ptr<function, f64>,
    a_id: ptr<function, u32>,
    b_key: ptr<function, f64>,
    b_id: ptr<function, u32>,
    ascending: bool,
    by_key: bool,
) {
    let b_first = select(before(0.0lf, *b_id, 0.0lf, *a_id), before(*b_key, *b_id, *a_key, *a_id), by_key);
    if (b_first == ascending) {
        let key = *a_key;
        let id = *a_id;
        *a_key = *b_key;
        *a_id = *b_id;
        *b_key = key;
        *b_id = id;
    }
}

// A symmetric sweep's lists (kc <= MAX_KC), before exact keys shared by mutual neighbours
// (`copy_mutual_keys` in refine.wgsl): each row's pairs sorted in place by index, padding
// last, so that any index's slot is found by binary search. The fp32 keys travel along.
@compute @workgroup_size(WG)
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
    for (var i = lid; i < sorted; i += WG) {
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
    for (var i = lid; i < params.kc; i += WG) {
        candidates[base + i] = vec2<u32>(u32(row_keys[slot(i)]), row_ids[slot(i)]);
    }
}

// Lists longer than MAX_KC, pass 1: sorts run `wid % runs` of row `wid / runs` in place (its
// valid pairs first, by (exact key, index); the query itself and padding after them, as
// NONE) and records the run's valid pairs and largest fp32 key.
@compute @workgroup_size(WG)
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
    for (var i = lid; i < len; i += WG) {
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
    if (lid == 0u) {
        atomicStore(&loops_cut, 0u);
    }
    workgroupBarrier();
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
    // Mesa's llvmpipe ends every loop of an invocation once its loops together have taken
    // 65535 steps, with no error; a long list's binary searches reach that (kc of about 37k).
    // Pairs would go unranked and stale answers pass: a last loop, its count read from the
    // uniform so that it is not unrolled, ends short if so, and the row is not accepted.
    let want = 2u + (params.k & 1u);
    var steps = 0u;
    for (var i = 0u; i < want; i++) {
        steps++;
    }
    if (steps != want) {
        atomicStore(&loops_cut, 1u);
    }
    workgroupBarrier();
    if (lid == 0u && atomicLoad(&loops_cut) != 0u) {
        status[row] = 1u;
    } else if (lid == 0u) {
        var kth = 0.0lf;
        if (valid >= params.k && params.k <= MAX_KC) {
            kth = row_keys[slot(params.k - 1u)];
        } else if (valid >= params.k) {
            kth = kth_key;
        }
        status[row] = decide(row, params.kc, valid, row_state[row].x, top, kth);
    }
}
