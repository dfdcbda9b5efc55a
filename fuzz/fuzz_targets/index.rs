//! Fuzzes the loader of index files and the search of what it loads (the whole input is the
//! file).
#![no_main]

#[path = "../common/harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = harness::run_index(data);
});
