//! Wire formats exchanged with peers, byte-compatible with librpma.
//!
//! This is the only module that uses `bincode` (pinned `=1.3.3`, an
//! unmaintained crate: RUSTSEC-2025-0141). Everything here is a fixed,
//! little-endian, packed layout, pinned by golden-byte tests, so the encoder
//! can be swapped without touching the rest of the library.
//!
//! | descriptor | bytes | layout |
//! |---|---|---|
//! | memory region | 21 | `addr: u64 LE`, `size: u64 LE`, `rkey: u32 LE`, `usage: u8` |
//! | peer configuration | 1 | `direct_write_to_pmem: u8` (0 or 1; any non-zero reads as true) |

use crate::error::{Error, Result};
use bincode::Options;
use serde::{Deserialize, Serialize};

/// Size of a memory region descriptor (librpma's `RPMA_MR_DESC_SIZE`).
pub const MR_DESCRIPTOR_SIZE: usize = 21;
/// Size of a peer configuration descriptor.
pub const PEER_CFG_DESCRIPTOR_SIZE: usize = 1;

/// The fields of a memory region descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MrDesc {
    pub addr: u64,
    pub size: u64,
    pub rkey: u32,
    pub usage: u8,
}

fn opts() -> impl Options {
    bincode::DefaultOptions::new().with_fixint_encoding().with_little_endian().allow_trailing_bytes().with_limit(64)
}

pub(crate) fn encode_mr(d: &MrDesc) -> [u8; MR_DESCRIPTOR_SIZE] {
    let mut out = [0u8; MR_DESCRIPTOR_SIZE];
    // A fixed-size struct of integers into an exactly-sized buffer: the
    // encoder cannot fail; a failure would be a bug caught by the golden tests.
    opts().serialize_into(&mut out[..], d).expect("fixed-layout MR descriptor encodes into 21 bytes");
    out
}

/// Decodes a descriptor received from a peer. Like librpma, trailing bytes
/// after the first 21 are ignored.
pub(crate) fn decode_mr(bytes: &[u8]) -> Result<MrDesc> {
    if bytes.len() < MR_DESCRIPTOR_SIZE {
        return Err(Error::inval(format!(
            "memory region descriptor is {} bytes long; it must be at least {MR_DESCRIPTOR_SIZE}",
            bytes.len()
        )));
    }
    let d: MrDesc = opts()
        .deserialize(&bytes[..MR_DESCRIPTOR_SIZE])
        .map_err(|e| Error::inval(format!("memory region descriptor does not decode: {e}")))?;
    if d.usage == 0 {
        return Err(Error::inval("memory region descriptor has usage 0 (the usage type of the memory is not set)"));
    }
    Ok(d)
}

pub(crate) fn encode_peer_cfg(direct_write_to_pmem: bool) -> [u8; PEER_CFG_DESCRIPTOR_SIZE] {
    let mut out = [0u8; PEER_CFG_DESCRIPTOR_SIZE];
    opts().serialize_into(&mut out[..], &(direct_write_to_pmem as u8)).expect("one byte encodes into one byte");
    out
}

pub(crate) fn decode_peer_cfg(bytes: &[u8]) -> Result<bool> {
    if bytes.is_empty() {
        return Err(Error::inval(format!(
            "peer configuration descriptor is 0 bytes long; it must be at least {PEER_CFG_DESCRIPTOR_SIZE}"
        )));
    }
    let b: u8 = opts()
        .deserialize(&bytes[..PEER_CFG_DESCRIPTOR_SIZE])
        .map_err(|e| Error::inval(format!("peer configuration descriptor does not decode: {e}")))?;
    Ok(b != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librpma's unit-test vector (`tests/unit/mr/mr-common.h`).
    const GOLDEN: [u8; 21] = [
        0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x13, 0x12,
        0x11, 0x10, 0x21,
    ];
    const GOLDEN_DESC: MrDesc =
        MrDesc { addr: 0x0001020304050607, size: 0x08090a0b0c0d0e0f, rkey: 0x10111213, usage: 0x21 };

    #[test]
    fn mr_golden_vector_roundtrips() {
        assert_eq!(encode_mr(&GOLDEN_DESC), GOLDEN);
        assert_eq!(decode_mr(&GOLDEN).unwrap(), GOLDEN_DESC);
    }

    #[test]
    fn mr_dram_variant() {
        let mut g = GOLDEN;
        g[20] = 0x11;
        assert_eq!(decode_mr(&g).unwrap().usage, 0x11);
    }

    #[test]
    fn mr_short_and_zero_usage_are_rejected() {
        for n in 0..21 {
            let e = decode_mr(&GOLDEN[..n]).unwrap_err();
            assert_eq!(e.code(), crate::error::RPMA_E_INVAL);
            assert!(e.to_string().contains(&format!("{n} bytes long")), "{e}");
        }
        let mut g = GOLDEN;
        g[20] = 0;
        assert!(decode_mr(&g).unwrap_err().to_string().contains("usage 0"));
    }

    #[test]
    fn mr_trailing_bytes_are_ignored() {
        let mut long = GOLDEN.to_vec();
        long.extend_from_slice(&[0xff; 11]);
        assert_eq!(decode_mr(&long).unwrap(), GOLDEN_DESC);
    }

    #[test]
    fn mr_extremes() {
        let d = MrDesc { addr: u64::MAX, size: 0, rkey: u32::MAX, usage: 0xff };
        let b = encode_mr(&d);
        assert_eq!(&b[..8], &[0xff; 8]);
        assert_eq!(&b[8..16], &[0; 8]);
        assert_eq!(decode_mr(&b).unwrap(), d);
    }

    #[test]
    fn peer_cfg_golden() {
        assert_eq!(encode_peer_cfg(false), [0]);
        assert_eq!(encode_peer_cfg(true), [1]);
        assert!(!decode_peer_cfg(&[0]).unwrap());
        assert!(decode_peer_cfg(&[1]).unwrap());
        assert!(decode_peer_cfg(&[0x80, 0]).unwrap(), "any non-zero byte is true, extra bytes ignored");
        assert!(decode_peer_cfg(&[]).unwrap_err().to_string().contains("0 bytes long"));
    }

    #[test]
    fn every_prefix_of_random_bytes_decodes_or_errs() {
        // A fixed-seed sweep: decoding peer input never panics.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bytes = x.to_le_bytes().repeat(3);
            for n in 0..bytes.len() {
                let _ = decode_mr(&bytes[..n]);
                let _ = decode_peer_cfg(&bytes[..n]);
            }
        }
    }
}

/// librpma's examples' private-data layout (`struct common_data`, 28 bytes,
/// native-endian: little-endian on the platforms rpma supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommonDataWire {
    pub data_offset: u16,
    pub mr_desc_size: u8,
    pub pcfg_desc_size: u8,
    pub descriptors: [u8; 24],
}

/// Size of the encoded `CommonData` (librpma examples' `struct common_data`): 28 bytes.
pub const COMMON_DATA_SIZE: usize = 28;

pub(crate) fn encode_common(d: &CommonDataWire) -> [u8; COMMON_DATA_SIZE] {
    let mut out = [0u8; COMMON_DATA_SIZE];
    opts().serialize_into(&mut out[..], d).expect("fixed-layout common data encodes into 28 bytes");
    out
}

pub(crate) fn decode_common(bytes: &[u8]) -> Result<CommonDataWire> {
    if bytes.len() < COMMON_DATA_SIZE {
        return Err(Error::inval(format!(
            "private data is {} bytes long; the examples' layout needs {COMMON_DATA_SIZE}",
            bytes.len()
        )));
    }
    let d: CommonDataWire = opts()
        .deserialize(&bytes[..COMMON_DATA_SIZE])
        .map_err(|e| Error::inval(format!("private data does not decode: {e}")))?;
    if d.mr_desc_size as usize + d.pcfg_desc_size as usize > d.descriptors.len() {
        return Err(Error::inval(format!(
            "private data claims {} + {} descriptor bytes; it holds at most 24",
            d.mr_desc_size, d.pcfg_desc_size
        )));
    }
    Ok(d)
}

#[cfg(test)]
mod common_tests {
    use super::*;

    #[test]
    fn common_data_layout() {
        let mut descriptors = [0u8; 24];
        descriptors[..21].copy_from_slice(&[7u8; 21]);
        descriptors[21] = 1;
        let d = CommonDataWire { data_offset: 0x0102, mr_desc_size: 21, pcfg_desc_size: 1, descriptors };
        let b = encode_common(&d);
        assert_eq!(&b[..4], &[0x02, 0x01, 21, 1]);
        assert_eq!(b[4 + 21], 1);
        assert_eq!(decode_common(&b).unwrap(), d);
        // padded by the CM to 56 bytes: still decodes
        let mut padded = b.to_vec();
        padded.resize(56, 0);
        assert_eq!(decode_common(&padded).unwrap(), d);
        let mut bad = b;
        bad[2] = 24;
        assert!(decode_common(&bad).unwrap_err().to_string().contains("24 + 1"));
        assert!(decode_common(&b[..27]).is_err());
    }
}

/// GPSPM flush request: offset, length, op_context (24 bytes, little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GpspmRequestWire {
    pub offset: u64,
    pub length: u64,
    pub op_context: u64,
}

/// Size of an encoded GPSPM flush request.
pub const GPSPM_REQUEST_SIZE: usize = 24;
/// Size of an encoded GPSPM flush response.
pub const GPSPM_RESPONSE_SIZE: usize = 8;

pub(crate) fn encode_gpspm_request(r: &GpspmRequestWire) -> [u8; GPSPM_REQUEST_SIZE] {
    let mut out = [0u8; GPSPM_REQUEST_SIZE];
    opts().serialize_into(&mut out[..], r).expect("fixed-layout request encodes into 24 bytes");
    out
}

pub(crate) fn decode_gpspm_request(bytes: &[u8]) -> Result<GpspmRequestWire> {
    if bytes.len() < GPSPM_REQUEST_SIZE {
        return Err(Error::inval(format!(
            "GPSPM flush request is {} bytes long; it must be {GPSPM_REQUEST_SIZE}",
            bytes.len()
        )));
    }
    opts()
        .deserialize(&bytes[..GPSPM_REQUEST_SIZE])
        .map_err(|e| Error::inval(format!("GPSPM flush request does not decode: {e}")))
}

pub(crate) fn encode_u64(v: u64) -> [u8; 8] {
    let mut out = [0u8; 8];
    opts().serialize_into(&mut out[..], &v).expect("a u64 encodes into 8 bytes");
    out
}

pub(crate) fn decode_u64(bytes: &[u8], what: &str) -> Result<u64> {
    if bytes.len() < 8 {
        return Err(Error::inval(format!("{what} is {} bytes long; it must be 8", bytes.len())));
    }
    opts().deserialize(&bytes[..8]).map_err(|e| Error::inval(format!("{what} does not decode: {e}")))
}

#[cfg(test)]
mod gpspm_tests {
    use super::*;

    #[test]
    fn gpspm_golden() {
        let r = GpspmRequestWire { offset: 0x10, length: 0x0102, op_context: u64::MAX };
        let b = encode_gpspm_request(&r);
        assert_eq!(&b[..10], &[0x10, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x01]);
        assert_eq!(&b[16..], &[0xff; 8]);
        assert_eq!(decode_gpspm_request(&b).unwrap(), r);
        assert!(decode_gpspm_request(&b[..23]).unwrap_err().to_string().contains("23 bytes"));
        assert_eq!(decode_u64(&encode_u64(77), "x").unwrap(), 77);
        assert!(decode_u64(&[1, 2], "response").is_err());
    }
}
