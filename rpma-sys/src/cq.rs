//! Completion channel, completion queue and extended completion queue.

use crate::device::Context;
use crate::ffi;
use crate::gate::{Bound, Gate};
use crate::{from_errno_ret, from_minus1_ret, last_error};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

struct ChannelInner {
    ch: *mut ffi::ibv_comp_channel,
    _ctx: Context,
    gate: Gate,
}

// SAFETY: a completion channel is an fd plus a context pointer; usable from any thread.
unsafe impl Send for ChannelInner {}
// SAFETY: ibv_get_cq_event on a shared channel is thread-safe (a blocking read).
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; CQs using it hold an Arc.
        let rc = unsafe { ffi::ibv_destroy_comp_channel(self.ch) };
        if let Err(e) = from_errno_ret(rc, "ibv_destroy_comp_channel") {
            crate::log_hook::sys_log!(Error, "ibv_destroy_comp_channel: {e}");
        }
    }
}

/// A completion event channel (`ibv_create_comp_channel`).
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl CompChannel {
    /// Creates a completion channel on `ctx`.
    ///
    /// # Errors
    /// The errno of `ibv_create_comp_channel`.
    pub fn new(ctx: &Context) -> io::Result<CompChannel> {
        // SAFETY: live context.
        let ch = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
        if ch.is_null() {
            return Err(last_error("ibv_create_comp_channel"));
        }
        Ok(CompChannel { inner: Arc::new(ChannelInner { ch, _ctx: ctx.clone(), gate: Gate::new() }) })
    }

    /// The channel's file descriptor (readable when an event is pending).
    #[inline]
    pub fn fd(&self) -> RawFd {
        // SAFETY: live channel.
        unsafe { (*self.inner.ch).fd }
    }
}

impl std::os::fd::AsFd for CompChannel {
    #[inline]
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the channel owns the fd and closes it only when the last
        // handle (this one among them) is dropped.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) }
    }
}

impl CompChannel {
    /// Takes the next completion event (`ibv_get_cq_event`) within `bound`
    /// (through the channel's [`Gate`]: one reader at a time), acknowledges
    /// it at once, and returns the [`Cq::id`] of the CQ it was for; `None`
    /// when none came in time. The CQ is not re-armed.
    ///
    /// # Errors
    /// The errno of `poll` or `ibv_get_cq_event` (`EAGAIN` on a
    /// non-blocking fd with no event pending, [`Bound::Never`]).
    #[inline]
    pub fn get_event(&self, bound: Bound) -> io::Result<Option<usize>> {
        self.inner.gate.read(self, bound, || self.next_event_acked())
    }

    /// [`get_event`](Self::get_event) for an async reader: `Pending` while
    /// another reader holds the channel (`cx` is woken when it lets go),
    /// else the event if one is there now.
    ///
    /// # Errors
    /// As [`get_event`](Self::get_event).
    pub fn poll_get_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<Option<usize>>> {
        self.inner.gate.poll_read(self, cx, || self.next_event_acked())
    }

    fn next_event_acked(&self) -> io::Result<usize> {
        let cq = self.next_event()?;
        // SAFETY: a CQ cannot finish ibv_destroy_cq while it has an unacked
        // event, so `cq` is live here; acking once matches the one event.
        unsafe { ffi::ibv_ack_cq_events(cq, 1) };
        Ok(cq as usize)
    }

    /// `ibv_get_cq_event`: the CQ of the next event, not acknowledged.
    #[inline]
    fn next_event(&self) -> io::Result<*mut ffi::ibv_cq> {
        let mut cq: *mut ffi::ibv_cq = std::ptr::null_mut();
        let mut cq_ctx: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: live channel; valid out-pointers.
        let rc = unsafe { ffi::ibv_get_cq_event(self.inner.ch, &mut cq, &mut cq_ctx) };
        from_minus1_ret(rc, "ibv_get_cq_event")?;
        Ok(cq)
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_comp_channel {
        self.inner.ch
    }
}

/// A work completion (`struct ibv_wc`), with immediate data in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wc {
    /// The work request ID given when posting.
    pub wr_id: u64,
    /// `ibv_wc_status` value (0 = success).
    pub status: u32,
    /// `ibv_wc_opcode` value.
    pub opcode: u32,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred (receives).
    pub byte_len: u32,
    /// Immediate data (host order) when `wc_flags` has `IBV_WC_WITH_IMM`, or
    /// the invalidated rkey with `IBV_WC_WITH_INV`.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number.
    pub src_qp: u32,
    /// `ibv_wc_flags`.
    pub wc_flags: u32,
}

/// A completion in libibverbs' layout (`struct ibv_wc`, 48 bytes, immediate
/// data in network order): what librpma's `rpma_cq_get_wc` hands out.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IbvWc {
    /// The work request ID (librpma: the operation's op context).
    pub wr_id: u64,
    /// `ibv_wc_status` value (0 = success).
    pub status: u32,
    /// `ibv_wc_opcode` value.
    pub opcode: u32,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred (receives).
    pub byte_len: u32,
    /// Immediate data in network order (`IBV_WC_WITH_IMM`), or the
    /// invalidated rkey (`IBV_WC_WITH_INV`).
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number.
    pub src_qp: u32,
    /// `ibv_wc_flags`.
    pub wc_flags: u32,
    /// P_Key index (UD only).
    pub pkey_index: u16,
    /// Source LID (UD only).
    pub slid: u16,
    /// Service level (UD only).
    pub sl: u8,
    /// Destination LID path bits (UD only).
    pub dlid_path_bits: u8,
}

// `IbvWc` is `struct ibv_wc` field for field: the same size, alignment and
// offsets, every field a plain integer, so the provider may write one in
// place ([`Cq::poll_into`]).
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    type W = ffi::ibv_wc;
    assert!(size_of::<IbvWc>() == size_of::<W>() && align_of::<IbvWc>() == align_of::<W>());
    macro_rules! same_offsets {
        ($($ours:ident ~ $theirs:ident),* $(,)?) => { $(assert!(offset_of!(IbvWc, $ours) == offset_of!(W, $theirs));)* };
    }
    same_offsets!(
        wr_id ~ wr_id, status ~ status, opcode ~ opcode, vendor_err ~ vendor_err, byte_len ~ byte_len,
        imm_data ~ __bindgen_anon_1, qp_num ~ qp_num, src_qp ~ src_qp, wc_flags ~ wc_flags,
        pkey_index ~ pkey_index, slid ~ slid, sl ~ sl, dlid_path_bits ~ dlid_path_bits,
    );
};

/// A completion as the provider wrote it (`struct ibv_wc` as is), read
/// through its methods: [`Cq::poll_in`] has the provider write it into the
/// caller's slot, so a caller that translates it after other work copies
/// nothing ahead; [`Cq::poll_one`] and [`Cq::poll_each`] hand it out too.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct PolledWc(ffi::ibv_wc);

// bindgen's enum representations differ between rdma-core versions.
#[allow(clippy::unnecessary_cast)]
impl PolledWc {
    /// The work request ID given when posting.
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// Sets the work request ID, e.g. to the operation's op context once
    /// the completion is retired ([`Cq::poll_into`]).
    #[inline(always)]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.0.wr_id = wr_id;
    }
    /// `ibv_wc_status` value (0 = success).
    #[inline(always)]
    pub fn status(&self) -> u32 {
        self.0.status as u32
    }
    /// `ibv_wc_opcode` value.
    #[inline(always)]
    pub fn opcode(&self) -> u32 {
        self.0.opcode as u32
    }
    /// Bytes transferred (receives).
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// Immediate data in host order (`IBV_WC_WITH_IMM`), or the
    /// invalidated rkey (`IBV_WC_WITH_INV`).
    #[inline(always)]
    pub fn imm_data(&self) -> u32 {
        Wc::imm_of(&self.0)
    }
    /// Local QP number.
    #[inline(always)]
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// `ibv_wc_flags`.
    #[inline(always)]
    pub fn wc_flags(&self) -> u32 {
        self.0.wc_flags
    }

    /// This completion in libibverbs' layout, every field as the provider
    /// wrote it but `wr_id`, which becomes `wr_id`.
    #[inline(always)]
    pub fn to_ibv_wc(&self, wr_id: u64) -> IbvWc {
        let w = &self.0;
        IbvWc {
            wr_id,
            status: w.status as u32,
            opcode: w.opcode as u32,
            vendor_err: w.vendor_err,
            byte_len: w.byte_len,
            // SAFETY: both union members are u32; reading either is defined.
            imm_data: unsafe { w.__bindgen_anon_1.imm_data },
            qp_num: w.qp_num,
            src_qp: w.src_qp,
            wc_flags: w.wc_flags,
            pkey_index: w.pkey_index,
            slid: w.slid,
            sl: w.sl,
            dlid_path_bits: w.dlid_path_bits,
        }
    }
}

impl std::fmt::Debug for PolledWc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_wc().fmt(f)
    }
}

impl PolledWc {
    /// A copy with every field ([`Wc`]).
    #[inline]
    pub fn to_wc(&self) -> Wc {
        Wc::from_raw(&self.0)
    }

    /// A completion with these fields and every other one 0, for models and
    /// tests of code that routes completions. A `PolledWc` is plain data:
    /// nothing in rpma takes one it did not poll itself.
    pub fn new(wr_id: u64, qp_num: u32, status: u32, opcode: u32) -> PolledWc {
        // SAFETY: plain data, all-zero is valid.
        let mut w: ffi::ibv_wc = unsafe { std::mem::zeroed() };
        w.wr_id = wr_id;
        w.qp_num = qp_num;
        w.status = status as _;
        w.opcode = opcode as _;
        PolledWc(w)
    }
}

/// `IBV_WC_WITH_IMM`.
pub const WC_WITH_IMM: u32 = 1 << 1;
/// `IBV_WC_WITH_INV`.
pub const WC_WITH_INV: u32 = 1 << 3;
/// `IBV_WC_RECV_RDMA_WITH_IMM`: the opcode of a receive consumed by an
/// RDMA write with immediate data.
pub const WC_RECV_RDMA_WITH_IMM: u32 = ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM;

impl Wc {
    // bindgen's enum representations differ between rdma-core versions.
    #[allow(clippy::unnecessary_cast)]
    #[inline]
    fn from_raw(w: &ffi::ibv_wc) -> Wc {
        Wc {
            wr_id: w.wr_id,
            status: w.status as u32,
            opcode: w.opcode as u32,
            vendor_err: w.vendor_err,
            byte_len: w.byte_len,
            imm_data: Wc::imm_of(w),
            qp_num: w.qp_num,
            src_qp: w.src_qp,
            wc_flags: w.wc_flags,
        }
    }
}

impl Wc {
    /// `w`'s immediate data in host order, or its invalidated rkey.
    #[inline(always)]
    fn imm_of(w: &ffi::ibv_wc) -> u32 {
        // SAFETY: both union members are u32; reading either is defined.
        let raw = unsafe { w.__bindgen_anon_1.imm_data };
        // An invalidated rkey is in host order; immediate data in network order.
        if w.wc_flags & WC_WITH_INV != 0 {
            raw
        } else {
            u32::from_be(raw)
        }
    }
}

struct CqInner {
    cq: *mut ffi::ibv_cq,
    /// The provider's `poll_cq` and `req_notify_cq`, resolved once.
    poll: ffi::PollCqFn,
    notify: ffi::ReqNotifyCqFn,
    ex: bool,
    channel: Option<CompChannel>,
    /// Events got by [`Cq::get_event`] and not acknowledged yet (fewer
    /// than [`ACK_BATCH`]; acknowledged before the CQ is destroyed).
    unacked: AtomicU32,
    _ctx: Context,
}

/// [`Cq::get_event`] acknowledges events in batches of this many:
/// `ibv_ack_cq_events` takes a mutex and signals a condition variable,
/// which `ibv_get_cq_event(3)` advises to amortise.
pub const ACK_BATCH: u32 = 64;

// SAFETY: ibv_cq is usable from any thread; only Drop destroys it.
unsafe impl Send for CqInner {}
// SAFETY: polling and arming a CQ are thread-safe in libibverbs providers.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let unacked = *self.unacked.get_mut();
        if unacked > 0 {
            // SAFETY: live CQ; exactly the events Cq::get_event got and did
            // not acknowledge yet.
            unsafe { ffi::ibv_ack_cq_events(self.cq, unacked) };
        }
        // SAFETY: live CQ destroyed once; QPs using it hold an Arc. Events got
        // through CompChannel::get_event are acked at once and the ones got
        // through Cq::get_event just above, so this cannot block on
        // unacked events.
        let rc = unsafe { ffi::ibv_destroy_cq(self.cq) };
        if let Err(e) = from_errno_ret(rc, "ibv_destroy_cq") {
            crate::log_hook::sys_log!(Error, "ibv_destroy_cq: {e}");
        }
    }
}

/// A completion queue (`ibv_create_cq`, or `ibv_create_cq_ex` for
/// [`Cq::new_ex`]), shared by reference counting.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

impl Cq {
    /// Creates a CQ of at least `cqe` entries, optionally reporting events on
    /// `channel`.
    ///
    /// # Errors
    /// The errno of `ibv_create_cq` (`EINVAL` over `max_cqe`).
    pub fn new(ctx: &Context, cqe: u32, channel: Option<&CompChannel>) -> io::Result<Cq> {
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.as_ptr());
        let cqe = cqe.min(i32::MAX as u32) as i32;
        // SAFETY: live context and (optional) channel of the same context.
        let cq = unsafe { ffi::ibv_create_cq(ctx.as_ptr(), cqe, std::ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            return Err(last_error("ibv_create_cq"));
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                cq,
                // SAFETY: live CQ.
                poll: unsafe { ffi::poll_cq_fn(cq) },
                // SAFETY: live CQ.
                notify: unsafe { ffi::req_notify_cq_fn(cq) },
                ex: false,
                channel: channel.cloned(),
                unacked: AtomicU32::new(0),
                _ctx: ctx.clone(),
            }),
        })
    }

    /// Creates an extended CQ (`ibv_create_cq_ex`) with the `IBV_WC_EX_WITH_*`
    /// fields `wc_flags`; it is polled like any other CQ through [`Cq::poll`].
    ///
    /// # Errors
    /// The errno of `ibv_create_cq_ex` (`EOPNOTSUPP` without provider support).
    pub fn new_ex(ctx: &Context, cqe: u32, channel: Option<&CompChannel>, wc_flags: u64) -> io::Result<Cq> {
        // SAFETY: plain data, all-zero is valid.
        let mut attr: ffi::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.cqe = cqe;
        attr.channel = channel.map_or(std::ptr::null_mut(), |c| c.as_ptr());
        attr.wc_flags = wc_flags;
        // SAFETY: live context, valid attributes.
        let cqx = unsafe { ffi::ibv_create_cq_ex(ctx.as_ptr(), &mut attr) };
        if cqx.is_null() {
            return Err(last_error("ibv_create_cq_ex"));
        }
        // An extended CQ begins with its ibv_cq.
        let cq = ffi::ibv_cq_ex_to_cq(cqx);
        Ok(Cq {
            inner: Arc::new(CqInner {
                cq,
                // SAFETY: live CQ.
                poll: unsafe { ffi::poll_cq_fn(cq) },
                // SAFETY: live CQ.
                notify: unsafe { ffi::req_notify_cq_fn(cq) },
                ex: true,
                channel: channel.cloned(),
                unacked: AtomicU32::new(0),
                _ctx: ctx.clone(),
            }),
        })
    }

    /// Whether this is an extended CQ.
    pub fn is_ex(&self) -> bool {
        self.inner.ex
    }

    /// Identity of the CQ, as returned by [`CompChannel::get_event`].
    pub fn id(&self) -> usize {
        self.inner.cq as usize
    }

    /// The channel this CQ reports events on.
    pub fn channel(&self) -> Option<&CompChannel> {
        self.inner.channel.as_ref()
    }

    /// Number of entries the CQ actually has.
    pub fn cqe(&self) -> u32 {
        // SAFETY: live CQ.
        unsafe { (*self.inner.cq).cqe.max(0) as u32 }
    }

    /// Takes the next completion event on the CQ's own channel
    /// (`ibv_get_cq_event`) within `bound`, through the channel's [`Gate`]
    /// (one reader at a time), for a channel this CQ alone reports on:
    /// `false` when none came in time. Unlike [`CompChannel::get_event`] it
    /// acknowledges events in batches of [`ACK_BATCH`] (the rest when the
    /// CQ is destroyed). The CQ is not re-armed.
    ///
    /// # Errors
    /// `EINVAL` for a CQ without a channel; the errno of `poll` or
    /// `ibv_get_cq_event` (`EAGAIN` on a non-blocking fd with no event
    /// pending, [`Bound::Never`]).
    #[inline]
    pub fn get_event(&self, bound: Bound) -> io::Result<bool> {
        let Some(ch) = &self.inner.channel else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        Ok(ch.inner.gate.read(ch, bound, || self.next_event_batched(ch))?.is_some())
    }

    /// [`get_event`](Self::get_event) for an async reader: `Pending` while
    /// another reader holds the channel (`cx` is woken when it lets go),
    /// else whether an event was there now.
    ///
    /// # Errors
    /// As [`get_event`](Self::get_event).
    pub fn poll_get_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<bool>> {
        let Some(ch) = &self.inner.channel else {
            return std::task::Poll::Ready(Err(io::Error::from_raw_os_error(libc::EINVAL)));
        };
        ch.inner.gate.poll_read(ch, cx, || self.next_event_batched(ch)).map(|r| r.map(|e| e.is_some()))
    }

    #[inline]
    fn next_event_batched(&self, ch: &CompChannel) -> io::Result<()> {
        let cq = ch.next_event()?;
        if cq != self.inner.cq {
            // Another CQ on the same channel: acknowledge at once. SAFETY:
            // as in CompChannel::next_event_acked.
            unsafe { ffi::ibv_ack_cq_events(cq, 1) };
            return Ok(());
        }
        if self.inner.unacked.fetch_add(1, Ordering::Relaxed) >= ACK_BATCH - 1 {
            let n = self.inner.unacked.swap(0, Ordering::Relaxed);
            if n > 0 {
                // SAFETY: live CQ; `n` events got here and not acknowledged
                // (each counted once, taken once by the swap).
                unsafe { ffi::ibv_ack_cq_events(self.inner.cq, n) };
            }
        }
        Ok(())
    }

    /// Arms the CQ for the next completion event (`ibv_req_notify_cq`).
    ///
    /// # Errors
    /// The errno of `ibv_req_notify_cq`.
    #[inline]
    pub fn req_notify(&self, solicited_only: bool) -> io::Result<()> {
        // SAFETY: live CQ.
        let rc = unsafe { (self.inner.notify)(self.inner.cq, solicited_only as i32) };
        from_errno_ret(rc, "ibv_req_notify_cq")
    }

    /// Polls up to `out.len()` completions (`ibv_poll_cq`); returns how many
    /// were written to the front of `out`.
    ///
    /// # Errors
    /// A provider failure of `ibv_poll_cq`.
    pub fn poll(&self, out: &mut [Wc]) -> io::Result<usize> {
        self.poll_each(out.len(), |i, w| out[i] = w.to_wc())
    }

    /// Polls up to `max` completions (`ibv_poll_cq`), handing each to `f`
    /// with its index, in order; returns how many there were. No
    /// intermediate array is zeroed or copied: the fast path of one
    /// completion costs the provider's poll and little else.
    ///
    /// # Errors
    /// A provider failure of `ibv_poll_cq` (completions handed to `f`
    /// before it stay handed).
    pub fn poll_each(&self, max: usize, mut f: impl FnMut(usize, &PolledWc)) -> io::Result<usize> {
        const CHUNK: usize = 16;
        let mut raw: [MaybeUninit<ffi::ibv_wc>; CHUNK] = [const { MaybeUninit::uninit() }; CHUNK];
        let mut got = 0;
        while got < max {
            let want = (max - got).min(CHUNK);
            // SAFETY: live CQ; `raw` has room for `want` entries, and the
            // provider writes the first `n` it returns.
            let n = unsafe { (self.inner.poll)(self.inner.cq, want as i32, raw.as_mut_ptr().cast()) };
            if n < 0 {
                return Err(io::Error::other(format!("ibv_poll_cq failed ({n})")));
            }
            // Never more than asked for, whatever the provider answers.
            let n = (n as usize).min(want);
            for src in &raw[..n] {
                // SAFETY: the provider initialised the first n entries;
                // PolledWc is a transparent ibv_wc.
                f(got, unsafe { &*src.as_ptr().cast::<PolledWc>() });
                got += 1;
            }
            if n < want {
                break;
            }
        }
        Ok(got)
    }

    /// Polls one completion (`ibv_poll_cq` with room for one), as a copy:
    /// [`poll_in`](Cq::poll_in) for callers that keep it.
    ///
    /// # Errors
    /// A provider failure of `ibv_poll_cq`.
    #[inline]
    pub fn poll_one(&self) -> io::Result<Option<PolledWc>> {
        let mut slot = MaybeUninit::uninit();
        Ok(self.poll_in(&mut slot)?.copied())
    }

    /// Polls one completion into `slot` (`ibv_poll_cq` with room for
    /// one), where it stays: the caller reads its fields in place.
    ///
    /// # Errors
    /// A provider failure of `ibv_poll_cq`.
    #[inline]
    pub fn poll_in<'a>(&self, slot: &'a mut MaybeUninit<PolledWc>) -> io::Result<Option<&'a PolledWc>> {
        Ok(if self.poll_slot(slot)? {
            // SAFETY: `poll_slot` said the provider initialised the entry.
            Some(unsafe { slot.assume_init_ref() })
        } else {
            None
        })
    }

    /// Polls one completion (`ibv_poll_cq` with room for one) straight
    /// into `out`, in libibverbs' layout: the provider writes it there, and
    /// the caller reads it in place and gives it its `wr_id`
    /// ([`PolledWc::set_wr_id`]) with nothing copied (librpma's
    /// `rpma_cq_get_wc`).
    ///
    /// # Errors
    /// A provider failure of `ibv_poll_cq`.
    #[inline]
    pub fn poll_into<'a>(&self, out: &'a mut MaybeUninit<IbvWc>) -> io::Result<Option<&'a mut PolledWc>> {
        // SAFETY: `IbvWc` and `PolledWc` (a transparent `ibv_wc`) have the
        // same size, alignment and field offsets, all plain integers (the
        // assertions under `IbvWc`): the slot is one as much as the other.
        let slot = unsafe { &mut *std::ptr::from_mut(out).cast::<MaybeUninit<PolledWc>>() };
        Ok(if self.poll_slot(slot)? {
            // SAFETY: `poll_slot` said the provider initialised the entry.
            Some(unsafe { slot.assume_init_mut() })
        } else {
            None
        })
    }

    /// `ibv_poll_cq` with room for one entry, `slot`: whether the provider
    /// wrote (initialised) one there.
    #[inline(always)]
    fn poll_slot(&self, slot: &mut MaybeUninit<PolledWc>) -> io::Result<bool> {
        // SAFETY: live CQ; `slot` has room for one `ibv_wc` (PolledWc is
        // transparent), which the provider initialises when it returns 1.
        let n = unsafe { (self.inner.poll)(self.inner.cq, 1, slot.as_mut_ptr().cast()) };
        match n {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(io::Error::other(format!("ibv_poll_cq failed ({n})"))),
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.inner.cq
    }
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel").field("fd", &self.fd()).finish()
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").field("id", &self.id()).field("cqe", &self.cqe()).field("ex", &self.is_ex()).finish()
    }
}
