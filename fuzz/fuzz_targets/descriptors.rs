//! Memory-region and peer-configuration descriptors from a peer.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = rpma::MrRemote::from_descriptor(data) {
        assert!(data.len() >= rpma::MR_DESCRIPTOR_SIZE);
        let _ = (m.addr(), m.size(), m.rkey(), m.flush_type());
    }
    if let Ok(c) = rpma::PeerCfg::from_descriptor(data) {
        assert_eq!(c.direct_write_to_pmem(), data[0] != 0);
    }
});
