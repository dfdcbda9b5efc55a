// Quick multi-select with one subgroup per row, for short rows (merging two candidate lists of
// a few dozen to a few hundred pairs), where a whole workgroup per row would leave most of its
// invocations idle. Appended after select.wgsl and select_entry_subgroup.wgsl, whose bindings and
// helpers it shares; only built for adapters with subgroups.
//
// Ranks come from the ballot alone: no workgroup scan. The rows of a workgroup advance in
// lockstep passes so that the storage barrier between passes stays in uniform control flow;
// a subgroup whose row is done idles until the others finish. Within a pass every branch is
// uniform across its subgroup, so ballots and shuffles see the whole subgroup.
//
// params.rows_per_group holds the rows per workgroup: 256 / the adapter's largest subgroup size, so
// that the host's dispatch is right whatever size the driver picks.

const ROW_STACK: u32 = 48u;
// Largest shortlist length x list slots per lane merged by insertion.
const INSERT_WORK: u32 = 256u;

var<workgroup> subgroup_busy: array<u32, 256>;
var<workgroup> any_busy: u32;

// An integer hash (a 32-bit finaliser): sample offsets that vary with the row and the pass.
fn mix_bits(x: u32) -> u32 {
    var h = x ^ (x >> 16u);
    h *= 0x7feb352du;
    h ^= h >> 15u;
    h *= 0x846ca68bu;
    return h ^ (h >> 16u);
}

fn first_lane(ballot: vec4<u32>) -> u32 {
    for (var w = 0u; w < 4u; w++) {
        if (ballot[w] != 0u) {
            return w * 32u + firstTrailingBit(ballot[w]);
        }
    }
    return 0u;
}

// Merges a short shortlist into the running list in place: each pair replaces the list's
// largest key if it is smaller. Lane i owns list slots i, i + size, ..., so every slot is
// read and written by one invocation only. Returns the list's largest key afterwards.
// Cheaper than quickselect passes when count x need / size is small, as on most distance
// tiles once the bound is tight.
fn insert_shortlist(row: u32, lane: u32, size: u32, count: u32) -> f32 {
    let base = row * params.out_stride;
    for (var s = 0u; s < count; s++) {
        let e = shortlist[row * params.shortlist_cap + s];
        var largest = bitcast<f32>(0xff800000u);
        var at = NONE;
        for (var i = lane; i < params.need; i += size) {
            let v = bitcast<f32>(out[base + i].x);
            if (at == NONE || v > largest) {
                largest = v;
                at = i;
            }
        }
        let top = subgroupMax(largest);
        if (bitcast<f32>(e.x) < top) {
            let owners = subgroupBallot(at != NONE && largest == top);
            if (lane == first_lane(owners)) {
                out[base + at] = e;
            }
        }
    }
    var largest = bitcast<f32>(0xff800000u);
    for (var i = lane; i < params.need; i += size) {
        largest = max(largest, bitcast<f32>(out[base + i].x));
    }
    return subgroupMax(largest);
}

// The sample at the need/len quantile of one sample per lane. Samples are a stride apart
// from an offset that changes with the pass: lists merged from sorted data are often nearly
// monotone, and fixed positions then keep sampling the same end of the few keys in excess, so
// that each pass dropped one key and long rows ran out of passes.
fn subgroup_pivot(lane: u32, size: u32, row: u32, src: u32, start: u32, len: u32, need: u32, pass_no: u32) -> f32 {
    let n_samples = min(len, size);
    let stride = max(len / size, 1u);
    let offset = mix_bits(row * 0x9e3779b9u + pass_no) % stride;
    var mine = bitcast<f32>(INF_BITS);
    if (lane < n_samples) {
        mine = bitcast<f32>(load_pair(src, row, start + lane * stride + offset).x);
    }
    var rank = 0u;
    for (var j = 0u; j < size; j++) {
        let s = subgroupShuffle(mine, j);
        rank += select(0u, 1u, s < mine || (s == mine && j < lane));
    }
    let quantile = f32(need) / f32(len) * f32(n_samples);
    let target_rank = min(n_samples - 1u, u32(quantile) + 1u);
    let hit = subgroupBallot(lane < n_samples && rank == target_rank);
    return subgroupShuffle(mine, first_lane(hit));
}

@compute @workgroup_size(256)
fn select_rows_per_subgroup(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
    @builtin(subgroup_id) sg_id: u32,
) {
    let rows_per_group = params.rows_per_group;
    let row = (wid.x + wid.y * params.groups_x) * rows_per_group + sg_id;

    var src = SRC_INPUT;
    var start = 0u;
    var need = params.need;
    var or_equal = false;
    var pivot = 0.0;
    var stack_src: array<u32, ROW_STACK>;
    var stack_start: array<u32, ROW_STACK>;
    var stack_len: array<u32, ROW_STACK>;
    var top = 0u;
    var done = sg_id >= rows_per_group || row >= params.rows;
    var len = 0u;
    // Nothing under the bound in this tile: the running list and bound stand.
    var unchanged = false;
    // A shortlist overflowed with no tile's list to fall back on (`mark_incomplete`).
    var incomplete = false;
    if (!done) {
        len = row_length(row);
        unchanged = from_shortlist && len == params.need;
        incomplete = !from_shortlist && params.in_stride == NONE;
        done = unchanged || incomplete;
    }
    // A few pairs under the bound: inserted one by one instead of selected.
    var inserted = false;
    if (!done && from_shortlist) {
        let count = len - params.need;
        if (count * ((params.need + size - 1u) / size) <= INSERT_WORK) {
            let bound = insert_shortlist(row, lane, size, count);
            if (lane == 0u) {
                row_state[row].y = lowered_bound(row, bound);
                end_merge(row);
            }
            inserted = true;
            done = true;
        }
    }

    for (var pass_no = 0u; pass_no < MAX_PASSES; pass_no++) {
        if (lane == 0u) {
            subgroup_busy[sg_id] = select(1u, 0u, done);
        }
        workgroupBarrier();
        if (lid == 0u) {
            var busy = 0u;
            for (var s = 0u; s < 256u / size; s++) {
                busy |= subgroup_busy[s];
            }
            any_busy = busy;
        }
        if (workgroupUniformLoad(&any_busy) == 0u) {
            break;
        }

        if (!done) {
            if (need == 0u || len <= need) {
                if (need > 0u) {
                    stack_src[top] = src;
                    stack_start[top] = start;
                    stack_len[top] = len;
                    top += 1u;
                }
                need = 0u;
                done = true;
            } else {
                if (!or_equal) {
                    pivot = subgroup_pivot(lane, size, row, src, start, len, need, pass_no);
                }
                let dst = select(SRC_A, SRC_B, src == SRC_A);
                var n_left = 0u;
                var n_right = 0u;
                for (var base = 0u; base < len; base += size) {
                    let i = base + lane;
                    let valid = i < len;
                    var e = vec2<u32>(INF_BITS, NONE);
                    if (valid) {
                        e = load_pair(src, row, start + i);
                    }
                    let v = bitcast<f32>(e.x);
                    let goes_left = select(v < pivot, v <= pivot, or_equal);
                    let left = subgroupBallot(valid && goes_left);
                    let right = subgroupBallot(valid && !goes_left);
                    if (valid && goes_left) {
                        store_pair(dst, row, start + n_left + bits_below(left, lane), e);
                    }
                    if (valid && !goes_left) {
                        store_pair(dst, row, start + len - 1u - (n_right + bits_below(right, lane)), e);
                    }
                    n_left += bits_all(left);
                    n_right += bits_all(right);
                }
                src = dst;
                let was_or_equal = or_equal;
                or_equal = false;
                if (was_or_equal && n_left >= need) {
                    stack_src[top] = dst;
                    stack_start[top] = start;
                    stack_len[top] = need;
                    top += 1u;
                    need = 0u;
                    done = true;
                } else if (n_left >= need) {
                    len = n_left;
                } else if (n_left > 0u) {
                    stack_src[top] = dst;
                    stack_start[top] = start;
                    stack_len[top] = n_left;
                    top += 1u;
                    need -= n_left;
                    start += n_left;
                    len -= n_left;
                } else {
                    or_equal = true;
                }
            }
        }
        storageBarrier();
    }

    if (sg_id >= rows_per_group || row >= params.rows) {
        return;
    }
    if (!done) {
        if (lane == 0u) {
            failed[row] = failed[row] | 1u;
            end_merge(row);
        }
        return;
    }
    if (incomplete) {
        if (lane == 0u) {
            mark_incomplete(row);
        }
        return;
    }
    if (unchanged) {
        if (lane == 0u) {
            failed[row] = failed[row] | 2u;
        }
        return;
    }
    if (inserted) {
        return;
    }
    let out_base = row * params.out_stride + params.out_offset;
    var written = 0u;
    var largest = bitcast<f32>(0xff800000u);
    for (var s = 0u; s < top; s++) {
        for (var i = lane; i < stack_len[s]; i += size) {
            let e = load_pair(stack_src[s], row, stack_start[s] + i);
            out[out_base + written + i] = e;
            largest = max(largest, bitcast<f32>(e.x));
        }
        written += stack_len[s];
    }
    for (var i = written + lane; i < params.need; i += size) {
        out[out_base + i] = vec2<u32>(INF_BITS, NONE);
        largest = bitcast<f32>(INF_BITS);
    }
    // Written into the running list: its largest key bounds the next tile's shortlist.
    largest = subgroupMax(largest);
    if (lane == 0u) {
        if (params.out_offset == 0u) {
            row_state[row].y = lowered_bound(row, largest);
        }
        end_merge(row);
    }
}
