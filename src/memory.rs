//! Host memory: what a run will hold, and what the machine can give, so that a run too large
//! for the machine is refused before it allocates instead of aborting when an allocation
//! fails.

use crate::error::{Error, Result};
use crate::strategy::Problem;

/// Host memory a search or graph allocates beyond its inputs, in bytes: the answer (an id and
/// a distance a neighbour), the candidate lists of the first round (fp32 keys, ids and float64
/// keys for the exact re-ranking, `kc` a query) and the prepared copies of the rows.
///
/// `corpus_rows` x `dim` is the corpus, `query_rows` the queries (for a graph, the same rows),
/// `k` the neighbours a query. An estimate: a run holds about this much at its peak.
pub fn host_memory_estimate(corpus_rows: usize, query_rows: usize, dim: usize, k: usize) -> u64 {
    parts(corpus_rows, query_rows, dim, k).iter().map(|(_, bytes)| bytes).fold(0u64, |a, &b| a.saturating_add(b))
}

fn parts(corpus_rows: usize, query_rows: usize, dim: usize, k: usize) -> [(&'static str, u64); 3] {
    let kc = crate::search::initial_candidates(k).min(corpus_rows.max(k)) as u128;
    let (n, nq, d, k) = (corpus_rows as u128, query_rows as u128, dim as u128, k as u128);
    let clamp = |b: u128| b.min(u64::MAX as u128) as u64;
    [
        ("answers", clamp(nq * k * 8)),
        ("candidate lists", clamp(nq * kc * 16)),
        ("prepared rows", clamp((n + nq) * (d * 4 + 16))),
    ]
}

/// Host memory a partitioned graph holds at its peak, in bytes, beyond its input: the rows'
/// statistics and bounds, for each of `workers` jobs in flight its two blocks of rows
/// prepared, their candidate lists and a pair's column lists (2 kc pairs a row), the merged
/// lists of `lists_in_memory` blocks of `block_rows` rows, and the answers of two blocks of
/// rows.
pub(crate) fn partitioned_estimate(p: Problem, block_rows: usize, workers: usize, lists_in_memory: usize) -> u64 {
    let kc = crate::search::initial_candidates(p.k).min(p.n.max(p.k)) as u128;
    let (n, d, k, r) = (p.n as u128, p.d as u128, p.k as u128, block_rows as u128);
    let lists = r * (kc * 16 + 1);
    let job = 3 * lists + 2 * r * (d * 4 + 16);
    let bytes = n * 20 + workers as u128 * job + lists_in_memory as u128 * lists + 2 * r * k * 8;
    bytes.min(u64::MAX as u128) as u64
}

/// Host memory a whole-data graph holds whose answers go to disk as they are ranked
/// (`Strategy::SingleOnDisk`), in bytes, beyond its input: per row its exclusion, its place
/// in the rounds, its statistics and error bound, its status and flags, plus the answers of
/// the query tiles being copied out.
pub(crate) fn on_disk_estimate(p: Problem) -> u64 {
    const PER_ROW: u128 = 4 + 8 + 4 + 8 + 8 + 4 + 2 + 8;
    const TILE_ROWS_IN_FLIGHT: u128 = 1 << 17;
    let (n, k) = (p.n as u128, p.k as u128);
    (n * PER_ROW + n.min(TILE_ROWS_IN_FLIGHT) * k * 8).min(u64::MAX as u128) as u64
}

/// Host memory this process may still allocate, in bytes: the kernel's estimate of available
/// memory (`MemAvailable`), lowered by a cgroup's limit where one applies. `None` where the
/// system does not say (not Linux).
pub fn available_host_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?
        .saturating_mul(1024);
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
    let cgroup_room = match (read("/sys/fs/cgroup/memory.max"), read("/sys/fs/cgroup/memory.current")) {
        (Some(max), Some(current)) => Some(max.saturating_sub(current)),
        _ => match (
            read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
            read("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
        ) {
            (Some(max), Some(used)) => Some(max.saturating_sub(used)),
            _ => None,
        },
    };
    Some(cgroup_room.map_or(available, |room| room.min(available)))
}

/// Refuses a run whose estimate ([`host_memory_estimate`]) exceeds `limit` (default:
/// [`available_host_memory`]) with [`Error::HostMemory`], whose message names both and the
/// ways around it. `inputs`: bytes of inputs the caller has yet to read, counted with the
/// run, so that a command-line tool can refuse before it reads them.
pub fn check_host_memory(
    corpus_rows: usize,
    query_rows: usize,
    dim: usize,
    k: usize,
    inputs: u64,
    limit: Option<u64>,
) -> Result<()> {
    let (limit, source) = match limit {
        Some(l) => (l, "the limit set"),
        None => match available_host_memory() {
            Some(a) => (a, "available"),
            None => return Ok(()),
        },
    };
    let parts = parts(corpus_rows, query_rows, dim, k);
    let needed = parts.iter().fold(inputs, |a, (_, b)| a.saturating_add(*b));
    if needed <= limit {
        return Ok(());
    }
    let mut shown: Vec<String> = Vec::new();
    if inputs > 0 {
        shown.push(format!("inputs {}", bytes(inputs)));
    }
    shown.extend(parts.iter().filter(|(_, b)| *b > 0).map(|(what, b)| format!("{what} {}", bytes(*b))));
    Err(Error::HostMemory(format!(
        "this run needs about {} of host memory ({}) but {} is {source}; use a smaller k or fewer \
         queries, or set the limit with `max_host_memory` (`--max-memory SIZE` on the command line)",
        bytes(needed),
        shown.join(", "),
        bytes(limit)
    )))
}

/// Bytes of a whole answer: an id and a distance for each of `k` neighbours of `rows` rows.
pub(crate) fn answer_bytes(rows: usize, k: usize) -> u64 {
    (rows as u128 * k as u128 * 8).min(u64::MAX as u128) as u64
}

/// Refuses an answer of `rows x k` that `limit` cannot hold (`explicit`: the limit was set,
/// rather than what the machine has available).
pub(crate) fn check_answers(rows: usize, k: usize, limit: Option<u64>, explicit: bool) -> Result<()> {
    let needed = answer_bytes(rows, k);
    match limit {
        Some(limit) if needed > limit => {
            let source = if explicit { "the limit set" } else { "available" };
            Err(Error::HostMemory(format!(
                "the answers alone take {} of host memory but {} is {source}; use a smaller k, or take the \
                 rows as they are finished (`Knn::graph_streamed`, or the command line, which writes them to \
                 the output as they come)",
                bytes(needed),
                bytes(limit)
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a partitioned graph whose [`partitioned_estimate`] exceeds `limit` (default:
/// [`available_host_memory`]), naming both and the ways around it.
pub(crate) fn check_partitioned(
    p: Problem,
    block_rows: usize,
    workers: usize,
    lists_in_memory: usize,
    limit: Option<u64>,
) -> Result<()> {
    let Some((limit, source)) =
        limit.map(|l| (l, "the limit set")).or(available_host_memory().map(|a| (a, "available")))
    else {
        return Ok(());
    };
    let needed = partitioned_estimate(p, block_rows, workers, lists_in_memory);
    if needed <= limit {
        return Ok(());
    }
    Err(Error::HostMemory(format!(
        "this graph needs about {} of host memory in blocks of {block_rows} rows but {} is {source}; use \
         smaller blocks (`--block-rows`), fewer devices or a smaller k, or raise the limit (`--max-memory SIZE`)",
        bytes(needed),
        bytes(limit)
    )))
}

/// Bytes in the largest unit that keeps a whole number in front.
pub(crate) fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = b as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_counts_answers_and_candidates() {
        // 50000 rows, k = 49999: 20 GB of answers and more of candidates.
        let e = host_memory_estimate(50000, 50000, 2, 49999);
        assert!(e > 50000 * 49999 * 24, "{e}");
        assert!(host_memory_estimate(1000, 1000, 8, 10) < 1 << 20);
        assert_eq!(host_memory_estimate(usize::MAX, usize::MAX, usize::MAX, usize::MAX), u64::MAX);
    }

    #[test]
    fn refusal_names_estimate_limit_and_way_around() {
        let msg = check_host_memory(50000, 50000, 2, 49999, 400_000, Some(1 << 30)).unwrap_err().to_string();
        assert!(msg.contains("host memory") && msg.contains("1.0 GiB") && msg.contains("smaller k"), "{msg}");
        assert!(msg.contains("answers 18.6 GiB") && msg.contains("--max-memory"), "{msg}");
        assert!(check_host_memory(100, 100, 4, 5, 0, Some(1 << 30)).is_ok());
    }

    #[test]
    fn units() {
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
