// Distance tile D[i, j] between prepared query rows and prepared corpus rows, as norms plus
// a matrix product: a register-blocked GEMM of Q (BM x dim) by C^T (dim x BN) per workgroup.
//
// Each invocation owns an 8 x 8 block of outputs, split as two 4-row groups BM/2 apart and
// two 4-column groups BN/2 apart, so that neighbouring invocations read neighbouring vec4s of
// workgroup memory. Operands are staged BK deep, transposed, as vec4s of four rows (or
// columns) at one depth: each invocation loads 4 x 4 blocks (four rows, four depths) with
// vec4 reads from storage, transposes them in registers, and prefetches the next slice's
// blocks while the current slice is multiplied. Per depth an invocation reads 4 vec4s of
// workgroup memory and does 64 fused multiply-adds.
//
// Tile shapes are override constants (BM and BN multiples of 8, BK a multiple of 4); the
// 8 x 8 block per invocation is fixed because register arrays need constant sizes. The tiles'
// rows in workgroup memory are padded by one vec4 (QS, CS): the transposed stores of four
// depths of one row then fall on two banks' worth of addresses instead of one.
//
// The epilogue turns dot products into ascending ranking keys:
//   mode 0 (euclidean family): |q|^2 + |c|^2 - 2 q.c
//   mode 1 (cosine, correlation on unit rows): 1 - q.c
//   mode 2 (inner product, larger is nearer): -q.c
// and writes +inf where the corpus row is the query itself (kNN graph without self).
//
// Shortlist (shortlist_cap > 0, every distance tile after a query tile's first, or every one
// where the rows start with bounds from the host): each row carries a bound, the largest key
// of its running candidate list or the host's bound. A key below it is also
// appended to the row's shortlist, so that the selection reads a few dozen pairs instead of
// the whole row. A row whose shortlist overflows is selected from the dense tile as before,
// except in a sparse tile (out_stride 0), which stores no dense keys: there the merge marks
// such a row incomplete.
//
// Symmetric blocks (a graph, column_end > 0): the query rows are corpus rows row_base.., and
// row_state is bound for every corpus row. A key is also the key of the transposed pair, so a
// key below a column row's bound (columns before column_end, rows of earlier query tiles whose
// lists are complete up to there) is appended to that column row's shortlist too. Keys of
// (x, y) and (y, x) are bitwise equal: the same fused multiply-adds in the same order, and
// norms that commute. A shortlist lives only until its tile's keys are merged, so shortlists
// are slots, not rows: query row r's is slot r, and the tile's columns' follow from
// column_lists.
//
// Filtered columns (a pair of blocks searched one way, `column_end` > 0 outside a symmetric
// sweep): the corpus rows are another block's, with bounds from lists the host holds, at
// row_state[column_state + column]; their lists are kept across the whole search, so
// column_lists is chosen per tile such that each column row appends to a list of its own.
//
// Publishing (shaders/distance_publish.wgsl, a module of its own): the ranked answers of the
// query tile before this one are copied from GPU memory into the mapped read-back buffer by
// workgroups interleaved with the GEMM's. wgpu has one queue, and its barriers make every
// dispatch wait for all earlier work, so a copy of its own would hold the GPU while the
// answers cross PCIe; spread over the dispatch, the transfer runs under the arithmetic. The
// plain module runs every workgroup as a tile (`publishes_instead`, `gemm_tile` below).

struct Params {
    q_rows: u32,     // valid query rows in this tile
    c_rows: u32,     // valid corpus rows in this tile
    dim4: u32,       // vec4s per prepared row
    c_offset: u32,   // first corpus row of the tile within the corpus buffer
    col_base: u32,   // global corpus index of the tile's first row
    out_stride: u32, // row stride of the distance tile; 0: a sparse tile, keys only to shortlists
    mode: u32,
    groups_x: u32,
    shortlist_cap: u32, // pairs per row of the query rows' shortlists; 0: none for this tile
    row_base: u32,      // index of the tile's first query row in row_state and the shortlists
    column_end: u32,    // columns below this global index also feed their own shortlists
    column_cap: u32,    // pairs per row of the column rows' shortlists
    publish_len: u32,   // vec4s of answers to publish (see above); 0: none
    query_first: u32,   // index of the tile's first query row: what column rows list
    column_lists: u32,  // shortlist slot of the tile's first column (symmetric blocks)
    column_state: u32,  // row_state index of global column 0 (for its bound)
}

override BM: u32 = 128u;
override BN: u32 = 128u;
override BK: u32 = 16u;
// Row strides of the workgroup tiles (see above).
override QS: u32 = BM / 4u + 1u;
override CS: u32 = BN / 4u + 1u;
override WG: u32 = (BM / 8u) * (BN / 8u);
// 4 x 4 blocks per slice: BM / 4 x BK / 4 of queries, then BN / 4 x BK / 4 of corpus.
override Q_BLOCKS: u32 = (BM / 4u) * (BK / 4u);
override BLOCKS: u32 = Q_BLOCKS + (BN / 4u) * (BK / 4u);

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> corpus: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> q_norms: array<f32>;
@group(0) @binding(4) var<storage, read> c_norms: array<f32>;
// Per row (from row_base for query rows): (corpus index to exclude, bits of the shortlist bound).
@group(0) @binding(5) var<storage, read> row_state: array<vec2<u32>>;
@group(0) @binding(6) var<storage, read_write> dist: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> shortlist_len: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> shortlist: array<vec2<u32>>;

// q_tile[k * QS + m / 4] holds query rows m..m+3 at depth k of the current slice.
var<workgroup> q_tile: array<vec4<f32>, BK * QS>;
var<workgroup> c_tile: array<vec4<f32>, BK * CS>;

// Four rows (or corpus rows) at four depths each.
struct Block {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

fn load_vec4(is_query: bool, row: u32, k4: u32) -> vec4<f32> {
    if (k4 >= params.dim4) {
        return vec4<f32>(0.0);
    }
    if (is_query) {
        if (row < params.q_rows) {
            return queries[row * params.dim4 + k4];
        }
    } else if (row < params.c_rows) {
        return corpus[(params.c_offset + row) * params.dim4 + k4];
    }
    return vec4<f32>(0.0);
}

// Loads 4 x 4 block `b` of the slice starting at vec4 depth k4. Neighbouring blocks are
// neighbouring depths of the same four rows, so that the BK / 4 invocations sharing rows read
// whole 16 * BK-byte runs of each row rather than 16 bytes a row apart.
fn load_block(b: u32, k4: u32, row0: u32, col0: u32) -> Block {
    let is_query = b < Q_BLOCKS;
    let local = select(b - Q_BLOCKS, b, is_query);
    let m = select(col0, row0, is_query) + (local / (BK / 4u)) * 4u;
    let k = k4 + local % (BK / 4u);
    return Block(
        load_vec4(is_query, m, k),
        load_vec4(is_query, m + 1u, k),
        load_vec4(is_query, m + 2u, k),
        load_vec4(is_query, m + 3u, k),
    );
}

// Writes block `b` transposed: one vec4 of four rows per depth.
fn store_block(b: u32, blk: Block) {
    let is_query = b < Q_BLOCKS;
    let local = select(b - Q_BLOCKS, b, is_query);
    let m4 = local / (BK / 4u);
    let k = (local % (BK / 4u)) * 4u;
    let t0 = vec4<f32>(blk.r0.x, blk.r1.x, blk.r2.x, blk.r3.x);
    let t1 = vec4<f32>(blk.r0.y, blk.r1.y, blk.r2.y, blk.r3.y);
    let t2 = vec4<f32>(blk.r0.z, blk.r1.z, blk.r2.z, blk.r3.z);
    let t3 = vec4<f32>(blk.r0.w, blk.r1.w, blk.r2.w, blk.r3.w);
    if (is_query) {
        q_tile[k * QS + m4] = t0;
        q_tile[(k + 1u) * QS + m4] = t1;
        q_tile[(k + 2u) * QS + m4] = t2;
        q_tile[(k + 3u) * QS + m4] = t3;
    } else {
        c_tile[k * CS + m4] = t0;
        c_tile[(k + 1u) * CS + m4] = t1;
        c_tile[(k + 2u) * CS + m4] = t2;
        c_tile[(k + 3u) * CS + m4] = t3;
    }
}

fn keys4(mode: u32, qn: f32, cn: vec4<f32>, dots: vec4<f32>) -> vec4<f32> {
    if (mode == 0u) {
        return vec4<f32>(qn) + cn - 2.0 * dots;
    }
    if (mode == 1u) {
        return vec4<f32>(1.0) - dots;
    }
    return -dots;
}

// Norms of columns c..c+3 of the tile, +inf past its end so that those keys are never kept.
fn column_norms(c: u32) -> vec4<f32> {
    var cn = vec4<f32>(bitcast<f32>(0x7f800000u));
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        if (c + j < params.c_rows) {
            cn[j] = c_norms[params.c_offset + c + j];
        }
    }
    return cn;
}

// Shortlist bounds of columns c..c+3 as rows of symmetric blocks; -inf where a column takes
// nothing: past the tile's end, or not below column_end.
fn column_bounds(c: u32) -> vec4<f32> {
    var cb = vec4<f32>(bitcast<f32>(0xff800000u));
    // unroll(j, 4u)
    for (var j = 0u; j < 4u; j++) {
        let global = params.col_base + c + j;
        if (c + j < params.c_rows && global < params.column_end) {
            cb[j] = bitcast<f32>(row_state[params.column_state + global].y);
        }
    }
    return cb;
}

// Appends the keys of one query row that fall under their column rows' bounds to those rows'
// shortlists (symmetric blocks).
fn append_to_columns(r: u32, global: vec4<u32>, v: vec4<f32>, cb: vec4<f32>) {
    if (any(v < cb)) {
        // unroll(j, 4u)
        for (var j = 0u; j < 4u; j++) {
            if (v[j] < cb[j]) {
                let list = params.column_lists + global[j] - params.col_base;
                let slot = atomicAdd(&shortlist_len[list], 1u);
                if (slot < params.column_cap) {
                    shortlist[list * params.column_cap + slot] = vec2<u32>(bitcast<u32>(v[j]), params.query_first + r);
                }
            }
        }
    }
}

// Epilogue for one row: columns c..c+3 from `d0` (norms `cn0`, column bounds `cb0`),
// c+BN/2..c+BN/2+3 from `d1` (`cn1`, `cb1`). Whole vec4s are stored: the tile's row stride is
// a multiple of 4 and the select never reads past the tile's columns.
fn store_row(
    r: u32,
    c: u32,
    d0: vec4<f32>,
    d1: vec4<f32>,
    cn0: vec4<f32>,
    cn1: vec4<f32>,
    cb0: vec4<f32>,
    cb1: vec4<f32>,
) {
    if (r >= params.q_rows) {
        return;
    }
    let qn = q_norms[r];
    let state = row_state[params.row_base + r];
    let list = r;
    let own = state.x;
    let bound = bitcast<f32>(state.y);
    let cap = params.shortlist_cap;
    let inf = vec4<f32>(bitcast<f32>(0x7f800000u));
    // Unrolled, as every loop marked so: components of a vector indexed by a loop variable
    // may otherwise live in local memory.
    // unroll(half, 2u)
    for (var half = 0u; half < 2u; half++) {
        let col = c + half * (BN / 2u);
        if (col < params.c_rows) {
            let global = vec4<u32>(params.col_base + col) + vec4<u32>(0u, 1u, 2u, 3u);
            var v = keys4(params.mode, qn, select(cn0, cn1, half == 1u), select(d0, d1, half == 1u));
            // Past the tile's end, and the query itself in a graph without self.
            v = select(v, inf, vec4<u32>(col) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(params.c_rows));
            v = select(v, inf, global == vec4<u32>(own));
            if (params.out_stride != 0u) {
                dist[(r * params.out_stride + col) / 4u] = v;
            }
            if (cap != 0u && any(v < vec4<f32>(bound))) {
                // unroll(j, 4u)
                for (var j = 0u; j < 4u; j++) {
                    if (v[j] < bound) {
                        let slot = atomicAdd(&shortlist_len[list], 1u);
                        if (slot < cap) {
                            shortlist[list * cap + slot] = vec2<u32>(bitcast<u32>(v[j]), global[j]);
                        }
                    }
                }
            }
            if (params.column_end > params.col_base) {
                append_to_columns(r, global, v, select(cb0, cb1, half == 1u));
            }
        }
    }
}

@compute @workgroup_size(WG)
fn distance_tile(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let group = wid.x + wid.y * params.groups_x;
    if (publishes_instead(group, lid)) {
        return;
    }
    let tiles_n = (params.c_rows + BN - 1u) / BN;
    let tile = gemm_tile(group);
    let row0 = (tile / tiles_n) * BM;
    let col0 = (tile % tiles_n) * BN;
    if (row0 >= params.q_rows) {
        return;
    }
    let tx = lid % (BN / 8u);
    let ty = lid / (BN / 8u);
    let bk4 = BK / 4u;
    // Each invocation loads block `lid` and, if there are more blocks than invocations,
    // block `lid + WG` too.
    let b_first = lid;
    let b_second = lid + WG;
    let has_second = b_second < BLOCKS;

    var r0c0 = vec4<f32>(0.0);
    var r0c1 = vec4<f32>(0.0);
    var r1c0 = vec4<f32>(0.0);
    var r1c1 = vec4<f32>(0.0);
    var r2c0 = vec4<f32>(0.0);
    var r2c1 = vec4<f32>(0.0);
    var r3c0 = vec4<f32>(0.0);
    var r3c1 = vec4<f32>(0.0);
    var r4c0 = vec4<f32>(0.0);
    var r4c1 = vec4<f32>(0.0);
    var r5c0 = vec4<f32>(0.0);
    var r5c1 = vec4<f32>(0.0);
    var r6c0 = vec4<f32>(0.0);
    var r6c1 = vec4<f32>(0.0);
    var r7c0 = vec4<f32>(0.0);
    var r7c1 = vec4<f32>(0.0);

    var next0 = load_block(b_first, 0u, row0, col0);
    var next1 = next0;
    if (has_second) {
        next1 = load_block(b_second, 0u, row0, col0);
    }
    for (var k4 = 0u; k4 < params.dim4; k4 += bk4) {
        if (b_first < BLOCKS) {
            store_block(b_first, next0);
        }
        if (has_second) {
            store_block(b_second, next1);
        }
        workgroupBarrier();
        // Prefetch the next slice while this one is multiplied.
        if (k4 + bk4 < params.dim4) {
            if (b_first < BLOCKS) {
                next0 = load_block(b_first, k4 + bk4, row0, col0);
            }
            if (has_second) {
                next1 = load_block(b_second, k4 + bk4, row0, col0);
            }
        }
        // Unrolled when the module is built (`shaders::distance`): each copy binds `k` as a
        // constant. The NVIDIA compiler keeps this loop rolled otherwise, which is slower
        // (notes/distance.md, version 7b).
        // unroll(k, BK)
        for (var k = 0u; k < BK; k++) {
            let a0 = q_tile[k * QS + ty];
            let a1 = q_tile[k * QS + ty + BM / 8u];
            let b0 = c_tile[k * CS + tx];
            let b1 = c_tile[k * CS + tx + BN / 8u];
            r0c0 = fma(vec4<f32>(a0.x), b0, r0c0);
            r0c1 = fma(vec4<f32>(a0.x), b1, r0c1);
            r1c0 = fma(vec4<f32>(a0.y), b0, r1c0);
            r1c1 = fma(vec4<f32>(a0.y), b1, r1c1);
            r2c0 = fma(vec4<f32>(a0.z), b0, r2c0);
            r2c1 = fma(vec4<f32>(a0.z), b1, r2c1);
            r3c0 = fma(vec4<f32>(a0.w), b0, r3c0);
            r3c1 = fma(vec4<f32>(a0.w), b1, r3c1);
            r4c0 = fma(vec4<f32>(a1.x), b0, r4c0);
            r4c1 = fma(vec4<f32>(a1.x), b1, r4c1);
            r5c0 = fma(vec4<f32>(a1.y), b0, r5c0);
            r5c1 = fma(vec4<f32>(a1.y), b1, r5c1);
            r6c0 = fma(vec4<f32>(a1.z), b0, r6c0);
            r6c1 = fma(vec4<f32>(a1.z), b1, r6c1);
            r7c0 = fma(vec4<f32>(a1.w), b0, r7c0);
            r7c1 = fma(vec4<f32>(a1.w), b1, r7c1);
        }
        workgroupBarrier();
    }

    // Each invocation's eight columns are the same for all its rows.
    let cn0 = column_norms(col0 + tx * 4u);
    let cn1 = column_norms(col0 + tx * 4u + BN / 2u);
    var cb0 = vec4<f32>(bitcast<f32>(0xff800000u));
    var cb1 = cb0;
    if (params.column_end > params.col_base) {
        cb0 = column_bounds(col0 + tx * 4u);
        cb1 = column_bounds(col0 + tx * 4u + BN / 2u);
    }
    let c = col0 + tx * 4u;
    store_row(row0 + ty * 4u + 0u + 0u * (BM / 2u), c, r0c0, r0c1, cn0, cn1, cb0, cb1);
    store_row(row0 + ty * 4u + 1u + 0u * (BM / 2u), c, r1c0, r1c1, cn0, cn1, cb0, cb1);
    store_row(row0 + ty * 4u + 2u + 0u * (BM / 2u), c, r2c0, r2c1, cn0, cn1, cb0, cb1);
    store_row(row0 + ty * 4u + 3u + 0u * (BM / 2u), c, r3c0, r3c1, cn0, cn1, cb0, cb1);
    store_row(row0 + ty * 4u + 0u + 1u * (BM / 2u), c, r4c0, r4c1, cn0, cn1, cb0, cb1);
    store_row(row0 + ty * 4u + 1u + 1u * (BM / 2u), c, r5c0, r5c1, cn0, cn1, cb0, cb1);
    store_row(row0 + ty * 4u + 2u + 1u * (BM / 2u), c, r6c0, r6c1, cn0, cn1, cb0, cb1);
    store_row(row0 + ty * 4u + 3u + 1u * (BM / 2u), c, r7c0, r7c1, cn0, cn1, cb0, cb1);
}
