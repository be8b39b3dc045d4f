//! Wire formats exchanged with peers, byte-compatible with librpma.
//!
//! long because: every wire format and its golden-byte tests live here, so
//! that the byte layouts are written, and pinned, in one file.
//!
//! The descriptors and the examples' private data are fixed, little-endian,
//! packed layouts, written field by field (`to_le_bytes`) and read through
//! [`Le`], whose every read is length-checked (too few bytes are an
//! [`Error::Inval`], never a panic); the GPSPM messages are librpma's
//! example 09's protobuf messages, encoded and decoded by hand. All are
//! pinned by golden-byte tests.
//!
//! | descriptor / message | bytes | layout |
//! |---|---|---|
//! | memory region | 21 | `addr: u64 LE`, `size: u64 LE`, `rkey: u32 LE`, `usage: u8` |
//! | memory region with rpma's extension | 23 | the 21 bytes above, then `0xE1` (tag), `usage_hi: u8` |
//! | peer configuration | 1 | `direct_write_to_pmem: u8` (0 or 1; any non-zero reads as true) |
//! | examples' private data | 28 | `data_offset: u16 LE`, `mr_desc_size: u8`, `pcfg_desc_size: u8`, `descriptors: [u8; 24]` |
//! | GPSPM flush request | 27 | `09 offset: u64 LE`, `11 length: u64 LE`, `19 op_context: u64 LE` (protobuf) |
//! | GPSPM flush response | 9 | `09 op_context: u64 LE` (protobuf) |

use crate::error::{Error, Result, Wire};

/// What a decoding error says: the layout and the byte where it stopped.
#[cfg(test)]
fn malformed(e: &Error) -> (Wire, u64) {
    match e.detail() {
        Some(&crate::error::Detail::Malformed { what, at }) => (what, at),
        _ => panic!("not Malformed: {e}"),
    }
}

/// Little-endian fields read in order from peer bytes. Each read takes the
/// next `N` bytes or, when fewer are left, fails with [`Error::Inval`]
/// naming `what`: decoding never indexes past the input.
struct Le<'a> {
    rest: &'a [u8],
    len: usize,
    what: Wire,
}

impl<'a> Le<'a> {
    fn new(bytes: &'a [u8], what: Wire) -> Le<'a> {
        Le { rest: bytes, len: bytes.len(), what }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        match self.rest.split_first_chunk::<N>() {
            Some((head, tail)) => {
                self.rest = tail;
                Ok(*head)
            }
            None => Err(Error::malformed(
                self.what,
                self.len,
                format!("{}: {} bytes left where a field of {N} bytes starts", self.what, self.rest.len()),
            )),
        }
    }

    fn u8(&mut self) -> Result<u8> {
        let [b] = self.take::<1>()?;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

/// `N` bytes made of `fields` in order (their total length is `N`, as the
/// golden-byte tests check).
fn packed<const N: usize>(fields: impl IntoIterator<Item = u8>) -> [u8; N] {
    let mut out = [0u8; N];
    for (o, b) in out.iter_mut().zip(fields) {
        *o = b;
    }
    out
}

/// Size of a memory region descriptor (librpma's `RPMA_MR_DESC_SIZE`).
pub const MR_DESCRIPTOR_SIZE: usize = 21;
/// Size of a peer configuration descriptor.
pub const PEER_CFG_DESCRIPTOR_SIZE: usize = 1;

/// Size of a memory region descriptor with rpma's extension: librpma's 21
/// bytes, the tag [`MR_EXT_TAG`] and the usage's second byte.
pub const MR_DESCRIPTOR_EXT_SIZE: usize = MR_DESCRIPTOR_SIZE + 2;
/// The byte after librpma's 21 that marks rpma's descriptor extension.
pub const MR_EXT_TAG: u8 = 0xE1;
/// The bits of the extension's byte (`Usage` bits 8..16, shifted down)
/// that descriptors carry: `REMOTE_ATOMIC` (`MW_BIND` is local only), and
/// [`MR_EXT_WINDOW`].
pub(crate) const MR_EXT_CARRIED: u8 = 0x02 | MR_EXT_WINDOW;
/// The extension's mark of a memory window's descriptor (an export's): not
/// a usage; a flush to it is always the read, since a window cannot grant
/// the access a native flush needs.
pub(crate) const MR_EXT_WINDOW: u8 = 0x04;

// rpma's descriptor extension. librpma's usage byte has all 8 bits taken,
// so what rpma adds travels after the 21 bytes, which librpma ignores
// (`rpma_mr_remote_from_descriptor` accepts any size >= 21): byte 21 is the
// tag 0xE1, byte 22 the usage's second byte (`Usage::bits() >> 8`), whose
// carried bits are 0x02, `REMOTE_ATOMIC`, and 0x04, the mark of a memory
// window (an export's descriptor: flush by read). Regions without rpma-only
// usages get the plain 21 bytes, byte-identical to librpma's. Decoding:
// after byte 21, a byte other than the tag is ignored, as librpma does (a
// peer configuration byte, 0 or 1, often follows a descriptor); the tag
// needs its byte, which must be non-zero and carry only known bits; bytes
// after the 23rd are ignored. The usage byte may be 0 only when the
// extension grants something (librpma refuses such a descriptor: usage 0).

/// The fields of a memory region descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MrDesc {
    pub addr: u64,
    pub size: u64,
    pub rkey: u32,
    pub usage: u8,
}

pub(crate) fn encode_mr(d: &MrDesc) -> [u8; MR_DESCRIPTOR_SIZE] {
    packed(d.addr.to_le_bytes().into_iter().chain(d.size.to_le_bytes()).chain(d.rkey.to_le_bytes()).chain([d.usage]))
}

/// The descriptor with rpma's extension carrying `ext` (the usage's second
/// byte, [`MR_EXT_CARRIED`] bits only): librpma's 21 bytes alone when
/// `ext` is 0, else 23.
pub(crate) fn encode_mr_ext(d: &MrDesc, ext: u8) -> Vec<u8> {
    let mut out = encode_mr(d).to_vec();
    let ext = ext & MR_EXT_CARRIED;
    if ext != 0 {
        out.extend_from_slice(&[MR_EXT_TAG, ext]);
    }
    out
}

/// Decodes a descriptor received from a peer, with rpma's extension when
/// present: the librpma fields and the usage's second byte (0 without the
/// extension). Trailing bytes are ignored, as librpma does.
///
/// # Errors
/// [`Error::Inval`]: shorter than 21 bytes; the tag without its byte, or
/// with a byte that is 0 or has bits no descriptor carries; usage 0
/// without an extension granting anything.
pub(crate) fn decode_mr_ext(bytes: &[u8]) -> Result<(MrDesc, u8)> {
    let d = decode_mr_fields(bytes)?;
    let ext = match bytes.get(MR_DESCRIPTOR_SIZE) {
        Some(&MR_EXT_TAG) => match bytes.get(MR_DESCRIPTOR_SIZE + 1) {
            None => {
                return Err(Error::malformed(
                    Wire::MrDescriptor,
                    bytes.len(),
                    format!(
                        "memory region descriptor: rpma's extension tag {MR_EXT_TAG:#04x} at byte 21 without its \
                     usage byte ({} bytes; the extended form is {MR_DESCRIPTOR_EXT_SIZE})",
                        bytes.len()
                    ),
                ))
            }
            Some(&e) if e == 0 || e & !MR_EXT_CARRIED != 0 => {
                return Err(Error::malformed(
                    Wire::MrDescriptor,
                    MR_DESCRIPTOR_SIZE + 1,
                    format!(
                        "memory region descriptor: rpma's extension byte {e:#04x} is not a usage a descriptor \
                     carries (known: 0x02, REMOTE_ATOMIC; 0x04, a memory window)"
                    ),
                ))
            }
            Some(&e) => e,
        },
        _ => 0,
    };
    if d.usage == 0 && ext & !MR_EXT_WINDOW == 0 {
        return Err(usage_0());
    }
    Ok((d, ext))
}

/// Decodes a descriptor received from a peer. Like librpma, trailing bytes
/// after the first 21 are ignored.
#[cfg(test)]
pub(crate) fn decode_mr(bytes: &[u8]) -> Result<MrDesc> {
    let d = decode_mr_fields(bytes)?;
    if d.usage == 0 {
        return Err(usage_0());
    }
    Ok(d)
}

/// A descriptor whose usage byte (byte 20) is 0.
#[cold]
fn usage_0() -> Error {
    let text = "memory region descriptor has usage 0 (the usage type of the memory is not set)";
    Error::malformed(Wire::MrDescriptor, MR_DESCRIPTOR_SIZE - 1, text)
}

/// librpma's 21 bytes, whatever their usage byte.
fn decode_mr_fields(bytes: &[u8]) -> Result<MrDesc> {
    if bytes.len() < MR_DESCRIPTOR_SIZE {
        return Err(Error::malformed(
            Wire::MrDescriptor,
            bytes.len(),
            format!("memory region descriptor is {} bytes long; it must be at least {MR_DESCRIPTOR_SIZE}", bytes.len()),
        ));
    }
    let mut r = Le::new(bytes, Wire::MrDescriptor);
    Ok(MrDesc { addr: r.u64()?, size: r.u64()?, rkey: r.u32()?, usage: r.u8()? })
}

pub(crate) fn encode_peer_cfg(direct_write_to_pmem: bool) -> [u8; PEER_CFG_DESCRIPTOR_SIZE] {
    [u8::from(direct_write_to_pmem)]
}

pub(crate) fn decode_peer_cfg(bytes: &[u8]) -> Result<bool> {
    if bytes.is_empty() {
        return Err(Error::malformed(
            Wire::PeerCfg,
            0,
            format!("peer configuration descriptor is 0 bytes long; it must be at least {PEER_CFG_DESCRIPTOR_SIZE}"),
        ));
    }
    Ok(Le::new(bytes, Wire::PeerCfg).u8()? != 0)
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
            assert_eq!(malformed(&e), (Wire::MrDescriptor, n as u64), "{e}");
        }
        let mut g = GOLDEN;
        g[20] = 0;
        assert_eq!(malformed(&decode_mr(&g).unwrap_err()), (Wire::MrDescriptor, 20));
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

    /// rpma's extension: the golden vector with REMOTE_ATOMIC granted.
    const GOLDEN_EXT: [u8; 23] = [
        0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x13, 0x12,
        0x11, 0x10, 0x21, 0xe1, 0x02,
    ];

    #[test]
    fn mr_extension_golden() {
        assert_eq!(encode_mr_ext(&GOLDEN_DESC, 0x02), GOLDEN_EXT);
        assert_eq!(decode_mr_ext(&GOLDEN_EXT).unwrap(), (GOLDEN_DESC, 0x02));
        // Without rpma-only usages: librpma's 21 bytes exactly.
        assert_eq!(encode_mr_ext(&GOLDEN_DESC, 0), GOLDEN);
        // MW_BIND (0x01) is local: never written.
        assert_eq!(encode_mr_ext(&GOLDEN_DESC, 0x01), GOLDEN);
        // What librpma decodes: the first 21 bytes, the same region.
        assert_eq!(decode_mr(&GOLDEN_EXT).unwrap(), GOLDEN_DESC);
        assert_eq!(&GOLDEN_EXT[..21], &GOLDEN);
        // Trailing bytes after the extension are ignored.
        let mut long = GOLDEN_EXT.to_vec();
        long.push(1);
        assert_eq!(decode_mr_ext(&long).unwrap(), (GOLDEN_DESC, 0x02));
        // Usage 0 is fine when the extension grants something.
        let mut only_atomic = GOLDEN_EXT;
        only_atomic[20] = 0;
        assert_eq!(decode_mr_ext(&only_atomic).unwrap().1, 0x02);
        assert!(decode_mr(&only_atomic).is_err(), "librpma refuses usage 0");
    }

    #[test]
    fn mr_old_descriptors_decode_unchanged() {
        assert_eq!(decode_mr_ext(&GOLDEN).unwrap(), (GOLDEN_DESC, 0));
        // A byte other than the tag after the 21 (e.g. a peer configuration): ignored.
        for b in [0u8, 1, 0xff, 0xe0, 0xe2] {
            let mut long = GOLDEN.to_vec();
            long.extend_from_slice(&[b, 0x02]);
            assert_eq!(decode_mr_ext(&long).unwrap(), (GOLDEN_DESC, 0), "{b:#x}");
        }
        let mut g = GOLDEN;
        g[20] = 0;
        assert_eq!(malformed(&decode_mr_ext(&g).unwrap_err()), (Wire::MrDescriptor, 20));
    }

    #[test]
    fn a_windows_mark_travels_in_the_extension_and_is_no_usage() {
        let d = encode_mr_ext(&GOLDEN_DESC, MR_EXT_WINDOW);
        assert_eq!(d.len(), MR_DESCRIPTOR_EXT_SIZE);
        assert_eq!(decode_mr_ext(&d).unwrap(), (GOLDEN_DESC, MR_EXT_WINDOW));
        let r = crate::MrRemote::from_descriptor(&d).unwrap();
        assert!(r.is_window());
        assert_eq!(r.usage().bits() >> 8, 0, "the mark is not a usage");
        assert!(!crate::MrRemote::from_descriptor(&GOLDEN_EXT).unwrap().is_window());
        // The mark alone grants nothing: usage 0 with it is still an error.
        let mut g = GOLDEN_DESC;
        g.usage = 0;
        assert!(decode_mr_ext(&encode_mr_ext(&g, MR_EXT_WINDOW)).is_err());
    }

    #[test]
    fn mr_malformed_extensions_are_errors() {
        let e = decode_mr_ext(&GOLDEN_EXT[..22]).unwrap_err();
        assert_eq!(e.code(), crate::error::RPMA_E_INVAL);
        assert_eq!(malformed(&e), (Wire::MrDescriptor, 22), "the tag without its usage byte: {e}");
        for bad in [0u8, 0x01, 0x08, 0x03, 0x80, 0xff] {
            let mut g = GOLDEN_EXT;
            g[22] = bad;
            let e = decode_mr_ext(&g).unwrap_err();
            assert_eq!(malformed(&e), (Wire::MrDescriptor, 22), "{bad:#x}: {e}");
        }
    }

    #[test]
    fn peer_cfg_golden() {
        assert_eq!(encode_peer_cfg(false), [0]);
        assert_eq!(encode_peer_cfg(true), [1]);
        assert!(!decode_peer_cfg(&[0]).unwrap());
        assert!(decode_peer_cfg(&[1]).unwrap());
        assert!(decode_peer_cfg(&[0x80, 0]).unwrap(), "any non-zero byte is true, extra bytes ignored");
        assert_eq!(malformed(&decode_peer_cfg(&[]).unwrap_err()), (Wire::PeerCfg, 0));
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
                let _ = decode_mr_ext(&bytes[..n]);
                let mut tagged = bytes[..n].to_vec();
                if n > MR_DESCRIPTOR_SIZE {
                    tagged[MR_DESCRIPTOR_SIZE] = MR_EXT_TAG;
                }
                let _ = decode_mr_ext(&tagged);
                let _ = decode_peer_cfg(&bytes[..n]);
            }
        }
    }
}

/// librpma's examples' private-data layout (`struct common_data`, 28 bytes,
/// native-endian: little-endian on the platforms rpma supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommonDataWire {
    pub data_offset: u16,
    pub mr_desc_size: u8,
    pub pcfg_desc_size: u8,
    pub descriptors: [u8; 24],
}

/// Size of the encoded `CommonData` (librpma examples' `struct common_data`): 28 bytes.
pub const COMMON_DATA_SIZE: usize = 28;

pub(crate) fn encode_common(d: &CommonDataWire) -> [u8; COMMON_DATA_SIZE] {
    packed(d.data_offset.to_le_bytes().into_iter().chain([d.mr_desc_size, d.pcfg_desc_size]).chain(d.descriptors))
}

pub(crate) fn decode_common(bytes: &[u8]) -> Result<CommonDataWire> {
    if bytes.len() < COMMON_DATA_SIZE {
        return Err(Error::malformed(
            Wire::CommonData,
            bytes.len(),
            format!("private data is {} bytes long; the examples' layout needs {COMMON_DATA_SIZE}", bytes.len()),
        ));
    }
    let mut r = Le::new(bytes, Wire::CommonData);
    let d = CommonDataWire {
        data_offset: r.u16()?,
        mr_desc_size: r.u8()?,
        pcfg_desc_size: r.u8()?,
        descriptors: r.take()?,
    };
    if d.mr_desc_size as usize + d.pcfg_desc_size as usize > d.descriptors.len() {
        return Err(Error::malformed(
            Wire::CommonData,
            2,
            format!(
                "private data claims {} + {} descriptor bytes; it holds at most 24",
                d.mr_desc_size, d.pcfg_desc_size
            ),
        ));
    }
    Ok(d)
}

/// Decoded `common_data`: the offset and both descriptors, decoded here in
/// one pass so that callers only turn fields into types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommonDataDesc {
    pub data_offset: u16,
    pub mr: MrDesc,
    /// The usage's second byte from rpma's descriptor extension (0: none).
    pub mr_ext: u8,
    /// `direct_write_to_pmem` of the peer configuration, when one was sent.
    pub peer_cfg: Option<bool>,
}

/// Decodes private data in the examples' layout with its descriptors.
///
/// # Errors
/// [`Error::Inval`] naming the part that does not decode.
pub(crate) fn decode_common_desc(bytes: &[u8]) -> Result<CommonDataDesc> {
    let w = decode_common(bytes)?;
    let (mr_end, pcfg_end) = (w.mr_desc_size as usize, w.mr_desc_size as usize + w.pcfg_desc_size as usize);
    let (mr, mr_ext) = decode_mr_ext(&w.descriptors[..mr_end]).map_err(|e| {
        let at = match e.detail() {
            Some(crate::error::Detail::Malformed { at, .. }) => *at as usize,
            _ => 0,
        };
        Error::malformed(Wire::CommonData, 4 + at, format!("private data: memory region descriptor: {e}"))
    })?;
    let peer_cfg = (w.pcfg_desc_size > 0).then(|| decode_peer_cfg(&w.descriptors[mr_end..pcfg_end])).transpose()?;
    Ok(CommonDataDesc { data_offset: w.data_offset, mr, mr_ext, peer_cfg })
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
        assert_eq!(malformed(&decode_common(&bad).unwrap_err()), (Wire::CommonData, 2), "24 + 1 descriptor bytes");
        assert!(decode_common(&b[..27]).is_err());
    }

    #[test]
    fn common_data_with_descriptors() {
        let mr = MrDesc { addr: 0x1000, size: 64, rkey: 9, usage: 1 };
        let mut descriptors = [0u8; 24];
        descriptors[..21].copy_from_slice(&encode_mr(&mr));
        descriptors[21] = 1;
        let w = CommonDataWire { data_offset: 8, mr_desc_size: 21, pcfg_desc_size: 1, descriptors };
        let d = decode_common_desc(&encode_common(&w)).unwrap();
        assert_eq!(d, CommonDataDesc { data_offset: 8, mr, mr_ext: 0, peer_cfg: Some(true) });
        let none = decode_common_desc(&encode_common(&CommonDataWire { pcfg_desc_size: 0, ..w })).unwrap();
        assert_eq!(none.peer_cfg, None);
        let e = decode_common_desc(&encode_common(&CommonDataWire { mr_desc_size: 20, ..w })).unwrap_err();
        assert_eq!(malformed(&e), (Wire::CommonData, 24), "the descriptor's 20 bytes end at 4 + 20: {e}");
    }
}

// GPSPM messages: librpma's example 09 packs them with protobuf-c from
//
//     syntax = "proto2";
//     message GPSPM_flush_request  { required fixed64 offset = 1; required fixed64 length = 2;
//                                    required fixed64 op_context = 3; }
//     message GPSPM_flush_response { required fixed64 op_context = 1; }
//
// A `fixed64` field is its tag, the varint `(number << 3) | 1` (one byte
// for these numbers), then 8 bytes little-endian. protobuf-c writes the
// fields in number order, so a request is 27 bytes and a response 9:
//
//     09 <offset> 11 <length> 19 <op_context>      09 <op_context>
//
// The decoder accepts what protobuf-c's does for these messages: fields in
// any order, a repeated field's last value winning, unknown fields of wire
// types 0 (varint), 1 (64-bit), 2 (length-delimited) and 5 (32-bit)
// skipped; it refuses a missing field, a known field with another wire type
// than 1, groups (3, 4), wire types 6 and 7, field number 0 (so trailing
// zero bytes) and anything truncated. (A differential run against
// protobuf-c 1.4's unpack over 200,000 generated inputs agreed on all but
// one kind: protobuf-c refuses field number 0 only in a one-byte tag and
// skips it in a longer one, e.g. `80 00`; rpma refuses it, as the protobuf
// encoding rules do.)

/// The fields of a GPSPM flush request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GpspmRequestWire {
    pub offset: u64,
    pub length: u64,
    pub op_context: u64,
}

/// Size of an encoded GPSPM flush request (librpma's example 09: protobuf, 27 bytes).
pub const GPSPM_REQUEST_SIZE: usize = 27;
/// Size of an encoded GPSPM flush response (librpma's example 09: protobuf, 9 bytes).
pub const GPSPM_RESPONSE_SIZE: usize = 9;

/// Protobuf wire types.
const PB_VARINT: u64 = 0;
const PB_I64: u64 = 1;
const PB_LEN: u64 = 2;
const PB_I32: u64 = 5;

/// Writes `values` as `fixed64` fields numbered 1, 2, ... into `out`.
fn encode_fixed64_fields(values: &[u64], out: &mut [u8]) {
    for (i, (v, chunk)) in values.iter().zip(out.chunks_exact_mut(9)).enumerate() {
        chunk[0] = (((i as u8) + 1) << 3) | PB_I64 as u8;
        chunk[1..].copy_from_slice(&v.to_le_bytes());
    }
}

pub(crate) fn encode_gpspm_request(r: &GpspmRequestWire) -> [u8; GPSPM_REQUEST_SIZE] {
    let mut out = [0u8; GPSPM_REQUEST_SIZE];
    encode_fixed64_fields(&[r.offset, r.length, r.op_context], &mut out);
    out
}

pub(crate) fn encode_gpspm_response(op_context: u64) -> [u8; GPSPM_RESPONSE_SIZE] {
    let mut out = [0u8; GPSPM_RESPONSE_SIZE];
    encode_fixed64_fields(&[op_context], &mut out);
    out
}

/// Reads a varint of at most `max` bytes at `*pos`, advancing `*pos`.
fn read_varint(bytes: &[u8], pos: &mut usize, max: usize, what: Wire) -> Result<u64> {
    let mut v = 0u64;
    for i in 0..max {
        let Some(&b) = bytes.get(*pos) else {
            return Err(Error::malformed(what, *pos, format!("{what}: truncated varint at byte {}", *pos)));
        };
        *pos += 1;
        // bits beyond 64 (a 10th byte above 1) are dropped, as protobuf-c does
        v |= u64::from(b & 0x7f).checked_shl(7 * i as u32).unwrap_or(0);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Error::malformed(what, *pos, format!("{what}: a varint longer than {max} bytes ends at byte {}", *pos)))
}

/// Advances `*pos` by `n` bytes, which must be there; returns where they start.
fn take(bytes: &[u8], pos: &mut usize, n: u64, what: Wire) -> Result<usize> {
    let start = *pos;
    let end = usize::try_from(n).ok().and_then(|n| start.checked_add(n)).filter(|&e| e <= bytes.len());
    match end {
        Some(e) => {
            *pos = e;
            Ok(start)
        }
        None => Err(Error::malformed(
            what,
            start,
            format!("{what}: a field of {n} bytes at byte {start} runs past the end ({} bytes)", bytes.len()),
        )),
    }
}

/// Decodes a proto2 message whose fields `names[i]` (numbered `i + 1`) are
/// all `required fixed64`.
fn decode_fixed64_fields<const N: usize>(bytes: &[u8], what: Wire, names: [&str; N]) -> Result<[u64; N]> {
    let mut values: [Option<u64>; N] = [None; N];
    let mut pos = 0;
    while pos < bytes.len() {
        let at = pos;
        let tag = read_varint(bytes, &mut pos, 5, what)?;
        let (number, wire) = (tag >> 3, tag & 7);
        if number == 0 {
            return Err(Error::malformed(what, at, format!("{what}: field number 0 at byte {at}")));
        }
        match usize::try_from(number - 1).ok().filter(|&i| i < N) {
            Some(i) if wire == PB_I64 => {
                let start = take(bytes, &mut pos, 8, what)?;
                let mut le = [0u8; 8];
                le.copy_from_slice(&bytes[start..start + 8]);
                values[i] = Some(u64::from_le_bytes(le));
            }
            Some(i) => {
                return Err(Error::malformed(
                    what,
                    at,
                    format!("{what}: field {} ({}) has wire type {wire}; a fixed64 has 1", i + 1, names[i]),
                ))
            }
            // an unknown field: skipped
            None => match wire {
                PB_VARINT => {
                    read_varint(bytes, &mut pos, 10, what)?;
                }
                PB_I64 => {
                    take(bytes, &mut pos, 8, what)?;
                }
                PB_LEN => {
                    let len = read_varint(bytes, &mut pos, 10, what)?;
                    take(bytes, &mut pos, len, what)?;
                }
                PB_I32 => {
                    take(bytes, &mut pos, 4, what)?;
                }
                _ => {
                    return Err(Error::malformed(
                        what,
                        at,
                        format!("{what}: field {number} at byte {at} has wire type {wire}, which is not supported"),
                    ))
                }
            },
        }
    }
    let mut out = [0u64; N];
    for (i, v) in values.iter().enumerate() {
        out[i] = v.ok_or_else(|| {
            Error::malformed(
                what,
                bytes.len(),
                format!("{what}: the required field {} ({}) is missing ({} bytes)", i + 1, names[i], bytes.len()),
            )
        })?;
    }
    Ok(out)
}

pub(crate) fn decode_gpspm_request(bytes: &[u8]) -> Result<GpspmRequestWire> {
    let [offset, length, op_context] =
        decode_fixed64_fields(bytes, Wire::GpspmRequest, ["offset", "length", "op_context"])?;
    Ok(GpspmRequestWire { offset, length, op_context })
}

pub(crate) fn decode_gpspm_response(bytes: &[u8]) -> Result<u64> {
    let [op_context] = decode_fixed64_fields(bytes, Wire::GpspmResponse, ["op_context"])?;
    Ok(op_context)
}

#[cfg(test)]
mod gpspm_tests {
    use super::*;

    /// Golden bytes: what protobuf-c 1.4 (librpma's example 09) packs for
    /// {offset 0x10, length 0x400, op_context 0xF01D} and {op_context 0xF01D}.
    const REQ: [u8; 27] = [
        0x09, 0x10, 0, 0, 0, 0, 0, 0, 0, //
        0x11, 0x00, 0x04, 0, 0, 0, 0, 0, 0, //
        0x19, 0x1d, 0xf0, 0, 0, 0, 0, 0, 0,
    ];
    const RESP: [u8; 9] = [0x09, 0x1d, 0xf0, 0, 0, 0, 0, 0, 0];
    const R: GpspmRequestWire = GpspmRequestWire { offset: 0x10, length: 0x400, op_context: 0xF01D };

    fn req(fields: &[&[u8]]) -> Result<GpspmRequestWire> {
        decode_gpspm_request(&fields.concat())
    }
    const F1: &[u8] = &[0x09, 3, 0, 0, 0, 0, 0, 0, 0];
    const F2: &[u8] = &[0x11, 2, 0, 0, 0, 0, 0, 0, 0];
    const F3: &[u8] = &[0x19, 1, 0, 0, 0, 0, 0, 0, 0];
    const G: GpspmRequestWire = GpspmRequestWire { offset: 3, length: 2, op_context: 1 };

    #[test]
    fn gpspm_golden() {
        assert_eq!(encode_gpspm_request(&R), REQ);
        assert_eq!(decode_gpspm_request(&REQ).unwrap(), R);
        assert_eq!(encode_gpspm_response(0xF01D), RESP);
        assert_eq!(decode_gpspm_response(&RESP).unwrap(), 0xF01D);
        let max = GpspmRequestWire { offset: u64::MAX, length: 0, op_context: 1 << 63 };
        assert_eq!(decode_gpspm_request(&encode_gpspm_request(&max)).unwrap(), max);
    }

    /// Each case as protobuf-c 1.4 decodes it (checked against
    /// gpspm_flush_request__unpack).
    #[test]
    fn gpspm_decodes_as_protobuf_c() {
        // any order; the last of a repeated field wins
        assert_eq!(req(&[F3, F2, F1]).unwrap(), G);
        assert_eq!(req(&[F1, F2, F3, &[0x09, 7, 0, 0, 0, 0, 0, 0, 0]]).unwrap().offset, 7);
        // unknown fields of wire types 0, 2, 5 and 1 are skipped
        let unknown: &[u8] = &[0x20, 0x96, 0x01, 0x2a, 2, b'h', b'i', 0x35, 1, 2, 3, 4, 0x39, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(req(&[unknown, F1, F2, F3]).unwrap(), G);
        // a non-minimal tag; a 5-byte tag of a big unknown field number
        assert_eq!(req(&[&[0x89, 0x00, 3, 0, 0, 0, 0, 0, 0, 0], F2, F3]).unwrap(), G);
        assert_eq!(req(&[&[0x80, 0x80, 0x80, 0x80, 0x10, 0x00], F1, F2, F3]).unwrap(), G);
        // refused: a missing field, a varint for a fixed64, a group, trailing
        // zero (field 0), wire type 6
        let at = |r: Result<GpspmRequestWire>| malformed(&r.unwrap_err());
        assert_eq!(at(req(&[F1, F2])), (Wire::GpspmRequest, 18), "field 3 missing: found at the end");
        assert_eq!(at(req(&[&[0x08, 3], F2, F3])), (Wire::GpspmRequest, 0), "field 1 as a varint");
        assert_eq!(at(req(&[&[0x2b, 0x2c], F1, F2, F3])), (Wire::GpspmRequest, 0), "a group (wire type 3)");
        assert_eq!(at(req(&[F1, F2, F3, &[0]])), (Wire::GpspmRequest, 27), "field number 0");
        assert_eq!(at(req(&[&[0x0e], F1, F2, F3])), (Wire::GpspmRequest, 0), "wire type 6");
        // truncated: everywhere
        for n in 0..REQ.len() {
            assert!(decode_gpspm_request(&REQ[..n]).is_err(), "{n} bytes");
        }
        for n in 0..RESP.len() {
            assert!(decode_gpspm_response(&RESP[..n]).is_err(), "{n} bytes");
        }
        // lengths that overflow, tags too long
        assert!(req(&[&[0x22, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], F1, F2, F3]).is_err());
        let e = req(&[&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], F1, F2, F3]).unwrap_err();
        assert_eq!(malformed(&e), (Wire::GpspmRequest, 5), "a tag longer than 5 bytes: {e}");
        // the response's decoder skips the request's other fields
        assert_eq!(decode_gpspm_response(&REQ).unwrap(), 0x10);
    }

    #[test]
    fn gpspm_random_bytes_decode_or_err() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = x.to_le_bytes().repeat(4);
            b[0] = [0x09, 0x11, 0x19, 0x0a, 0x22][(x % 5) as usize];
            for n in 0..b.len() {
                let _ = decode_gpspm_request(&b[..n]);
                let _ = decode_gpspm_response(&b[..n]);
            }
        }
    }
}
