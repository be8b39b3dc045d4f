//! `props::gpspm` (fuzz/props.rs) on the fuzzer's inputs.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../props.rs"]
#[allow(dead_code)] // each target uses one property
mod props;

fuzz_target!(|data: &[u8]| props::gpspm(data));
