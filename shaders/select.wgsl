// Quick multi-select: the `need` smallest (value, index) pairs of each row, one workgroup per
// row, after Komarov, Dashti and D'Souza's GPU quick multi-select.
//
// Each pass partitions the current segment around a pivot into an auxiliary array: elements
// below the pivot packed from the left, the rest from the right. Every invocation learns where
// its element goes from `partition_ranks`, which is a subgroup ballot plus popcount with one
// small scan across subgroups (rank_subgroup.wgsl) or, on adapters without subgroups, a
// workgroup-memory prefix sum (rank_workgroup.wgsl). The host appends one of the two files.
//
// Left parts that are wholly kept are not copied: a small stack remembers (array, start,
// length) and the answer is gathered from it once at the end. The whole loop runs on the GPU.
//
// The pivot is the sample at the `need / len` quantile of WG evenly spaced samples of the
// segment, so a pass usually shrinks the segment to little more than `need`. Ties are handled
// by a second pass with `<=` against the same pivot when nothing lies strictly below it.
//
// Input is either a dense row of f32 keys (index = col_base + position) or a row of pairs
// already in the output buffer (merging a tile's candidates into the running list).
// A row that does not finish within MAX_PASSES sets its flag; the host then answers that row
// another way, so a pathological row is slow but never wrong.

struct Params {
    rows: u32,           // rows in this dispatch
    len: u32,            // input elements per row
    in_stride: u32,      // row stride of a dense input
    col_base: u32,       // global index of a dense row's first element
    need: u32,           // how many to select
    scratch_stride: u32, // row stride of the auxiliary arrays (>= len)
    out_stride: u32,     // row stride of the output, in pairs
    out_offset: u32,     // where this selection goes within the output row
    dense: u32,          // 1: dense f32 input; 0: pairs at the start of the output row
    groups_x: u32,
    rows_per_group: u32, // rows per workgroup of select_rows_per_subgroup
    _pad1: u32,
}

const WG: u32 = 256u;
const MAX_PASSES: u32 = 48u;
const NONE: u32 = 0xffffffffu;
const INF_BITS: u32 = 0x7f800000u;
// Where a segment lives: the input row or one of the two auxiliary arrays.
const SRC_INPUT: u32 = 0u;
const SRC_A: u32 = 1u;
const SRC_B: u32 = 2u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> dense_in: array<f32>;
@group(0) @binding(2) var<storage, read_write> aux_a: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> aux_b: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read_write> failed: array<u32>;

var<workgroup> seg_src: u32;
var<workgroup> seg_start: u32;
var<workgroup> seg_len: u32;
var<workgroup> seg_need: u32;
var<workgroup> seg_or_equal: u32;
var<workgroup> pivot_bits: u32;
var<workgroup> stack_top: u32;
var<workgroup> stack_src: array<u32, 64>;
var<workgroup> stack_start: array<u32, 64>;
var<workgroup> stack_len: array<u32, 64>;
var<workgroup> samples: array<f32, WG>;

fn load_pair(src: u32, row: u32, i: u32) -> vec2<u32> {
    if (src == SRC_A) {
        return aux_a[row * params.scratch_stride + i];
    }
    if (src == SRC_B) {
        return aux_b[row * params.scratch_stride + i];
    }
    if (params.dense == 1u) {
        return vec2<u32>(bitcast<u32>(dense_in[row * params.in_stride + i]), params.col_base + i);
    }
    return out[row * params.out_stride + i];
}

fn store_pair(dst: u32, row: u32, i: u32, e: vec2<u32>) {
    if (dst == SRC_A) {
        aux_a[row * params.scratch_stride + i] = e;
    } else {
        aux_b[row * params.scratch_stride + i] = e;
    }
}

fn push_segment(src: u32, start: u32, len: u32) {
    let t = stack_top;
    stack_src[t] = src;
    stack_start[t] = start;
    stack_len[t] = len;
    stack_top = t + 1u;
}

// Chooses the pivot for the segment: the sample just above the need/len quantile.
fn choose_pivot(lid: u32, row: u32, src: u32, start: u32, len: u32, need: u32) {
    let n_samples = min(len, WG);
    let stride = max(len / WG, 1u);
    var mine = bitcast<f32>(INF_BITS);
    if (lid < n_samples) {
        mine = bitcast<f32>(load_pair(src, row, start + lid * stride).x);
    }
    samples[lid] = mine;
    workgroupBarrier();
    var rank = 0u;
    for (var j = 0u; j < WG; j++) {
        let s = samples[j];
        rank += select(0u, 1u, s < mine || (s == mine && j < lid));
    }
    let quantile = f32(need) / f32(len) * f32(n_samples);
    let target_rank = min(n_samples - 1u, u32(quantile) + 1u);
    if (lid < n_samples && rank == target_rank) {
        pivot_bits = bitcast<u32>(mine);
    }
    workgroupBarrier();
}

// The body of the `select_rows` entry point, which the rank file declares because only it
// knows whether subgroup built-ins exist.
fn select_row(lid: u32, wid: vec3<u32>, lane: u32, sg_id: u32, sg_count: u32) {
    let row = wid.x + wid.y * params.groups_x;
    if (row >= params.rows) {
        return;
    }
    if (lid == 0u) {
        seg_src = SRC_INPUT;
        seg_start = 0u;
        seg_len = params.len;
        seg_need = params.need;
        seg_or_equal = 0u;
        stack_top = 0u;
    }
    workgroupBarrier();

    var finished = false;
    for (var pass_no = 0u; pass_no < MAX_PASSES; pass_no++) {
        let need = workgroupUniformLoad(&seg_need);
        let len = workgroupUniformLoad(&seg_len);
        let src = workgroupUniformLoad(&seg_src);
        let start = workgroupUniformLoad(&seg_start);
        let or_equal = workgroupUniformLoad(&seg_or_equal);
        if (need == 0u) {
            finished = true;
            break;
        }
        if (len <= need) {
            if (lid == 0u) {
                push_segment(src, start, len);
                seg_need = 0u;
            }
            finished = true;
            break;
        }
        if (or_equal == 0u) {
            choose_pivot(lid, row, src, start, len, need);
        }
        let pivot = bitcast<f32>(workgroupUniformLoad(&pivot_bits));
        let dst = select(SRC_A, SRC_B, src == SRC_A);

        var n_left = 0u;
        var n_right = 0u;
        for (var base = 0u; base < len; base += WG) {
            let i = base + lid;
            let valid = i < len;
            var e = vec2<u32>(INF_BITS, NONE);
            if (valid) {
                e = load_pair(src, row, start + i);
            }
            let v = bitcast<f32>(e.x);
            let goes_left = select(v < pivot, v <= pivot, or_equal == 1u);
            let left = valid && goes_left;
            let right = valid && !goes_left;
            let r = partition_ranks(left, right, lid, lane, sg_id, sg_count);
            if (left) {
                store_pair(dst, row, start + n_left + r.x, e);
            }
            if (right) {
                store_pair(dst, row, start + len - 1u - (n_right + r.z), e);
            }
            n_left += r.y;
            n_right += r.w;
        }
        storageBarrier();

        if (lid == 0u) {
            seg_src = dst;
            seg_or_equal = 0u;
            if (or_equal == 1u && n_left >= need) {
                // Every left element equals the pivot: any `need` of them complete the answer.
                push_segment(dst, start, need);
                seg_need = 0u;
            } else if (n_left >= need) {
                seg_len = n_left;
            } else if (n_left > 0u) {
                push_segment(dst, start, n_left);
                seg_need = need - n_left;
                seg_start = start + n_left;
                seg_len = len - n_left;
            } else {
                // The pivot is the segment's minimum: split off the elements equal to it.
                seg_or_equal = 1u;
            }
        }
        workgroupBarrier();
    }

    if (!finished) {
        if (lid == 0u) {
            failed[row] = 1u;
        }
        return;
    }

    // Gather the kept segments into the output row, then pad rows shorter than `need`.
    let top = workgroupUniformLoad(&stack_top);
    var written = 0u;
    let out_base = row * params.out_stride + params.out_offset;
    for (var s = 0u; s < top; s++) {
        let src = workgroupUniformLoad(&stack_src[s]);
        let start = workgroupUniformLoad(&stack_start[s]);
        let len = workgroupUniformLoad(&stack_len[s]);
        for (var i = lid; i < len; i += WG) {
            let e = load_pair(src, row, start + i);
            out[out_base + written + i] = e;
        }
        written += len;
    }
    // All reads of an input held in the output row are done before it is overwritten.
    storageBarrier();
    for (var i = written + lid; i < params.need; i += WG) {
        out[out_base + i] = vec2<u32>(INF_BITS, NONE);
    }
}
