// Rows read as vec4s, four loads of each row in flight per invocation, for row lengths a
// multiple of 4: appended to refine.wgsl.
//
// Why: with one 4-byte load of each row per loop step, an invocation waits out a memory
// round trip per step, and the keys of long rows were bound by latency, not bandwidth
// (notes/exactness.md). Here each
// step issues four independent 16-byte loads of each row before using any.

@group(0) @binding(1) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> corpus: array<vec4<f32>>;

// DEPTH, the loads of each row in flight per invocation and step, is declared by the host
// (`shaders::refine`), which also unrolls the loops over it: one number for both.

// Where row `row` starts in `queries` or `corpus`, in vec4s.
fn row_start(row: u32) -> u32 {
    return row * (params.dim / 4u);
}

// The centred sums of `partial_sums` over one vec4 of each row.
fn sums4(x: vec4<f32>, y: vec4<f32>, mx: f64, my: f64) -> vec4<f64> {
    let cx = vec4<f64>(x) - vec4<f64>(mx);
    let cy = vec4<f64>(y) - vec4<f64>(my);
    return vec4<f64>(0.0lf, dot(cx, cy), dot(cx, cx), dot(cy, cy));
}

// The sums of refine_scalar.wgsl's `partial_sums`, over the vec4s first, first + step, ... of
// the query row at `qb` and the corpus row at `cb`. The loops over `u` are unrolled when the
// module is built (`shaders::refine`), so that x and y stay in registers.
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

// The one sum that the euclidean key (sum (x - y)^2) or the inner product and cosine keys
// (sum x y) need, over the vec4s `partial_sums` reads. The loads repeat those of
// `partial_sums` rather than come from a helper returning the arrays: this kernel's speed is
// its registers per invocation, and the shared form is unmeasured.
fn single_sum(qb: u32, cb: u32, first: u32, step: u32) -> f64 {
    let dim4 = params.dim / 4u;
    var s = 0.0lf;
    for (var j = first; j < dim4; j += DEPTH * step) {
        var x: array<vec4<f32>, DEPTH>;
        var y: array<vec4<f32>, DEPTH>;
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
            if (params.mode == 0u) {
                let diff = vec4<f64>(x[u]) - vec4<f64>(y[u]);
                s += dot(diff, diff);
            } else {
                s += dot(vec4<f64>(x[u]), vec4<f64>(y[u]));
            }
        }
    }
    return s;
}
