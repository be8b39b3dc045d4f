//! Memory-region and peer-configuration descriptors from a peer: `props::descriptors` (fuzz/props.rs).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../props.rs"]
#[allow(dead_code)] // each target uses one property
mod props;

fuzz_target!(|data: &[u8]| props::descriptors(data));
