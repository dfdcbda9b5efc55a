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
// 8 x 8 block per invocation is fixed because register arrays need constant sizes.
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

override BM: u32 = 128u;
override BN: u32 = 128u;
override BK: u32 = 16u;
override WG: u32 = (BM / 8u) * (BN / 8u);
// 4 x 4 blocks per slice: BM / 4 x BK / 4 of queries, then BN / 4 x BK / 4 of corpus.
override Q_BLOCKS: u32 = (BM / 4u) * (BK / 4u);
override BLOCKS: u32 = Q_BLOCKS + (BN / 4u) * (BK / 4u);
// Blocks each invocation loads per slice (at most 2 with the default shapes).
const MAX_LOADS: u32 = 2u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> corpus: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> q_norms: array<f32>;
@group(0) @binding(4) var<storage, read> c_norms: array<f32>;
@group(0) @binding(5) var<storage, read> exclude: array<u32>;
@group(0) @binding(6) var<storage, read_write> dist: array<f32>;

// q_tile[k * BM / 4 + m / 4] holds query rows m..m+3 at depth k of the current slice.
var<workgroup> q_tile: array<vec4<f32>, BK * BM / 4u>;
var<workgroup> c_tile: array<vec4<f32>, BK * BN / 4u>;

struct Block {
    r: array<vec4<f32>, 4>, // four rows (or corpus rows), four depths each
}

// Loads 4 x 4 block `b` of the slice starting at vec4 depth k4.
fn load_block(b: u32, k4: u32, row0: u32, col0: u32) -> Block {
    var out: Block;
    let is_query = b < Q_BLOCKS;
    let local = select(b - Q_BLOCKS, b, is_query);
    let rows_per_slice = select(BN, BM, is_query) / 4u;
    let m = (local % rows_per_slice) * 4u;
    let kk = local / rows_per_slice;
    for (var i = 0u; i < 4u; i++) {
        var v = vec4<f32>(0.0);
        if (k4 + kk < params.dim4) {
            if (is_query) {
                if (row0 + m + i < params.q_rows) {
                    v = queries[(row0 + m + i) * params.dim4 + k4 + kk];
                }
            } else if (col0 + m + i < params.c_rows) {
                v = corpus[(params.c_offset + col0 + m + i) * params.dim4 + k4 + kk];
            }
        }
        out.r[i] = v;
    }
    return out;
}

// Writes block `b` transposed: one vec4 of four rows per depth.
fn store_block(b: u32, blk: Block) {
    let is_query = b < Q_BLOCKS;
    let local = select(b - Q_BLOCKS, b, is_query);
    let rows_per_slice = select(BN, BM, is_query) / 4u;
    let m4 = local % rows_per_slice;
    let kk = local / rows_per_slice;
    for (var j = 0u; j < 4u; j++) {
        let v = vec4<f32>(blk.r[0][j], blk.r[1][j], blk.r[2][j], blk.r[3][j]);
        let k = kk * 4u + j;
        if (is_query) {
            q_tile[k * (BM / 4u) + m4] = v;
        } else {
            c_tile[k * (BN / 4u) + m4] = v;
        }
    }
}

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
    let tx = lid % (BN / 8u);
    let ty = lid / (BN / 8u);
    let bk4 = BK / 4u;

    var acc: array<vec4<f32>, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = vec4<f32>(0.0);
    }

    var next: array<Block, MAX_LOADS>;
    for (var l = 0u; l < MAX_LOADS; l++) {
        let b = lid + l * WG;
        if (b < BLOCKS) {
            next[l] = load_block(b, 0u, row0, col0);
        }
    }
    for (var k4 = 0u; k4 < params.dim4; k4 += bk4) {
        for (var l = 0u; l < MAX_LOADS; l++) {
            let b = lid + l * WG;
            if (b < BLOCKS) {
                store_block(b, next[l]);
            }
        }
        workgroupBarrier();
        // Prefetch the next slice while this one is multiplied.
        if (k4 + bk4 < params.dim4) {
            for (var l = 0u; l < MAX_LOADS; l++) {
                let b = lid + l * WG;
                if (b < BLOCKS) {
                    next[l] = load_block(b, k4 + bk4, row0, col0);
                }
            }
        }
        for (var k = 0u; k < BK; k++) {
            let a0 = q_tile[k * (BM / 4u) + ty];
            let a1 = q_tile[k * (BM / 4u) + ty + BM / 8u];
            let b0 = c_tile[k * (BN / 4u) + tx];
            let b1 = c_tile[k * (BN / 4u) + tx + BN / 8u];
            for (var i = 0u; i < 4u; i++) {
                acc[i * 2u] = fma(vec4<f32>(a0[i]), b0, acc[i * 2u]);
                acc[i * 2u + 1u] = fma(vec4<f32>(a0[i]), b1, acc[i * 2u + 1u]);
                acc[8u + i * 2u] = fma(vec4<f32>(a1[i]), b0, acc[8u + i * 2u]);
                acc[8u + i * 2u + 1u] = fma(vec4<f32>(a1[i]), b1, acc[8u + i * 2u + 1u]);
            }
        }
        workgroupBarrier();
    }

    let inf = bitcast<f32>(0x7f800000u);
    for (var i = 0u; i < 8u; i++) {
        let r = row0 + ty * 4u + (i % 4u) + (i / 4u) * (BM / 2u);
        if (r >= params.q_rows) {
            continue;
        }
        let qn = q_norms[r];
        let own = exclude[r];
        for (var half = 0u; half < 2u; half++) {
            let dots = acc[i * 2u + half];
            for (var j = 0u; j < 4u; j++) {
                let c = col0 + tx * 4u + j + half * (BN / 2u);
                if (c >= params.c_rows) {
                    continue;
                }
                var key: f32;
                if (params.mode == 0u) {
                    key = qn + c_norms[params.c_offset + c] - 2.0 * dots[j];
                } else if (params.mode == 1u) {
                    key = 1.0 - dots[j];
                } else {
                    key = -dots[j];
                }
                if (own == params.col_base + c) {
                    key = inf;
                }
                dist[r * params.out_stride + c] = key;
            }
        }
    }
}
