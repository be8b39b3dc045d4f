//! Peer configuration: what a peer tells the other side about itself.

use crate::error::Result;
use crate::wire;

/// Configuration of a peer that the other side needs to know
/// (librpma's `rpma_peer_cfg`): currently whether the peer's platform supports
/// writing directly to persistent memory, which allows
/// [`FlushType::Persistent`]-style flushes in APM mode.
///
/// It travels as a 1-byte descriptor, usually in connection private data.
///
/// ```
/// use rpma::PeerCfg;
/// let mut cfg = PeerCfg::new();
/// cfg.set_direct_write_to_pmem(true);
/// let desc = cfg.descriptor();
/// assert_eq!(desc, [1]);
/// assert!(PeerCfg::from_descriptor(&desc)?.direct_write_to_pmem());
/// # Ok::<(), rpma::Error>(())
/// ```
///
/// # Security
/// The descriptor is not authenticated: a tampered one can switch the other
/// side from GPSPM to APM persistence. Exchange it over a trusted channel.
///
/// With the `serde` feature it serializes as its one field,
/// `direct_write_to_pmem`.
///
/// [`FlushType::Persistent`]: crate::Usage::FLUSH_TYPE_PERSISTENT
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PeerCfg {
    direct_write_to_pmem: bool,
}

impl PeerCfg {
    /// Size of the descriptor in bytes (always 1).
    pub const DESCRIPTOR_SIZE: usize = wire::PEER_CFG_DESCRIPTOR_SIZE;

    /// A configuration with `direct_write_to_pmem = false`.
    pub fn new() -> PeerCfg {
        PeerCfg::default()
    }

    /// Declares whether this peer supports direct write to persistent memory.
    pub fn set_direct_write_to_pmem(&mut self, supported: bool) -> &mut Self {
        self.direct_write_to_pmem = supported;
        self
    }

    /// Whether direct write to persistent memory is declared supported.
    pub fn direct_write_to_pmem(&self) -> bool {
        self.direct_write_to_pmem
    }

    /// The 1-byte descriptor (librpma's `rpma_peer_cfg_get_descriptor`).
    pub fn descriptor(&self) -> [u8; wire::PEER_CFG_DESCRIPTOR_SIZE] {
        wire::encode_peer_cfg(self.direct_write_to_pmem)
    }

    /// Decodes a descriptor received from a peer; extra bytes are ignored.
    ///
    /// # Errors
    /// [`Error::Inval`](crate::Error::Inval) for an empty descriptor.
    pub fn from_descriptor(desc: &[u8]) -> Result<PeerCfg> {
        Ok(PeerCfg::from_flag(wire::decode_peer_cfg(desc)?))
    }

    /// The configuration a decoded descriptor carries.
    pub(crate) fn from_flag(direct_write_to_pmem: bool) -> PeerCfg {
        PeerCfg { direct_write_to_pmem }
    }
}
