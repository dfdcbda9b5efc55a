//! A timeline of one process for tuning: with the environment variable `KNNG_TRACE` set,
//! each phase boundary prints its time since the first one to standard error. Off, a mark
//! costs one atomic load.

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Option<Instant>> = OnceLock::new();

/// Prints `what()` with the milliseconds since the process's first mark, when tracing.
pub(crate) fn mark(what: impl FnOnce() -> String) {
    if let Some(start) = START.get_or_init(|| std::env::var_os("KNNG_TRACE").map(|_| Instant::now())) {
        eprintln!("knng-trace {:9.3} ms  {}", start.elapsed().as_secs_f64() * 1e3, what());
    }
}
