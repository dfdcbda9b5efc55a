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
// global atomic, and every invocation writes its keys at slots taken one key at a time from
// those ranges (workgroup atomics). Keys past a list's cap are counted but not written. Shares
// distance_append.wgsl's helpers with the one-sided forms.
//
// Measured on an H100 (notes/select.md, "The two-sided appending epilogue"): 0.65 of the
// dense kernel's speed at 2% of the keys kept on each side, where the one-sided forms run at
// 0.85-0.90. Per-column state costs the GEMM even where it is never used: the forms tried
// that held the columns' bounds in registers ran at 0.57-0.62.

// Per row and per column of the tile: kept keys, then (after the reservation) the next free
// slot of that list.
var<workgroup> row_kept: array<atomic<u32>, BM>;
var<workgroup> col_kept: array<atomic<u32>, BN>;
// The columns' bounds (-inf where a column takes nothing) and squared norms (+inf past the
// tile), read where used rather than held in registers beside the accumulators: the one-sided
// subgroup form with eight column bounds in registers ran a fifth slower even where every
// bound was -inf.
var<workgroup> col_bound: array<f32, BN>;
var<workgroup> col_norm: array<f32, BN>;

fn column_norms4(lc: u32) -> vec4<f32> {
    return vec4<f32>(col_norm[lc], col_norm[lc + 1u], col_norm[lc + 2u], col_norm[lc + 3u]);
}

// Keys of row r at columns c..c+3, +inf for rows past the tile, which neither side keeps.
fn side_keys(r: u32, c: u32, d: vec4<f32>, cn: vec4<f32>) -> vec4<f32> {
    if (r >= params.q_rows) {
        return vec4<f32>(bitcast<f32>(0x7f800000u));
    }
    return append_keys(r, c, d, cn);
}

// The bound of column c as a row of a later tile; -inf where it takes nothing: past the
// tile's end, or before column_begin.
fn later_bound(c: u32) -> f32 {
    let global = params.col_base + c;
    if (c < params.c_rows && global >= params.column_begin) {
        return bitcast<f32>(row_state[global].y);
    }
    return bitcast<f32>(0xff800000u);
}

// The bounds of local columns lc..lc+3 from workgroup memory.
fn column_bounds4(lc: u32) -> vec4<f32> {
    return vec4<f32>(col_bound[lc], col_bound[lc + 1u], col_bound[lc + 2u], col_bound[lc + 3u]);
}

fn below4(v: vec4<f32>, bound: vec4<f32>) -> vec4<u32> {
    return select(vec4<u32>(0u), vec4<u32>(1u), v < bound);
}

fn add_row(m: u32, n: u32) {
    if (n > 0u) {
        atomicAdd(&row_kept[m], n);
    }
}

fn add_columns(c: u32, n: vec4<u32>) {
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        if (n[j] > 0u) {
            atomicAdd(&col_kept[c + j], n[j]);
        }
    }
}

// One row's keys at columns c..c+3 (`lc` local): each under the row's bound to the row's list
// (local row `lm`), each under its column's bound to that column row's list, at slots taken
// one key at a time from the workgroup's ranges.
fn write_four(r: u32, lm: u32, c: u32, lc: u32, v: vec4<f32>, bound: f32) {
    let cap = params.shortlist_cap;
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        if (v[j] < bound) {
            let slot = atomicAdd(&row_kept[lm], 1u);
            if (slot < cap) {
                shortlist[(params.row_base + r) * cap + slot] = vec2<u32>(bitcast<u32>(v[j]), params.col_base + c + j);
            }
        }
        if (v[j] < col_bound[lc + j]) {
            let slot = atomicAdd(&col_kept[lc + j], 1u);
            if (slot < cap) {
                shortlist[(params.col_base + c + j) * cap + slot] = vec2<u32>(bitcast<u32>(v[j]), params.row_base + r);
            }
        }
    }
}

// Phase 1 for one row and four columns c..c+3: counts the row's kept keys in workgroup
// memory (local row `lm`) and returns the columns' counts plus `n`.
fn count_four(lm: u32, r: u32, c: u32, lc: u32, d: vec4<f32>, cn: vec4<f32>, n: vec4<u32>) -> vec4<u32> {
    let v = side_keys(r, c, d, cn);
    add_row(lm, count_below(v, append_bound(r)));
    return n + below4(v, column_bounds4(lc));
}

// Phases 1 and 3 for the invocation's four columns c..c+3 (local `lc`) of its eight rows from
// `m` (local `lm`), with those rows' accumulators for these columns: one half of the
// invocation's columns at a time.
fn count_half(lm: u32, m: u32, c: u32, lc: u32, d0: vec4<f32>, d1: vec4<f32>, d2: vec4<f32>, d3: vec4<f32>,
              d4: vec4<f32>, d5: vec4<f32>, d6: vec4<f32>, d7: vec4<f32>) {
    let h = BM / 2u;
    let cn = column_norms4(lc);
    var n = count_four(lm, m, c, lc, d0, cn, vec4<u32>(0u));
    n = count_four(lm + 1u, m + 1u, c, lc, d1, cn, n);
    n = count_four(lm + 2u, m + 2u, c, lc, d2, cn, n);
    n = count_four(lm + 3u, m + 3u, c, lc, d3, cn, n);
    n = count_four(lm + h, m + h, c, lc, d4, cn, n);
    n = count_four(lm + h + 1u, m + h + 1u, c, lc, d5, cn, n);
    n = count_four(lm + h + 2u, m + h + 2u, c, lc, d6, cn, n);
    n = count_four(lm + h + 3u, m + h + 3u, c, lc, d7, cn, n);
    add_columns(lc, n);
}

fn write_half(lm: u32, m: u32, c: u32, lc: u32, d0: vec4<f32>, d1: vec4<f32>, d2: vec4<f32>, d3: vec4<f32>,
              d4: vec4<f32>, d5: vec4<f32>, d6: vec4<f32>, d7: vec4<f32>) {
    let h = BM / 2u;
    let cn = column_norms4(lc);
    write_four(m, lm, c, lc, side_keys(m, c, d0, cn), append_bound(m));
    write_four(m + 1u, lm + 1u, c, lc, side_keys(m + 1u, c, d1, cn), append_bound(m + 1u));
    write_four(m + 2u, lm + 2u, c, lc, side_keys(m + 2u, c, d2, cn), append_bound(m + 2u));
    write_four(m + 3u, lm + 3u, c, lc, side_keys(m + 3u, c, d3, cn), append_bound(m + 3u));
    write_four(m + h, lm + h, c, lc, side_keys(m + h, c, d4, cn), append_bound(m + h));
    write_four(m + h + 1u, lm + h + 1u, c, lc, side_keys(m + h + 1u, c, d5, cn), append_bound(m + h + 1u));
    write_four(m + h + 2u, lm + h + 2u, c, lc, side_keys(m + h + 2u, c, d6, cn), append_bound(m + h + 2u));
    write_four(m + h + 3u, lm + h + 3u, c, lc, side_keys(m + h + 3u, c, d7, cn), append_bound(m + h + 3u));
}

// Nothing but the accumulators lives across the barriers: keys are computed from them in each
// phase, and no invocation holds offsets into the ranges.
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
        col_bound[lid] = later_bound(col0 + lid);
        let past = col0 + lid >= params.c_rows;
        let norm = c_norms[params.c_offset + min(col0 + lid, params.c_rows - 1u)];
        col_norm[lid] = select(norm, bitcast<f32>(0x7f800000u), past);
    }
    workgroupBarrier();
    let c = col0 + tx * 4u;
    let m = row0 + ty * 4u;
    let lm = ty * 4u;
    let lc = tx * 4u;
    let c1 = c + BN / 2u;
    let lc1 = lc + BN / 2u;
    count_half(lm, m, c, lc, r0c0, r1c0, r2c0, r3c0, r4c0, r5c0, r6c0, r7c0);
    count_half(lm, m, c1, lc1, r0c1, r1c1, r2c1, r3c1, r4c1, r5c1, r6c1, r7c1);
    workgroupBarrier();
    // The workgroup's range of each list: its counter becomes the range's next free slot.
    if (lid < BM) {
        let kept = atomicLoad(&row_kept[lid]);
        if (kept > 0u) {
            atomicStore(&row_kept[lid], atomicAdd(&shortlist_len[params.row_base + row0 + lid], kept));
        }
    } else if (lid - BM < BN) {
        let l = lid - BM;
        let kept = atomicLoad(&col_kept[l]);
        if (kept > 0u) {
            atomicStore(&col_kept[l], atomicAdd(&shortlist_len[params.col_base + col0 + l], kept));
        }
    }
    workgroupBarrier();
    write_half(lm, m, c, lc, r0c0, r1c0, r2c0, r3c0, r4c0, r5c0, r6c0, r7c0);
    write_half(lm, m, c1, lc1, r0c1, r1c1, r2c1, r3c1, r4c1, r5c1, r6c1, r7c1);
}
