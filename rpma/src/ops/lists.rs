//! The local side as a list or as bytes (not in librpma): several local
//! ranges in one operation (scatter/gather, up to the QP's granted SGEs,
//! every region held until the operation completes), and bytes from any
//! slice carried inline (copied by the device during the post, up to the
//! QP's granted `max_inline_data`).

use super::sealed::{Encode, Hold_};
use super::{Flags, HoldBy, Meta, Operation, Settings, Sink, Target};
use crate::access::Usage;
use crate::error::{Arg, Error, Named, Result};
use crate::inflight::{unbox, Hold, Holding};
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote};
use crate::peer::Peer;
use crate::validate;
use rpma_sys::wr::{SendOp, SendWr, Sge, MAX_SGL};
use std::sync::Arc;

/// One element of a scatter/gather list: `len` bytes at `offset` of a
/// local region, for [`WriteSg`], [`ReadSg`], [`SendSg`] and
/// [`RecvSg`](super::RecvSg). The elements of one list are regions of one
/// memory type `M`.
pub struct Sg<'a, M: RegMemory> {
    mr: &'a MrLocal<M>,
    offset: usize,
    len: usize,
}

impl<M: RegMemory> Clone for Sg<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: RegMemory> Copy for Sg<'_, M> {}

impl<M: RegMemory> std::fmt::Debug for Sg<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sg").field("mr", self.mr).field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl<'a, M: RegMemory> Sg<'a, M> {
    /// `len` bytes at `offset` of `mr`. Nothing is checked here: the
    /// operation taking the list checks every element.
    pub fn new(mr: &'a MrLocal<M>, offset: usize, len: usize) -> Sg<'a, M> {
        Sg { mr, offset, len }
    }
}

/// A checked list, ready to post: the SGEs of its non-empty elements, the
/// total length and what keeps their regions alive.
pub(crate) struct Gathered {
    sges: [Sge; MAX_SGL],
    n: usize,
    total: u32,
    pub(crate) hold: Option<Hold>,
}

impl Gathered {
    pub(crate) fn list(&self) -> &[Sge] {
        self.sges.get(..self.n).unwrap_or(&[])
    }
}

/// Checks `list` as the local side `what` of an operation (count against
/// `max`, called `limit` in the message; every element's range, `need` and
/// peer; the total length) and builds its SGEs and its hold. Elements of 0
/// bytes are checked but not posted.
///
/// # Errors
/// [`Error::Inval`] naming the element (by index) and the broken bound;
/// [`Error::NoMem`] when the holds cannot be allocated.
pub(crate) fn gather<M: RegMemory + Send + Sync + 'static>(
    list: &[Sg<'_, M>],
    need: Usage,
    what: &Named,
    max: u32,
    limit: &str,
    peer: &Peer,
) -> Result<Gathered> {
    let max = (max as usize).min(MAX_SGL);
    if list.len() > max {
        return Err(Error::too_long(
            what.arg,
            list.len() as u64,
            max as u64,
            format!("{what}: {} elements exceed {limit} {max}", list.len()),
        ));
    }
    let empty = Sge { addr: 0, length: 0, lkey: 0 };
    let mut g = Gathered { sges: [empty; MAX_SGL], n: 0, total: 0, hold: None };
    let mut total = 0u64;
    for (i, e) in list.iter().enumerate() {
        check_element(e, need, what, i, peer)?;
        total = total.saturating_add(e.len as u64);
        let len32 = u32::try_from(total).map_err(|_| too_long(what, i, total))?;
        g.total = len32;
        if e.len == 0 {
            continue;
        }
        let slot = g.sges.get_mut(g.n).ok_or_else(|| Error::Unknown("rpma bug: SGE list overflow".into()))?;
        // e.len <= total <= u32::MAX (checked above)
        *slot = e.mr.sge(e.offset, e.len as u32);
        g.n += 1;
    }
    // No element posted (an empty list, librpma's 0-byte form, or 0-byte
    // elements only): no memory, nothing to hold. One posted element: its
    // hold; more: one hold per element (each takes its own range), in one
    // allocation made fallibly.
    let by = super::device_use(need);
    let mut posted = list.iter().enumerate().filter(|(_, e)| e.len > 0);
    if g.n == 1 {
        if let Some((i, e)) = posted.next() {
            g.hold = Some(e.mr.hold_range(&what.element(i), e.offset, e.len, by).map_err(unbox)?);
        }
    } else if g.n > 1 {
        let mut holds: Vec<Hold> = Vec::new();
        holds.try_reserve_exact(g.n).map_err(|_| Error::nomem(format!("{what}: holds of {} regions", g.n)))?;
        for (i, e) in posted {
            holds.push(e.mr.hold_range(&what.element(i), e.offset, e.len, by).map_err(unbox)?);
        }
        g.hold = Some(Hold::keep(Arc::new(holds)));
    }
    Ok(g)
}

/// One element: its range, usage and peer, named `what[i]` in errors.
fn check_element<M: RegMemory>(e: &Sg<'_, M>, need: Usage, what: &Named, i: usize, peer: &Peer) -> Result<()> {
    let check = |name: &Named| -> Result<()> {
        e.mr.check_range(name, e.offset, e.len)?;
        validate::local(e.mr, need, name, peer)
    };
    match check(what) {
        Ok(()) => Ok(()),
        // The error again, with the element's index in its name (built
        // only on this path).
        Err(first) => match check(&what.element(i)) {
            Err(e) => Err(e),
            Ok(()) => Err(first),
        },
    }
}

#[cold]
#[inline(never)]
fn too_long(what: &Named, i: usize, total: u64) -> Error {
    Error::too_long(what.arg, total, u32::MAX.into(), format!(
        "{what}: the elements up to [{i}] add up to {total} bytes, more than 4 GiB - 1 (the most one work request carries)"
    ))
}

/// A gathering RDMA WRITE: the elements of `src`, one after the other, to a
/// remote region at `dst_offset` (one work request, one completion); every
/// region in `src` is held until the operation completes, elements of 0
/// bytes are checked and skipped, and an empty list is a 0-byte write
/// (librpma's NULL form). For a record whose header and body live in
/// different regions, without copying them together.
///
/// ```
/// use rpma::ops::{Sg, WriteSg};
/// use rpma::{AlignedBuf, MrLocal, MrRemote};
/// # #[allow(dead_code)]
/// fn put(conn: &rpma::Conn, hdr: &MrLocal<AlignedBuf>, body: &MrLocal<AlignedBuf>, dst: &MrRemote) -> rpma::Result<()> {
///     // 16 header bytes, then 100 body bytes, land at dst[0..116]
///     conn.post(WriteSg::new(dst, 0, &[Sg::new(hdr, 0, 16), Sg::new(body, 0, 100)]).op_context(1))?;
///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
///     assert_eq!(wc.op_context, 1);
///     Ok(())
/// }
/// ```
///
/// # Errors (when posted)
/// [`Error::Inval`] when the flags are empty, `src` is longer than
/// [`Conn::max_send_sge`](crate::Conn::max_send_sge), an element exceeds
/// its region, lacks [`Usage::WRITE_SRC`] or is on another peer (named as
/// `src[i]`), the total exceeds 4 GiB - 1 or the remote range, or `dst`
/// lacks [`Usage::WRITE_DST`]; [`Error::Again`] when the send queue is
/// full; [`Error::NoMem`] when the holds of the regions cannot be
/// allocated; [`Error::Provider`] when posting fails.
#[must_use = "an operation does nothing until it is posted"]
pub struct WriteSg<'a, M: RegMemory> {
    dst: &'a MrRemote,
    dst_offset: u64,
    src: &'a [Sg<'a, M>],
    s: Settings,
}

impl<'a, M: RegMemory> WriteSg<'a, M> {
    /// The write, reporting its completion with `op_context` 0.
    pub fn new(dst: &'a MrRemote, dst_offset: u64, src: &'a [Sg<'a, M>]) -> Self {
        WriteSg { dst, dst_offset, src, s: Settings::DEFAULT }
    }

    setters!(s);
}

/// A scattering RDMA READ: from a remote region at `src_offset` into the
/// elements of `dst`, filled one after the other; every region in `dst` is
/// held until the operation completes; an empty list is a 0-byte read
/// (librpma's NULL form).
///
/// # Errors (when posted)
/// As [`WriteSg`], with the elements needing [`Usage::READ_DST`], `src`
/// [`Usage::READ_SRC`], and the count also bounded by the device's
/// `max_sge_rd` ([`Capabilities::max_sge_rd`](crate::Capabilities::max_sge_rd)).
#[must_use = "an operation does nothing until it is posted"]
pub struct ReadSg<'a, M: RegMemory> {
    dst: &'a [Sg<'a, M>],
    src: &'a MrRemote,
    src_offset: u64,
    s: Settings,
}

impl<'a, M: RegMemory> ReadSg<'a, M> {
    /// The read, reporting its completion with `op_context` 0.
    pub fn new(dst: &'a [Sg<'a, M>], src: &'a MrRemote, src_offset: u64) -> Self {
        ReadSg { dst, src, src_offset, s: Settings::DEFAULT }
    }

    setters!(s);
}

/// A gathering send: the elements of `src`, one after the other, as one
/// message to a receive the other side posted; every region in `src` is
/// held until the operation completes; an empty list sends a 0-byte
/// message.
///
/// # Errors (when posted)
/// As [`WriteSg`], with the elements needing [`Usage::SEND`] and no remote
/// range.
#[must_use = "an operation does nothing until it is posted"]
pub struct SendSg<'a, M: RegMemory> {
    src: &'a [Sg<'a, M>],
    s: Settings,
}

impl<'a, M: RegMemory> SendSg<'a, M> {
    /// The send, reporting its completion with `op_context` 0.
    pub fn new(src: &'a [Sg<'a, M>]) -> Self {
        SendSg { src, s: Settings::DEFAULT }
    }

    setters!(s);
}

/// Checks a list against the connection and posts it through `sink`.
#[allow(clippy::too_many_arguments)]
fn post_list<M: RegMemory + Send + Sync + 'static, S: Sink>(
    verb: SendOp,
    list: &[Sg<'_, M>],
    need: Usage,
    what: &Named,
    (max, limit): (u32, &str),
    remote: Option<(&MrRemote, u64, Usage, &Named)>,
    s: Settings,
    t: &Target<'_>,
    sink: S,
) -> Result<()> {
    let signaled = s.flags.signaled()?;
    let g = gather(list, need, what, max, limit, t.peer)?;
    let (remote_addr, rkey) = match remote {
        Some((mr, offset, need, what)) => {
            mr.check_range(what, offset, u64::from(g.total))?;
            validate::remote(mr, need, what, t.peer)?;
            (mr.addr().wrapping_add(offset), mr.rkey())
        }
        None => (0, 0),
    };
    let wr =
        SendWr { wr_id: 0, op: verb, sge: None, remote_addr, rkey, signaled, fence: s.flags.fence(), inline: false };
    sink.list(Meta { kind: super::kind_of(verb), ctx: s.ctx, hold: HoldBy::List }, wr, g)
}

const SEND_SGE: &str = "the connection's max_send_sge";

impl<M: RegMemory + Send + Sync + 'static> Encode for WriteSg<'_, M> {
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        const DST: Named = Named::new(Arg::Dst, "write_sg: dst");
        const SRC: Named = Named::new(Arg::Src, "write_sg: src");
        let remote = Some((self.dst, self.dst_offset, Usage::WRITE_DST, &DST));
        let max = (t.max_send_sge, SEND_SGE);
        post_list(SendOp::Write, self.src, Usage::WRITE_SRC, &SRC, max, remote, self.s, t, sink)
    }
}

impl<M: RegMemory + Send + Sync + 'static> Encode for ReadSg<'_, M> {
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let rd = t.peer.capabilities().max_sge_rd;
        let max =
            if rd != 0 && rd < t.max_send_sge { (rd, "the device's max_sge_rd") } else { (t.max_send_sge, SEND_SGE) };
        const SRC: Named = Named::new(Arg::Src, "read_sg: src");
        const DST: Named = Named::new(Arg::Dst, "read_sg: dst");
        let remote = Some((self.src, self.src_offset, Usage::READ_SRC, &SRC));
        post_list(SendOp::Read, self.dst, Usage::READ_DST, &DST, max, remote, self.s, t, sink)
    }
}

impl<M: RegMemory + Send + Sync + 'static> Encode for SendSg<'_, M> {
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let max = (t.max_send_sge, SEND_SGE);
        const SRC: Named = Named::new(Arg::Src, "send_sg: src");
        post_list(SendOp::Send, self.src, Usage::SEND, &SRC, max, None, self.s, t, sink)
    }
}

/// An RDMA write of `data` to a remote region at `dst_offset` as inline
/// data (`IBV_SEND_INLINE`): the device copies the bytes during the post,
/// so they may come from any slice, need no registration, and may change as
/// soon as the post returns. At most the connection's
/// [`max_inline_data`](crate::Conn::max_inline_data) bytes. Posted alone
/// (a chain refuses it: its bytes are lent for the call only). For small
/// records from any slice, without a registration.
///
/// ```
/// use rpma::ops::WriteInline;
/// # #[allow(dead_code)]
/// fn note(conn: &rpma::Conn, dst: &rpma::MrRemote) -> rpma::Result<()> {
///     let mut record = [0u8; 8];
///     record.copy_from_slice(&42u64.to_le_bytes());
///     conn.post(WriteInline::new(dst, 64, &record).op_context(9))?;
///     record.fill(0); // copied already
///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
///     assert_eq!(wc.op_context, 9);
///     Ok(())
/// }
/// ```
///
/// # Errors (when posted)
/// [`Error::Inval`] when the flags are empty, `data` is longer than
/// [`max_inline_data`](crate::Conn::max_inline_data) (the message names
/// both), the range exceeds the remote region or it lacks
/// [`Usage::WRITE_DST`]; [`Error::Again`] when the send queue is full;
/// [`Error::Provider`] when posting fails.
#[derive(Debug, Clone, Copy)]
#[must_use = "an operation does nothing until it is posted"]
pub struct WriteInline<'a> {
    dst: &'a MrRemote,
    dst_offset: u64,
    data: &'a [u8],
    imm: Option<u32>,
    s: Settings,
}

impl<'a> WriteInline<'a> {
    /// The write, reporting its completion with `op_context` 0.
    pub fn new(dst: &'a MrRemote, dst_offset: u64, data: &'a [u8]) -> Self {
        WriteInline { dst, dst_offset, data, imm: None, s: Settings::DEFAULT }
    }

    /// With immediate data, which the other side gets in the completion of
    /// a posted receive, in host order.
    pub fn imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }

    setters!(s);
}

/// A send of `data` as inline data to a receive the other side posted:
/// copied by the device during the post, from any slice, at most the
/// connection's [`max_inline_data`](crate::Conn::max_inline_data) bytes
/// (`data` may be empty). Posted alone, as [`WriteInline`].
///
/// # Errors (when posted)
/// [`Error::Inval`] when the flags are empty or `data` is longer than
/// [`max_inline_data`](crate::Conn::max_inline_data); [`Error::Again`],
/// [`Error::Provider`] as [`WriteInline`].
#[derive(Debug, Clone, Copy)]
#[must_use = "an operation does nothing until it is posted"]
pub struct SendInline<'a> {
    data: &'a [u8],
    imm: Option<u32>,
    s: Settings,
}

impl<'a> SendInline<'a> {
    /// The send, reporting its completion with `op_context` 0.
    pub fn new(data: &'a [u8]) -> Self {
        SendInline { data, imm: None, s: Settings::DEFAULT }
    }

    /// With immediate data, delivered in host order.
    pub fn imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }

    setters!(s);
}

/// Checks inline bytes and hands them to `sink`, lent for the call.
fn post_inline<S: Sink>(
    verb: SendOp,
    remote: Option<(&MrRemote, u64)>,
    data: &[u8],
    s: Settings,
    what: &str,
    t: &Target<'_>,
    sink: S,
) -> Result<()> {
    let signaled = s.flags.signaled()?;
    let max = t.max_inline_data;
    let len = match u32::try_from(data.len()) {
        Ok(n) if n <= max => n,
        _ => return Err(too_much_inline(what, data.len(), max)),
    };
    let (remote_addr, rkey) = remote.map_or((0, 0), |(r, o)| (r.addr().wrapping_add(o), r.rkey()));
    let wr = SendWr {
        wr_id: 0,
        op: verb,
        // lkey is ignored for inline data
        sge: (len > 0).then_some(Sge { addr: data.as_ptr() as u64, length: len, lkey: 0 }),
        remote_addr,
        rkey,
        signaled,
        fence: s.flags.fence(),
        inline: true,
    };
    sink.plain(Meta { kind: super::kind_of(verb), ctx: s.ctx, hold: HoldBy::LentBytes }, wr)
}

impl Encode for WriteInline<'_> {
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let (dst, off) = (self.dst, self.dst_offset);
        const DST: Named = Named::new(Arg::Dst, "write_inline: dst");
        dst.check_range(&DST, off, self.data.len() as u64)?;
        validate::remote(dst, Usage::WRITE_DST, &DST, t.peer)?;
        let verb = self.imm.map_or(SendOp::Write, SendOp::WriteImm);
        post_inline(verb, Some((dst, off)), self.data, self.s, "write_inline", t, sink)
    }
}

impl Encode for SendInline<'_> {
    fn encode<S: Sink>(&self, t: &Target<'_>, sink: S) -> Result<()> {
        let verb = self.imm.map_or(SendOp::Send, SendOp::SendImm);
        post_inline(verb, None, self.data, self.s, "send_inline", t, sink)
    }
}

/// The trait impls of a list or inline operation: nothing of its own for
/// the connection to hold (a list's holds come with its encoding).
macro_rules! list_op {
    ($t:ident $(<$m:ident>)?) => {
        impl<$($m: RegMemory + Send + Sync + 'static)?> Hold_ for $t<'_ $(, $m)?> {
            fn hold(&self, t: &Target<'_>) -> Holding {
                t.flush_mr.keep()
            }
        }
        impl<$($m: RegMemory + Send + Sync + 'static)?> Operation for $t<'_ $(, $m)?> {}
    };
}
list_op!(WriteSg<M>);
list_op!(ReadSg<M>);
list_op!(SendSg<M>);
list_op!(WriteInline);
list_op!(SendInline);

macro_rules! list_debug {
    ($t:ident) => {
        impl<M: RegMemory> std::fmt::Debug for $t<'_, M> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).field("settings", &self.s).finish_non_exhaustive()
            }
        }
        impl<M: RegMemory> Clone for $t<'_, M> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<M: RegMemory> Copy for $t<'_, M> {}
    };
}
list_debug!(WriteSg);
list_debug!(ReadSg);
list_debug!(SendSg);

#[cold]
#[inline(never)]
fn too_much_inline(what: &str, len: usize, max: u32) -> Error {
    let text = format!(
        "{what}: {len} bytes exceed the connection's max_inline_data {max} (granted for ConnCfg::set_max_inline_data)"
    );
    Error::too_long(Arg::Data, len as u64, max.into(), text)
}
