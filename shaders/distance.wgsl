// Distance tile D[i, j] between prepared query rows and prepared corpus rows, as norms plus
// a matrix product: a register-blocked GEMM of Q (BM x dim) by C^T (dim x BN) per workgroup.
//
// Each workgroup stages BK-deep slices of both operands in workgroup memory, transposed so
// that the inner loop reads TM query values and TN corpus values per k step and does TM x TN
// fused multiply-adds from registers. Tile shapes are override constants so the host can
// pick them per adapter; TM and TN are fixed because register arrays need constant sizes.
//
// The epilogue turns dot products into ascending ranking keys:
//   mode 0 (euclidean family): |q|^2 + |c|^2 - 2 q.c
//   mode 1 (cosine, correlation on unit rows): 1 - q.c
//   mode 2 (inner product, larger is nearer): -q.c
// and writes +inf where the corpus row is the query itself (kNN graph without self).

struct Params {
    q_rows: u32,     // valid query rows in this tile
    c_rows: u32,     // valid corpus rows in this tile
    dim4: u32,       // vec4s per prepared row
    c_offset: u32,   // first corpus row of the tile within the corpus buffer
    col_base: u32,   // global corpus index of the tile's first row
    out_stride: u32, // row stride of the distance tile
    mode: u32,
    groups_x: u32,
}

override BM: u32 = 64u;
override BN: u32 = 64u;
override BK: u32 = 16u;   // multiple of 4
const TM: u32 = 4u;
const TN: u32 = 4u;
override WG: u32 = (BM / TM) * (BN / TN);

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> corpus: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> q_norms: array<f32>;
@group(0) @binding(4) var<storage, read> c_norms: array<f32>;
@group(0) @binding(5) var<storage, read> exclude: array<u32>;
@group(0) @binding(6) var<storage, read_write> dist: array<f32>;

var<workgroup> q_tile: array<f32, BK * BM>;
var<workgroup> c_tile: array<f32, BK * BN>;

@compute @workgroup_size(WG)
fn distance_tile(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let tiles_n = (params.c_rows + BN - 1u) / BN;
    let tile = wid.x + wid.y * params.groups_x;
    let row0 = (tile / tiles_n) * BM;
    let col0 = (tile % tiles_n) * BN;
    if (row0 >= params.q_rows) {
        return;
    }
    let tx = lid % (BN / TN);
    let ty = lid / (BN / TN);
    let bk4 = BK / 4u;

    var acc: array<f32, 16>;
    for (var i = 0u; i < TM * TN; i++) {
        acc[i] = 0.0;
    }

    for (var k4 = 0u; k4 < params.dim4; k4 += bk4) {
        for (var e = lid; e < BM * bk4; e += WG) {
            let m = e / bk4;
            let kk = e % bk4;
            var v = vec4<f32>(0.0);
            if (row0 + m < params.q_rows && k4 + kk < params.dim4) {
                v = queries[(row0 + m) * params.dim4 + k4 + kk];
            }
            q_tile[(kk * 4u) * BM + m] = v.x;
            q_tile[(kk * 4u + 1u) * BM + m] = v.y;
            q_tile[(kk * 4u + 2u) * BM + m] = v.z;
            q_tile[(kk * 4u + 3u) * BM + m] = v.w;
        }
        for (var e = lid; e < BN * bk4; e += WG) {
            let n = e / bk4;
            let kk = e % bk4;
            var v = vec4<f32>(0.0);
            if (col0 + n < params.c_rows && k4 + kk < params.dim4) {
                v = corpus[(params.c_offset + col0 + n) * params.dim4 + k4 + kk];
            }
            c_tile[(kk * 4u) * BN + n] = v.x;
            c_tile[(kk * 4u + 1u) * BN + n] = v.y;
            c_tile[(kk * 4u + 2u) * BN + n] = v.z;
            c_tile[(kk * 4u + 3u) * BN + n] = v.w;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<f32, 4>;
            var b: array<f32, 4>;
            for (var i = 0u; i < TM; i++) {
                a[i] = q_tile[kk * BM + ty * TM + i];
            }
            for (var j = 0u; j < TN; j++) {
                b[j] = c_tile[kk * BN + tx * TN + j];
            }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) {
                    acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
                }
            }
        }
        workgroupBarrier();
    }

    let inf = bitcast<f32>(0x7f800000u);
    for (var i = 0u; i < TM; i++) {
        let r = row0 + ty * TM + i;
        if (r >= params.q_rows) {
            continue;
        }
        for (var j = 0u; j < TN; j++) {
            let c = col0 + tx * TN + j;
            if (c >= params.c_rows) {
                continue;
            }
            let dot = acc[i * TN + j];
            var key: f32;
            if (params.mode == 0u) {
                key = q_norms[r] + c_norms[params.c_offset + c] - 2.0 * dot;
            } else if (params.mode == 1u) {
                key = 1.0 - dot;
            } else {
                key = -dot;
            }
            if (exclude[r] == params.col_base + c) {
                key = inf;
            }
            dist[r * params.out_stride + c] = key;
        }
    }
}
