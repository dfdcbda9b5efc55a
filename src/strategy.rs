//! The planner's first decision: one pass over the whole data on one engine, or the
//! partitioned graph of P x P blocks dealt to several workers.

use crate::partition::BlockPlan;

/// How a graph is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// The whole data on one engine, which sweeps it plainly, in symmetric blocks or under
    /// bounds (`plan.rs`).
    Single,
    /// Blocks of rows, the blocks with I <= J dealt to the workers (`partition/`).
    Partitioned(BlockPlan),
}

/// Rows a block aims for when the partition is not asked for by size: a block pair of
/// this many rows is a few seconds of a large GPU, short enough for a checkpoint to lose
/// little and for workers to finish close together.
const DEFAULT_BLOCK_ROWS: usize = 1 << 20;

/// Chooses how to compute a graph of `n` rows on `workers` engines. `block_rows` asks for
/// blocks of that many rows; a checkpoint needs blocks to record.
pub(crate) fn choose(n: usize, workers: usize, block_rows: Option<usize>, checkpoint: bool) -> Strategy {
    if let Some(rows) = block_rows {
        return Strategy::Partitioned(BlockPlan::new(n, rows));
    }
    if workers <= 1 && !checkpoint {
        return Strategy::Single;
    }
    // Two blocks a worker at least, so that there are more jobs (P (P + 1) / 2) than workers.
    let blocks = (2 * workers).max(n.div_ceil(DEFAULT_BLOCK_ROWS));
    Strategy::Partitioned(BlockPlan::new(n, n.div_ceil(blocks)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_engine_without_a_checkpoint_takes_the_whole_data() {
        assert_eq!(choose(1 << 24, 1, None, false), Strategy::Single);
    }

    #[test]
    fn several_workers_or_a_checkpoint_take_blocks() {
        let Strategy::Partitioned(plan) = choose(1000, 2, None, false) else { panic!("not partitioned") };
        assert_eq!((plan.count, plan.rows), (4, 250));
        let Strategy::Partitioned(plan) = choose(3 << 20, 1, None, true) else { panic!("not partitioned") };
        assert_eq!(plan.count, 3);
        let Strategy::Partitioned(plan) = choose(100, 1, Some(30), false) else { panic!("not partitioned") };
        assert_eq!((plan.count, plan.rows), (4, 30));
    }
}
