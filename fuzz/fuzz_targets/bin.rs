//! Fuzzes the reader of `.fbin` / `.u8bin` / `.i8bin` / `.ibin` files (the first byte picks the extension).
#![no_main]

#[path = "../common/harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = harness::run_file_target("bin", data);
});
