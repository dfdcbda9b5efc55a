// The lists of a bounded sweep (plan::plan_bounded) after their tile: a row's list holds every
// key under the row's bound, from the filter of its own tile's block (filter_two_sided.wgsl,
// row side) and of earlier tiles' blocks (column side), in no order and with the list's
// length counted past its cap. The dense select (select.wgsl) then takes the row's kc best:
// `list_keys` lays the keys out as a dense row for it, and `list_ids` turns the positions it
// reports into corpus indices.
//
// A row with fewer keys than kc under its bound, or more than its list holds, may miss
// candidates: flagged (bit 2 of `failed`, as an overflowed column-side shortlist in a
// symmetric sweep) and searched again by the host.

struct Params {
    rows: u32,     // rows of the tile
    cap: u32,      // pairs a list (and keys a dense row)
    need: u32,     // candidates a row (kc)
    row_base: u32, // the tile's first row in the per-row arrays
    id_base: u32,  // what the select added to a position (its col_base)
    groups_x: u32,
}

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
const INF_BITS: u32 = 0x7f800000u;
const INCOMPLETE: u32 = 4u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> list_len: array<u32>;
@group(0) @binding(2) var<storage, read> lists: array<vec2<u32>>;
// Dense rows of `cap` keys, the tile's rows from 0.
@group(0) @binding(3) var<storage, read_write> keys: array<f32>;
@group(0) @binding(4) var<storage, read_write> candidates: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read_write> failed: array<u32>;

// One workgroup a row: its list's keys, +inf past its length.
@compute @workgroup_size(WG)
fn list_keys(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let r = wid.x + wid.y * params.groups_x;
    if (r >= params.rows) {
        return;
    }
    let row = params.row_base + r;
    let len = list_len[row];
    let kept = min(len, params.cap);
    for (var i = lid; i < params.cap; i += WG) {
        var key = bitcast<f32>(INF_BITS);
        if (i < kept) {
            key = bitcast<f32>(lists[row * params.cap + i].x);
        }
        keys[r * params.cap + i] = key;
    }
    if (lid == 0u && (len < params.need || len > params.cap)) {
        failed[row] = failed[row] | INCOMPLETE;
    }
}

// One invocation a candidate slot of the tile's rows: the position the select reported,
// as the corpus index its list holds there (padding and positions past the list: none).
@compute @workgroup_size(WG)
fn list_ids(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = (wid.x + wid.y * params.groups_x) * WG + lid;
    if (t >= params.rows * params.need) {
        return;
    }
    let row = params.row_base + t / params.need;
    let slot = row * params.need + t % params.need;
    let c = candidates[slot];
    let kept = min(list_len[row], params.cap);
    var id = NONE;
    if (c.y != NONE && c.y - params.id_base < kept) {
        id = lists[row * params.cap + c.y - params.id_base].y;
    }
    candidates[slot] = select(vec2<u32>(INF_BITS, NONE), vec2<u32>(c.x, id), id != NONE);
}
