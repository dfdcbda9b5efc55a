//! The planner's first decision: one pass over the whole data on one engine, or the
//! partitioned graph of P x P blocks dealt to several workers.

use crate::partition::BlockPlan;

/// How a graph is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// The whole data on one engine, which sweeps it plainly, in symmetric blocks or under
    /// bounds (`plan.rs`).
    Single,
    /// Blocks of rows, the blocks with I <= J dealt to the first `workers` engines
    /// (`partition/`).
    Partitioned { plan: BlockPlan, workers: usize },
}

/// Rows a block aims for when the partition is not asked for by size: a block pair of
/// this many rows is a few seconds of a large GPU, short enough for a checkpoint to lose
/// little and for workers to finish close together.
const DEFAULT_BLOCK_ROWS: usize = 1 << 20;

/// Fewest rows for which devices that the caller did not list share a graph: below it one
/// device's symmetric sweep, which computes each key once, is about as fast as blocks over
/// two, which compute the off-diagonal keys twice (notes/partition.md).
const DEFAULT_SHARED_ROWS: usize = 1 << 20;

/// What the caller asked for that bears on the choice.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Asked {
    /// `Options::block_rows`.
    pub block_rows: Option<usize>,
    /// A checkpoint directory, which needs blocks to record.
    pub checkpoint: bool,
    /// The devices were listed by the caller rather than found.
    pub devices_listed: bool,
}

/// Chooses how to compute a graph of `n` rows on `workers` engines.
pub(crate) fn choose(n: usize, workers: usize, asked: Asked) -> Strategy {
    if let Some(rows) = asked.block_rows {
        return Strategy::Partitioned { plan: BlockPlan::new(n, rows), workers };
    }
    let share = workers > 1 && (asked.devices_listed || n >= DEFAULT_SHARED_ROWS);
    if !share && !asked.checkpoint {
        return Strategy::Single;
    }
    let workers = if share { workers } else { 1 };
    // Two blocks a worker at least, so that there are more jobs (P (P + 1) / 2) than workers.
    let blocks = (2 * workers).max(n.div_ceil(DEFAULT_BLOCK_ROWS));
    Strategy::Partitioned { plan: BlockPlan::new(n, n.div_ceil(blocks)), workers }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTED: Asked = Asked { block_rows: None, checkpoint: false, devices_listed: true };

    #[test]
    fn one_engine_without_a_checkpoint_takes_the_whole_data() {
        assert_eq!(choose(1 << 24, 1, Asked::default()), Strategy::Single);
    }

    #[test]
    fn several_workers_or_a_checkpoint_take_blocks() {
        let Strategy::Partitioned { plan, workers } = choose(1000, 2, LISTED) else { panic!("not partitioned") };
        assert_eq!((plan.count, plan.rows, workers), (4, 250, 2));
        let asked = Asked { checkpoint: true, ..Asked::default() };
        let Strategy::Partitioned { plan, workers } = choose(3 << 20, 1, asked) else { panic!("not partitioned") };
        assert_eq!((plan.count, workers), (3, 1));
        let asked = Asked { block_rows: Some(30), ..Asked::default() };
        let Strategy::Partitioned { plan, workers } = choose(100, 1, asked) else { panic!("not partitioned") };
        assert_eq!((plan.count, plan.rows, workers), (4, 30, 1));
    }

    #[test]
    fn devices_found_rather_than_listed_share_only_large_graphs() {
        assert_eq!(choose(100_000, 4, Asked::default()), Strategy::Single);
        let Strategy::Partitioned { plan, workers } = choose(1 << 21, 4, Asked::default()) else {
            panic!("not partitioned")
        };
        assert_eq!((plan.count, workers), (8, 4));
        // A small graph with a checkpoint is cut for the checkpoint alone.
        let asked = Asked { checkpoint: true, ..Asked::default() };
        let Strategy::Partitioned { plan, workers } = choose(100_000, 4, asked) else { panic!("not partitioned") };
        assert_eq!((plan.count, workers), (2, 1));
    }
}
