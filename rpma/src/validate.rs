//! Argument checks shared by the data path of connections and SRQs: what
//! librpma leaves to the NIC, checked locally with a message that names the
//! broken bound. Region ranges are checked by the regions themselves
//! (`MrLocal::check_range`, `MrRemote::check_range`).

use crate::access::Usage;
use crate::error::{Detail, Error, Msg, Named, Result};
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote};
use crate::peer::Peer;

/// `len` as a work request carries it (32 bits).
///
/// # Errors
/// [`Error::Inval`] above 4 GiB - 1.
#[inline]
pub(crate) fn len32(what: &Named, len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| too_long(what, len))
}

#[cold]
#[inline(never)]
fn too_long(what: &Named, len: usize) -> Error {
    let text = format!("{what}: length {len} exceeds 4 GiB - 1, the largest a single work request carries");
    Error::too_long(what.arg, len as u64, u32::MAX.into(), text)
}

/// A local region used as `what` needs usage `need` (unless the peer
/// leaves usages to the device: [`Peer::set_usage_checks`]) and `peer`'s
/// protection domain.
///
/// # Errors
/// [`Error::Inval`] naming what is missing.
// Always inlined: a program posting the same operation two ways (held and
// unheld) would otherwise get it out of line in both.
#[inline(always)]
pub(crate) fn local<M: RegMemory>(mr: &MrLocal<M>, need: Usage, what: &Named, peer: &Peer) -> Result<()> {
    if !mr.usage().contains(need) && peer.usage_checks() {
        return Err(bad_usage(what, "the region", mr.usage(), need));
    }
    if !mr.peer().same_pd(peer) {
        return Err(other_peer(what));
    }
    Ok(())
}

/// A remote region used as `what` needs usage `need` (unless `peer` leaves
/// usages to the device: [`Peer::set_usage_checks`]).
///
/// # Errors
/// [`Error::Inval`] naming what is missing.
#[inline]
pub(crate) fn remote(mr: &MrRemote, need: Usage, what: &Named, peer: &Peer) -> Result<()> {
    if !mr.usage().contains(need) && peer.usage_checks() {
        return Err(remote_missing(what, mr.usage(), need));
    }
    Ok(())
}

/// [`remote`]'s refusal, out of the posting path.
#[cold]
#[inline(never)]
fn remote_missing(what: &Named, has: Usage, need: Usage) -> Error {
    if need.contains(Usage::REMOTE_ATOMIC) {
        let text = format!(
            "{what}: the remote region does not grant atomics: its descriptor says {has:?}, without REMOTE_ATOMIC \
             (the remote side must register it with Usage::REMOTE_ATOMIC and send MrLocal::descriptor_ext, \
             or export it with MwAccess::REMOTE_ATOMIC and send Export::descriptor_ext: these carry the grant \
             in rpma's descriptor extension)"
        );
        let missing = Usage::REMOTE_ATOMIC;
        return Error::Inval(Msg::detailed(Detail::UsageMissing { what: what.arg, missing }, text));
    }
    bad_usage(what, "the remote region", has, need)
}

#[cold]
#[inline(never)]
fn bad_usage(what: &Named, which: &str, has: Usage, need: Usage) -> Error {
    let text =
        format!("{what}: {which} was registered for {has:?}, not {need:?}: register it with {:?} added", need - has);
    Error::Inval(Msg::detailed(Detail::UsageMissing { what: what.arg, missing: need - has }, text))
}

#[cold]
#[inline(never)]
fn other_peer(what: &Named) -> Error {
    Error::foreign(what.arg, format!("{what}: the region is registered on another peer (protection domain)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_above_32_bits_are_refused() {
        let src = &Named::new(crate::error::Arg::Src, "write: src");
        assert_eq!(len32(src, 8).unwrap(), 8);
        assert_eq!(len32(src, u32::MAX as usize).unwrap(), u32::MAX);
        let e = len32(src, u32::MAX as usize + 1).unwrap_err();
        let max = u32::MAX.into();
        assert_eq!(e.detail(), Some(&Detail::TooLong { what: crate::error::Arg::Src, len: 1 << 32, max }));
        // The message names the argument and the bound.
        assert!(e.to_string().contains("write: src: length 4294967296 exceeds 4 GiB - 1"), "{e}");
    }
}
