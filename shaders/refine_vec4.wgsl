// Exact float64 ranking keys of the candidates for rows whose length is a multiple of 4: the
// keys of refine.wgsl's `exact_keys_wide` and `exact_keys_grouped` (same modes, same sums, see
// there) from vec4 loads, four of each row in flight per invocation. `exact_keys_wide4`: one
// workgroup per candidate; `exact_keys_grouped4`: GROUP invocations per candidate.
//
// Why: with one 4-byte load of each row per loop step, an invocation waits out a memory
// round trip per step, and the keys of long rows were bound by latency, not bandwidth (d=4096:
// 172 GB of candidate rows in 107 ms on an H100, half of what its memory delivers). Here each
// step issues four independent 16-byte loads of each row before using any.

struct Params {
    rows: u32,     // query rows
    kc: u32,       // candidates per row
    dim: u32,      // a multiple of 4
    mode: u32,
    groups_x: u32, // workgroups along x of the 2-D dispatch
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const WG: u32 = 64u;
// Loads of each row in flight per invocation and step.
const DEPTH: u32 = 4u;
const NONE: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> corpus: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> candidates: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> keys: array<f64>;

var<workgroup> partial: array<vec4<f64>, WG>;
var<workgroup> candidate_id: u32;

// The sums of refine.wgsl's `partial_sums` over one vec4 of each row.
fn sums4(x: vec4<f32>, y: vec4<f32>, mx: f64, my: f64) -> vec4<f64> {
    if (params.mode == 0u) {
        let diff = vec4<f64>(x) - vec4<f64>(y);
        return vec4<f64>(dot(diff, diff), 0.0lf, 0.0lf, 0.0lf);
    }
    if (params.mode == 3u) {
        return vec4<f64>(0.0lf, dot(vec4<f64>(x), vec4<f64>(y)), 0.0lf, 0.0lf);
    }
    let cx = vec4<f64>(x) - vec4<f64>(mx);
    let cy = vec4<f64>(y) - vec4<f64>(my);
    return vec4<f64>(0.0lf, dot(cx, cy), dot(cx, cx), dot(cy, cy));
}

// Sums over the vec4s first, first + step, ... of the query row at `qb` and the corpus row at
// `cb` (vec4 indices): the metric's sums, or with `row_sums` the plain sums of each row (for
// correlation's means). The loops over `u` are unrolled when the module is built
// (`shaders::refine_vec4`), so that x and y stay in registers.
fn partial_sums(qb: u32, cb: u32, first: u32, step: u32, row_sums: bool, mx: f64, my: f64) -> vec4<f64> {
    let dim4 = params.dim / 4u;
    let ones = vec4<f64>(1.0lf);
    var s = vec4<f64>(0.0lf);
    for (var j = first; j < dim4; j += DEPTH * step) {
        var x: array<vec4<f32>, DEPTH>;
        var y: array<vec4<f32>, DEPTH>;
        // All loads first: the rows' reads overlap instead of waiting one after another.
        // unroll(u, DEPTH)
        for (var u = 0u; u < DEPTH; u++) {
            x[u] = vec4<f32>(0.0);
            y[u] = vec4<f32>(0.0);
            if (j + u * step < dim4) {
                x[u] = queries[qb + j + u * step];
                y[u] = corpus[cb + j + u * step];
            }
        }
        // unroll(u, DEPTH)
        for (var u = 0u; u < DEPTH; u++) {
            if (j + u * step < dim4) {
                if (row_sums) {
                    s += vec4<f64>(dot(vec4<f64>(x[u]), ones), dot(vec4<f64>(y[u]), ones), 0.0lf, 0.0lf);
                } else {
                    s += sums4(x[u], y[u], mx, my);
                }
            }
        }
    }
    return s;
}

fn key_of(s: vec4<f64>) -> f64 {
    if (params.mode == 0u) {
        return s.x;
    }
    if (params.mode == 3u) {
        return -s.y;
    }
    return 1.0lf - s.y / (sqrt(s.z) * sqrt(s.w));
}

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
fn exact_keys_wide4(
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
    let dim4 = params.dim / 4u;
    let qb = (t / params.kc) * dim4;
    let cb = id * dim4;
    var mx: f64 = 0.0lf;
    var my: f64 = 0.0lf;
    if (params.mode == 2u) {
        let s = group_sum(partial_sums(qb, cb, lid, WG, true, 0.0lf, 0.0lf), lid, WG);
        mx = s.x / f64(params.dim);
        my = s.y / f64(params.dim);
    }
    let s = group_sum(partial_sums(qb, cb, lid, WG, false, mx, my), lid, WG);
    if (lid == 0u) {
        keys[t] = key_of(s);
    }
}

// GROUP invocations per candidate, WG / GROUP candidates per workgroup, for rows of a few dozen
// to a few hundred values.
const GROUP: u32 = 8u;

@compute @workgroup_size(64)
fn exact_keys_grouped4(
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
    let dim4 = params.dim / 4u;
    let qb = (t / params.kc) * dim4;
    let cb = id * dim4;
    var mx: f64 = 0.0lf;
    var my: f64 = 0.0lf;
    if (params.mode == 2u) {
        var sums = vec4<f64>(0.0lf);
        if (live) {
            sums = partial_sums(qb, cb, lane, GROUP, true, 0.0lf, 0.0lf);
        }
        let s = group_sum(sums, lid, GROUP);
        mx = s.x / f64(params.dim);
        my = s.y / f64(params.dim);
    }
    var sums = vec4<f64>(0.0lf);
    if (live) {
        sums = partial_sums(qb, cb, lane, GROUP, false, mx, my);
    }
    let s = group_sum(sums, lid, GROUP);
    if (lane == 0u && t < params.rows * params.kc) {
        keys[t] = select(0.0lf, key_of(s), live);
    }
}
