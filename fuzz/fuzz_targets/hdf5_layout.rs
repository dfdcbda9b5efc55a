//! Fuzzes `knng::io::check_hdf5_layout`, the check of an HDF5 dataset's shape, maximum
//! dimensions and chunk sizes (decoded from the input by `harness::decode_layout`).
#![no_main]

#[path = "../common/harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = harness::run_hdf5_layout(data);
});
