//! Memory windows: remote access to a sub-range of a registered region,
//! granted and revoked without re-registering it (`ibv_alloc_mw`,
//! `ibv_bind_mw`, invalidation).

use crate::error::{Error, Result};
use crate::mr::RegionHold;
use crate::mr::Usage;
use crate::peer::Peer;
use crate::wire::{self, MrDesc};
use bitflags::bitflags;
use std::sync::Arc;

pub use rpma_sys::mw::MwType;

bitflags! {
    /// What a bound window allows the remote side (`IBV_ACCESS_*` bits).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct MwAccess: u32 {
        /// `IBV_ACCESS_REMOTE_WRITE`: needs a region with local write access.
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ`.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC`: needs a region with local write access.
        const REMOTE_ATOMIC = 1 << 3;
        /// `IBV_ACCESS_ZERO_BASED`: remote addresses are offsets from the
        /// window's start (type 2 windows only).
        const ZERO_BASED = 1 << 5;
    }
}

pub(crate) struct Binding {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: MwAccess,
    pub(crate) region: Arc<dyn RegionHold>,
}

/// A memory window (`ibv_mw`), allocated on a peer's protection domain and
/// bound over part of a region with [`Conn::bind_mw`](crate::Conn::bind_mw).
///
/// While bound, the window keeps its region alive (the region cannot be
/// deregistered: [`MrLocal::dereg`](crate::MrLocal::dereg) reports
/// [`Error::Again`]); dropping the window deallocates it, which revokes it.
/// Its [`descriptor`](Mw::descriptor) has the 21-byte format of a region's,
/// so the remote side uses it as any [`MrRemote`](crate::MrRemote).
///
/// ```no_run
/// use rpma::{AlignedBuf, Flags, MrLocal, Mw, MwAccess, MwType, Usage};
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn) -> rpma::Result<()> {
/// let mr = MrLocal::reg(conn.peer(), AlignedBuf::new(1 << 20)?, Usage::MW_BIND | Usage::RECV)?;
/// let mut mw = Mw::alloc(conn.peer(), MwType::Type2)?;
/// conn.bind_mw(&mut mw, &mr, 4096, 4096, MwAccess::REMOTE_READ, Flags::COMPLETION_ALWAYS, 1)?;
/// conn.cq().next_completion(std::time::Duration::from_secs(5))?;
/// let desc = mw.descriptor()?; // for the peer: read access to 4 KiB only
/// // ... later, revoke it:
/// conn.invalidate_mw(&mut mw, Flags::COMPLETION_ALWAYS, 2)?;
/// # let _ = desc; Ok(()) }
/// ```
pub struct Mw {
    // Drop order: the window goes (revoked) before the region it holds.
    mw: rpma_sys::mw::Mw,
    rkey: u32,
    pub(crate) binding: Option<Binding>,
    peer: Peer,
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.binding.as_ref().map(|b| (b.addr, b.len, b.access));
        f.debug_struct("Mw").field("type", &self.mw.mw_type()).field("rkey", &self.rkey).field("binding", &b).finish()
    }
}

impl Mw {
    /// Allocates a window of type `ty` on `peer` (`ibv_alloc_mw`).
    ///
    /// # Errors
    /// [`Error::NoSupp`] when the device does not advertise windows of that
    /// type; [`Error::Provider`] when `ibv_alloc_mw` fails.
    pub fn alloc(peer: &Peer, ty: MwType) -> Result<Mw> {
        let c = peer.capabilities();
        let supported = match ty {
            MwType::Type1 => c.mw_type1,
            MwType::Type2 => c.mw_type2,
        };
        if !supported {
            return Err(Error::nosupp(format!("{} does not support memory windows of {ty:?}", peer.device_name())));
        }
        let mw = rpma_sys::mw::Mw::alloc(peer.pd(), ty).map_err(|e| Error::provider_raw("ibv_alloc_mw", e))?;
        Ok(Mw { rkey: mw.rkey(), mw, binding: None, peer: peer.clone() })
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.mw.mw_type()
    }

    /// The rkey the window has (after its latest bind).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Whether the window is bound (as far as this side knows: a remote
    /// invalidation is seen through [`Mw::remote_invalidated`]).
    pub fn is_bound(&self) -> bool {
        self.binding.is_some()
    }

    /// The peer the window belongs to.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The 21-byte descriptor of the bound window: its start (0 when
    /// zero-based), length, rkey and usage (`READ_SRC` for remote read,
    /// `WRITE_DST` for remote write).
    ///
    /// # Errors
    /// [`Error::Inval`] when the window is not bound.
    pub fn descriptor(&self) -> Result<[u8; wire::MR_DESCRIPTOR_SIZE]> {
        let b = self.binding.as_ref().ok_or_else(|| Error::inval("the memory window is not bound"))?;
        let mut usage = Usage::empty();
        if b.access.contains(MwAccess::REMOTE_READ) {
            usage |= Usage::READ_SRC;
        }
        if b.access.intersects(MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC) {
            usage |= Usage::WRITE_DST;
        }
        let addr = if b.access.contains(MwAccess::ZERO_BASED) { 0 } else { b.addr };
        Ok(wire::encode_mr(&MrDesc { addr, size: b.len, rkey: self.rkey, usage: usage.bits() as u8 }))
    }

    /// Records that the remote side invalidated this window with a
    /// send-with-invalidate, whose receive is `completion`; releases the
    /// region.
    ///
    /// Some providers (rxe on Linux 6.1, measured) invalidate the window but
    /// do not report the invalidated rkey in the completion; such a
    /// completion is taken as this window's invalidation. Were the window
    /// still bound, deregistering its region would fail on the device
    /// (the seed's rule), so no window can outlive its region.
    ///
    /// # Errors
    /// [`Error::Inval`] when the completion reports another rkey.
    pub fn remote_invalidated(&mut self, completion: &crate::Completion) -> Result<()> {
        match completion.invalidated_rkey {
            Some(k) if k != self.rkey => {
                Err(Error::inval(format!("the completion invalidated rkey {k:#x}, not this window's {:#x}", self.rkey)))
            }
            _ => {
                self.binding = None;
                Ok(())
            }
        }
    }

    pub(crate) fn sys(&self) -> &rpma_sys::mw::Mw {
        &self.mw
    }

    pub(crate) fn set_rkey(&mut self, rkey: u32) {
        self.rkey = rkey;
    }
}
