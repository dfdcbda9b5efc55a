// Exact float64 ranking keys of every candidate, from the original f32 rows: the re-ranking
// step of the exactness argument (notes/exactness.md), on the GPU so that only keys come back
// instead of every candidate's row being read on the host. Needs SHADER_F64.
//
// This part is shared; the host appends one of two ways of reading rows, each defining the
// row bindings, `row_start`, `partial_sums` and `single_sum`: refine_scalar.wgsl (any length,
// one f32 per load) or refine_vec4.wgsl (lengths a multiple of 4, four vec4 loads of each row in flight).
// Entry points: `exact_keys_wide`, one workgroup per candidate, for long rows;
// `exact_keys_grouped`, `group` invocations per candidate, for rows of a few dozen values; and
// in refine_scalar.wgsl `exact_keys`, one invocation per candidate, for short rows.
// Keys are those of `Metric::rank_key_f64`:
//   mode 0 (euclidean family): sum (x - y)^2
//   mode 1 (cosine):           1 - x.y / (|x| |y|)
//   mode 2 (correlation):      1 - (x - mean x).(y - mean y) / (|x - mean x| |y - mean y|)
//   mode 3 (inner product):    -x.y
// Padding slots (index NONE) get 0 and are ignored by the host. Candidate ids are corpus rows;
// the bound chunk holds rows `params.first..params.end`.

struct Params {
    rows: u32,     // query rows
    kc: u32,       // candidates per row
    dim: u32,
    mode: u32,
    groups_x: u32, // workgroups along x of the 2-D dispatch
    // The query rows' first list in `candidates` (and `keys`), which hold every row's lists
    // when `mutual` is 1; else 0, the buffers bound at the tile's lists.
    row_base: u32,
    // 1: a symmetric sweep's lists, sorted by index (`sort_by_index` in certify.wgsl); a pair
    // listed by both its rows gets its key once, in the row of the smaller index, and the
    // other row copies it (`copy_mutual_keys`).
    mutual: u32,
    // Invocations per candidate in `exact_keys_grouped`: a power of two, at most WG.
    group: u32,
    // The tile's first query row in `query_norms` (cosine).
    norm_base: u32,
    // The corpus rows `first..end` are those of the bound `corpus` chunk (row `first` at its
    // start): a corpus larger than one binding is bound a chunk per dispatch, and each
    // dispatch computes the keys of the candidates in its chunk only. Padding slots get 0 from
    // every dispatch.
    first: u32,
    end: u32,
}

const WG: u32 = 64u;
const NONE: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(3) var<storage, read> candidates: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> keys: array<f64>;
// Cosine: the float64 norms of the query rows (from norm_base) and of the corpus rows, computed
// by the host, so that a key needs one sum (x.y) instead of three. Other metrics bind
// anything here.
@group(0) @binding(5) var<storage, read> query_norms: array<f64>;
@group(0) @binding(6) var<storage, read> corpus_norms: array<f64>;

// 1 - x.y / (|x| |y|) from `partial_sums` of rows (centred for correlation): (_, sum x y,
// sum x^2, sum y^2). sqrt(x^2 y^2) rather than sqrt(x^2) sqrt(y^2), as on the host: a row's
// duplicate has three equal sums and sqrt(a a) = a exactly, so its key is exactly 0.
fn normalised_key(s: vec4<f64>) -> f64 {
    return 1.0lf - s.y / sqrt(s.z * s.w);
}

var<workgroup> partial: array<vec4<f64>, WG>;
var<workgroup> candidate_id: u32;

// Sums `v` over groups of `width` neighbouring invocations (a power of two up to WG); every
// invocation gets its group's total.
fn group_sum(v: vec4<f64>, lid: u32, width: u32) -> vec4<f64> {
    partial[lid] = v;
    workgroupBarrier();
    for (var step = width / 2u; step > 0u; step /= 2u) {
        if (lid % width < step) {
            partial[lid] += partial[lid + step];
        }
        workgroupBarrier();
    }
    let total = partial[lid - lid % width];
    workgroupBarrier();
    return total;
}

var<workgroup> partial_one: array<f64, WG>;

// `group_sum` of one float64 (`single_sum`): a quarter of the registers and of the reduction's
// traffic, and faster than the vec4 sums for the metrics that need one sum (notes/exactness.md).
fn group_sum_one(v: f64, lid: u32, width: u32) -> f64 {
    partial_one[lid] = v;
    workgroupBarrier();
    for (var step = width / 2u; step > 0u; step /= 2u) {
        if (lid % width < step) {
            partial_one[lid] += partial_one[lid + step];
        }
        workgroupBarrier();
    }
    let total = partial_one[lid - lid % width];
    workgroupBarrier();
    return total;
}

// The key of corpus row `id` for the tile's query row `q`, summed by the `width` invocations
// of a group, this one being `lane`: sums over the strided part of the rows, then the
// group's total. Correlation first sums both rows for their means, then the centred sums.
fn group_key(q: u32, id: u32, lid: u32, lane: u32, width: u32, live: bool) -> f64 {
    let qb = row_start(q);
    let cb = row_start(id - params.first);
    if (params.mode != 2u) {
        // One sum: (x - y)^2, or x.y for inner products and cosine (whose norms the host
        // computed: with x.x and y.y summed here too, cosine keys took markedly longer than
        // euclidean ones; notes/exactness.md).
        var one = 0.0lf;
        if (live) {
            one = single_sum(qb, cb, lane, width);
        }
        let total = group_sum_one(one, lid, width);
        if (params.mode == 1u) {
            if (!live) {
                return 0.0lf;
            }
            return 1.0lf - total / (query_norms[params.norm_base + q] * corpus_norms[id]);
        }
        return select(-total, total, params.mode == 0u);
    }
    var row_sums = vec4<f64>(0.0lf);
    if (live) {
        row_sums = partial_sums(qb, cb, lane, width, true, 0.0lf, 0.0lf);
    }
    let s = group_sum(row_sums, lid, width);
    let mx = s.x / f64(params.dim);
    let my = s.y / f64(params.dim);
    var sums = vec4<f64>(0.0lf);
    if (live) {
        sums = partial_sums(qb, cb, lane, width, false, mx, my);
    }
    return normalised_key(group_sum(sums, lid, width));
}

// Query rows whose same slots run side by side in `exact_keys_wide`.
const INTERLEAVED_ROWS: u32 = 256u;

// The list slot of workgroup `w` (< rows * kc) when slot s of INTERLEAVED_ROWS neighbouring
// rows comes before slot s + 1 of any of them. In list order the workgroups resident at one
// time (thousands) shared a handful of query rows, every one reading the same addresses;
// interleaved they read hundreds of different query rows, which measured faster
// (notes/exactness.md, "Exact keys of long rows").
fn interleaved_slot(w: u32) -> u32 {
    let per_block = INTERLEAVED_ROWS * params.kc;
    let block = w / per_block;
    let first_row = block * INTERLEAVED_ROWS;
    let block_rows = min(INTERLEAVED_ROWS, params.rows - first_row);
    let local = w - block * per_block;
    return (first_row + local % block_rows) * params.kc + local / block_rows;
}

// One workgroup per candidate, for wide rows: the invocations stride over the row together,
// so reads of both rows are coalesced, and the sums meet in a workgroup-memory reduction.
@compute @workgroup_size(64)
fn exact_keys_wide(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let w = wid.x + wid.y * params.groups_x;
    if (w >= params.rows * params.kc) {
        return;
    }
    let t = interleaved_slot(w);
    let g = params.row_base * params.kc + t;
    if (lid == 0u) {
        candidate_id = candidates[g].y;
    }
    let id = workgroupUniformLoad(&candidate_id);
    if (id == NONE) {
        if (lid == 0u) {
            keys[g] = 0.0lf;
        }
        return;
    }
    if (!in_chunk(id)) {
        return;
    }
    if (params.mutual == 1u && copied(params.row_base + t / params.kc, id)) {
        return;
    }
    let key = group_key(t / params.kc, id, lid, lid, WG, true);
    if (lid == 0u) {
        keys[g] = key;
    }
}

// Whether corpus row `id` is in the bound chunk.
fn in_chunk(id: u32) -> bool {
    return id >= params.first && id < params.end;
}

// The slot of corpus row `id` in row `row`'s list (sorted by index), or NONE.
fn slot_of(row: u32, id: u32) -> u32 {
    let base = row * params.kc;
    var lo = 0u;
    var hi = params.kc;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (candidates[base + mid].y < id) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return select(NONE, lo, lo < params.kc && candidates[base + lo].y == id);
}

// Whether row `row` takes its key of candidate `id` from row `id`'s list: the pair is in both
// lists and `id` is the smaller index. The key is the same either way round: every term of
// the sums is symmetric in the two rows and they are summed in the same order.
fn copied(row: u32, id: u32) -> bool {
    return id < row && slot_of(id, row) != NONE;
}

// After `exact_keys_wide` with `mutual`: the keys of pairs computed in the other row's list.
// Those rows come first (smaller index), so they are in this tile or an earlier one.
@compute @workgroup_size(64)
fn copy_mutual_keys(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let t = (wid.x + wid.y * params.groups_x) * WG + lid;
    if (t >= params.rows * params.kc) {
        return;
    }
    let g = params.row_base * params.kc + t;
    let id = candidates[g].y;
    let row = params.row_base + t / params.kc;
    if (id == NONE || id >= row) {
        return;
    }
    let s = slot_of(id, row);
    if (s != NONE) {
        keys[g] = keys[id * params.kc + s];
    }
}

// `group` invocations per candidate, WG / group candidates per workgroup, for rows too short
// for a workgroup each. One invocation per candidate reads its row alone, from rows far
// apart; a group reads `group` neighbouring parts of the row at a time. The host chooses the
// width by row length (`refine_group`).
@compute @workgroup_size(64)
fn exact_keys_grouped(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let group = params.group;
    let t = (wid.x + wid.y * params.groups_x) * (WG / group) + lid / group;
    // Every invocation reaches the barriers of the sums; the ones without a candidate add 0.
    var id = NONE;
    if (t < params.rows * params.kc) {
        id = candidates[t].y;
    }
    let live = id != NONE && in_chunk(id);
    let key = group_key(t / params.kc, id, lid, lid % group, group, live);
    if (lid % group == 0u && t < params.rows * params.kc && (live || id == NONE)) {
        keys[t] = select(0.0lf, key, live);
    }
}
