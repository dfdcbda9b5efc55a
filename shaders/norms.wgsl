// Prepares rows for the distance kernel, one workgroup per row, in one pass over the data:
//   mode 0 (euclidean): x - shift, where shift is the corpus mean. Distances are translation
//          invariant, and centring keeps |x|^2 + |y|^2 - 2x.y from cancelling catastrophically
//          on data with a large common offset.
//   mode 1 (cosine):      x / |x|
//   mode 2 (correlation): (x - mean(x)) / |x - mean(x)|
//   mode 3 (inner product): x unchanged
// Writes the prepared row padded with zeros to a multiple of 4 (so the distance kernel can
// use vec4 loads) and its squared norm.
// Cosine and correlation first scale the row by a power of two (exact) that brings its
// largest magnitude into [0.5, 1): sums of squares of rows of 1e-25 would underflow to zero
// and those of long rows of 1e18 overflow, and either would leave the unit vector wrong by far
// more than the error bound allows (`prepare::key_error_bound`).

struct Params {
    rows: u32,      // rows to prepare
    dim: u32,       // values per input row
    dim4: u32,      // vec4s per output row
    mode: u32,
    groups_x: u32,  // workgroups along x of the 2-D dispatch
    in_offset: u32, // first input row
    _pad0: u32,
    _pad1: u32,
}

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> raw: array<f32>;
@group(0) @binding(2) var<storage, read> shift: array<f32>;
@group(0) @binding(3) var<storage, read_write> prepared: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> sq_norms: array<f32>;

var<workgroup> partial: array<f32, WG>;

// Sum, or with `largest` the largest, of one value per invocation; every invocation gets it.
fn workgroup_reduce(v: f32, lid: u32, largest: bool) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var step = WG / 2u; step > 0u; step = step / 2u) {
        if (lid < step) {
            let a = partial[lid];
            let b = partial[lid + step];
            partial[lid] = select(a + b, max(a, b), largest);
        }
        workgroupBarrier();
    }
    let total = workgroupUniformLoad(&partial[0]);
    return total;
}

fn value_at(base: u32, j: u32, pre: f32, mean: f32) -> f32 {
    if (j >= params.dim) {
        return 0.0;
    }
    var v = raw[base + j] * pre;
    if (params.mode == 0u) {
        v = v - shift[j];
    } else if (params.mode == 2u) {
        v = v - mean;
    }
    return v;
}

@compute @workgroup_size(64)
fn prepare_rows(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let row = wid.x + wid.y * params.groups_x;
    if (row >= params.rows) {
        return;
    }
    let base = (params.in_offset + row) * params.dim;

    var pre = 1.0;
    if (params.mode == 1u || params.mode == 2u) {
        var peak = 0.0;
        for (var j = lid; j < params.dim; j += WG) {
            peak = max(peak, abs(raw[base + j]));
        }
        peak = workgroup_reduce(peak, lid, true);
        workgroupBarrier();
        // Rows without a value of normal magnitude are refused on the host.
        if (peak > 0.0) {
            pre = ldexp(1.0, -frexp(peak).exp);
        }
    }
    var mean = 0.0;
    if (params.mode == 2u) {
        var s = 0.0;
        for (var j = lid; j < params.dim; j += WG) {
            s += raw[base + j] * pre;
        }
        mean = workgroup_reduce(s, lid, false) / f32(params.dim);
        workgroupBarrier();
    }

    var ss = 0.0;
    for (var j = lid; j < params.dim; j += WG) {
        let v = value_at(base, j, pre, mean);
        ss += v * v;
    }
    let sq = workgroup_reduce(ss, lid, false);

    var scale = 1.0;
    if (params.mode == 1u || params.mode == 2u) {
        scale = 1.0 / sqrt(sq);
    }
    for (var j4 = lid; j4 < params.dim4; j4 += WG) {
        let j = j4 * 4u;
        prepared[row * params.dim4 + j4] = vec4<f32>(
            value_at(base, j, pre, mean),
            value_at(base, j + 1u, pre, mean),
            value_at(base, j + 2u, pre, mean),
            value_at(base, j + 3u, pre, mean),
        ) * scale;
    }
    if (lid == 0u) {
        sq_norms[row] = select(sq, sq * scale * scale, params.mode == 1u || params.mode == 2u);
    }
}
