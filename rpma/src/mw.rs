//! Memory windows: remote access to a sub-range of a registered region,
//! granted and revoked without re-registering it (`ibv_alloc_mw`,
//! `ibv_bind_mw`, invalidation).

use crate::access::{Access, Usage};
use crate::conn::{Conn, EndWithConn};
use crate::error::{Arg, Error, Misuse, Named, Result};
use crate::inflight::{Confirm, Hold, SendOpRec};
use crate::logging::{rpma_log, LogLevel};
use crate::memory::RegMemory;
use crate::mr::{MrLocal, RegionHold};
use crate::ops::Flags;
use crate::peer::Peer;
use crate::validate;
use crate::windows::Invalidate;
#[cfg(all(test, loom))]
use crate::windows::Windows;
use crate::wire::{self, MrDesc};
use crate::wrid::CompletionOp;
use bitflags::bitflags;
use std::sync::atomic::Ordering;
use std::sync::Arc;
// loom's mutex under `--cfg loom`, for the model below.
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

mod bind;

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
    /// The window's range of the region, in use as the device may use it
    /// (written where the window grants remote write or atomic access).
    _range: Hold,
}

impl Binding {
    pub(crate) fn new(
        addr: u64,
        len: u64,
        access: MwAccess,
        rkey: u32,
        qp_num: u32,
        region: Arc<dyn RegionHold>,
        range: Hold,
    ) -> Binding {
        region.windows().fetch_add(1, Ordering::Relaxed);
        Binding { addr, len, access, rkey, qp_num, region, _range: range }
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

pub(crate) struct MwShared {
    state: Mutex<MwState>,
    /// The verbs window (`ibv_mw`), deallocated by whichever comes first:
    /// the window's drop, or the end of the connection its type 2 binding
    /// is on. Held across a bind or an invalidation's post; taken before
    /// the state.
    handle: Mutex<Option<rpma_sys::mw::Mw>>,
}

impl MwShared {
    pub(crate) fn new(state: MwState, handle: Option<rpma_sys::mw::Mw>) -> MwShared {
        MwShared { state: Mutex::new(state), handle: Mutex::new(handle) }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, MwState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The verbs window; `None` once deallocated.
    pub(crate) fn handle(&self) -> MutexGuard<'_, Option<rpma_sys::mw::Mw>> {
        self.handle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A type 2 window ends with the connection its binding is on: a QP with a
/// type 2 window bound to it is not destroyed promptly (rxe waits out a
/// timeout of tens of seconds for the window's reference), and the window
/// serves nothing once its QP is gone. Deallocated as its drop would, the
/// device's success ending the binding; a failure leaks both.
impl EndWithConn for MwShared {
    fn end(&self, qp_num: u32, peer: &Peer) {
        let (mw, binding) = {
            let mut handle = self.handle();
            let mut st = self.lock();
            if st.binding.as_ref().is_none_or(|b| b.qp_num != qp_num) {
                return;
            }
            let Some(mw) = handle.take() else { return };
            (mw, st.binding.take())
        };
        if let Some(b) = &binding {
            peer.windows().keep_stale(b.qp_num, b.rkey);
        }
        // After the locks: the log function and the region's last drop.
        dealloc(mw, binding);
    }
}

/// `ibv_dealloc_mw`: on success the window no longer reaches its region and
/// `binding` (its hold) goes; on failure both are leaked, never freed.
fn dealloc(mw: rpma_sys::mw::Mw, binding: Option<Binding>) {
    match mw.dealloc() {
        Ok(()) => drop(binding),
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

impl Confirm for MwShared {
    /// The invalidation's own completion: only a successful one ends the
    /// binding (and its hold on the region), and only the binding it named.
    fn completed(&self, success: bool) {
        let mut st = self.lock();
        let mut ended = None;
        if let Some(rkey) = st.invalidating.take() {
            if success && st.binding.as_ref().is_some_and(|b| b.rkey == rkey) {
                ended = st.binding.take();
            }
        }
        drop(st);
        // After the lock: the last hold of the region drops it (and the
        // caller's memory value).
        drop(ended);
    }
}

/// The device's report that a window's rkey was invalidated ends that
/// window's binding (see [`Windows`]).
impl Invalidate for MwShared {
    fn invalidated(&self, qp_num: u32, rkey: u32) -> Option<Box<dyn Send>> {
        let mut st = self.lock();
        if st.binding.as_ref().is_some_and(|b| b.rkey == rkey && b.qp_num == qp_num) {
            st.invalidating = None;
            return st.binding.take().map(|b| Box::new(b) as Box<dyn Send>);
        }
        None
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
/// successful receive completion that the device marks as invalidating its
/// rkey, as a completion queue of this peer's connections polls it
/// ([`Mw::remote_invalidated`]), or a successful `ibv_dealloc_mw` when the
/// window is dropped or, for a type 2 window, when the connection its
/// binding is on goes (the window is deallocated with it: a later bind
/// reports [`Detail::Closed`](crate::error::Detail::Closed)). If
/// deallocation fails, the window and its region are leaked, never freed.
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
/// let wc = conn.cq().next_completion(std::time::Duration::from_secs(5))?;
/// assert!(wc.status.is_success() && !mw.is_bound()); // the region is free again
/// # let _ = desc; Ok(()) }
/// ```
pub struct Mw {
    ty: MwType,
    shared: Arc<MwShared>,
    peer: Peer,
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        let b = st.binding.as_ref().map(|b| (b.addr, b.len, b.access));
        f.debug_struct("Mw")
            .field("type", &self.ty)
            .field("rkey", &st.rkey)
            .field("binding", &b)
            .field("invalidating", &st.invalidating.is_some())
            .finish()
    }
}

/// The usage a window's descriptor states for `access`: `READ_SRC` for
/// remote read, `WRITE_DST` for remote write or atomics.
pub(crate) fn remote_usage(access: MwAccess) -> Usage {
    let mut usage = Usage::empty();
    if access.contains(MwAccess::REMOTE_READ) {
        usage |= Usage::READ_SRC;
    }
    if access.intersects(MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC) {
        usage |= Usage::WRITE_DST;
    }
    usage
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
        let shared = Arc::new(MwShared::new(st, Some(mw)));
        // On failure the window is dropped unbound: ibv_dealloc_mw.
        let m = Mw { ty, shared, peer: peer.clone() };
        peer.windows().add(m.shared.clone())?;
        Ok(m)
    }

    /// The window's type ([`MwType`]: how it is bound and invalidated).
    pub fn mw_type(&self) -> MwType {
        self.ty
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

    /// The peer whose regions and connections the window binds to.
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
        let (mut d, access) = self.bound_desc()?;
        d.usage = remote_usage(access).bits() as u8;
        Ok(wire::encode_mr(&d))
    }

    /// The bound window's start (0 when zero-based), length and rkey (usage
    /// left 0 for the caller), and its access.
    pub(crate) fn bound_desc(&self) -> Result<(MrDesc, MwAccess)> {
        let st = self.shared.lock();
        let b = st
            .binding
            .as_ref()
            .ok_or_else(|| Error::misuse(Misuse::WindowNotBound, "the memory window is not bound"))?;
        let addr = if b.access.contains(MwAccess::ZERO_BASED) { 0 } else { b.addr };
        Ok((MrDesc { addr, size: b.len, rkey: b.rkey, usage: 0 }, b.access))
    }

    /// Whether the remote side's send-with-invalidate, whose receive is
    /// `completion`, released the window: `Ok` when the completion is a
    /// successful receive naming this window's rkey as invalidated and the
    /// window is no longer bound.
    ///
    /// The binding (and the window's hold on its region) ends when the
    /// device reports the invalidation, at the moment a completion queue of
    /// one of this peer's connections polls that receive, not when this is
    /// called: a [`Completion`](crate::Completion) is plain data that safe
    /// code can build or copy, so it is never taken as evidence of what the
    /// device did. This call only tells the caller what happened.
    ///
    /// Some providers (rxe on Linux 6.1, measured) invalidate the window but
    /// do not report the invalidated rkey; then nothing confirms it and the
    /// window stays bound: drop the window (`ibv_dealloc_mw`) to release the
    /// region.
    ///
    /// ```
    /// use rpma::{CompletionOp, Cq};
    /// // A value changed by hand says the window was invalidated...
    /// let mut forged = Cq::EMPTY;
    /// (forged.op, forged.invalidated_rkey) = (CompletionOp::Recv, Some(0x1234));
    /// // ...but no call releases a region on its word: `Mw::remote_invalidated`
    /// // only reports what the window's completion queues saw.
    /// # let _ = forged;
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when the completion is not a successful receive
    /// naming this window's rkey (it names another rkey, none, or is
    /// another operation's), or when the window is still bound: no
    /// completion queue of this peer has polled the device's report of the
    /// invalidation (the completion was not polled from one, or was built
    /// or copied by hand). The window then stays bound and keeps its region.
    pub fn remote_invalidated(&mut self, completion: &crate::Completion) -> Result<()> {
        let st = self.shared.lock();
        if !completion.status.is_success() || completion.op != crate::CompletionOp::Recv {
            return Err(Error::misuse(
                Misuse::NotAReceive,
                format!(
                    "remote_invalidated: the completion is a {:?} with status \"{}\", not a successful receive; \
                 the window stays bound",
                    completion.op, completion.status
                ),
            ));
        }
        match completion.invalidated_rkey {
            Some(k) if k == st.rkey && st.binding.is_none() => Ok(()),
            Some(k) if k == st.rkey => Err(Error::misuse(
                Misuse::NotPolledHere,
                format!(
                "remote_invalidated: no completion queue of this window's peer has polled the device's report that \
                 rkey {k:#x} was invalidated (the completion was not polled from one, or was built or copied by \
                 hand); the window stays bound"
            ),
            )),
            Some(k) => Err(Error::misuse(
                Misuse::OtherRkey,
                format!(
                    "remote_invalidated: the completion invalidated rkey {k:#x}, not this window's {:#x}; the window \
                 stays bound",
                    st.rkey
                ),
            )),
            None => Err(Error::misuse(
                Misuse::NoInvalidatedRkey,
                "remote_invalidated: the completion names no invalidated rkey (the provider does not report it, \
                 or the send carried no invalidation); the window stays bound: drop it to release the region",
            )),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<MwShared> {
        &self.shared
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // Nothing left when the window ended with its connection.
        let Some(mw) = self.shared.handle().take() else { return };
        let binding = self.shared.lock().binding.take();
        // A report of the binding may still be polled: its QP and rkey are
        // kept stale (if the deallocation succeeds, the window is gone), so
        // it never ends a newer binding.
        if let (Some(b), MwType::Type2) = (&binding, self.ty) {
            self.peer.windows().keep_stale(b.qp_num, b.rkey);
        }
        dealloc(mw, binding);
    }
}

/// loom model (`harness/loom`): a window's binding ended by the device's
/// report (a receive polled on one thread) and by its own invalidation's
/// completion (polled on another) at once ends once: the region's window
/// count goes down exactly once.
#[cfg(all(test, loom))]
#[allow(unsafe_code)] // a book outside a region, as the book's own models
mod loom_models {
    use super::*;
    use crate::inflight::book::{Book, Use};
    use std::sync::atomic::AtomicUsize;

    struct Region(AtomicUsize, Book);
    unsafe fn no_free(_: std::ptr::NonNull<Book>) {}
    impl RegionHold for Region {
        fn mr(&self) -> &rpma_sys::mr::Mr {
            unreachable!("not used by the model")
        }
        fn windows(&self) -> &AtomicUsize {
            &self.0
        }
    }

    #[test]
    fn loom_report_and_own_completion_end_a_binding_once() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let region = Arc::new(Region(AtomicUsize::new(0), Book::new(64, no_free)));
            // SAFETY: the model's region outlives the binding.
            let range = unsafe { Book::hold(std::ptr::NonNull::from(&region.1), 0, 8, Use::DeviceReads) };
            let range = Hold::Range(range.unwrap());
            let binding = Binding::new(0, 8, MwAccess::REMOTE_READ, 7, 1, region.clone(), range);
            let st = MwState { rkey: 7, binding: Some(binding), invalidating: Some(7) };
            let shared = Arc::new(MwShared::new(st, None));
            let windows = Arc::new(Windows::default());
            windows.add(shared.clone()).unwrap();
            let w2 = windows.clone();
            let poller = loom::thread::spawn(move || w2.invalidated(1, 7));
            shared.completed(true);
            poller.join().unwrap();
            assert!(shared.lock().binding.is_none());
            assert_eq!(region.0.load(Ordering::SeqCst), 0, "the hold ended once");
            // ... and its range with it: the CPU may write it again.
            region.1.release_cpu(region.1.take_cpu(0, 8, Use::CpuWrites).unwrap());
            windows.invalidated(1, 7); // a late report of the same rkey changes nothing
            assert_eq!(region.0.load(Ordering::SeqCst), 0);
        });
    }
}
