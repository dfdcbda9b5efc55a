//! WGSL sources, embedded in the binary.

/// Row preparation: centring, normalisation and squared norms (`shaders/norms.wgsl`).
pub const NORMS: &str = include_str!("../../shaders/norms.wgsl");
/// The register-blocked distance GEMM (`shaders/distance.wgsl`), before unrolling.
const DISTANCE: &str = include_str!("../../shaders/distance.wgsl");
/// Copies the previous query tile's ranked answers into the read-back buffer from inside the
/// distance GEMM (`shaders/distance_publish.wgsl`).
const DISTANCE_PUBLISH: &str = include_str!("../../shaders/distance_publish.wgsl");
/// The two-sided filter of a dense block, a kernel of its own (`shaders/filter_two_sided.wgsl`).
const FILTER_TWO_SIDED: &str = include_str!("../../shaders/filter_two_sided.wgsl");
/// A bounded sweep's sample rows, gathered from the prepared corpus (`shaders/gather_rows.wgsl`).
pub const GATHER_ROWS: &str = include_str!("../../shaders/gather_rows.wgsl");
/// A bounded sweep's selects of short rows in workgroup memory (`shaders/bounded_lists.wgsl`),
/// before unrolling.
const BOUNDED_LISTS: &str = include_str!("../../shaders/bounded_lists.wgsl");
/// Quick multi-select, without its entry point (`shaders/select.wgsl`).
const SELECT: &str = include_str!("../../shaders/select.wgsl");
/// Ballot helpers and the `select_rows` entry point with subgroups (`shaders/select_entry_subgroup.wgsl`).
const SELECT_ENTRY_SUBGROUP: &str = include_str!("../../shaders/select_entry_subgroup.wgsl");
/// Exact float64 keys of the candidates, the part shared by both ways of reading rows
/// (`shaders/refine.wgsl`); needs SHADER_F64.
const REFINE: &str = include_str!("../../shaders/refine.wgsl");
/// Rows read one f32 per load (`shaders/refine_scalar.wgsl`).
const REFINE_SCALAR: &str = include_str!("../../shaders/refine_scalar.wgsl");
/// Rows read as vec4s, several loads in flight (`shaders/refine_vec4.wgsl`), before unrolling.
const REFINE_VEC4: &str = include_str!("../../shaders/refine_vec4.wgsl");
/// Ranking by exact keys and the certificate, per row (`shaders/certify.wgsl`); needs SHADER_F64.
pub const CERTIFY: &str = include_str!("../../shaders/certify.wgsl");
/// One subgroup per row, for short rows (`shaders/select_per_subgroup.wgsl`).
const SELECT_PER_SUBGROUP: &str = include_str!("../../shaders/select_per_subgroup.wgsl");
/// The `select_rows` entry point without subgroups (`shaders/select_entry_workgroup.wgsl`).
const SELECT_ENTRY_WORKGROUP: &str = include_str!("../../shaders/select_entry_workgroup.wgsl");

/// One pass of the radix sort, without its entry point `scatter` (`shaders/radix_sort.wgsl`).
const RADIX_SORT: &str = include_str!("../../shaders/radix_sort.wgsl");
/// `scatter` ranking with subgroup scans (`shaders/radix_entry_subgroup.wgsl`).
const RADIX_ENTRY_SUBGROUP: &str = include_str!("../../shaders/radix_entry_subgroup.wgsl");
/// `scatter` ranking with a workgroup-memory scan (`shaders/radix_entry_workgroup.wgsl`).
const RADIX_ENTRY_WORKGROUP: &str = include_str!("../../shaders/radix_entry_workgroup.wgsl");
/// The exclusive prefix sum of a u32 array (`shaders/prefix_sum.wgsl`).
pub const PREFIX_SUM: &str = include_str!("../../shaders/prefix_sum.wgsl");

/// The batch index sort selector's kernels around the radix sort (`shaders/sort_select.wgsl`).
pub const SORT_SELECT: &str = include_str!("../../shaders/sort_select.wgsl");

/// The low-dimensional grid's kernels (`shaders/grid.wgsl`).
pub const GRID: &str = include_str!("../../shaders/grid.wgsl");

/// Grid queries' answers ranked and proven on the GPU (`shaders/grid_prove.wgsl`), without
/// its `MAX_KC`; needs SHADER_F64.
const GRID_PROVE: &str = include_str!("../../shaders/grid_prove.wgsl");

/// [`GRID_PROVE`] for queries of at most `GRID_PROVE_MAX_KC` heap slots.
pub fn grid_prove() -> String {
    format!("const MAX_KC: u32 = {}u;\n{GRID_PROVE}", super::kernels::GRID_PROVE_MAX_KC)
}

/// The cover tree's construction (`shaders/cover_tree.wgsl`), without its points' chunks.
const COVER_TREE: &str = include_str!("../../shaders/cover_tree.wgsl");

/// The cover tree's construction reading its points from `chunks` bindings: the first is
/// `points` (binding 1), the others `points_1`, ... from binding 9 on, after the build's own.
pub fn cover_tree(chunks: usize) -> String {
    let mut source = format!("{COVER_TREE}\n");
    for c in 1..chunks {
        source += &format!("@group(0) @binding({}) var<storage, read> points_{c}: array<f32>;\n", 8 + c);
    }
    source += "\nfn point_in_chunk(chunk: u32, at: u32) -> f32 {\n    switch chunk {\n";
    for c in 1..chunks {
        source += &format!("        case {c}u: {{ return points_{c}[at]; }}\n");
    }
    source += "        default: { return points[at]; }\n    }\n}\n";
    source
}

/// The cover tree's queries against cover sets (`shaders/cover_tree_query.wgsl`).
pub const COVER_TREE_QUERY: &str = include_str!("../../shaders/cover_tree_query.wgsl");

/// The radix sort's pass with the `scatter` entry point the adapter supports.
pub fn radix_sort(subgroups: bool) -> String {
    let entry = if subgroups { RADIX_ENTRY_SUBGROUP } else { RADIX_ENTRY_WORKGROUP };
    format!(
        "{RADIX_SORT}
{entry}"
    )
}

/// The select shader with the entry point the adapter supports. With subgroups it also
/// has the one-subgroup-per-row entry point `select_rows_per_subgroup`.
pub fn select(subgroups: bool) -> String {
    if subgroups {
        format!("{SELECT}\n{SELECT_ENTRY_SUBGROUP}\n{SELECT_PER_SUBGROUP}")
    } else {
        format!("{SELECT}\n{SELECT_ENTRY_WORKGROUP}")
    }
}

/// Every workgroup of the plain distance module computes a tile.
const PLAIN_TILES: &str = "
fn publishes_instead(group: u32, lid: u32) -> bool {
    return false;
}

fn gemm_tile(group: u32) -> u32 {
    return group;
}
";

/// The distance GEMM for workgroup tiles `depth` deep, its marked loops unrolled. `publish`:
/// with the bindings and workgroups that publish a query tile's answers (where mapped buffers
/// can be bound as storage), else every workgroup a tile.
pub fn distance(depth: u32, publish: bool) -> String {
    let publish = if publish {
        format!("const PUBLISH_STRIDE: u32 = {}u;\n{DISTANCE_PUBLISH}", super::kernels::PUBLISH_STRIDE)
    } else {
        PLAIN_TILES.to_string()
    };
    unroll(&format!("{DISTANCE}\n{publish}"), &[("BK", depth)])
}

/// The two-sided filter of a dense block, with its strip's shape as constants and its marked
/// loops unrolled.
pub fn filter_two_sided() -> String {
    let (rows, cols) = super::kernels::FILTER_STRIP;
    let source = format!("const STRIP: u32 = {rows}u;\nconst WIDTH: u32 = {cols}u;\n{FILTER_TWO_SIDED}");
    unroll(&source, &[("STRIP", rows as u32)])
}

/// A bounded sweep's short selects, their marked loops unrolled (`PER` keys an invocation).
pub fn bounded_lists() -> String {
    let per = (crate::plan::MAX_SHORT_SELECT / 256) as u32;
    unroll(BOUNDED_LISTS, &[("PER", per)])
}

/// Loads of each row in flight per invocation and step in refine_vec4.wgsl (`DEPTH`).
const REFINE_DEPTH: u32 = 4;

/// The exact-key kernels for any row length (`vec4: false`) or for lengths a multiple of 4,
/// their marked loops unrolled.
pub fn refine(vec4: bool) -> String {
    let rows = if vec4 { REFINE_VEC4 } else { REFINE_SCALAR };
    let source = format!("const DEPTH: u32 = {REFINE_DEPTH}u;\n{REFINE}\n{rows}");
    unroll(&source, &[("DEPTH", REFINE_DEPTH)])
}

/// Expands each loop marked `// unroll(VAR, BOUND)` into one block per iteration, each binding
/// VAR as a constant. BOUND is a literal such as `4u`, or an override constant named in
/// `overrides` with the value the caller also gives the pipeline. The marked line must be
/// followed by `for (var VAR = 0u; VAR < BOUND; VAR++) {` and the loop must end with a `}` at
/// the indentation of that line; anything else is left as it is. Marked loops inside a marked
/// loop are expanded too.
fn unroll(source: &str, overrides: &[(&str, u32)]) -> String {
    let mut out = String::with_capacity(source.len() * 2);
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        let Some((var, bound)) =
            line.trim().strip_prefix("// unroll(").and_then(|rest| rest.strip_suffix(')')?.split_once(", "))
        else {
            continue;
        };
        let count = match overrides.iter().find(|(name, _)| *name == bound) {
            Some(&(_, value)) => value,
            None => match bound.strip_suffix('u').and_then(|n| n.parse().ok()) {
                Some(n) => n,
                None => continue,
            },
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        let header = format!("{indent}for (var {var} = 0u; {var} < {bound}; {var}++) {{");
        if lines.peek() != Some(&header.as_str()) {
            continue;
        }
        lines.next();
        let close = format!("{indent}}}");
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != close).collect();
        let body = unroll(&body.join("\n"), overrides);
        for i in 0..count {
            out.push_str(&format!("{indent}{{\n{indent}    const {var} = {i}u;\n"));
            out.push_str(&body);
            out.push_str(&close);
            out.push('\n');
        }
    }
    out
}

/// A complete shader module and the optional features it needs.
pub struct ShaderModuleInfo {
    /// Short name.
    pub name: &'static str,
    /// WGSL source.
    pub source: String,
    /// Uses subgroup operations (`Features::SUBGROUP`).
    pub subgroups: bool,
    /// Uses f64 (`Features::SHADER_F64`; Metal has none).
    pub f64: bool,
}

/// Every complete shader module knng builds.
pub fn all() -> Vec<ShaderModuleInfo> {
    let m = |name, source: String, subgroups, f64| ShaderModuleInfo { name, source, subgroups, f64 };
    vec![
        m("norms", NORMS.to_string(), false, false),
        m("distance", distance(super::kernels::TILE_K, false), false, false),
        m("distance_publish", distance(super::kernels::TILE_K, true), false, false),
        m("filter_two_sided", filter_two_sided(), false, false),
        m("gather_rows", GATHER_ROWS.to_string(), false, false),
        m("bounded_lists", bounded_lists(), false, false),
        m("select_subgroup", select(true), true, false),
        m("select_workgroup", select(false), false, false),
        m("refine_scalar", refine(false), false, true),
        m("refine_vec4", refine(true), false, true),
        m("certify", CERTIFY.to_string(), false, true),
        m("radix_sort_subgroup", radix_sort(true), true, false),
        m("radix_sort_workgroup", radix_sort(false), false, false),
        m("prefix_sum", PREFIX_SUM.to_string(), false, false),
        m("sort_select", SORT_SELECT.to_string(), false, false),
        m("grid", GRID.to_string(), false, false),
        m("grid_prove", grid_prove(), false, true),
        m("cover_tree", cover_tree(1), false, false),
        m("cover_tree_chunked", cover_tree(super::kernels::COVER_TREE_MOST_CHUNKS), false, false),
        m("cover_tree_query", COVER_TREE_QUERY.to_string(), false, false),
    ]
}
