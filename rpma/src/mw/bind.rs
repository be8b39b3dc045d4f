//! Binding and invalidating windows: the window operations a connection
//! posts on its send queue.

use super::*;
use crate::error::RangeUse;
use rpma_sys::wr::{MwBindInfo, WrFlags};

/// The next rkey of a type 2 window after `rkey` that no report still
/// unpolled on QP `qp_num` can name (the stale pairs of
/// [`Windows`](crate::windows::Windows)); `None` when all 255 others are.
fn fresh_rkey(peer: &crate::Peer, qp_num: u32, rkey: u32) -> Option<u32> {
    let mut k = rkey;
    (0..255).find_map(|_| {
        k = rpma_sys::wr::next_rkey(k);
        (!peer.windows().is_stale(qp_num, k)).then_some(k)
    })
}

/// Window operations on a connection (they post on its send queue; they
/// live here, with the window whose state they change).
impl Conn {
    /// Binds `mw` over `len` bytes at `offset` of `mr` with `access`
    /// (`ibv_bind_mw` for type 1, a posted bind work request for type 2,
    /// which ties the window to this connection). The window is usable, and
    /// its [`descriptor`](Mw::descriptor) valid, once the bind's completion
    /// has been reaped (with [`Flags::COMPLETION_ON_ERROR`], after a later
    /// signaled operation's). The window keeps `mr` alive until it is
    /// invalidated or dropped.
    ///
    /// # Errors
    /// * [`Error::Inval`]: `flags` empty; the window is already bound; the
    ///   range exceeds `mr`; `mr` was not registered with
    ///   [`Usage::MW_BIND`]; remote write or atomic access over a region
    ///   without local write access (the seed's rule); zero-based addressing
    ///   on a type 1 window; window or region on another peer.
    /// * [`Error::NoSupp`]: the provider cannot bind type 1 windows.
    /// * [`Error::Again`], [`Error::Provider`]: as [`write`](Conn::write).
    pub fn bind_mw<M: RegMemory + Send + Sync + 'static>(
        &self,
        mw: &mut Mw,
        mr: &MrLocal<M>,
        offset: usize,
        len: usize,
        access: MwAccess,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        let parts = self.parts();
        let signaled = flags.signaled()?;
        let fence = flags.fence();
        if mw.is_bound() {
            return Err(Error::misuse(
                Misuse::WindowBound,
                "bind_mw: the window is already bound; invalidate it first",
            ));
        }
        const MR: Named = Named::new(Arg::Region, "bind_mw: mr");
        mr.check_range(&MR, offset, len)?;
        validate::local(mr, Usage::MW_BIND, &MR, &parts.peer)?;
        if !mw.peer().same_pd(&parts.peer) {
            return Err(Error::foreign(
                Arg::Window,
                "bind_mw: the window was allocated on another peer (protection domain)",
            ));
        }
        if access.intersects(MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC)
            && !mr.access().contains(Access::LOCAL_WRITE)
        {
            return Err(Error::misuse(
                Misuse::WindowNeedsLocalWrite,
                format!(
                    "bind_mw: remote write or atomic access needs local write access on the region, which has {:?}",
                    mr.access()
                ),
            ));
        }
        if access.contains(MwAccess::ZERO_BASED) && mw.mw_type() == MwType::Type1 {
            return Err(Error::misuse(
                Misuse::ZeroBasedNeedsType2,
                "bind_mw: zero-based addressing needs a type 2 window",
            ));
        }
        let qp = parts.qp()?;
        let handle = mw.shared().handle();
        let sys_mw = handle.as_ref().ok_or_else(ended)?;
        let addr = mr.sys().device_addr() + offset as u64;
        let mut new_rkey = mw.rkey();
        let type2_rkey = match mw.mw_type() {
            MwType::Type1 => 0,
            MwType::Type2 => fresh_rkey(&parts.peer, qp.qp_num(), new_rkey).ok_or_else(|| {
                Error::Again(
                    "bind_mw: every rkey of this window may still be named by an unpolled invalidation report of \
                     a deallocated window on this connection: poll its receive CQ"
                        .into(),
                )
            })?,
        };
        // The window's range, taken before the post: the remote side may
        // use it from the bind on.
        let by = match access.intersects(MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC) {
            true => RangeUse::DeviceWrites,
            false => RangeUse::DeviceReads,
        };
        let range = mr.hold_range(&MR, offset, len, by).map_err(crate::inflight::unbox)?;
        let rec = SendOpRec {
            ctx: op_context,
            kind: CompletionOp::BindMw,
            signaled,
            hold: Some(mr.keep().map_err(crate::inflight::unbox)?),
            confirm: None,
        };
        // Set when the provider refused the bind but may have queued it: the
        // window may then become bound on the device, so it is recorded as
        // bound (holding the region) all the same.
        let mut maybe_queued = false;
        let posted = parts
            .send
            .post_with(rec, |wr_id| {
                let info = MwBindInfo { mr: mr.sys(), addr, length: len as u64, access: access.bits() };
                let wr = WrFlags { wr_id, signaled, fence };
                let r = match mw.mw_type() {
                    MwType::Type1 => qp.bind_mw_type1(sys_mw, info, wr).map(|k| new_rkey = k),
                    MwType::Type2 => {
                        new_rkey = type2_rkey;
                        qp.post_bind_mw(sys_mw, new_rkey, info, wr)
                    }
                };
                maybe_queued = r.as_ref().is_err_and(|e| e.maybe_queued);
                r
            })
            .map_err(|e| match e.errno() {
                Some(libc::EOPNOTSUPP) => Error::nosupp("bind_mw: the provider cannot bind type 1 memory windows"),
                _ => e,
            });
        if posted.is_err() && !maybe_queued {
            return posted;
        }
        // The window holds the region from the post on, whether or not the
        // bind succeeds on the device: only a confirmed invalidation or a
        // successful deallocation ends the hold.
        let mut st = mw.shared().lock();
        st.rkey = new_rkey;
        st.binding = Some(Binding::new(addr, len as u64, access, new_rkey, qp.qp_num(), mr.region_hold(), range));
        drop(st);
        if mw.mw_type() == MwType::Type2 {
            // The window ends with this connection unless invalidated or
            // dropped before.
            let weak: std::sync::Weak<dyn EndWithConn> = Arc::downgrade(mw.shared()) as _;
            parts.ends.add(weak);
        }
        drop(handle);
        posted
    }

    /// Revokes `mw`'s binding: a local invalidate (`IBV_WR_LOCAL_INV`) for a
    /// type 2 window, a zero-length bind for type 1. Once its completion has
    /// been reaped, remote access through the old rkey fails; if that
    /// completion is successful the window releases its region then (a
    /// failed one leaves the window bound, holding the region).
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` lack [`Flags::COMPLETION_ALWAYS`] (the
    /// release needs the invalidation's own completion), the window is not
    /// bound, an invalidation of it is already posted, a type 2 window was
    /// bound on another connection, or the connection is closed (the window
    /// stays bound in every case); [`Error::Again`], [`Error::Provider`]: as
    /// [`write`](Conn::write).
    pub fn invalidate_mw(&self, mw: &mut Mw, flags: Flags, op_context: u64) -> Result<()> {
        let parts = self.parts();
        if !flags.signaled()? {
            return Err(Error::misuse(
                Misuse::CompletionNeeded,
                "invalidate_mw: flags need Flags::COMPLETION_ALWAYS: the window releases its region only when \
                 the invalidation's own completion confirms it",
            ));
        }
        let fence = flags.fence();
        let qp = parts.qp()?;
        let ty = mw.mw_type();
        let shared = mw.shared().clone();
        let (rkey, region) = {
            let mut st = shared.lock();
            let Some(b) = st.binding.as_ref() else {
                return Err(Error::misuse(Misuse::WindowNotBound, "invalidate_mw: the window is not bound"));
            };
            if st.invalidating.is_some() {
                return Err(Error::misuse(
                    Misuse::InvalidationPosted,
                    "invalidate_mw: an invalidation of this window is already posted; reap its completion",
                ));
            }
            if ty == MwType::Type2 && b.qp_num != qp.qp_num() {
                return Err(Error::foreign(
                    Arg::Window,
                    format!(
                        "invalidate_mw: the type 2 window was bound on another connection (QP {}), not this one \
                         (QP {}); invalidate it there",
                        b.qp_num,
                        qp.qp_num()
                    ),
                ));
            }
            let r = (b.rkey, b.region.clone());
            // Set before posting: the completion may be translated (by a
            // thread polling the CQ) as soon as the post returns.
            st.invalidating = Some(r.0);
            r
        };
        let hold = Hold::keep(region.clone());
        let rec = SendOpRec {
            ctx: op_context,
            kind: CompletionOp::LocalInv,
            signaled: true,
            hold: Some(hold),
            confirm: Some(shared.clone()),
        };
        let handle = shared.handle();
        let Some(sys_mw) = handle.as_ref() else {
            shared.lock().invalidating = None;
            return Err(ended());
        };
        let r = parts.send.post_with(rec, |wr_id| match ty {
            MwType::Type2 => qp.post_local_inv(wr_id, true, fence, rkey),
            MwType::Type1 => {
                // A zero-length bind over its region unbinds a type 1 window.
                let mr = region.mr();
                let info = MwBindInfo { mr, addr: mr.device_addr(), length: 0, access: 0 };
                qp.bind_mw_type1(sys_mw, info, WrFlags { wr_id, signaled: true, fence }).map(|_| ())
            }
        });
        let mut st = shared.lock();
        match r {
            Ok(()) => {
                if ty == MwType::Type1 {
                    st.rkey = sys_mw.rkey();
                }
                Ok(())
            }
            Err(e) => {
                st.invalidating = None;
                Err(e)
            }
        }
    }
}

/// A window used after the connection its type 2 binding was on ended it.
#[cold]
fn ended() -> Error {
    let text = "the memory window was deallocated with the connection its binding was on: allocate another";
    Error::closed(text)
}
