//! Memory windows: remote access to a sub-range of a registered region,
//! granted and revoked without re-registering it (`ibv_alloc_mw`,
//! `ibv_bind_mw`, invalidation).

use crate::error::{Error, Result};
use crate::inflight::Confirm;
use crate::log::{rpma_log, LogLevel};
use crate::mr::RegionHold;
use crate::mr::Usage;
use crate::peer::Peer;
use crate::wire::{self, MrDesc};
use bitflags::bitflags;
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

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

/// A window's hold on the region it is bound over.
pub(crate) struct Binding {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: MwAccess,
    /// The rkey the bind gave the window.
    pub(crate) rkey: u32,
    /// The QP the bind was posted on (a type 2 window is tied to it).
    pub(crate) qp_num: u32,
    pub(crate) region: Arc<dyn RegionHold>,
}

impl Binding {
    pub(crate) fn new(
        addr: u64,
        len: u64,
        access: MwAccess,
        rkey: u32,
        qp_num: u32,
        region: Arc<dyn RegionHold>,
    ) -> Binding {
        region.windows().fetch_add(1, Ordering::Relaxed);
        Binding { addr, len, access, rkey, qp_num, region }
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        self.region.windows().fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a window knows of itself, shared with the tracker entry of a posted
/// invalidation (which releases the binding when the device confirms it).
pub(crate) struct MwState {
    /// The window's current rkey.
    pub(crate) rkey: u32,
    pub(crate) binding: Option<Binding>,
    /// The rkey of a binding whose invalidation is posted and not completed.
    pub(crate) invalidating: Option<u32>,
}

pub(crate) struct MwShared(Mutex<MwState>);

impl MwShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, MwState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Confirm for MwShared {
    /// The invalidation's own completion: only a successful one ends the
    /// binding (and its hold on the region), and only the binding it named.
    fn completed(&self, success: bool) {
        let mut st = self.lock();
        if let Some(rkey) = st.invalidating.take() {
            if success && st.binding.as_ref().is_some_and(|b| b.rkey == rkey) {
                st.binding = None;
            }
        }
    }
}

/// A memory window (`ibv_mw`), allocated on a peer's protection domain and
/// bound over part of a region with [`Conn::bind_mw`](crate::Conn::bind_mw).
///
/// While bound, the window keeps its region alive (the region cannot be
/// deregistered: [`MrLocal::dereg`](crate::MrLocal::dereg) reports
/// [`Error::Again`] naming the window). The hold ends only when the device
/// confirms the window no longer reaches the region: the successful
/// completion of its [`Conn::invalidate_mw`](crate::Conn::invalidate_mw), a
/// successful receive completion that names its rkey as invalidated
/// ([`Mw::remote_invalidated`]), or a successful `ibv_dealloc_mw` when the
/// window is dropped. If deallocation fails, the window and its region are
/// leaked, never freed. Its [`descriptor`](Mw::descriptor) has the 21-byte
/// format of a region's, so the remote side uses it as any
/// [`MrRemote`](crate::MrRemote).
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
/// let wc = conn.cq().next_completion(std::time::Duration::from_secs(5))?;
/// assert!(wc.status.is_success() && !mw.is_bound()); // the region is free again
/// # let _ = desc; Ok(()) }
/// ```
pub struct Mw {
    mw: ManuallyDrop<rpma_sys::mw::Mw>,
    shared: Arc<MwShared>,
    peer: Peer,
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        let b = st.binding.as_ref().map(|b| (b.addr, b.len, b.access));
        f.debug_struct("Mw")
            .field("type", &self.mw.mw_type())
            .field("rkey", &st.rkey)
            .field("binding", &b)
            .field("invalidating", &st.invalidating.is_some())
            .finish()
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
        let st = MwState { rkey: mw.rkey(), binding: None, invalidating: None };
        Ok(Mw { mw: ManuallyDrop::new(mw), shared: Arc::new(MwShared(Mutex::new(st))), peer: peer.clone() })
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.mw.mw_type()
    }

    /// The rkey the window has (after its latest bind).
    pub fn rkey(&self) -> u32 {
        self.shared.lock().rkey
    }

    /// Whether the window is bound (as far as this side knows): true from
    /// a bind until the device confirmed an invalidation.
    pub fn is_bound(&self) -> bool {
        self.shared.lock().binding.is_some()
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
        let st = self.shared.lock();
        let b = st.binding.as_ref().ok_or_else(|| Error::inval("the memory window is not bound"))?;
        let mut usage = Usage::empty();
        if b.access.contains(MwAccess::REMOTE_READ) {
            usage |= Usage::READ_SRC;
        }
        if b.access.intersects(MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC) {
            usage |= Usage::WRITE_DST;
        }
        let addr = if b.access.contains(MwAccess::ZERO_BASED) { 0 } else { b.addr };
        Ok(wire::encode_mr(&MrDesc { addr, size: b.len, rkey: b.rkey, usage: usage.bits() as u8 }))
    }

    /// Records that the remote side invalidated this window with a
    /// send-with-invalidate, whose receive is `completion`, and releases the
    /// region: only when the completion is a successful receive that names
    /// this window's rkey as invalidated, which is the device's confirmation.
    ///
    /// Some providers (rxe on Linux 6.1, measured) invalidate the window but
    /// do not report the invalidated rkey; then nothing confirms it and this
    /// call fails: drop the window (`ibv_dealloc_mw`) to release the region.
    ///
    /// # Errors
    /// [`Error::Inval`] when the window is not bound, or the completion is
    /// not a successful receive naming this window's rkey (it names another
    /// rkey, none, or is another operation's); the window stays bound and
    /// keeps its region.
    pub fn remote_invalidated(&mut self, completion: &crate::Completion) -> Result<()> {
        let mut st = self.shared.lock();
        let Some(b) = st.binding.as_ref() else {
            return Err(Error::inval("remote_invalidated: the memory window is not bound"));
        };
        if !completion.status.is_success() || completion.op != crate::CompletionOp::Recv {
            return Err(Error::inval(format!(
                "remote_invalidated: the completion is a {:?} with status \"{}\", not a successful receive; \
                 the window stays bound",
                completion.op, completion.status
            )));
        }
        match completion.invalidated_rkey {
            Some(k) if k == b.rkey => {
                st.binding = None;
                st.invalidating = None;
                Ok(())
            }
            Some(k) => Err(Error::inval(format!(
                "remote_invalidated: the completion invalidated rkey {k:#x}, not this window's {:#x}; the window \
                 stays bound",
                b.rkey
            ))),
            None => Err(Error::inval(
                "remote_invalidated: the completion names no invalidated rkey (the provider does not report it, \
                 or the send carried no invalidation); the window stays bound: drop it to release the region",
            )),
        }
    }

    pub(crate) fn sys(&self) -> &rpma_sys::mw::Mw {
        &self.mw
    }

    pub(crate) fn shared(&self) -> &Arc<MwShared> {
        &self.shared
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // SAFETY: taken once, here.
        #[allow(unsafe_code)]
        let mw = unsafe { ManuallyDrop::take(&mut self.mw) };
        let binding = self.shared.lock().binding.take();
        match mw.dealloc() {
            Ok(()) => drop(binding), // the window is gone: the region is free
            Err((mw, e)) => {
                rpma_log!(
                    LogLevel::Error,
                    "ibv_dealloc_mw: {e}; the window may still reach its region: leaking both instead of freeing"
                );
                std::mem::forget(mw);
                std::mem::forget(binding);
            }
        }
    }
}
