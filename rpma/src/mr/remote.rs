//! A region of the remote side, decoded from its descriptor.

use super::*;

/// A memory region of the remote side (librpma's `rpma_mr_remote`), decoded
/// from its descriptor.
///
/// ```
/// let desc = [7, 6, 5, 4, 3, 2, 1, 0, 0xf, 0xe, 0xd, 0xc, 0xb, 0xa, 9, 8, 0x13, 0x12, 0x11, 0x10, 0x21];
/// let mr = rpma::MrRemote::from_descriptor(&desc)?;
/// assert_eq!(mr.size(), 0x08090a0b0c0d0e0f);
/// assert_eq!(mr.rkey(), 0x10111213);
/// assert_eq!(mr.flush_type(), rpma::Usage::FLUSH_TYPE_PERSISTENT);
/// # Ok::<(), rpma::Error>(())
/// ```
///
/// With the `serde` feature it serializes as its fields `addr`, `size`,
/// `rkey` and `usage`, for messages of the caller's own; deserializing
/// checks them as [`from_descriptor`](Self::from_descriptor) checks a
/// descriptor (a usage a descriptor cannot carry is an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MrRemote {
    addr: u64,
    size: u64,
    rkey: u32,
    usage: Usage,
    /// A memory window's descriptor (an export's, rpma's extension): its
    /// flush is the read. Not serialized (send the descriptor's bytes).
    #[cfg_attr(feature = "serde", serde(skip))]
    window: bool,
}

impl MrRemote {
    /// Decodes a descriptor received from the remote side
    /// (`rpma_mr_remote_from_descriptor`), with rpma's extension when
    /// present (see [`MrLocal::descriptor_ext`]): when byte 21 is the tag
    /// `0xE1`, byte 22 adds rpma-only usages ([`Usage::REMOTE_ATOMIC`]).
    /// Other bytes after the first 21 are ignored, as librpma does.
    ///
    /// ```
    /// let mut desc = vec![0, 0x10, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0x08];
    /// assert_eq!(rpma::MrRemote::from_descriptor(&desc)?.usage(), rpma::Usage::WRITE_DST);
    /// desc.extend_from_slice(&[0xE1, 0x02]); // rpma's extension: REMOTE_ATOMIC
    /// let mr = rpma::MrRemote::from_descriptor(&desc)?;
    /// assert_eq!(mr.usage(), rpma::Usage::WRITE_DST | rpma::Usage::REMOTE_ATOMIC);
    /// # Ok::<(), rpma::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `desc` is shorter than 21 bytes, its usage
    /// byte is 0 (and no extension grants a usage), or it has the
    /// extension's tag without a valid usage byte after it (missing, 0, or
    /// with bits no descriptor carries).
    pub fn from_descriptor(desc: &[u8]) -> Result<MrRemote> {
        let (d, ext) = wire::decode_mr_ext(desc)?;
        Ok(MrRemote::from_desc(d, ext))
    }

    /// The region a decoded descriptor describes, `ext` the usage's second
    /// byte from rpma's extension (0 without it).
    pub(crate) fn from_desc(d: MrDesc, ext: u8) -> MrRemote {
        let usage = Usage::from_bits_retain(u16::from_le_bytes([d.usage, ext & !wire::MR_EXT_WINDOW]));
        MrRemote { addr: d.addr, size: d.size, rkey: d.rkey, usage, window: ext & wire::MR_EXT_WINDOW != 0 }
    }

    /// Size of the remote region in bytes (`rpma_mr_remote_get_size`).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The remote address of the region's start (0 for a zero-based
    /// region): with [`rkey`](MrRemote::rkey), what a raw verbs work
    /// request or another transport needs to reach the same memory, and
    /// what logs name.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The remote key: see [`addr`](MrRemote::addr).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The usage the remote side registered it for: librpma's usage byte,
    /// plus [`Usage::REMOTE_ATOMIC`] when rpma's descriptor extension
    /// grants it.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    #[inline]
    pub(crate) fn check_range(&self, what: &Named, offset: u64, len: u64) -> Result<()> {
        check_within::<true>(what, offset, len, self.size)
    }

    /// Whether the descriptor is a memory window's (an
    /// [`Export`](crate::export::Export)'s extended descriptor): a flush to
    /// it is always the read, never the native flush, whose access a window
    /// cannot grant.
    pub fn is_window(&self) -> bool {
        self.window
    }

    /// The flush types the region supports, as `Usage` bits
    /// (`rpma_mr_remote_get_flush_type`).
    pub fn flush_type(&self) -> Usage {
        self.usage & (Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT)
    }
}

/// The fields of a serialized [`MrRemote`], checked before they become one.
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
#[serde(rename = "MrRemote")]
struct MrRemoteFields {
    addr: u64,
    size: u64,
    rkey: u32,
    usage: Usage,
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for MrRemote {
    /// The fields, checked by the descriptor decoder: librpma's 21 bytes
    /// with rpma's extension when the usage has rpma-only bits, decoded as
    /// [`MrRemote::from_descriptor`] decodes a peer's.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<MrRemote, D::Error> {
        let f = MrRemoteFields::deserialize(d)?;
        let [usage, ext] = f.usage.bits().to_le_bytes();
        let mut desc = wire::encode_mr(&MrDesc { addr: f.addr, size: f.size, rkey: f.rkey, usage }).to_vec();
        if ext != 0 {
            desc.extend_from_slice(&[wire::MR_EXT_TAG, ext]);
        }
        MrRemote::from_descriptor(&desc).map_err(serde::de::Error::custom)
    }
}
