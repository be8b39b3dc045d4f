//! Properties of rpma's parsers of peer input, each checked against an
//! independent decoder written from the wire format (librpma's layouts and
//! rpma's descriptor extension), not from rpma's code. Shared by the fuzz
//! targets (`cargo fuzz run descriptors`, ...) and by the suite's
//! `tests/fuzz_replay.rs`, which runs every property on every test run.

/// Little-endian integer from the first `N` bytes.
fn le<const N: usize>(b: &[u8]) -> u64 {
    b[..N].iter().rev().fold(0, |v, &x| v << 8 | u64::from(x))
}

/// A memory-region descriptor as the wire format defines it: librpma's 21
/// bytes (addr, size, rkey, usage), then optionally rpma's extension (tag
/// 0xE1 and a byte whose allowed bits are 0x02, remote atomics, a usage,
/// and 0x04, a memory window's mark, not a usage); anything else after byte
/// 21 is ignored. `None` where a peer's descriptor is refused; else the
/// fields, the usage and the window mark.
pub fn expected_mr(b: &[u8]) -> Option<(u64, u64, u32, u16, bool)> {
    if b.len() < 21 {
        return None;
    }
    let ext = match b.get(21) {
        Some(0xE1) => match b.get(22) {
            Some(&e) if e != 0 && e & !0x06 == 0 => e,
            _ => return None,
        },
        _ => 0,
    };
    if b[20] == 0 && ext & 0x02 == 0 {
        return None;
    }
    let usage = u16::from_le_bytes([b[20], ext & 0x02]);
    Some((le::<8>(b), le::<8>(&b[8..]), le::<4>(&b[16..]) as u32, usage, ext & 0x04 != 0))
}

/// Descriptors of regions and of peer configurations.
pub fn descriptors(data: &[u8]) {
    let got = rpma::MrRemote::from_descriptor(data);
    match (&got, expected_mr(data)) {
        (Ok(m), Some((addr, size, rkey, usage, window))) => {
            assert_eq!(
                (m.addr(), m.size(), m.rkey(), m.usage().bits(), m.is_window()),
                (addr, size, rkey, usage, window),
                "{data:02x?}"
            );
            assert_eq!(
                m.flush_type(),
                m.usage() & (rpma::Usage::FLUSH_TYPE_VISIBILITY | rpma::Usage::FLUSH_TYPE_PERSISTENT)
            );
        }
        (Err(e), None) => assert_eq!(e.code(), rpma::error::RPMA_E_INVAL, "{data:02x?}: {e}"),
        (got, want) => panic!("{data:02x?}: rpma says {got:?}, the wire format {want:?}"),
    }
    match (rpma::PeerCfg::from_descriptor(data), data.first()) {
        (Ok(c), Some(&b)) => {
            assert_eq!(c.direct_write_to_pmem(), b != 0);
            let again = rpma::PeerCfg::from_descriptor(&c.descriptor()).unwrap();
            assert_eq!(again.direct_write_to_pmem(), c.direct_write_to_pmem(), "round trip");
        }
        (Err(_), None) => {}
        (got, first) => panic!("{data:02x?}: peer configuration {got:?}, first byte {first:?}"),
    }
}

/// librpma's examples' private data: `u16 data_offset; u8 mr_desc_size;
/// u8 pcfg_desc_size; u8 descriptors[24]` (CM padding after it ignored).
pub fn private_data(data: &[u8]) {
    let got = rpma::CommonData::decode(data);
    let want = (|| {
        if data.len() < 28 {
            return None;
        }
        let (m, p) = (data[2] as usize, data[3] as usize);
        if m + p > 24 {
            return None;
        }
        let d = &data[4..28];
        let mr = expected_mr(&d[..m])?;
        let pcfg = if p > 0 { Some(d[m] != 0) } else { None };
        Some((le::<2>(data) as u16, mr, pcfg))
    })();
    match (&got, want) {
        (Ok(cd), Some((off, (addr, size, rkey, usage, window), pcfg))) => {
            assert_eq!(cd.data_offset, off);
            let m = &cd.mr;
            assert_eq!(
                (m.addr(), m.size(), m.rkey(), m.usage().bits(), m.is_window()),
                (addr, size, rkey, usage, window)
            );
            assert_eq!(cd.peer_cfg.map(|c| c.direct_write_to_pmem()), pcfg, "{data:02x?}");
        }
        (Err(e), None) => assert_eq!(e.code(), rpma::error::RPMA_E_INVAL, "{data:02x?}: {e}"),
        (got, want) => panic!("{data:02x?}: rpma says {got:?}, the wire format {want:?}"),
    }
}

/// GPSPM flush requests and responses (protobuf): what decodes encodes
/// back to the same message, and checking a request against any region
/// size never panics.
pub fn gpspm(data: &[u8]) {
    if let Ok(r) = rpma::gpspm::FlushRequest::decode(data) {
        let size = if data.len() >= 8 { le::<8>(data) } else { u64::MAX };
        let _ = r.check(size);
        let _ = r.check(0);
        assert_eq!(rpma::gpspm::FlushRequest::decode(&r.encode()).unwrap(), r, "{data:02x?}");
    }
    if let Ok(p) = rpma::gpspm::FlushResponse::decode(data) {
        assert_eq!(rpma::gpspm::FlushResponse::decode(&p.encode()).unwrap(), p, "{data:02x?}");
    }
}
