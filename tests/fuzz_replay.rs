//! The fuzz targets' properties (`fuzz/props.rs`: each parser of peer input
//! against an independent decoder of the wire format) on every test run, on
//! stable Rust: random inputs of every length, and valid encodings with one
//! byte changed, cut or extended. `cargo fuzz run <target>` explores further
//! (nightly; see fuzz/).

#[path = "../fuzz/props.rs"]
mod props;

mod common;
use common::Rng;

const CASES: usize = 40_000;

fn bytes(r: &mut Rng, max: usize) -> Vec<u8> {
    let n = r.next() as usize % (max + 1);
    (0..n).map(|_| r.next() as u8).collect()
}

/// `b` with one byte changed, removed or added somewhere (or as it is).
fn mutate(r: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    match r.next() % 4 {
        0 if !b.is_empty() => {
            let i = r.next() as usize % b.len();
            b[i] = r.next() as u8;
        }
        1 if !b.is_empty() => {
            b.truncate(r.next() as usize % b.len());
        }
        2 => b.push(r.next() as u8),
        _ => {}
    }
    b
}

/// A valid region descriptor, with rpma's extension half the time.
fn descriptor(r: &mut Rng) -> Vec<u8> {
    let mut d: Vec<u8> = (0..20).map(|_| r.next() as u8).collect();
    d.push((r.next() as u8) | 1);
    if r.next().is_multiple_of(2) {
        d.extend_from_slice(&[0xE1, 0x02]);
    }
    d
}

#[test]
fn descriptors() {
    let mut r = Rng(0xf022_0001);
    let mut valid = 0;
    for _ in 0..CASES {
        let b = if r.next().is_multiple_of(2) {
            bytes(&mut r, 40)
        } else {
            let d = descriptor(&mut r);
            mutate(&mut r, d)
        };
        valid += usize::from(props::expected_mr(&b).is_some());
        props::descriptors(&b);
    }
    assert!(valid > CASES / 4, "valid descriptors reached: {valid}");
}

#[test]
fn private_data() {
    let mut r = Rng(0xf022_0002);
    let mut valid = 0;
    for _ in 0..CASES {
        let b = if r.next().is_multiple_of(3) {
            bytes(&mut r, 64)
        } else {
            let d = descriptor(&mut r);
            let pcfg = (r.next() % 2) as usize;
            let mut b = vec![r.next() as u8, r.next() as u8, d.len() as u8, pcfg as u8];
            b.extend_from_slice(&d);
            b.extend((0..pcfg).map(|_| (r.next() % 2) as u8));
            b.resize(28 + (r.next() % 28) as usize, 0);
            mutate(&mut r, b)
        };
        valid += usize::from(rpma::CommonData::decode(&b).is_ok());
        props::private_data(&b);
    }
    assert!(valid > CASES / 4, "valid private data reached: {valid}");
}

#[test]
fn gpspm() {
    let mut r = Rng(0xf022_0003);
    for _ in 0..CASES {
        let b = if r.next().is_multiple_of(2) {
            bytes(&mut r, 40)
        } else {
            let q = rpma::gpspm::FlushRequest::new(r.next(), r.next(), r.next());
            mutate(&mut r, q.encode().to_vec())
        };
        props::gpspm(&b);
    }
}
