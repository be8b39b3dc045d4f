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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        let mut descriptors = [0u8; 24];
        let d = mr.descriptor_ext();
        descriptors[..d.len()].copy_from_slice(&d);
        let pcfg_desc_size = match peer_cfg {
            Some(p) => {
                descriptors[d.len()] = p.descriptor()[0];
                1
            }
            None => 0,
        };
        wire::encode_common(&CommonDataWire { data_offset, mr_desc_size: d.len() as u8, pcfg_desc_size, descriptors })
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
