//! WGSL sources, embedded in the binary.

/// Row preparation: centring, normalisation and squared norms (`shaders/norms.wgsl`).
pub const NORMS: &str = include_str!("../../shaders/norms.wgsl");
/// The register-blocked distance GEMM (`shaders/distance.wgsl`).
pub const DISTANCE: &str = include_str!("../../shaders/distance.wgsl");
/// Quick multi-select, without its rank primitive (`shaders/select.wgsl`).
const SELECT: &str = include_str!("../../shaders/select.wgsl");
/// Partition ranks from subgroup ballots (`shaders/rank_subgroup.wgsl`).
const RANK_SUBGROUP: &str = include_str!("../../shaders/rank_subgroup.wgsl");
/// One subgroup per row, for short rows (`shaders/select_per_subgroup.wgsl`).
const SELECT_PER_SUBGROUP: &str = include_str!("../../shaders/select_per_subgroup.wgsl");
/// Partition ranks from a workgroup prefix sum (`shaders/rank_workgroup.wgsl`).
const RANK_WORKGROUP: &str = include_str!("../../shaders/rank_workgroup.wgsl");

/// The select shader with the rank primitive the adapter supports. With subgroups it also
/// has the one-subgroup-per-row entry point `select_rows_per_subgroup`.
pub fn select(subgroups: bool) -> String {
    if subgroups {
        format!("{SELECT}\n{RANK_SUBGROUP}\n{SELECT_PER_SUBGROUP}")
    } else {
        format!("{SELECT}\n{RANK_WORKGROUP}")
    }
}

/// Every complete shader module knng builds: (name, source, needs subgroup operations).
pub fn all() -> Vec<(&'static str, String, bool)> {
    vec![
        ("norms", NORMS.to_string(), false),
        ("distance", DISTANCE.to_string(), false),
        ("select_subgroup", select(true), true),
        ("select_workgroup", select(false), false),
    ]
}
