//! Operations as values: one type per verb, built with its required
//! arguments and chained setters, checked in one place (long because: every
//! verb's type, checks and encoding live here, one home per verb;
//! CONTRIBUTING.md) and posted by [`Conn::post`](crate::Conn::post) (the
//! regions held until the completion) or [`Chain::push`](crate::Chain::push)
//! (many operations, one doorbell); wrapped in [`Unheld`] (`unsafe`), they
//! are posted under librpma's contract (the caller keeps the regions), as
//! the C ABI does.
//!
//! | type | verb | librpma |
//! |---|---|---|
//! | [`Read`] | `IBV_WR_RDMA_READ` | `rpma_read` |
//! | [`Write`] | `IBV_WR_RDMA_WRITE` (`.imm`: `_WITH_IMM`) | `rpma_write`, `rpma_write_with_imm` |
//! | [`AtomicWrite`] | `IBV_WR_ATOMIC_WRITE`, or an inline 8-byte fenced write | `rpma_atomic_write` |
//! | [`Flush`] | `IBV_WR_FLUSH`, or an 8-byte read (APM) | `rpma_flush` |
//! | [`Send`] | `IBV_WR_SEND` (`.imm`, `.invalidate`) | `rpma_send`, `rpma_send_with_imm` |
//! | [`CompareAndSwap`] | `IBV_WR_ATOMIC_CMP_AND_SWP` | — |
//! | [`FetchAndAdd`] | `IBV_WR_ATOMIC_FETCH_AND_ADD` | — |
//! | [`WriteSg`], [`ReadSg`], [`SendSg`] | the same verbs with a list of local ranges ([`Sg`]) | — |
//! | [`WriteInline`], [`SendInline`] | the same verbs with bytes copied when posting (`IBV_SEND_INLINE`) | — |
//! | [`Recv`], [`RecvSg`] | `ibv_post_recv` / `ibv_post_srq_recv` (also on [`Srq::post`](crate::Srq::post)) | `rpma_recv`, `rpma_srq_recv` |
//!
//! Every operation reports a completion by default
//! ([`Flags::COMPLETION_ALWAYS`]) with `op_context` 0; `.flags(..)`,
//! `.op_context(..)` change that. The librpma-named methods
//! of [`Conn`](crate::Conn) (`read`, `write`, `flush`, ...) are one-line
//! wrappers over these.
//!
//! ```
//! use rpma::ops::{Flush, Write};
//! use rpma::{AlignedBuf, Conn, Flags, FlushType, MrLocal, MrRemote};
//! # #[allow(dead_code)]
//! fn persist(conn: &Conn, log: &MrRemote, src: &MrLocal<AlignedBuf>) -> rpma::Result<()> {
//!     conn.post(Write::new(log, 0, src, 0, 64).flags(Flags::COMPLETION_ON_ERROR))?;
//!     conn.post(Flush::new(log, 0, 64, FlushType::Visibility).op_context(1))?;
//!     let wc = conn.cq().next_completion(std::time::Duration::from_secs(5))?;
//!     assert_eq!(wc.op_context, 1);
//!     Ok(())
//! }
//! ```
//!
//! An operation does nothing until it is posted; one built and dropped is
//! a warning (`#[must_use]`), an error where warnings are:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! # fn f(dst: &rpma::MrLocal<rpma::AlignedBuf>, src: &rpma::MrRemote) {
//! rpma::ops::Read::new(dst, 0, src, 0, 8).op_context(1); // never posted
//! # }
//! ```
//!
//! An operation borrows its regions: it cannot outlive them, so a region
//! is never dropped between building an operation and posting it (after
//! the post, [`Conn::post`](crate::Conn::post) holds it until the
//! completion):
//!
//! ```compile_fail,E0597
//! # fn f(conn: &rpma::Conn, remote: &rpma::MrRemote) -> rpma::Result<()> {
//! let op;
//! {
//!     let dst = rpma::MrLocal::reg(conn.peer(), rpma::AlignedBuf::new(8)?, rpma::Usage::READ_DST)?;
//!     op = rpma::ops::Read::new(&dst, 0, remote, 0, 8);
//! } // `dst` dropped here while `op` still borrows it
//! conn.post(op)?;
//! # Ok(()) }
//! ```
// The sealed traits' methods take and give crate-private types (the
// connection's view, the encoded request, a hold): nameable only inside the
// crate, which is what seals them.
#![allow(private_interfaces, private_bounds)]

use crate::access::Usage;
use crate::error::{Arg, Detail, Error, Msg, Named, RangeUse, Result};
use crate::inflight::Holding;
use crate::memory::{AlignedBuf, RegMemory};
use crate::mr::{MrLocal, MrRemote};
use crate::peer::Peer;
use crate::validate;
use crate::wrid::CompletionOp;
use bitflags::bitflags;
use rpma_sys::wr::Wr;
use rpma_sys::wr::{SendOp, SendWr, WrFlags};

bitflags! {
    /// When an operation reports a completion (librpma's `RPMA_F_COMPLETION_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Flags: u32 {
        /// Only when it fails. Its send-queue slot (and the region it uses)
        /// is released when a later signaled operation completes.
        const COMPLETION_ON_ERROR = 1;
        /// Always (`IBV_SEND_SIGNALED`).
        const COMPLETION_ALWAYS = 3;
        /// Fence (`IBV_SEND_FENCE`): the operation starts only after earlier
        /// RDMA reads and atomics on this connection completed (rpma
        /// extension; combine with a completion flag).
        const FENCE = 1 << 2;
    }
}

impl Flags {
    /// Whether the operation is signaled (`IBV_SEND_SIGNALED`).
    ///
    /// # Errors
    /// [`Error::Inval`] without a completion mode or with undefined bits.
    #[inline]
    pub(crate) fn signaled(self) -> Result<bool> {
        if !self.intersects(Flags::COMPLETION_ON_ERROR) || !Flags::all().contains(self) {
            return Err(bad_flags(self));
        }
        Ok(self.bits() & 2 != 0)
    }

    /// Whether [`Flags::FENCE`] is set.
    #[inline]
    pub(crate) fn fence(self) -> bool {
        self.contains(Flags::FENCE)
    }
}

#[cold]
#[inline(never)]
fn bad_flags(flags: Flags) -> Error {
    let text = if flags.is_empty() {
        "flags are empty: pass Flags::COMPLETION_ON_ERROR or Flags::COMPLETION_ALWAYS".to_string()
    } else if !flags.intersects(Flags::COMPLETION_ON_ERROR) {
        "flags have no completion mode (FENCE alone is not enough): add Flags::COMPLETION_ON_ERROR or \
         Flags::COMPLETION_ALWAYS"
            .to_string()
    } else {
        format!("flags {:#x} have undefined bits", flags.bits())
    };
    Error::Inval(crate::error::Msg::detailed(crate::error::Detail::BadFlags { bits: flags.bits() }, text))
}

/// The kind of flush (librpma's `enum rpma_flush_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushType {
    /// The data is visible to the remote CPU (global visibility).
    Visibility,
    /// The data is persistent: needs the remote peer's
    /// `direct_write_to_pmem` ([`Conn::apply_remote_peer_cfg`](crate::Conn::apply_remote_peer_cfg))
    /// and a region registered with [`Usage::FLUSH_TYPE_PERSISTENT`].
    Persistent,
}

/// librpma's `RPMA_ATOMIC_WRITE_ALIGNMENT`.
pub const ATOMIC_WRITE_ALIGNMENT: u64 = 8;

/// The alignment of the remote address of
/// [`Conn::compare_and_swap`](crate::Conn::compare_and_swap) and
/// [`Conn::fetch_and_add`](crate::Conn::fetch_and_add): the verbs require
/// the 8 bytes of a remote atomic to be naturally aligned (rpma extension).
pub const ATOMIC_ALIGNMENT: u64 = 8;

/// The local side of an operation: a range of a region (the usage it
/// needs and its name in messages: [`Sides`]).
struct Local<'a, M: RegMemory> {
    mr: &'a MrLocal<M>,
    offset: usize,
}

impl<M: RegMemory> Clone for Local<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M: RegMemory> Copy for Local<'_, M> {}

/// The remote side of an RDMA operation.
#[derive(Clone, Copy)]
struct Remote<'a> {
    mr: &'a MrRemote,
    offset: u64,
}

/// What an operation with a local range needs of its sides (the usages)
/// and their names in messages: one table, a constant of each operation's
/// type ([`local_op!`]) rather than fields of each value, so an operation
/// is small to build and to move (an awaited one lives in its future).
struct Sides {
    local: (Usage, &'static Named),
    remote: (Usage, &'static Named),
}

const NOTHING: &Named = &Named::new(Arg::Dst, "");
const READ: Sides = Sides {
    local: (Usage::READ_DST, &Named::new(Arg::Dst, "read: dst")),
    remote: (Usage::READ_SRC, &Named::new(Arg::Src, "read: src")),
};
const WRITE: Sides = Sides {
    local: (Usage::WRITE_SRC, &Named::new(Arg::Src, "write: src")),
    remote: (Usage::WRITE_DST, &Named::new(Arg::Dst, "write: dst")),
};
const SEND: Sides =
    Sides { local: (Usage::SEND, &Named::new(Arg::Src, "send: src")), remote: (Usage::empty(), NOTHING) };
const SEND_INV: Sides =
    Sides { local: (Usage::SEND, &Named::new(Arg::Src, "send_with_inv: src")), remote: (Usage::empty(), NOTHING) };
const COMPARE_AND_SWAP: Sides = Sides {
    local: (Usage::READ_DST, &Named::new(Arg::Dst, "compare_and_swap: dst")),
    remote: (Usage::REMOTE_ATOMIC, &Named::new(Arg::Src, "compare_and_swap: src")),
};
const FETCH_AND_ADD: Sides = Sides {
    local: (Usage::READ_DST, &Named::new(Arg::Dst, "fetch_and_add: dst")),
    remote: (Usage::REMOTE_ATOMIC, &Named::new(Arg::Src, "fetch_and_add: src")),
};

/// What a connection lends an operation to check and encode it: its peer,
/// which operations its QP posts natively, its inline limit, whether the
/// remote side writes directly to pmem, and the region of the APM flush's
/// read.
pub(crate) struct Target<'a> {
    pub(crate) peer: &'a Peer,
    pub(crate) native_atomic_write: bool,
    pub(crate) native_flush: bool,
    pub(crate) max_inline_data: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    /// Read only by a flush (an atomic load is not optimized away).
    pub(crate) pmem: &'a std::sync::atomic::AtomicBool,
    pub(crate) flush_mr: &'a MrLocal<AlignedBuf>,
}

/// How the device uses an operation's local range, from the usage the
/// operation needs of its region: it writes a read's or an atomic's
/// destination and a receive's buffer, and reads every other.
#[inline(always)]
pub(crate) fn device_use(need: Usage) -> RangeUse {
    if need.intersects(Usage::READ_DST | Usage::RECV) {
        RangeUse::DeviceWrites
    } else {
        RangeUse::DeviceReads
    }
}

/// What keeps an encoded operation's local memory alive until it completes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldBy {
    /// Nothing: no local memory, or bytes copied when posting.
    Nothing,
    /// The operation's own region ([`sealed::Encode::hold`]).
    Op,
    /// The connection's flush region (the APM flush's read).
    FlushRegion,
    /// The holds of a list's regions, made with its encoding ([`Sink::list`]).
    List,
    /// Inline bytes the caller lends for the post only: copied during the
    /// call, so never kept (a chain refuses them).
    LentBytes,
}

/// What a posted operation's completion reports and what holds its memory.
#[derive(Clone, Copy)]
pub(crate) struct Meta {
    pub(crate) kind: CompletionOp,
    pub(crate) ctx: u64,
    pub(crate) hold: HoldBy,
}

/// Where a checked operation goes: one of the three ways to post (a
/// tracked single post, an untracked one, a chain). The operation hands it
/// its work request (ID 0) without building an intermediate value, so the
/// single posts cost what a hand-written call would.
pub(crate) trait Sink {
    /// A work request `ibv_post_send` carries.
    fn plain(self, m: Meta, wr: SendWr) -> Result<()>;
    /// The emulated atomic write (inline bytes) or a native atomic write or
    /// flush.
    fn other(self, m: Meta, wr: Wr) -> Result<()>;
    /// A request whose local memory is the list `g` (`wr.sge` is `None`),
    /// with the holds of its regions.
    fn list(self, m: Meta, wr: SendWr, g: Gathered) -> Result<()>;
    /// A receive into one range (`None`: 0 bytes), for the receive queue.
    fn recv(self, m: Meta, sge: Option<rpma_sys::wr::Sge>) -> Result<()>;
    /// A receive scattering into the list `g`, with the holds of its
    /// regions.
    fn recv_list(self, m: Meta, g: Gathered) -> Result<()>;
    /// This sink under librpma's memory contract, for an [`Unheld`]
    /// operation (an awaited post's sink stays as it is: it holds).
    fn unheld(self) -> impl Sink;
}

pub(crate) mod sealed {
    use super::{Sink, Target};
    use crate::error::Result;
    use crate::inflight::{Hold, Holding};
    use crate::peer::Peer;

    /// Checks an operation and hands it to a [`Sink`] (sealed: only this
    /// module's types).
    pub trait Encode {
        /// The checks, then the work request to `sink`.
        fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()>;
    }

    /// Holds an operation's local region ([`super::HoldBy::Op`]).
    pub trait Hold_ {
        /// A hold on the region and the operation's range in it, taken
        /// before the post. Asked only of operations that report
        /// [`super::HoldBy::Op`]; the others answer with the connection's
        /// flush region (`t`), a harmless hold.
        ///
        /// # Errors
        /// [`Error::Again`](crate::Error::Again) with
        /// [`Detail::RangeBusy`](crate::error::Detail::RangeBusy) while the
        /// CPU uses the range.
        fn hold(&self, t: &Target<'_>) -> Holding;
    }

    /// Checks a receive for a queue other than a connection's (an SRQ, a
    /// connection request).
    pub trait Receive {
        /// Whether the caller keeps the regions ([`super::Unheld`]).
        const UNHELD: bool = false;

        /// The checks against `peer` and the queue's most SGEs (and its
        /// name in messages), then `post` with the op context, the SGEs
        /// (empty: a 0-byte receive) and the hold. The list stays in this
        /// frame: a single range's post never moves a list's room.
        fn post_checked(
            &self,
            peer: &Peer,
            max_sge: (u32, &str),
            post: impl FnOnce(u64, &[rpma_sys::wr::Sge], Option<Hold>) -> Result<()>,
        ) -> Result<()>;
    }
}

/// An operation's hold, taken by its post when it needs one
/// ([`Take`](crate::inflight::Take)): the operation and its target.
pub(crate) struct HoldOf<'o, 't, O>(pub(crate) &'o O, pub(crate) &'o Target<'t>);

impl<O: sealed::Hold_> crate::inflight::Take for HoldOf<'_, '_, O> {
    #[inline(always)]
    fn take(self) -> Holding {
        self.0.hold(self.1)
    }
}

/// A hold on a region without a range ([`MrLocal::keep`]): a
/// connection's own region.
pub(crate) struct KeepOf<'a>(pub(crate) &'a MrLocal<AlignedBuf>);

impl crate::inflight::Take for KeepOf<'_> {
    #[inline(always)]
    fn take(self) -> Holding {
        self.0.keep()
    }
}

/// An operation [`Conn::post`](crate::Conn::post) and
/// [`Chain::push`](crate::Chain::push) post: every type of this module on
/// memory the library can hold until the completion
/// (`RegMemory + Send + Sync + 'static`; sealed).
pub trait Operation: sealed::Encode + sealed::Hold_ {}

/// A receive ([`Recv`], [`RecvSg`]): what
/// [`Srq::post`](crate::Srq::post) posts (sealed).
pub trait RecvOperation: Operation + sealed::Receive {}

/// The verb, its ranges and length: what every operation with a local range
/// has, checked and encoded by [`Core::encode`].
struct Core<'a, M: RegMemory> {
    verb: SendOp,
    local: Local<'a, M>,
    remote: Option<Remote<'a>>,
    len: usize,
    flags: Flags,
    ctx: u64,
}

impl<M: RegMemory> Clone for Core<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M: RegMemory> Copy for Core<'_, M> {}

impl<'a, M: RegMemory> Core<'a, M> {
    #[inline(always)]
    fn new(verb: SendOp, local: Local<'a, M>, remote: Option<Remote<'a>>, len: usize) -> Self {
        Core { verb, local, remote, len, flags: Flags::COMPLETION_ALWAYS, ctx: 0 }
    }

    /// The checks: flags, length, the local range and usage, the remote
    /// range and usage, the peer of both; for an atomic the device's
    /// support and the remote alignment.
    ///
    /// # Errors
    /// [`Error::Inval`] naming the broken bound; [`Error::NoSupp`] for an
    /// atomic on a device without them.
    #[inline(always)]
    fn encode<S: Sink>(&self, sides: &Sides, peer: &Peer, sink: S) -> Result<()> {
        let signaled = self.flags.signaled()?;
        let (local, len) = (&self.local, self.len);
        let ((local_need, local_what), (remote_need, remote_what)) = (sides.local, sides.remote);
        let len32 = validate::len32(local_what, len)?;
        local.mr.check_range(local_what, local.offset, len)?;
        let atomic = matches!(self.verb, SendOp::CompareSwap { .. } | SendOp::FetchAdd(_));
        if atomic && !peer.capabilities().atomics {
            return Err(no_atomics(local_what, peer));
        }
        validate::local(local.mr, local_need, local_what, peer)?;
        let (remote_addr, rkey) = match &self.remote {
            Some(r) => {
                let addr = r.mr.addr().wrapping_add(r.offset);
                r.mr.check_range(remote_what, r.offset, len as u64)?;
                validate::remote(r.mr, remote_need, remote_what, peer)?;
                if atomic {
                    check_atomic_addr(remote_what, r.mr.addr(), r.offset)?;
                }
                (addr, r.mr.rkey())
            }
            None => (0, 0),
        };
        let wr = SendWr {
            wr_id: 0,
            op: self.verb,
            sge: Some(local.mr.sge(local.offset, len32)),
            remote_addr,
            rkey,
            signaled,
            fence: self.flags.fence(),
            inline: false,
        };
        sink.plain(Meta { kind: kind_of(self.verb), ctx: self.ctx, hold: HoldBy::Op }, wr)
    }
}

/// The setters every operation has, on its `flags` and `ctx`.
macro_rules! setters {
    ($f:tt) => {
        /// When it reports a completion (default
        /// [`Flags::COMPLETION_ALWAYS`]); [`Flags::FENCE`] may be added.
        #[inline(always)]
        pub fn flags(mut self, flags: Flags) -> Self {
            self.$f.flags = flags;
            self
        }

        /// The value its completion carries in
        /// [`Completion::op_context`](crate::Completion) (default 0).
        #[inline(always)]
        pub fn op_context(mut self, op_context: u64) -> Self {
            self.$f.ctx = op_context;
            self
        }
    };
}

/// The trait impls of an operation with a local range (`self.0` its
/// [`Core`]; `$sides` its [`Sides`] from its verb): encoded by the core,
/// held when the memory can be owned.
macro_rules! local_op {
    ($t:ident, $sides:expr) => {
        impl<M: RegMemory> Clone for $t<'_, M> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<M: RegMemory> Copy for $t<'_, M> {}
        impl<M: RegMemory> std::fmt::Debug for $t<'_, M> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("verb", &self.0.verb)
                    .field("len", &self.0.len)
                    .field("flags", &self.0.flags)
                    .field("op_context", &self.0.ctx)
                    .finish_non_exhaustive()
            }
        }
        impl<M: RegMemory> sealed::Encode for $t<'_, M> {
            #[inline(always)]
            fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
                let sides: fn(&SendOp) -> &'static Sides = $sides;
                self.0.encode(sides(&self.0.verb), t.peer, sink)
            }
        }
        impl<M: RegMemory + std::marker::Send + Sync + 'static> sealed::Hold_ for $t<'_, M> {
            #[inline(always)]
            fn hold(&self, _: &Target<'_>) -> Holding {
                let sides: fn(&SendOp) -> &'static Sides = $sides;
                let (need, what) = sides(&self.0.verb).local;
                self.0.local.mr.hold_range(what, self.0.local.offset, self.0.len, device_use(need))
            }
        }
        impl<M: RegMemory + std::marker::Send + Sync + 'static> Operation for $t<'_, M> {}
    };
}

/// An RDMA read of `len` bytes at `src_offset` of a remote region into
/// `dst` at `dst_offset` (`rpma_read`); `dst` needs [`Usage::READ_DST`],
/// the remote region [`Usage::READ_SRC`].
#[must_use = "an operation does nothing until it is posted"]
pub struct Read<'a, M: RegMemory>(Core<'a, M>);
local_op!(Read, |_| &READ);

impl<'a, M: RegMemory> Read<'a, M> {
    /// The read, reporting its completion with `op_context` 0.
    #[inline(always)]
    pub fn new(dst: &'a MrLocal<M>, dst_offset: usize, src: &'a MrRemote, src_offset: u64, len: usize) -> Self {
        Read(Core::new(
            SendOp::Read,
            Local { mr: dst, offset: dst_offset },
            Some(Remote { mr: src, offset: src_offset }),
            len,
        ))
    }

    setters!(0);
}

/// An RDMA write of `len` bytes of `src` at `src_offset` to a remote region
/// at `dst_offset` (`rpma_write`; with [`imm`](Write::imm)
/// `rpma_write_with_imm`); `src` needs [`Usage::WRITE_SRC`], the remote
/// region [`Usage::WRITE_DST`].
#[must_use = "an operation does nothing until it is posted"]
pub struct Write<'a, M: RegMemory>(Core<'a, M>);
local_op!(Write, |_| &WRITE);

impl<'a, M: RegMemory> Write<'a, M> {
    /// The write, reporting its completion with `op_context` 0.
    #[inline(always)]
    pub fn new(dst: &'a MrRemote, dst_offset: u64, src: &'a MrLocal<M>, src_offset: usize, len: usize) -> Self {
        Write(Core::new(
            SendOp::Write,
            Local { mr: src, offset: src_offset },
            Some(Remote { mr: dst, offset: dst_offset }),
            len,
        ))
    }

    /// With immediate data, which the other side gets in the completion of
    /// a posted receive, in host order (`IBV_WR_RDMA_WRITE_WITH_IMM`).
    #[inline(always)]
    pub fn imm(mut self, imm: u32) -> Self {
        self.0.verb = SendOp::WriteImm(imm);
        self
    }

    setters!(0);
}

/// A send of `len` bytes (0 allowed) of `src` at `offset` to a receive the
/// other side posted (`rpma_send`; with [`imm`](Send::imm)
/// `rpma_send_with_imm`); `src` needs [`Usage::SEND`].
#[must_use = "an operation does nothing until it is posted"]
pub struct Send<'a, M: RegMemory>(Core<'a, M>);
local_op!(Send, |v| if matches!(v, SendOp::SendInv(_)) { &SEND_INV } else { &SEND });

impl<'a, M: RegMemory> Send<'a, M> {
    /// The send, reporting its completion with `op_context` 0.
    #[inline(always)]
    pub fn new(src: &'a MrLocal<M>, offset: usize, len: usize) -> Self {
        Send(Core::new(SendOp::Send, Local { mr: src, offset }, None, len))
    }

    /// With immediate data, delivered in host order
    /// (`IBV_WR_SEND_WITH_IMM`); replaces [`invalidate`](Send::invalidate).
    #[inline(always)]
    pub fn imm(mut self, imm: u32) -> Self {
        self.0.verb = SendOp::SendImm(imm);
        self
    }

    /// Also invalidates the other side's type 2 window with `rkey`
    /// (`IBV_WR_SEND_WITH_INV`): the receiver's completion reports it in
    /// [`Completion::invalidated_rkey`](crate::Completion); replaces
    /// [`imm`](Send::imm).
    #[inline(always)]
    pub fn invalidate(mut self, rkey: u32) -> Self {
        self.0.verb = SendOp::SendInv(rkey);
        self
    }

    setters!(0);
}

/// Compares the 8 bytes at `src_offset` of a remote region with `compare`
/// and, if equal, replaces them with `swap`, atomically; the previous value
/// lands in the 8 bytes at `dst_offset` of `dst`
/// (`IBV_WR_ATOMIC_CMP_AND_SWP`). See
/// [`Conn::compare_and_swap`](crate::Conn::compare_and_swap).
#[must_use = "an operation does nothing until it is posted"]
pub struct CompareAndSwap<'a, M: RegMemory>(Core<'a, M>);
local_op!(CompareAndSwap, |_| &COMPARE_AND_SWAP);

impl<'a, M: RegMemory> CompareAndSwap<'a, M> {
    /// The compare-and-swap, reporting its completion with `op_context` 0.
    #[inline(always)]
    pub fn new(
        dst: &'a MrLocal<M>,
        dst_offset: usize,
        src: &'a MrRemote,
        src_offset: u64,
        compare: u64,
        swap: u64,
    ) -> Self {
        CompareAndSwap(atomic(SendOp::CompareSwap { compare, swap }, dst, dst_offset, src, src_offset))
    }

    setters!(0);
}

/// Adds `add` (wrapping) to the 8 bytes at `src_offset` of a remote region,
/// atomically; the previous value lands in the 8 bytes at `dst_offset` of
/// `dst` (`IBV_WR_ATOMIC_FETCH_AND_ADD`). See
/// [`Conn::fetch_and_add`](crate::Conn::fetch_and_add).
#[must_use = "an operation does nothing until it is posted"]
pub struct FetchAndAdd<'a, M: RegMemory>(Core<'a, M>);
local_op!(FetchAndAdd, |_| &FETCH_AND_ADD);

impl<'a, M: RegMemory> FetchAndAdd<'a, M> {
    /// The fetch-and-add, reporting its completion with `op_context` 0.
    #[inline(always)]
    pub fn new(dst: &'a MrLocal<M>, dst_offset: usize, src: &'a MrRemote, src_offset: u64, add: u64) -> Self {
        FetchAndAdd(atomic(SendOp::FetchAdd(add), dst, dst_offset, src, src_offset))
    }

    setters!(0);
}

/// A remote atomic's core: 8 bytes, the result into `dst`.
#[inline(always)]
fn atomic<'a, M: RegMemory>(
    verb: SendOp,
    dst: &'a MrLocal<M>,
    dst_offset: usize,
    src: &'a MrRemote,
    src_offset: u64,
) -> Core<'a, M> {
    Core::new(verb, Local { mr: dst, offset: dst_offset }, Some(Remote { mr: src, offset: src_offset }), 8)
}

/// The completion settings of an operation without a local range.
#[derive(Debug, Clone, Copy)]
struct Settings {
    flags: Flags,
    ctx: u64,
}

impl Settings {
    const DEFAULT: Settings = Settings { flags: Flags::COMPLETION_ALWAYS, ctx: 0 };
}

/// Writes 8 bytes atomically at `dst_offset` of a remote region
/// (`rpma_atomic_write`): natively (`IBV_WR_ATOMIC_WRITE`) where the
/// connection's QP posts it, else as an inline 8-byte RDMA write fenced
/// behind earlier reads (and so behind an APM flush), as librpma does.
/// `value` is copied when posting. The remote region needs
/// [`Usage::WRITE_DST`]; `dst_offset` a multiple of
/// [`ATOMIC_WRITE_ALIGNMENT`].
#[derive(Debug, Clone, Copy)]
#[must_use = "an operation does nothing until it is posted"]
pub struct AtomicWrite<'a> {
    dst: &'a MrRemote,
    dst_offset: u64,
    value: [u8; 8],
    s: Settings,
}

impl<'a> AtomicWrite<'a> {
    /// The atomic write, reporting its completion with `op_context` 0.
    #[inline(always)]
    pub fn new(dst: &'a MrRemote, dst_offset: u64, value: [u8; 8]) -> Self {
        AtomicWrite { dst, dst_offset, value, s: Settings::DEFAULT }
    }

    setters!(s);
}

impl sealed::Encode for AtomicWrite<'_> {
    #[inline(always)]
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let signaled = self.s.flags.signaled()?;
        let (dst, dst_offset) = (self.dst, self.dst_offset);
        check_atomic_write_offset(dst_offset)?;
        const DST: Named = Named::new(Arg::Dst, "atomic_write: dst");
        dst.check_range(&DST, dst_offset, 8)?;
        validate::remote(dst, Usage::WRITE_DST, &DST, t.peer)?;
        let (rkey, remote_addr, value) = (dst.rkey(), dst.addr().wrapping_add(dst_offset), self.value);
        let m = Meta { kind: CompletionOp::AtomicWrite, ctx: self.s.ctx, hold: HoldBy::Nothing };
        // One call to the sink per kind of request, so each sees its kind
        // as a constant (a request chosen at run time would be built in
        // memory and matched again).
        if t.native_atomic_write {
            let flags = WrFlags { wr_id: 0, signaled, fence: self.s.flags.fence() };
            sink.other(m, Wr::AtomicWrite { flags, rkey, remote_addr, value })
        } else {
            if t.max_inline_data < 8 {
                return Err(no_inline8(t.max_inline_data));
            }
            sink.other(m, Wr::Inline8 { flags: WrFlags { wr_id: 0, signaled, fence: true }, rkey, remote_addr, value })
        }
    }
}

/// Makes earlier writes to a remote region durable or visible
/// (`rpma_flush`): natively (`IBV_WR_FLUSH`) where the connection's QP
/// posts it, else (APM) as an 8-byte RDMA read at `dst_offset`, which
/// completes only after the earlier writes on the connection.
/// [`FlushType::Persistent`] needs the remote peer's
/// `direct_write_to_pmem` ([`Conn::apply_remote_peer_cfg`](crate::Conn::apply_remote_peer_cfg))
/// and a region registered with [`Usage::FLUSH_TYPE_PERSISTENT`];
/// [`FlushType::Visibility`] one with [`Usage::FLUSH_TYPE_VISIBILITY`].
#[derive(Debug, Clone, Copy)]
#[must_use = "an operation does nothing until it is posted"]
pub struct Flush<'a> {
    dst: &'a MrRemote,
    dst_offset: u64,
    len: u64,
    ty: FlushType,
    s: Settings,
}

impl<'a> Flush<'a> {
    /// The flush of `len` bytes at `dst_offset`, reporting its completion
    /// with `op_context` 0.
    #[inline(always)]
    pub fn new(dst: &'a MrRemote, dst_offset: u64, len: u64, ty: FlushType) -> Self {
        Flush { dst, dst_offset, len, ty, s: Settings::DEFAULT }
    }

    setters!(s);
}

impl sealed::Encode for Flush<'_> {
    #[inline(always)]
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let signaled = self.s.flags.signaled()?;
        let (dst, dst_offset, len) = (self.dst, self.dst_offset, self.len);
        let pmem = t.pmem.load(std::sync::atomic::Ordering::Relaxed);
        let supported = match self.ty {
            FlushType::Persistent => pmem && dst.usage().contains(Usage::FLUSH_TYPE_PERSISTENT),
            FlushType::Visibility => dst.usage().contains(Usage::FLUSH_TYPE_VISIBILITY),
        };
        if !supported {
            return Err(unsupported_flush(self.ty, pmem));
        }
        // Named as constants: a reference to a static, not a value built
        // on the stack for each post.
        const DST: Named = Named::new(Arg::Dst, "flush: dst");
        const APM: Named = Named::new(Arg::Dst, "flush (APM reads 8 bytes at dst_offset)");
        dst.check_range(&DST, dst_offset, len)?;
        let flags = WrFlags { wr_id: 0, signaled, fence: self.s.flags.fence() };
        let (rkey, remote_addr) = (dst.rkey(), dst.addr().wrapping_add(dst_offset));
        let ctx = self.s.ctx;
        // A window cannot grant the access a native flush needs: its flush
        // is the read. (`&`, not `&&`: no short-circuit branch on the
        // posting path.)
        if t.native_flush & !dst.is_window() {
            let ptype = match self.ty {
                FlushType::Visibility => rpma_sys::qp::FLUSH_GLOBAL,
                FlushType::Persistent => rpma_sys::qp::FLUSH_PERSISTENT,
            };
            let len = usize::try_from(len).map_err(|_| Error::inval(format!("flush: length {len} exceeds usize")))?;
            let wr = Wr::Flush { flags, rkey, remote_addr, len, ptype };
            return sink.other(Meta { kind: CompletionOp::Flush, ctx, hold: HoldBy::Nothing }, wr);
        }
        dst.check_range(&APM, dst_offset, 8)?;
        // The APM read: 8 bytes into the connection's flush region, held
        // like any local region until the read completes.
        let wr = SendWr {
            wr_id: 0,
            op: SendOp::Read,
            sge: Some(t.flush_mr.sge(0, 8)),
            remote_addr,
            rkey,
            signaled,
            fence: flags.fence,
            inline: false,
        };
        sink.plain(Meta { kind: CompletionOp::Flush, ctx, hold: HoldBy::FlushRegion }, wr)
    }
}

/// The trait impls of an operation without local memory.
macro_rules! remote_only_op {
    ($t:ident) => {
        impl sealed::Hold_ for $t<'_> {
            #[inline(always)]
            fn hold(&self, t: &Target<'_>) -> Holding {
                t.flush_mr.keep()
            }
        }
        impl Operation for $t<'_> {}
    };
}
remote_only_op!(AtomicWrite);
remote_only_op!(Flush);

/// Why a flush of type `ty` is not supported (`pmem`: the peer's direct
/// write to persistent memory).
#[cold]
#[inline(never)]
fn unsupported_flush(ty: FlushType, pmem: bool) -> Error {
    let (detail, text) = match ty {
        FlushType::Persistent if !pmem => (
            Detail::PeerNotPmem,
            "flush(Persistent): the remote peer does not support direct write to persistent memory \
             (apply its PeerCfg with Conn::apply_remote_peer_cfg)",
        ),
        FlushType::Persistent => (
            Detail::UsageMissing { what: Arg::Dst, missing: Usage::FLUSH_TYPE_PERSISTENT },
            "flush(Persistent): the remote region was not registered with FLUSH_TYPE_PERSISTENT",
        ),
        FlushType::Visibility => (
            Detail::UsageMissing { what: Arg::Dst, missing: Usage::FLUSH_TYPE_VISIBILITY },
            "flush(Visibility): the remote region was not registered with FLUSH_TYPE_VISIBILITY",
        ),
    };
    Error::NoSupp(Msg::detailed(detail, text.into()))
}

/// An atomic write's destination offset: a multiple of
/// [`ATOMIC_WRITE_ALIGNMENT`] (librpma's check).
///
/// # Errors
/// [`Error::Inval`] with [`Detail::Misaligned`](crate::error::Detail::Misaligned).
#[inline(always)]
fn check_atomic_write_offset(dst_offset: u64) -> Result<()> {
    match dst_offset.is_multiple_of(ATOMIC_WRITE_ALIGNMENT) {
        true => Ok(()),
        false => Err(misaligned_atomic_write(dst_offset)),
    }
}

/// A remote atomic's address, `offset` into a region at `region`: a
/// multiple of [`ATOMIC_ALIGNMENT`].
///
/// # Errors
/// [`Error::Inval`] with [`Detail::Misaligned`](crate::error::Detail::Misaligned) naming `what`.
#[inline(always)]
fn check_atomic_addr(what: &Named, region: u64, offset: u64) -> Result<()> {
    match region.wrapping_add(offset).is_multiple_of(ATOMIC_ALIGNMENT) {
        true => Ok(()),
        false => Err(misaligned(what, region, offset)),
    }
}

#[cold]
#[inline(never)]
fn misaligned_atomic_write(dst_offset: u64) -> Error {
    Error::misaligned(
        Arg::Dst,
        dst_offset,
        ATOMIC_WRITE_ALIGNMENT,
        format!("atomic_write: dst_offset {dst_offset} is not a multiple of {ATOMIC_WRITE_ALIGNMENT}"),
    )
}

#[cold]
#[inline(never)]
fn no_inline8(max_inline_data: u32) -> Error {
    Error::too_long(
        Arg::Data,
        8,
        max_inline_data.into(),
        format!(
            "atomic_write: the emulation is an inline 8-byte write and the connection's max_inline_data is \
             {max_inline_data} (ConnCfg::set_max_inline_data)"
        ),
    )
}

#[cold]
#[inline(never)]
fn no_atomics(what: &Named, peer: &Peer) -> Error {
    Error::unsupported(format!(
        "{}: {} does not support remote atomics (atomic_cap is IBV_ATOMIC_NONE)",
        what.text.split(':').next().unwrap_or(what.text),
        peer.device_name()
    ))
}

#[cold]
#[inline(never)]
fn misaligned(what: &Named, region: u64, offset: u64) -> Error {
    Error::misaligned(
        what.arg,
        region.wrapping_add(offset),
        ATOMIC_ALIGNMENT,
        format!(
            "{what}: the remote address {:#x} (region start {region:#x} + offset {offset}) is not a multiple of \
             {ATOMIC_ALIGNMENT}: remote atomics need 8-aligned addresses",
            region.wrapping_add(offset)
        ),
    )
}

/// The completion kind of a posted verb: the one mapping between them.
#[inline]
pub(crate) fn kind_of(verb: SendOp) -> CompletionOp {
    match verb {
        SendOp::Read => CompletionOp::Read,
        SendOp::Write => CompletionOp::Write,
        SendOp::WriteImm(_) => CompletionOp::WriteWithImm,
        SendOp::Send => CompletionOp::Send,
        SendOp::SendImm(_) => CompletionOp::SendWithImm,
        SendOp::SendInv(_) => CompletionOp::SendWithInv,
        SendOp::CompareSwap { .. } => CompletionOp::CompareSwap,
        SendOp::FetchAdd(_) => CompletionOp::FetchAdd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_checks() {
        assert!(Flags::COMPLETION_ALWAYS.signaled().unwrap());
        assert!(!Flags::COMPLETION_ON_ERROR.signaled().unwrap());
        assert!((Flags::COMPLETION_ON_ERROR | Flags::FENCE).fence());
        for bad in [Flags::empty(), Flags::FENCE, Flags::from_bits_retain(1 << 9 | 1)] {
            assert!(matches!(bad.signaled(), Err(Error::Inval(_))), "{bad:?}");
        }
    }

    #[test]
    fn verbs_map_to_their_completions() {
        assert_eq!(kind_of(SendOp::WriteImm(1)), CompletionOp::WriteWithImm);
        assert_eq!(kind_of(SendOp::SendInv(1)), CompletionOp::SendWithInv);
        assert_eq!(kind_of(SendOp::Read), CompletionOp::Read);
        assert_eq!(kind_of(SendOp::CompareSwap { compare: 1, swap: 2 }), CompletionOp::CompareSwap);
        assert_eq!(kind_of(SendOp::FetchAdd(1)), CompletionOp::FetchAdd);
    }
}

mod lists;
mod unheld;
pub(crate) use lists::{gather, Gathered};
pub use lists::{ReadSg, SendInline, SendSg, Sg, WriteInline, WriteSg};
pub(crate) mod recv;
pub use recv::{Recv, RecvSg};
pub use unheld::Unheld;
