//! Property tests of everything that parses peer input (fixed seed, fixed
//! budget, so they are deterministic and fast): descriptors, the examples'
//! private data, GPSPM messages. For arbitrary bytes each parser must return
//! a typed error or exactly the value an independent decoding gives, never
//! panic; encodings must round-trip.

use rpma::gpspm::{FlushRequest, FlushResponse};
use rpma::{CommonData, MrRemote, PeerCfg, Usage};

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
    let mut ext = 0;
    for _ in 0..CASES {
        let mut b = r.bytes(40);
        if b.len() > 20 && r.next().is_multiple_of(4) {
            b[20] = 0; // usage 0 often enough
        }
        if b.len() > 21 && r.next().is_multiple_of(3) {
            b[21] = rpma::MR_EXT_TAG; // rpma's extension often enough, its byte valid half the time
            if b.len() > 22 && r.next().is_multiple_of(2) {
                b[22] = [0x02, 0x04, 0x06][(r.next() % 3) as usize];
            }
        }
        // The extension: the tag at byte 21 and a non-zero byte of 0x02
        // (REMOTE_ATOMIC) and 0x04 (a memory window's mark, not a usage) only.
        let tagged = b.get(21) == Some(&rpma::MR_EXT_TAG);
        let e = if tagged { b.get(22).copied().unwrap_or(0) } else { 0 };
        let ext_valid = tagged && e != 0 && e & !0x06 == 0;
        let ext_ok = ext_valid && e & 0x02 != 0;
        match MrRemote::from_descriptor(&b) {
            Ok(m) => {
                ok += 1;
                assert!(b.len() >= 21 && (!tagged || ext_valid) && (b[20] != 0 || ext_ok), "{b:?}");
                assert_eq!(m.is_window(), ext_valid && e & 0x04 != 0, "{b:?}");
                assert_eq!(m.addr(), le64(&b[0..]));
                assert_eq!(m.size(), le64(&b[8..]));
                assert_eq!(m.rkey(), u32::from_le_bytes(b[16..20].try_into().unwrap()));
                let want = b[20] as u16 | if ext_ok { Usage::REMOTE_ATOMIC.bits() } else { 0 };
                assert_eq!(m.usage().bits(), want);
                ext += usize::from(ext_ok);
            }
            Err(e) => {
                assert!(b.len() < 21 || (tagged && !ext_valid) || (b[20] == 0 && !ext_ok), "{b:?}: {e}");
                assert_eq!(e.code(), rpma::error::RPMA_E_INVAL);
            }
        }
    }
    assert!(ext > CASES / 20, "the generator reaches extended descriptors ({ext})");
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

/// A protobuf field as the GPSPM generator makes it: its number, wire type
/// and encoded bytes; for a fixed64 (wire type 1) also its value.
struct Field {
    number: u64,
    wire: u64,
    value: u64,
    bytes: Vec<u8>,
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field(r: &mut Rng) -> Field {
    // mostly the three known numbers, sometimes 0 or an unknown one
    let number = match r.next() % 10 {
        0 => 0,
        1 | 2 => 4 + r.next() % 5000,
        n => (n % 3) + 1,
    };
    // mostly fixed64, else any of the 8 wire types
    let wire = if r.next().is_multiple_of(3) { r.next() % 8 } else { 1 };
    let mut bytes = Vec::new();
    varint((number << 3) | wire, &mut bytes);
    if r.next().is_multiple_of(8) && bytes.len() < 5 {
        // a non-minimal tag: one more continuation byte
        let last = bytes.len() - 1;
        bytes[last] |= 0x80;
        bytes.push(0);
    }
    let value = r.next();
    match wire {
        0 => varint(value >> (r.next() % 64), &mut bytes),
        1 => bytes.extend_from_slice(&value.to_le_bytes()),
        2 => {
            let n = (r.next() % 6) as usize;
            varint(n as u64, &mut bytes);
            bytes.extend((0..n).map(|_| r.next() as u8));
        }
        5 => bytes.extend_from_slice(&(value as u32).to_le_bytes()),
        _ => {} // groups, 6, 7: refused at the tag
    }
    Field { number, wire, value, bytes }
}

/// What a decoder of `n` required fixed64 fields (numbered 1..=n) must
/// give for `fields`, worked out from how they were made.
fn expected<const N: usize>(fields: &[Field]) -> Option<[u64; N]> {
    let mut got = [None; N];
    for f in fields {
        match f.number {
            0 => return None,
            k if k <= N as u64 => {
                if f.wire != 1 {
                    return None;
                }
                got[k as usize - 1] = Some(f.value);
            }
            _ if matches!(f.wire, 0 | 1 | 2 | 5) => {}
            _ => return None,
        }
    }
    let mut out = [0; N];
    for (o, g) in out.iter_mut().zip(got) {
        *o = g?;
    }
    Some(out)
}

#[test]
fn gpspm_messages() {
    let mut r = Rng(0x5eed_0004);
    let (mut ok_req, mut ok_resp) = (0, 0);
    for _ in 0..CASES {
        let fields: Vec<Field> = (0..r.next() % 7).map(|_| field(&mut r)).collect();
        let mut b: Vec<u8> = fields.iter().flat_map(|f| f.bytes.iter().copied()).collect();
        // now and then cut inside the last field: never decodes
        let cut = !b.is_empty() && fields.last().is_some_and(|f| f.bytes.len() > 1) && r.next().is_multiple_of(5);
        if cut {
            let last = fields.last().unwrap().bytes.len();
            b.truncate(b.len() - 1 - (r.next() as usize % (last - 1)));
        }
        let want_req = if cut { None } else { expected::<3>(&fields) };
        let want_resp = if cut { None } else { expected::<1>(&fields) };
        match FlushRequest::decode(&b) {
            Ok(q) => {
                assert_eq!(Some([q.offset, q.length, q.op_context]), want_req, "{b:02x?}");
                assert_eq!(FlushRequest::decode(&q.encode()).unwrap(), q);
                let _ = q.check(r.next()); // never panics, even when offset + length overflows
                ok_req += 1;
            }
            Err(e) => {
                assert_eq!(want_req, None, "{b:02x?}: {e}");
                assert_eq!(e.code(), rpma::error::RPMA_E_INVAL);
            }
        }
        match FlushResponse::decode(&b) {
            Ok(p) => {
                assert_eq!(Some([p.op_context]), want_resp, "{b:02x?}");
                ok_resp += 1;
            }
            Err(e) => assert_eq!(want_resp, None, "{b:02x?}: {e}"),
        }
        // arbitrary bytes: a value or an error, never a panic
        let junk = r.bytes(40);
        let _ = FlushRequest::decode(&junk);
        let _ = FlushResponse::decode(&junk);
    }
    assert!(ok_req > CASES / 100 && ok_resp > CASES / 20, "valid messages reached ({ok_req}, {ok_resp})");
}
