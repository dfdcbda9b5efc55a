// The batch index sort selector (Dashti's thesis, section 3.3): a dense distance tile's kc best
// per row by sorting instead of selecting. `tile_pairs` lays the tile out as (key, position)
// pairs; the host sorts them by key (radix_sort.wgsl), `row_keys` replaces each key by its
// pair's row, and the host sorts again by row, stably: every row's pairs are then its own
// `cols` positions, in (key, column) order. `take_rows` writes each row's first `need` as
// its list, where select.wgsl's `select_rows` writes a dense tile's, and (into the running
// lists) its largest key as the row's bound, as `select_rows` does.
//
// In a symmetric or two-sided block the same key-sorted pairs also give the column side (the
// thesis's third sort): `column_keys` keeps the key order in `key_order` and keys each pair by
// its column, the host sorts stably by column, and `take_columns` appends each column's first
// `need` keys under the column row's bound to that row's shortlist, where distance.wgsl's
// `append_to_columns` would have (the distance kernel appends none for such a tile). A
// column's run then holds its keys in (key, row) order: no key past the `need`-th can be among
// the column row's best. `order_row_keys` restores the key order, keyed by row, for the rows'
// sort.

struct Params {
    rows: u32,
    cols: u32,
    in_stride: u32,  // the distance tile's row stride
    col_base: u32,   // global index of the tile's first column
    need: u32,
    out_stride: u32, // row stride of the output, in pairs
    out_offset: u32, // first pair of the output region (0: the running lists)
    groups_x: u32,
    row_base: u32,   // global index of the tile's first row (the column side's payloads)
    column_end: u32, // columns below this global index take keys into their shortlists
    column_cap: u32, // pairs per row of the shortlists
    column_lists: u32, // shortlist slot of the tile's first column (see distance.wgsl)
}

const NONE: u32 = 0xffffffffu;
const INF_BITS: u32 = 0x7f800000u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dist: array<f32>;
@group(0) @binding(2) var<storage, read_write> keys: array<u32>;
@group(0) @binding(3) var<storage, read_write> positions: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec2<u32>>;
// Per row: (corpus index to exclude, bits of the shortlist bound); see distance.wgsl.
@group(0) @binding(5) var<storage, read_write> row_state: array<vec2<u32>>;
// The column side's (a layout of its own, bound from row 0): the key-sorted positions, and
// the shortlist slots.
@group(0) @binding(6) var<storage, read_write> key_order: array<u32>;
@group(0) @binding(7) var<storage, read_write> shortlist_len: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> shortlist: array<vec2<u32>>;

fn pair_index(lid: u32, wid: vec3<u32>) -> u32 {
    return (wid.x + wid.y * p.groups_x) * 256u + lid;
}

@compute @workgroup_size(256)
fn tile_pairs(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = pair_index(lid, wid);
    if (i >= p.rows * p.cols) {
        return;
    }
    let row = i / p.cols;
    keys[i] = bitcast<u32>(dist[row * p.in_stride + i - row * p.cols]);
    positions[i] = i;
}

@compute @workgroup_size(256)
fn row_keys(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = pair_index(lid, wid);
    if (i >= p.rows * p.cols) {
        return;
    }
    keys[i] = positions[i] / p.cols;
}

fn pair_at(row: u32, j: u32) -> vec2<u32> {
    if (j >= p.cols) {
        return vec2<u32>(INF_BITS, NONE);
    }
    let col = positions[row * p.cols + j] - row * p.cols;
    return vec2<u32>(bitcast<u32>(dist[row * p.in_stride + col]), p.col_base + col);
}

// One workgroup a row.
@compute @workgroup_size(256)
fn take_rows(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x + wid.y * p.groups_x;
    if (row >= p.rows) {
        return;
    }
    let out_base = row * p.out_stride + p.out_offset;
    for (var j = lid; j < p.need; j += 256u) {
        out[out_base + j] = pair_at(row, j);
    }
    if (p.out_offset == 0u && lid == 0u) {
        // The running list is complete: its largest key bounds the next tile's shortlist.
        row_state[row].y = pair_at(row, p.need - 1u).x;
    }
}

@compute @workgroup_size(256)
fn column_keys(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = pair_index(lid, wid);
    if (i >= p.rows * p.cols) {
        return;
    }
    let position = positions[i];
    key_order[i] = position;
    keys[i] = position % p.cols;
}

// One workgroup a column: after the sort by column, column c's pairs are c rows .. c rows +
// rows, its keys in (key, row) order.
@compute @workgroup_size(256)
fn take_columns(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let col = wid.x + wid.y * p.groups_x;
    let global = p.col_base + col;
    if (col >= p.cols || global >= p.column_end) {
        return;
    }
    let bound = bitcast<f32>(row_state[global].y);
    for (var j = lid; j < min(p.need, p.rows); j += 256u) {
        let row = positions[col * p.rows + j] / p.cols;
        let key = dist[row * p.in_stride + col];
        if (key < bound) {
            let list = p.column_lists + col;
            let slot = atomicAdd(&shortlist_len[list], 1u);
            if (slot < p.column_cap) {
                shortlist[list * p.column_cap + slot] = vec2<u32>(bitcast<u32>(key), p.row_base + row);
            }
        }
    }
}

@compute @workgroup_size(256)
fn order_row_keys(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = pair_index(lid, wid);
    if (i >= p.rows * p.cols) {
        return;
    }
    let position = key_order[i];
    positions[i] = position;
    keys[i] = position / p.cols;
}
