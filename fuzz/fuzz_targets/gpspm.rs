//! GPSPM flush requests and responses from a peer.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = rpma::gpspm::FlushRequest::decode(data) {
        let _ = r.check(u64::from_le_bytes(data[..8].try_into().unwrap()));
        assert_eq!(rpma::gpspm::FlushRequest::decode(&r.encode()).unwrap(), r);
    }
    let _ = rpma::gpspm::FlushResponse::decode(data);
});
