// Ranks each row's candidates by their exact float64 keys and checks the row's certificate
// on the GPU, so that only k neighbours per row are read back instead of every candidate
// (notes/exactness.md). The same decision as `refine::refine` on the host:
// - valid candidates are those with an index that is neither NONE nor the query itself;
// - the answer is the k smallest valid ones by (exact key, index);
// - the list is complete (no outsider can exist) when it holds every available row or has
//   padding; otherwise it is accepted when the k-th exact key is at most the largest fp32
//   key of the list minus the row's fp32 error bound (floored at 0 except for inner product).
// Status per row: 0 accepted (k neighbours), 2 + m accepted with only m < k neighbours (all
// there are), 1 not accepted: the row is searched again with more candidates.
// One workgroup per row. The row's (exact key, index) pairs are sorted in workgroup memory by
// a bitonic network over kc rounded up to a power of two (at most MAX_KC, set by the host):
// O(kc log^2 kc) comparisons, where ranking by counting took kc^2 (2.3x slower at kc = 1250,
// though it kept 10 KiB less workgroup memory). Needs SHADER_F64.

struct Params {
    rows: u32,
    kc: u32,
    k: u32,
    corpus_rows: u32,
    groups_x: u32,
    floor_zero: u32, // 1: keys are non-negative (every metric but inner product)
    _pad0: u32,
    _pad1: u32,
}

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
// The largest kc; set by the host (`MAX_CERTIFY_KC`), a power of two.
override MAX_KC: u32 = 2048u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> candidates: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> exact: array<f64>;
// Per row: (corpus index to exclude, shortlist bound); only the first is used here.
@group(0) @binding(3) var<storage, read> row_state: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read> error_bounds: array<f64>;
@group(0) @binding(5) var<storage, read_write> ranked_ids: array<u32>;
@group(0) @binding(6) var<storage, read_write> ranked_keys: array<f64>;
@group(0) @binding(7) var<storage, read_write> status: array<u32>;

var<workgroup> valid_count: array<u32, WG>;
var<workgroup> largest: array<f32, WG>;
// The row's exact keys and corpus rows; NONE marks padding and the query itself.
var<workgroup> row_keys: array<f64, MAX_KC>;
var<workgroup> row_ids: array<u32, MAX_KC>;

// (a_key, a_id) < (b_key, b_id), NONE after everything.
fn before(a_key: f64, a_id: u32, b_key: f64, b_id: u32) -> bool {
    if (a_id == NONE || b_id == NONE) {
        return a_id != NONE;
    }
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

    // Valid candidates and the largest fp32 key of the list (self included, as on the host).
    var count = 0u;
    var top = bitcast<f32>(0xff800000u);
    var sorted = 1u;
    while (sorted < kc) {
        sorted *= 2u;
    }
    for (var i = lid; i < sorted; i += WG) {
        var id = NONE;
        var key = 0.0lf;
        if (i < kc) {
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
        row_ids[i] = id;
        row_keys[i] = key;
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
    let valid = workgroupUniformLoad(&valid_count[0]);

    // Bitonic sort of the `sorted` pairs; the first k valid ones are the answer.
    for (var size = 2u; size <= sorted; size *= 2u) {
        for (var stride = size / 2u; stride > 0u; stride /= 2u) {
            for (var t = lid; t < sorted / 2u; t += WG) {
                let lo = (t / stride) * 2u * stride + t % stride;
                let hi = lo + stride;
                let a_key = row_keys[lo];
                let a_id = row_ids[lo];
                let b_key = row_keys[hi];
                let b_id = row_ids[hi];
                let ascending = (lo & size) == 0u;
                if (before(b_key, b_id, a_key, a_id) == ascending) {
                    row_keys[lo] = b_key;
                    row_ids[lo] = b_id;
                    row_keys[hi] = a_key;
                    row_ids[hi] = a_id;
                }
            }
            workgroupBarrier();
        }
    }
    for (var r = lid; r < min(params.k, valid); r += WG) {
        ranked_ids[row * params.k + r] = row_ids[r];
        ranked_keys[row * params.k + r] = row_keys[r];
    }

    if (lid == 0u) {
        let available = params.corpus_rows - select(0u, 1u, own != NONE);
        let complete = valid >= available || valid < kc;
        if (valid < params.k) {
            // Fewer than k exist at all (complete), or the list must grow.
            status[row] = select(1u, 2u + valid, complete);
        } else if (complete) {
            status[row] = 0u;
        } else {
            var outside = f64(largest[0]) - error_bounds[row];
            if (params.floor_zero == 1u) {
                outside = max(outside, 0.0lf);
            }
            let accepted = row_keys[params.k - 1u] <= outside;
            status[row] = select(1u, 0u, accepted);
        }
    }
}
