// The short selects of a bounded sweep (plan::plan_bounded), a workgroup a row with the row's
// keys held in workgroup memory:
// - mode SAMPLE: each row's key of rank `need` among its keys against the sample (a dense
//   row in `keys`) becomes the row's bound (`row_state`);
// - mode LISTS: after its tile, a row's list holds every key under the row's bound, from the
//   filter of its own tile's block (filter_two_sided.wgsl, row side) and of earlier tiles'
//   blocks (column side), in no order, its length counted past its cap. Its `need` (kc) best
//   pairs become the row's candidates. A row with fewer keys than kc under its bound, or
//   more than its list holds, may miss candidates: flagged (bit 2 of `failed`, as an
//   overflowed column-side shortlist in a symmetric sweep) and searched again by the host.
//
// The need-th smallest key is found by bisection over the keys' bits taken as ordered
// integers: up to 32 counts over the keys, which stay in registers, each summed by the
// workgroup; no second pass over global memory. The dense
// select (select.wgsl) does the same work for rows of 65536 keys in a few passes over
// global memory; for rows of a few thousand its per-row passes and barriers cost more than the
// keys (65536 lists of 2560 at n=65536 k=1000: notes/select.md).

struct Params {
    rows: u32,       // rows of the dispatch
    cap: u32,        // pairs a list (LISTS); keys a row (SAMPLE)
    need: u32,       // the rank sought: kc (LISTS), the bound's rank (SAMPLE)
    row_base: u32,   // the dispatch's first row in the per-row arrays
    mode: u32,
    groups_x: u32,
    key_stride: u32, // row stride of `keys` (SAMPLE)
}

// Keys a row may have: the host plans lists and samples no longer (`plan::MAX_SHORT_SELECT`).
const MAX_LEN: u32 = 4096u;
const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
const INF_BITS: u32 = 0x7f800000u;
const INCOMPLETE: u32 = 4u;
const SAMPLE: u32 = 0u;
const LISTS: u32 = 1u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> list_len: array<u32>;
@group(0) @binding(2) var<storage, read> lists: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> keys: array<f32>;
@group(0) @binding(4) var<storage, read_write> candidates: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read_write> failed: array<u32>;
@group(0) @binding(6) var<storage, read_write> row_state: array<vec2<u32>>;

// Keys an invocation holds in registers (its keys i = lid + j WG), MAX_LEN in all.
const PER: u32 = MAX_LEN / WG;
// Counts of the bisection, two in turn: one is summed while the other is cleared.
var<workgroup> counts: array<atomic<u32>, 2>;
var<workgroup> count_seen: u32;
var<workgroup> row_len: u32;
var<workgroup> taken_below: atomic<u32>;
var<workgroup> taken_equal: atomic<u32>;
var<workgroup> range_lo: atomic<u32>;
var<workgroup> range_hi: atomic<u32>;
var<workgroup> range: vec2<u32>;

// f32 bits as integers in the floats' order (negative keys below positive ones).
fn ordered(bits: u32) -> u32 {
    return select(bits | 0x80000000u, ~bits, (bits >> 31u) == 1u);
}

fn unordered(o: u32) -> u32 {
    return select(~o, o & 0x7fffffffu, (o >> 31u) == 1u);
}

@compute @workgroup_size(WG)
fn select_short(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let r = wid.x + wid.y * params.groups_x;
    if (r >= params.rows) {
        return;
    }
    let row = params.row_base + r;
    if (lid == 0u) {
        row_len = params.cap;
        if (params.mode == LISTS) {
            row_len = min(list_len[row], params.cap);
        }
    }
    let len = workgroupUniformLoad(&row_len);
    // Indexed by constants only (the loops are unrolled when the module is built), so that
    // the keys stay in registers: past the row, the largest integer, never counted.
    var mine: array<u32, PER>;
    // unroll(j, PER)
    for (var j = 0u; j < PER; j++) {
        mine[j] = 0xffffffffu;
        let i = lid + j * WG;
        if (i < len) {
            var bits: u32;
            if (params.mode == LISTS) {
                bits = lists[row * params.cap + i].x;
            } else {
                bits = bitcast<u32>(keys[r * params.key_stride + i]);
            }
            mine[j] = ordered(bits);
        }
    }
    // The row's smallest and largest keys bound the bisection.
    var smallest = 0xffffffffu;
    var largest = 0u;
    // unroll(j, PER)
    for (var j = 0u; j < PER; j++) {
        if (lid + j * WG < len) {
            smallest = min(smallest, mine[j]);
            largest = max(largest, mine[j]);
        }
    }
    if (lid < 2u) {
        atomicStore(&counts[lid], 0u);
    }
    if (lid == 0u) {
        atomicStore(&taken_below, 0u);
        atomicStore(&taken_equal, 0u);
        atomicStore(&range_lo, 0xffffffffu);
        atomicStore(&range_hi, 0u);
    }
    workgroupBarrier();
    atomicMin(&range_lo, smallest);
    atomicMax(&range_hi, largest);
    workgroupBarrier();
    if (lid == 0u) {
        range = vec2<u32>(atomicLoad(&range_lo), atomicLoad(&range_hi));
    }
    let bounds = workgroupUniformLoad(&range);

    // The smallest t with at least `need` keys <= t (the need-th smallest key), or any t
    // with exactly `need`.
    let need = min(params.need, len);
    var lo = bounds.x;
    var hi = bounds.y;
    for (var turn = 0u; turn < 33u; turn++) {
        if (lo >= hi || need == 0u) {
            break;
        }
        let mid = lo + (hi - lo) / 2u;
        var c = 0u;
        // unroll(j, PER)
        for (var j = 0u; j < PER; j++) {
            c += select(0u, 1u, mine[j] <= mid);
        }
        atomicAdd(&counts[turn % 2u], c);
        workgroupBarrier();
        if (lid == 0u) {
            count_seen = atomicLoad(&counts[turn % 2u]);
            atomicStore(&counts[(turn + 1u) % 2u], 0u);
        }
        let count = workgroupUniformLoad(&count_seen);
        if (count == need) {
            lo = mid;
            break;
        }
        if (count > need) {
            hi = mid;
        } else {
            lo = mid + 1u;
        }
    }
    let t = lo;

    if (params.mode == SAMPLE) {
        if (lid == 0u) {
            row_state[row].y = unordered(t);
        }
        return;
    }
    let out = row * params.need;
    // unroll(j, PER)
    for (var j = 0u; j < PER; j++) {
        if (mine[j] < t && need > 0u) {
            let s = atomicAdd(&taken_below, 1u);
            candidates[out + s] = vec2<u32>(unordered(mine[j]), lists[row * params.cap + lid + j * WG].y);
        }
    }
    workgroupBarrier();
    let below = atomicLoad(&taken_below);
    // unroll(j, PER)
    for (var j = 0u; j < PER; j++) {
        if (mine[j] == t && need > 0u) {
            let s = below + atomicAdd(&taken_equal, 1u);
            if (s < need) {
                candidates[out + s] = vec2<u32>(unordered(t), lists[row * params.cap + lid + j * WG].y);
            }
        }
    }
    for (var s = need + lid; s < params.need; s += WG) {
        candidates[out + s] = vec2<u32>(INF_BITS, NONE);
    }
    if (lid == 0u && (list_len[row] < params.need || list_len[row] > params.cap)) {
        failed[row] = failed[row] | INCOMPLETE;
    }
}
