// Rows read one f32 per load, for any row length: appended to refine.wgsl.

@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> corpus: array<f32>;

// Where row `row` starts in `queries` or `corpus`.
fn row_start(row: u32) -> u32 {
    return row * params.dim;
}

// Sums over the dimensions j = first, first + step, ... of the query row at `qb` and the
// corpus row at `cb`, for keys of normalised rows: with `row_sums` the plain sums of each row
// (x, y: correlation's means), else of the rows centred on (mx, my): (0, sum x y, sum x^2,
// sum y^2).
fn partial_sums(qb: u32, cb: u32, first: u32, step: u32, row_sums: bool, mx: f64, my: f64) -> vec4<f64> {
    var s = vec4<f64>(0.0lf);
    if (row_sums) {
        for (var j = first; j < params.dim; j += step) {
            s.x += f64(queries[qb + j]);
            s.y += f64(corpus[cb + j]);
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

// The one sum that the euclidean key (sum (x - y)^2) or the inner product and cosine keys
// (sum x y; cosine's norms come from the host) need, over the same dimensions as
// `partial_sums`: f64 arithmetic runs at a fraction of f32's, so no other sum is taken.
fn single_sum(qb: u32, cb: u32, first: u32, step: u32) -> f64 {
    var s = 0.0lf;
    if (params.mode == 0u) {
        for (var j = first; j < params.dim; j += step) {
            let diff = f64(queries[qb + j]) - f64(corpus[cb + j]);
            s += diff * diff;
        }
    } else {
        for (var j = first; j < params.dim; j += step) {
            s += f64(queries[qb + j]) * f64(corpus[cb + j]);
        }
    }
    return s;
}

// One invocation per (query row, candidate), for short rows.
@compute @workgroup_size(64)
fn exact_keys(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x + gid.y * params.groups_x * WG;
    if (t >= params.rows * params.kc) {
        return;
    }
    let id = candidates[t].y;
    if (id == NONE) {
        keys[t] = 0.0lf;
        return;
    }
    if (!in_chunk(id)) {
        return;
    }
    let qb = row_start(t / params.kc);
    let cb = row_start(id - params.first);
    if (params.mode == 0u || params.mode == 3u) {
        let one = single_sum(qb, cb, 0u, 1u);
        keys[t] = select(-one, one, params.mode == 0u);
        return;
    }
    // Cosine sums the norms here too: for rows this short, loading the host's norms (two
    // scattered reads a candidate) took longer (notes/exactness.md).
    var mx = 0.0lf;
    var my = 0.0lf;
    if (params.mode == 2u) {
        let s = partial_sums(qb, cb, 0u, 1u, true, 0.0lf, 0.0lf);
        mx = s.x / f64(params.dim);
        my = s.y / f64(params.dim);
    }
    keys[t] = normalised_key(partial_sums(qb, cb, 0u, 1u, false, mx, my));
}
