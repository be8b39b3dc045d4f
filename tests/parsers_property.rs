//! Property tests of everything that parses peer input (fixed seed, fixed
//! budget, so they are deterministic and fast): descriptors, the examples'
//! private data, GPSPM messages. For arbitrary bytes each parser must return
//! a typed error or exactly the value an independent decoding gives, never
//! panic; encodings must round-trip.

use rpma::gpspm::{FlushRequest, FlushResponse};
use rpma::{CommonData, MrRemote, PeerCfg};

mod common;
use common::Rng;

trait Bytes {
    fn bytes(&mut self, max: usize) -> Vec<u8>;
}

impl Bytes for Rng {
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = (self.next() % (max as u64 + 1)) as usize;
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const CASES: usize = 50_000;

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

#[test]
fn mr_descriptor_decodes_exactly_its_bytes() {
    let mut r = Rng(0x5eed_0001);
    let mut ok = 0;
    for _ in 0..CASES {
        let mut b = r.bytes(40);
        if b.len() > 20 && r.next().is_multiple_of(4) {
            b[20] = 0; // usage 0 often enough
        }
        match MrRemote::from_descriptor(&b) {
            Ok(m) => {
                ok += 1;
                assert!(b.len() >= 21 && b[20] != 0);
                assert_eq!(m.addr(), le64(&b[0..]));
                assert_eq!(m.size(), le64(&b[8..]));
                assert_eq!(m.rkey(), u32::from_le_bytes(b[16..20].try_into().unwrap()));
                assert_eq!(m.usage().bits(), b[20] as u16);
            }
            Err(e) => {
                assert!(b.len() < 21 || b[20] == 0, "{b:?}: {e}");
                assert_eq!(e.code(), rpma::error::RPMA_E_INVAL);
            }
        }
    }
    assert!(ok > CASES / 10, "the generator reaches valid descriptors ({ok})");
}

#[test]
fn peer_cfg_descriptor() {
    let mut r = Rng(0x5eed_0002);
    for _ in 0..CASES {
        let b = r.bytes(4);
        match PeerCfg::from_descriptor(&b) {
            Ok(c) => assert_eq!(c.direct_write_to_pmem(), b[0] != 0),
            Err(_) => assert!(b.is_empty()),
        }
    }
    for v in [false, true] {
        let mut c = PeerCfg::new();
        c.set_direct_write_to_pmem(v);
        assert_eq!(PeerCfg::from_descriptor(&c.descriptor()).unwrap(), c);
    }
}

#[test]
fn common_data_accepts_exactly_the_consistent_layouts() {
    let mut r = Rng(0x5eed_0003);
    let mut ok = 0;
    for _ in 0..CASES {
        let mut b = r.bytes(64);
        if b.len() >= 28 && r.next().is_multiple_of(2) {
            b[2] = 21; // a plausible MR descriptor size
            b[3] = (r.next() % 4) as u8;
        }
        let res = CommonData::decode(&b);
        let expect_ok = b.len() >= 28 && {
            let (m, p) = (b[2] as usize, b[3] as usize);
            m + p <= 24 && m >= 21 && b[4 + 20] != 0
        };
        assert_eq!(res.is_ok(), expect_ok, "{b:?}: {res:?}");
        if let Ok(cd) = res {
            ok += 1;
            assert_eq!(cd.data_offset, u16::from_le_bytes([b[0], b[1]]));
            assert_eq!(cd.mr.size(), le64(&b[4 + 8..]));
            assert_eq!(cd.peer_cfg.is_some(), b[3] > 0);
        }
    }
    assert!(ok > 100, "valid layouts reached ({ok})");
}

#[test]
fn gpspm_messages() {
    let mut r = Rng(0x5eed_0004);
    for _ in 0..CASES {
        let b = r.bytes(32);
        match FlushRequest::decode(&b) {
            Ok(q) => {
                assert!(b.len() >= 24);
                assert_eq!((q.offset, q.length, q.op_context), (le64(&b), le64(&b[8..]), le64(&b[16..])));
                assert_eq!(FlushRequest::decode(&q.encode()).unwrap(), q);
                let _ = q.check(r.next()); // never panics, even when offset + length overflows
            }
            Err(_) => assert!(b.len() < 24),
        }
        match FlushResponse::decode(&b) {
            Ok(p) => assert_eq!(p.op_context, le64(&b)),
            Err(_) => assert!(b.len() < 8),
        }
    }
}
