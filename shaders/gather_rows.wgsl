// Every `step`-th prepared row from `first` on, with its norm, into a buffer of its own: the
// sample that bounds each row's list in a bounded sweep (plan::plan_bounded). A kernel rather
// than a copy per row: thousands of copies cost the host milliseconds to record.

struct Params {
    rows: u32,     // rows to gather
    dim4: u32,     // vec4s a prepared row
    first: u32,
    step: u32,
    groups_x: u32,
}

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> vectors: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> norms: array<f32>;
@group(0) @binding(3) var<storage, read_write> out_vectors: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out_norms: array<f32>;

// One workgroup a row, its invocations along the row.
@compute @workgroup_size(WG)
fn gather_rows(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x + wid.y * params.groups_x;
    if (row >= params.rows) {
        return;
    }
    let source = params.first + row * params.step;
    for (var j = lid; j < params.dim4; j += WG) {
        out_vectors[row * params.dim4 + j] = vectors[source * params.dim4 + j];
    }
    if (lid == 0u) {
        out_norms[row] = norms[source];
    }
}
