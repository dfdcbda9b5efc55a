// The two-sided filter of a dense block (bounded sweeps, src/gpu/session/bounded.rs), a kernel
// of its own that reads the block the plain distance kernel wrote. Each key d(i, j) under row
// i's bound goes to row i's list, and under column row j's bound (for global columns from
// column_begin on) to row j's list. Why not in the GEMM's epilogue: every form of such an
// epilogue cost the GEMM a third of its speed or more, as the GEMM leaves no registers to spare
// (notes/experiments.md); this kernel only moves memory.
//
// A workgroup takes a strip of STRIP rows x WIDTH columns, an invocation per column, reading
// the strip row by row (each row's WIDTH keys in one run) into registers, once. The
// column side counts in a register, the row side in workgroup memory where a key is kept (a
// few percent of keys); one global atomic per row and per column with keys reserves the
// strip's range of each list, and the keys are written from the registers. Keys past a list's
// cap are counted but not written.

struct Params {
    rows: u32,         // rows of the block
    cols: u32,         // columns of the block
    stride: u32,       // row stride of the block
    row_base: u32,     // list and state index of the block's first row
    col_base: u32,     // list and state index (and global index) of the block's first column
    column_begin: u32, // columns from this global index on also feed their own lists
    cap: u32,          // pairs a list
    groups_x: u32,
}

// STRIP (rows a workgroup takes) and WIDTH (its columns and invocations) are constants the
// module is built with (`shaders::filter_two_sided`, from `FILTER_STRIP` in src/gpu/mod.rs,
// which the host's dispatch sizes use too).

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> block: array<f32>;
// Per row: (index to exclude, bits of the row's bound); the block's rows from row_base, its
// columns' rows from col_base.
@group(0) @binding(2) var<storage, read> row_state: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> list_len: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> lists: array<vec2<u32>>;

var<workgroup> row_bound: array<f32, STRIP>;
// Kept keys per row of the strip, then (after the reservation) the next free slot of its list.
var<workgroup> row_kept: array<atomic<u32>, STRIP>;

@compute @workgroup_size(WIDTH)
fn filter_block(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let group = wid.x + wid.y * params.groups_x;
    let strips_across = (params.cols + WIDTH - 1u) / WIDTH;
    let r0 = (group / strips_across) * STRIP;
    let c0 = (group % strips_across) * WIDTH;
    if (r0 >= params.rows) {
        return;
    }
    let rows = min(STRIP, params.rows - r0);
    if (lid < STRIP) {
        atomicStore(&row_kept[lid], 0u);
        var bound = bitcast<f32>(0xff800000u);
        if (lid < rows) {
            bound = bitcast<f32>(row_state[params.row_base + r0 + lid].y);
        }
        row_bound[lid] = bound;
    }
    let col = c0 + lid;
    let global = params.col_base + col;
    let inside = col < params.cols;
    var column_bound = bitcast<f32>(0xff800000u);
    if (inside && global >= params.column_begin) {
        column_bound = bitcast<f32>(row_state[global].y);
    }
    let first = r0 * params.stride + col;
    workgroupBarrier();

    // The strip's keys of this column, +inf past the block; indexed by constants only (the
    // loops are unrolled when the module is built), so they stay in registers.
    var v: array<f32, STRIP>;
    // unroll(i, STRIP)
    for (var i = 0u; i < STRIP; i++) {
        v[i] = bitcast<f32>(0x7f800000u);
        if (inside && i < rows) {
            v[i] = block[first + i * params.stride];
        }
    }
    var kept = 0u;
    // unroll(i, STRIP)
    for (var i = 0u; i < STRIP; i++) {
        kept += select(0u, 1u, v[i] < column_bound);
        if (v[i] < row_bound[i]) {
            atomicAdd(&row_kept[i], 1u);
        }
    }
    workgroupBarrier();
    if (lid < STRIP) {
        let n = atomicLoad(&row_kept[lid]);
        if (n > 0u) {
            atomicStore(&row_kept[lid], atomicAdd(&list_len[params.row_base + r0 + lid], n));
        }
    }
    var slot = 0u;
    if (kept > 0u) {
        slot = atomicAdd(&list_len[global], kept);
    }
    workgroupBarrier();

    let cap = params.cap;
    // unroll(i, STRIP)
    for (var i = 0u; i < STRIP; i++) {
        if (v[i] < row_bound[i]) {
            let s = atomicAdd(&row_kept[i], 1u);
            if (s < cap) {
                lists[(params.row_base + r0 + i) * cap + s] = vec2<u32>(bitcast<u32>(v[i]), global);
            }
        }
        if (v[i] < column_bound) {
            if (slot < cap) {
                lists[global * cap + slot] = vec2<u32>(bitcast<u32>(v[i]), params.row_base + r0 + i);
            }
            slot += 1u;
        }
    }
}
