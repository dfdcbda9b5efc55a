// The two-sided appending epilogue (`shaders::distance_appending` with `AppendForm::TwoSided`;
// so far measured by `knng bench --what distance --keep F --two-sided` only). A block of a
// symmetric sweep holds the key of (i, j) and, bitwise equal, that of (j, i) (distance.wgsl,
// "Symmetric blocks"). With every row's bound known before the sweep, a key under row i's
// bound goes to row i's list (the row side), and a key under column row j's bound to row j's
// list (the column side, for global columns from column_begin on: the rows of later query
// tiles). Both are rows of the same lists (shortlist_len, shortlist; shortlist_cap pairs a
// row, indexed by global row), so a row's list gathers its keys from its own blocks and from
// the earlier tiles' blocks that hold it as a column.
//
// Each side counts its kept keys per row and per column in workgroup memory; then one
// invocation per row and one per column reserves the workgroup's range of that list with one
// global atomic, and every invocation writes its keys from registers (computed once, in place
// of the accumulators). Keys past a list's cap are counted but not written. Shares
// distance_append.wgsl's helpers with the one-sided forms.

var<workgroup> row_kept: array<atomic<u32>, BM>;
var<workgroup> col_kept: array<atomic<u32>, BN>;
var<workgroup> row_first: array<u32, BM>;
var<workgroup> col_first: array<u32, BN>;

// Keys of row r at columns c..c+3, +inf for rows past the tile, which neither side keeps.
fn side_keys(r: u32, c: u32, d: vec4<f32>, cn: vec4<f32>) -> vec4<f32> {
    if (r >= params.q_rows) {
        return vec4<f32>(bitcast<f32>(0x7f800000u));
    }
    return append_keys(r, c, d, cn);
}

// Bounds of columns c..c+3 as rows of later tiles; -inf where a column takes nothing: past
// the tile's end, or before column_begin.
fn later_bounds(c: u32) -> vec4<f32> {
    var cb = vec4<f32>(bitcast<f32>(0xff800000u));
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        let global = params.col_base + c + j;
        if (c + j < params.c_rows && global >= params.column_begin) {
            cb[j] = bitcast<f32>(row_state[global].y);
        }
    }
    return cb;
}

fn below4(v: vec4<f32>, bound: vec4<f32>) -> vec4<u32> {
    return select(vec4<u32>(0u), vec4<u32>(1u), v < bound);
}

// This invocation's offset in the workgroup's range of local row m's list.
fn row_offset(m: u32, n: u32) -> u32 {
    if (n == 0u) {
        return 0u;
    }
    return atomicAdd(&row_kept[m], n);
}

// This invocation's offsets in the workgroup's ranges of local columns c..c+3's lists.
fn column_offsets(c: u32, n: vec4<u32>) -> vec4<u32> {
    var o = vec4<u32>(0u);
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        if (n[j] > 0u) {
            o[j] = atomicAdd(&col_kept[c + j], n[j]);
        }
    }
    return o;
}

// Row side of one row: its eight keys under its bound, from slot `slot` of its list.
fn row_side(r: u32, c: u32, lo: vec4<f32>, hi: vec4<f32>, bound: f32, slot: u32) {
    let next = append_four(r, slot, c, lo, bound);
    append_four(r, next, c + BN / 2u, hi, bound);
}

// Column side of one row's keys at columns c..c+3: each under its column's bound goes to that
// column row's list at the column's next slot. Returns the next slots.
fn column_side(r: u32, c: u32, v: vec4<f32>, cb: vec4<f32>, slots: vec4<u32>) -> vec4<u32> {
    var s = slots;
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        if (v[j] < cb[j]) {
            if (s[j] < params.shortlist_cap) {
                shortlist[(params.col_base + c + j) * params.shortlist_cap + s[j]] =
                    vec2<u32>(bitcast<u32>(v[j]), params.row_base + r);
            }
            s[j] += 1u;
        }
    }
    return s;
}

fn append_tile(
    row0: u32, col0: u32, tx: u32, ty: u32, lid: u32,
    r0c0: vec4<f32>, r0c1: vec4<f32>, r1c0: vec4<f32>, r1c1: vec4<f32>,
    r2c0: vec4<f32>, r2c1: vec4<f32>, r3c0: vec4<f32>, r3c1: vec4<f32>,
    r4c0: vec4<f32>, r4c1: vec4<f32>, r5c0: vec4<f32>, r5c1: vec4<f32>,
    r6c0: vec4<f32>, r6c1: vec4<f32>, r7c0: vec4<f32>, r7c1: vec4<f32>,
) {
    // WG = (BM / 8) (BN / 8) invocations cover BM + BN counters for tiles of 128 x 128.
    if (lid < BM) {
        atomicStore(&row_kept[lid], 0u);
    }
    if (lid < BN) {
        atomicStore(&col_kept[lid], 0u);
    }
    workgroupBarrier();
    let c = col0 + tx * 4u;
    let c1 = c + BN / 2u;
    let m = row0 + ty * 4u;
    let h = BM / 2u;
    let cn0 = column_norms(c);
    let cn1 = column_norms(c1);
    let k0a = side_keys(m, c, r0c0, cn0);
    let k0b = side_keys(m, c1, r0c1, cn1);
    let k1a = side_keys(m + 1u, c, r1c0, cn0);
    let k1b = side_keys(m + 1u, c1, r1c1, cn1);
    let k2a = side_keys(m + 2u, c, r2c0, cn0);
    let k2b = side_keys(m + 2u, c1, r2c1, cn1);
    let k3a = side_keys(m + 3u, c, r3c0, cn0);
    let k3b = side_keys(m + 3u, c1, r3c1, cn1);
    let k4a = side_keys(m + h, c, r4c0, cn0);
    let k4b = side_keys(m + h, c1, r4c1, cn1);
    let k5a = side_keys(m + h + 1u, c, r5c0, cn0);
    let k5b = side_keys(m + h + 1u, c1, r5c1, cn1);
    let k6a = side_keys(m + h + 2u, c, r6c0, cn0);
    let k6b = side_keys(m + h + 2u, c1, r6c1, cn1);
    let k7a = side_keys(m + h + 3u, c, r7c0, cn0);
    let k7b = side_keys(m + h + 3u, c1, r7c1, cn1);
    let b0 = append_bound(m);
    let b1 = append_bound(m + 1u);
    let b2 = append_bound(m + 2u);
    let b3 = append_bound(m + 3u);
    let b4 = append_bound(m + h);
    let b5 = append_bound(m + h + 1u);
    let b6 = append_bound(m + h + 2u);
    let b7 = append_bound(m + h + 3u);
    let cb0 = later_bounds(c);
    let cb1 = later_bounds(c1);

    let lm = ty * 4u;
    let o0 = row_offset(lm, count_below(k0a, b0) + count_below(k0b, b0));
    let o1 = row_offset(lm + 1u, count_below(k1a, b1) + count_below(k1b, b1));
    let o2 = row_offset(lm + 2u, count_below(k2a, b2) + count_below(k2b, b2));
    let o3 = row_offset(lm + 3u, count_below(k3a, b3) + count_below(k3b, b3));
    let o4 = row_offset(lm + h, count_below(k4a, b4) + count_below(k4b, b4));
    let o5 = row_offset(lm + h + 1u, count_below(k5a, b5) + count_below(k5b, b5));
    let o6 = row_offset(lm + h + 2u, count_below(k6a, b6) + count_below(k6b, b6));
    let o7 = row_offset(lm + h + 3u, count_below(k7a, b7) + count_below(k7b, b7));
    let na = below4(k0a, cb0) + below4(k1a, cb0) + below4(k2a, cb0) + below4(k3a, cb0)
        + below4(k4a, cb0) + below4(k5a, cb0) + below4(k6a, cb0) + below4(k7a, cb0);
    let nb = below4(k0b, cb1) + below4(k1b, cb1) + below4(k2b, cb1) + below4(k3b, cb1)
        + below4(k4b, cb1) + below4(k5b, cb1) + below4(k6b, cb1) + below4(k7b, cb1);
    let lc = tx * 4u;
    let oa = column_offsets(lc, na);
    let ob = column_offsets(lc + BN / 2u, nb);
    workgroupBarrier();
    if (lid < BM) {
        let kept = atomicLoad(&row_kept[lid]);
        if (kept > 0u) {
            row_first[lid] = atomicAdd(&shortlist_len[params.row_base + row0 + lid], kept);
        }
    } else if (lid - BM < BN) {
        let l = lid - BM;
        let kept = atomicLoad(&col_kept[l]);
        if (kept > 0u) {
            col_first[l] = atomicAdd(&shortlist_len[params.col_base + col0 + l], kept);
        }
    }
    workgroupBarrier();
    row_side(m, c, k0a, k0b, b0, row_first[lm] + o0);
    row_side(m + 1u, c, k1a, k1b, b1, row_first[lm + 1u] + o1);
    row_side(m + 2u, c, k2a, k2b, b2, row_first[lm + 2u] + o2);
    row_side(m + 3u, c, k3a, k3b, b3, row_first[lm + 3u] + o3);
    row_side(m + h, c, k4a, k4b, b4, row_first[lm + h] + o4);
    row_side(m + h + 1u, c, k5a, k5b, b5, row_first[lm + h + 1u] + o5);
    row_side(m + h + 2u, c, k6a, k6b, b6, row_first[lm + h + 2u] + o6);
    row_side(m + h + 3u, c, k7a, k7b, b7, row_first[lm + h + 3u] + o7);
    if (any(na > vec4<u32>(0u))) {
        var sa = vec4<u32>(col_first[lc], col_first[lc + 1u], col_first[lc + 2u], col_first[lc + 3u]) + oa;
        sa = column_side(m, c, k0a, cb0, sa);
        sa = column_side(m + 1u, c, k1a, cb0, sa);
        sa = column_side(m + 2u, c, k2a, cb0, sa);
        sa = column_side(m + 3u, c, k3a, cb0, sa);
        sa = column_side(m + h, c, k4a, cb0, sa);
        sa = column_side(m + h + 1u, c, k5a, cb0, sa);
        sa = column_side(m + h + 2u, c, k6a, cb0, sa);
        column_side(m + h + 3u, c, k7a, cb0, sa);
    }
    if (any(nb > vec4<u32>(0u))) {
        let l = lc + BN / 2u;
        var sb = vec4<u32>(col_first[l], col_first[l + 1u], col_first[l + 2u], col_first[l + 3u]) + ob;
        sb = column_side(m, c1, k0b, cb1, sb);
        sb = column_side(m + 1u, c1, k1b, cb1, sb);
        sb = column_side(m + 2u, c1, k2b, cb1, sb);
        sb = column_side(m + 3u, c1, k3b, cb1, sb);
        sb = column_side(m + h, c1, k4b, cb1, sb);
        sb = column_side(m + h + 1u, c1, k5b, cb1, sb);
        sb = column_side(m + h + 2u, c1, k6b, cb1, sb);
        column_side(m + h + 3u, c1, k7b, cb1, sb);
    }
}
