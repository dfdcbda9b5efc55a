// Exact float64 ranking keys of every candidate, from the original f32 rows: the re-ranking
// step of the exactness argument (notes/exactness.md), on the GPU so that only keys come back
// instead of every candidate's row being read on the host. Needs SHADER_F64.
//
// One invocation per (query row, candidate). Keys are those of `Metric::rank_key_f64`:
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

fn mean(base: u32) -> f64 {
    var s: f64 = 0.0lf;
    for (var j = 0u; j < params.dim; j++) {
        s += f64(queries[base + j]);
    }
    return s / f64(params.dim);
}

fn corpus_mean(base: u32) -> f64 {
    var s: f64 = 0.0lf;
    for (var j = 0u; j < params.dim; j++) {
        s += f64(corpus[base + j]);
    }
    return s / f64(params.dim);
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
        mx = mean(qb);
        my = corpus_mean(cb);
    }
    var sxy: f64 = 0.0lf;
    var sxx: f64 = 0.0lf;
    var syy: f64 = 0.0lf;
    var sdd: f64 = 0.0lf;
    for (var j = 0u; j < params.dim; j++) {
        let x = f64(queries[qb + j]) - mx;
        let y = f64(corpus[cb + j]) - my;
        let diff = x - y;
        sdd += diff * diff;
        sxy += x * y;
        sxx += x * x;
        syy += y * y;
    }
    var key: f64;
    if (params.mode == 0u) {
        key = sdd;
    } else if (params.mode == 3u) {
        key = -sxy;
    } else {
        key = 1.0lf - sxy / (sqrt(sxx) * sqrt(syy));
    }
    keys[t] = key;
}
