//! The private-data layout of librpma's examples, for talking to them.
//!
//! librpma's examples put `struct common_data { uint16_t data_offset; uint8_t
//! mr_desc_size; uint8_t pcfg_desc_size; char descriptors[24]; }` (28 bytes)
//! in the connection's private data: an offset into the region where the
//! data starts, a memory-region descriptor, and optionally a peer
//! configuration descriptor right after it. The Rust examples use the same
//! bytes, so each side can be a C librpma example.

use crate::error::Result;
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote};
use crate::peer_cfg::PeerCfg;
use crate::wire::{self, CommonDataWire};

pub use crate::wire::COMMON_DATA_SIZE;

/// Decoded [`common_data`](self) private data.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn, mr: &rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
/// let pdata = rpma::CommonData::encode(0, mr, None); // 28 bytes for connect/accept
/// let theirs = rpma::CommonData::decode(conn.private_data())?;
/// println!("remote region of {} bytes", theirs.mr.size());
/// # let _ = pdata; Ok(()) }
/// ```
///
/// With the `serde` feature it serializes as its three fields (the region
/// as [`MrRemote`] does), independently of the 28-byte layout above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CommonData {
    /// Offset in the region where the example's data starts.
    pub data_offset: u16,
    /// The region.
    pub mr: MrRemote,
    /// The sender's peer configuration, when it sent one.
    pub peer_cfg: Option<PeerCfg>,
}

impl CommonData {
    /// Encodes `mr`'s descriptor (and `peer_cfg`'s) with `data_offset`.
    /// The descriptor is [`MrLocal::descriptor_ext`]: librpma's 21 bytes,
    /// plus rpma's 2-byte extension for a region with
    /// [`Usage::REMOTE_ATOMIC`](crate::Usage::REMOTE_ATOMIC) (23 + 1 bytes
    /// still fit the 24; librpma's examples find the peer configuration
    /// after `mr_desc_size` bytes and ignore the extension).
    pub fn encode<M: RegMemory>(
        data_offset: u16,
        mr: &MrLocal<M>,
        peer_cfg: Option<&PeerCfg>,
    ) -> [u8; COMMON_DATA_SIZE] {
        encode_desc(data_offset, &mr.descriptor_ext(), peer_cfg)
    }

    /// [`encode`](CommonData::encode) for a per-connection export: its
    /// [`descriptor_ext`](crate::export::Export::descriptor_ext) and
    /// `peer_cfg`'s, to send to that connection's peer as a message (an
    /// export's descriptor cannot travel in the private data: the bind runs
    /// once the connection is up).
    ///
    /// # Errors
    /// As [`Export::descriptor_ext`](crate::export::Export::descriptor_ext):
    /// [`Error::Inval`](crate::Error::Inval) when the export has ended.
    pub fn encode_export(
        data_offset: u16,
        export: &crate::export::Export,
        peer_cfg: Option<&PeerCfg>,
    ) -> Result<[u8; COMMON_DATA_SIZE]> {
        Ok(encode_desc(data_offset, &export.descriptor_ext()?, peer_cfg))
    }

    /// Decodes private data received from a peer (CM padding is ignored).
    ///
    /// # Errors
    /// [`Error::Inval`](crate::Error::Inval) when it is shorter than 28 bytes, its sizes do not fit
    /// its 24 descriptor bytes, or the descriptors do not decode.
    pub fn decode(bytes: &[u8]) -> Result<CommonData> {
        let d = wire::decode_common_desc(bytes)?;
        Ok(CommonData {
            data_offset: d.data_offset,
            mr: MrRemote::from_desc(d.mr, d.mr_ext),
            peer_cfg: d.peer_cfg.map(PeerCfg::from_flag),
        })
    }
}

/// The 28 bytes of a descriptor `d` (21 or 23 bytes) and `peer_cfg`'s.
fn encode_desc(data_offset: u16, d: &[u8], peer_cfg: Option<&PeerCfg>) -> [u8; COMMON_DATA_SIZE] {
    let mut descriptors = [0u8; 24];
    descriptors[..d.len()].copy_from_slice(d);
    let pcfg_desc_size = match peer_cfg {
        Some(p) => {
            descriptors[d.len()] = p.descriptor()[0];
            1
        }
        None => 0,
    };
    wire::encode_common(&CommonDataWire { data_offset, mr_desc_size: d.len() as u8, pcfg_desc_size, descriptors })
}

#[cfg(all(test, feature = "serde"))]
mod serde_tests {
    use super::*;
    use crate::access::Usage;

    /// The descriptor types embedded in a message of the caller's own,
    /// through a binary serde format (bincode, a test-only dependency).
    #[test]
    fn descriptor_types_round_trip_through_bincode() {
        let mut desc = vec![7, 6, 5, 4, 3, 2, 1, 0, 0xf, 0xe, 0xd, 0xc, 0xb, 0xa, 9, 8, 0x13, 0x12, 0x11, 0x10, 0x21];
        desc.extend_from_slice(&[crate::MR_EXT_TAG, 0x02]);
        let mr = MrRemote::from_descriptor(&desc).unwrap();
        assert!(mr.usage().contains(Usage::REMOTE_ATOMIC));
        let mut pcfg = PeerCfg::new();
        pcfg.set_direct_write_to_pmem(true);
        let theirs = CommonData { data_offset: 64, mr, peer_cfg: Some(pcfg) };

        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Hello {
            name: String,
            region: CommonData,
            cfgs: Vec<PeerCfg>,
        }
        let hello = Hello { name: "replica-1".into(), region: theirs, cfgs: vec![pcfg, PeerCfg::new()] };
        let bytes = bincode::serialize(&hello).unwrap();
        assert_eq!(bincode::deserialize::<Hello>(&bytes).unwrap(), hello);
        let bytes = bincode::serialize(&mr).unwrap();
        // addr, size, rkey, then the usage's bits
        assert_eq!(bytes.len(), 8 + 8 + 4 + 2);
        assert_eq!(bincode::deserialize::<MrRemote>(&bytes).unwrap(), mr);
    }

    /// A deserialized region is checked as a descriptor is: a usage no
    /// descriptor carries (0, or `MW_BIND`, which is local) is refused.
    #[test]
    fn a_deserialized_region_is_checked_as_a_descriptor() {
        let mut desc = [0u8; 21];
        desc[20] = 0x08; // WRITE_DST
        let ok = MrRemote::from_descriptor(&desc).unwrap();
        let mut bytes = bincode::serialize(&ok).unwrap();
        let n = bytes.len();
        for bad in [0u16, Usage::MW_BIND.bits(), Usage::WRITE_DST.bits() | 0x8000] {
            bytes[n - 2..].copy_from_slice(&bad.to_le_bytes());
            // Only the usage differs from the bytes that deserialize.
            assert!(bincode::deserialize::<MrRemote>(&bytes).is_err(), "{bad:#x}");
        }
        assert!(bincode::deserialize::<MrRemote>(&bytes[..n - 1]).is_err(), "truncated");
    }
}
