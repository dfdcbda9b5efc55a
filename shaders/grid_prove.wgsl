// Each grid query's answer ranked and proven on the GPU (needs SHADER_F64), so that the host
// only copies it: the same decision and the same answer as the host's proof
// (`lowdim::hybrid`, `lowdim::grid::outside_bound`, `lowdim::job::rows_answer`), bit for bit.
// One invocation a query, after `query_cells` (grid.wgsl) filled its heap of kc candidates:
// - the candidates' exact float64 keys, sorted by (key, point);
// - walking their rows (a distinct point stands for every row sharing its coordinates, the
//   query's excluded row left out) to the k-th row: its key is the k-th key;
// - proven when the k-th key is below every key outside the candidates: the grid's reach,
//   and where the cells held more points than the heap kept, the largest kept f32 key less
//   its error;
// - the answer: every row of the points nearer than the k-th key, and the lowest rows among
//   those at it, ascending by key (rows of equal keys in point order: the host orders the
//   rows of each reported distance by index).
// Status per query, in place of its count of points seen: PROVEN (its k rows in the first k
// of its heap slots, their keys in `answer_keys`), UNPROVEN (the kd-tree answers it: too few
// rows within reach), UNANSWERED (the grid could not answer it, or this kernel's loops were
// cut short).
// MAX_KC (the most heap slots a query has here) is set by the host.

struct Params {
    len: u32,      // queries
    dims: u32,
    kc: u32,       // heap slots a query
    k: u32,
    groups_x: u32,
    points: u32,   // distinct corpus points
    pad0: u32,
    pad1: u32,
    reach_key: f64,   // squared distance within which the cells hold every point
    kept_scale: f64,  // a kept f32 key's lower bound on the exact key: key * kept_scale - kept_floor
    kept_floor: f64,
    one: f64,         // 1.0 (see `exact_key`)
}

const MAX_DIMS: u32 = 6u;
const NONE: u32 = 0xffffffffu;
// grid.wgsl's count of a query it could not answer.
const FAILED: u32 = 0xffffffffu;
const PROVEN: u32 = 0u;
const UNPROVEN: u32 = 1u;
const UNANSWERED: u32 = 2u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> coords: array<f32>;
@group(0) @binding(2) var<storage, read> corpus: array<f32>;
@group(0) @binding(3) var<storage, read> heap_keys: array<f32>;
// A query's candidates in; where proven, its answer's rows in its first k slots.
@group(0) @binding(4) var<storage, read_write> heap_ids: array<u32>;
// [0, len): each query's count of points seen in, its status out; [len, 2 len): each query's
// excluded row (NONE: none).
@group(0) @binding(5) var<storage, read_write> found: array<u32>;
// The rows of point t are rows[first[t]..first[t + 1]], ascending: first[0..=points] at the
// start, then rows.
@group(0) @binding(6) var<storage, read> point_rows: array<u32>;
@group(0) @binding(7) var<storage, read_write> answer_keys: array<f64>;

var<private> cand_key: array<f64, MAX_KC>;
var<private> cand_id: array<u32, MAX_KC>;

fn invocation(lid: u32, wid: vec3<u32>) -> u32 {
    return (wid.x + wid.y * p.groups_x) * 64u + lid;
}

// Query q's exact key to corpus point t: the host's `sq_euclidean_f64_to`, terms added in order
// from 0, bit for bit. A compiler may fuse a multiplication into the addition after it (WGSL
// cannot ask SPIR-V for NoContraction): diff * diff + key would then round once where the host
// rounds twice. Each term is therefore multiplied by `one`, a 1.0 the compiler cannot see; a
// fused (term * one) + key rounds once, as the host's term + key does.
fn exact_key(q: u32, t: u32) -> f64 {
    var key = 0.0lf;
    for (var j = 0u; j < p.dims; j++) {
        let diff = f64(coords[q * p.dims + j]) - f64(corpus[t * p.dims + j]);
        key += (diff * diff) * p.one;
    }
    return key;
}

fn before(a: u32, b: u32) -> bool {
    return cand_key[a] < cand_key[b] || (cand_key[a] == cand_key[b] && cand_id[a] < cand_id[b]);
}

fn swap_candidates(a: u32, b: u32) {
    let key = cand_key[a];
    let id = cand_id[a];
    cand_key[a] = cand_key[b];
    cand_id[a] = cand_id[b];
    cand_key[b] = key;
    cand_id[b] = id;
}

// Restores the max-heap of candidates [0, end) below `start`.
fn sift_down(start: u32, end: u32) {
    var at = start;
    loop {
        let left = 2u * at + 1u;
        if (left >= end) {
            break;
        }
        var child = left;
        if (left + 1u < end && before(left, left + 1u)) {
            child = left + 1u;
        }
        if (!before(at, child)) {
            break;
        }
        swap_candidates(at, child);
        at = child;
    }
}

// Sorts candidates [0, m) ascending by (key, point): heapsort, kc log kc steps.
fn sort_candidates(m: u32) {
    for (var i = m / 2u; i > 0u; i--) {
        sift_down(i - 1u, m);
    }
    for (var end = m; end > 1u; end--) {
        swap_candidates(0u, end - 1u);
        sift_down(0u, end - 1u);
    }
}

// The first position of point t's rows holding a row not below `row`.
fn first_row_from(t: u32, row: u32) -> u32 {
    var lo = point_rows[t];
    var hi = point_rows[t + 1u];
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (point_rows[p.points + 1u + mid] < row) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Rows of point t, the excluded row left out.
fn rows_of(t: u32, excluded: u32) -> u32 {
    let all = point_rows[t + 1u] - point_rows[t];
    if (excluded == NONE) {
        return all;
    }
    let at = first_row_from(t, excluded);
    let holds = at < point_rows[t + 1u] && point_rows[p.points + 1u + at] == excluded;
    return all - select(0u, 1u, holds);
}

// As grid.wgsl's: whether this invocation's loops all ran to their end (llvmpipe ends them
// after 65535 steps in all, silently).
fn loops_ran_whole() -> bool {
    var steps = 0u;
    for (var i = 0u; i <= p.dims; i++) {
        steps++;
    }
    return steps == p.dims + 1u;
}

// Query q's answer entry `at`: row and key.
fn put(q: u32, at: u32, row: u32, key: f64) {
    heap_ids[q * p.kc + at] = row;
    answer_keys[q * p.k + at] = key;
}

// The answer of query q from its sorted candidates [0, m), k-th key `kth`.
fn write_answer(q: u32, m: u32, kth: f64, excluded: u32) {
    var out = 0u;
    var c = 0u;
    for (; c < m && cand_key[c] < kth; c++) {
        let t = cand_id[c];
        for (var s = point_rows[t]; s < point_rows[t + 1u]; s++) {
            let row = point_rows[p.points + 1u + s];
            if (row != excluded) {
                put(q, out, row, cand_key[c]);
                out++;
            }
        }
    }
    // The points at the k-th key (sorted by point from c on): their lowest rows, merged.
    var next = 0u;
    for (; out < p.k; out++) {
        var best = NONE;
        for (var t = c; t < m && cand_key[t] == kth; t++) {
            var s = first_row_from(cand_id[t], next);
            let end = point_rows[cand_id[t] + 1u];
            if (s < end && point_rows[p.points + 1u + s] == excluded) {
                s++;
            }
            if (s < end) {
                best = min(best, point_rows[p.points + 1u + s]);
            }
        }
        put(q, out, best, kth);
        next = best + 1u;
    }
}

@compute @workgroup_size(64)
fn prove_rows(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let q = invocation(lid, wid);
    if (q >= p.len) {
        return;
    }
    let seen = found[q];
    if (seen == FAILED) {
        found[q] = UNANSWERED;
        return;
    }
    let excluded = found[p.len + q];
    var m = 0u;
    var largest = bitcast<f32>(0xff800000u);
    for (var s = 0u; s < p.kc; s++) {
        let t = heap_ids[q * p.kc + s];
        if (t != NONE) {
            cand_key[m] = exact_key(q, t);
            cand_id[m] = t;
            largest = max(largest, heap_keys[q * p.kc + s]);
            m++;
        }
    }
    sort_candidates(m);
    var held = 0u;
    var kth = -1.0lf;
    for (var c = 0u; c < m; c++) {
        held += rows_of(cand_id[c], excluded);
        if (held >= p.k) {
            kth = cand_key[c];
            break;
        }
    }
    var bound = p.reach_key;
    if (seen > p.kc) {
        // As `outside_bound`: a heap that kept an infinite key proves nothing.
        let finite = largest < bitcast<f32>(0x7f800000u);
        bound = select(-1.0lf, min(bound, f64(largest) * p.kept_scale - p.kept_floor), finite);
    }
    var status = UNPROVEN;
    if (held >= p.k && kth < bound) {
        write_answer(q, m, kth, excluded);
        status = PROVEN;
    }
    found[q] = select(UNANSWERED, status, loops_ran_whole());
}
