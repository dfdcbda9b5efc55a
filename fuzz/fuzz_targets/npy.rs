//! Fuzzes the reader of `.npy` files (the whole input is the file).
#![no_main]

#[path = "../common/harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = harness::run_file_target("npy", data);
});
