// Exact float64 ranking keys of every candidate, from the original f32 rows: the re-ranking
// step of the exactness argument (notes/exactness.md), on the GPU so that only keys come back
// instead of every candidate's row being read on the host. Needs SHADER_F64.
//
// `exact_keys`: one invocation per (query row, candidate), for short rows; `exact_keys_grouped`
// (below): GROUP invocations per candidate, for rows of a few dozen values; `exact_keys_wide`:
// one workgroup per candidate. Keys are those of `Metric::rank_key_f64`:
//   mode 0 (euclidean family): sum (x - y)^2
//   mode 1 (cosine):           1 - x.y / (|x| |y|)
//   mode 2 (correlation):      1 - (x - mean x).(y - mean y) / (|x - mean x| |y - mean y|)
//   mode 3 (inner product):    -x.y
// Padding slots (index NONE) get 0 and are ignored by the host.

struct Params {
    rows: u32,     // query rows
    kc: u32,       // candidates per row
    dim: u32,
    mode: u32,
    groups_x: u32, // workgroups along x of the 2-D dispatch
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const WG: u32 = 64u;
const NONE: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> corpus: array<f32>;
@group(0) @binding(3) var<storage, read> candidates: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> keys: array<f64>;

// Sums of the query row at `qb` and of the corpus row at `cb` over j = first, first + step, ...,
// for correlation's centring.
fn partial_row_sums(qb: u32, cb: u32, first: u32, step: u32) -> vec4<f64> {
    var s = vec4<f64>(0.0lf);
    for (var j = first; j < params.dim; j += step) {
        s.x += f64(queries[qb + j]);
        s.y += f64(corpus[cb + j]);
    }
    return s;
}

// Sums over the dimensions j = first, first + step, ... of the query row at `qb` and the corpus
// row at `cb`, centred on (mx, my): (sum (x - y)^2, sum x y, sum x^2, sum y^2), each only where
// the metric's key uses it (the others stay 0): f64 arithmetic runs at a fraction of f32's.
fn partial_sums(qb: u32, cb: u32, first: u32, step: u32, mx: f64, my: f64) -> vec4<f64> {
    var s = vec4<f64>(0.0lf);
    if (params.mode == 0u) {
        for (var j = first; j < params.dim; j += step) {
            let diff = f64(queries[qb + j]) - f64(corpus[cb + j]);
            s.x += diff * diff;
        }
    } else if (params.mode == 3u) {
        for (var j = first; j < params.dim; j += step) {
            s.y += f64(queries[qb + j]) * f64(corpus[cb + j]);
        }
    } else {
        for (var j = first; j < params.dim; j += step) {
            let x = f64(queries[qb + j]) - mx;
            let y = f64(corpus[cb + j]) - my;
            s.y += x * y;
            s.z += x * x;
            s.w += y * y;
        }
    }
    return s;
}

// The ranking key from the sums of `partial_sums`.
fn key_of(s: vec4<f64>) -> f64 {
    if (params.mode == 0u) {
        return s.x;
    }
    if (params.mode == 3u) {
        return -s.y;
    }
    return 1.0lf - s.y / (sqrt(s.z) * sqrt(s.w));
}

@compute @workgroup_size(64)
fn exact_keys(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x + gid.y * params.groups_x * WG;
    if (t >= params.rows * params.kc) {
        return;
    }
    let row = t / params.kc;
    let id = candidates[t].y;
    if (id == NONE) {
        keys[t] = 0.0lf;
        return;
    }
    let qb = row * params.dim;
    let cb = id * params.dim;
    var mx: f64 = 0.0lf;
    var my: f64 = 0.0lf;
    if (params.mode == 2u) {
        let s = partial_row_sums(qb, cb, 0u, 1u);
        mx = s.x / f64(params.dim);
        my = s.y / f64(params.dim);
    }
    keys[t] = key_of(partial_sums(qb, cb, 0u, 1u, mx, my));
}

// The same keys with one workgroup per candidate, for wide rows: the invocations stride over
// the dimension together, so reads of both rows are coalesced, and the sums meet in a
// workgroup-memory reduction.

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

@compute @workgroup_size(64)
fn exact_keys_wide(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let t = wid.x + wid.y * params.groups_x;
    if (t >= params.rows * params.kc) {
        return;
    }
    if (lid == 0u) {
        candidate_id = candidates[t].y;
    }
    let id = workgroupUniformLoad(&candidate_id);
    if (id == NONE) {
        if (lid == 0u) {
            keys[t] = 0.0lf;
        }
        return;
    }
    let qb = (t / params.kc) * params.dim;
    let cb = id * params.dim;
    var mx: f64 = 0.0lf;
    var my: f64 = 0.0lf;
    if (params.mode == 2u) {
        let s = group_sum(partial_row_sums(qb, cb, lid, WG), lid, WG);
        mx = s.x / f64(params.dim);
        my = s.y / f64(params.dim);
    }
    let s = group_sum(partial_sums(qb, cb, lid, WG, mx, my), lid, WG);
    if (lid == 0u) {
        keys[t] = key_of(s);
    }
}

// GROUP invocations per candidate, WG / GROUP candidates per workgroup, for rows too short
// for a workgroup each. One invocation per candidate reads its row alone, 4 bytes per load
// from rows far apart; a group reads GROUP neighbouring values of the row at a time.

const GROUP: u32 = 8u;

@compute @workgroup_size(64)
fn exact_keys_grouped(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let t = (wid.x + wid.y * params.groups_x) * (WG / GROUP) + lid / GROUP;
    let lane = lid % GROUP;
    // Every invocation reaches the barriers of the sums; the ones without a candidate add 0.
    var id = NONE;
    if (t < params.rows * params.kc) {
        id = candidates[t].y;
    }
    let live = id != NONE;
    let qb = (t / params.kc) * params.dim;
    let cb = id * params.dim;
    var mx: f64 = 0.0lf;
    var my: f64 = 0.0lf;
    if (params.mode == 2u) {
        var sums = vec4<f64>(0.0lf);
        if (live) {
            sums = partial_row_sums(qb, cb, lane, GROUP);
        }
        let s = group_sum(sums, lid, GROUP);
        mx = s.x / f64(params.dim);
        my = s.y / f64(params.dim);
    }
    var sums = vec4<f64>(0.0lf);
    if (live) {
        sums = partial_sums(qb, cb, lane, GROUP, mx, my);
    }
    let s = group_sum(sums, lid, GROUP);
    if (lane == 0u && t < params.rows * params.kc) {
        keys[t] = select(0.0lf, key_of(s), live);
    }
}
