//! The examples' private-data layout (`CommonData`) from a peer.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(cd) = rpma::CommonData::decode(data) {
        assert!(data.len() >= rpma::common_data::COMMON_DATA_SIZE);
        let _ = (cd.data_offset, cd.mr.size(), cd.peer_cfg);
    }
});
