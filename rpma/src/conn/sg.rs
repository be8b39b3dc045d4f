//! Scatter-gather lists and inline data (not in librpma): several local
//! ranges in one operation, up to the QP's granted SGEs, every region held
//! until the operation completes; and bytes from any slice carried inline,
//! copied by the device during the post, up to the QP's granted
//! `max_inline_data`.

use super::Conn;
use crate::error::{Error, Result};
use crate::inflight::{Hold, SendOpRec, NO_HOLD};
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote, Usage};
use crate::ops::{kind_of, Flags};
use crate::peer::Peer;
use crate::validate;
use rpma_sys::wr::{SendOp, SendWr, Sge, MAX_SGL};
use std::sync::Arc;

/// One element of a scatter/gather list: `len` bytes at `offset` of a
/// local region, for [`Conn::write_sg`], [`Conn::read_sg`],
/// [`Conn::send_sg`] and [`Conn::recv_sg`]. The elements of one list are
/// regions of one memory type `M`.
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
struct Gathered {
    sges: [Sge; MAX_SGL],
    n: usize,
    total: u32,
    hold: Option<Hold>,
}

impl Gathered {
    fn list(&self) -> &[Sge] {
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
fn gather<M: RegMemory + Send + Sync + 'static>(
    list: &[Sg<'_, M>],
    need: Usage,
    what: &str,
    max: u32,
    limit: &str,
    peer: &Peer,
) -> Result<Gathered> {
    let Some(first) = list.first() else {
        return Err(Error::inval(format!(
            "{what}: the list is empty (a 0-byte operation is the plain one with len 0, or one element of 0 bytes)"
        )));
    };
    let max = (max as usize).min(MAX_SGL);
    if list.len() > max {
        return Err(Error::inval(format!("{what}: {} elements exceed {limit} {max}", list.len())));
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
    if g.n == 0 {
        return Ok(g);
    }
    // One region for the whole list (the common case): its hold; else one
    // hold per posted element, in one allocation made fallibly.
    if list.iter().all(|e| std::ptr::eq(e.mr, first.mr)) {
        g.hold = Some(first.mr.hold());
    } else {
        let mut holds: Vec<Hold> = Vec::new();
        holds.try_reserve_exact(g.n).map_err(|_| Error::NoMem(format!("{what}: holds of {} regions", g.n).into()))?;
        holds.extend(list.iter().filter(|e| e.len > 0).map(|e| e.mr.hold()));
        g.hold = Some(Arc::new(holds));
    }
    Ok(g)
}

/// One element: its range, usage and peer, named `what[i]` in errors.
fn check_element<M: RegMemory>(e: &Sg<'_, M>, need: Usage, what: &str, i: usize, peer: &Peer) -> Result<()> {
    let check = |name: &str| -> Result<()> {
        e.mr.check_range(name, e.offset, e.len)?;
        validate::local(e.mr, need, name, peer)
    };
    match check(what) {
        Ok(()) => Ok(()),
        // The error again, with the element's index in its name (built
        // only on this path).
        Err(first) => match check(&format!("{what}[{i}]")) {
            Err(e) => Err(e),
            Ok(()) => Err(first),
        },
    }
}

#[cold]
#[inline(never)]
fn too_long(what: &str, i: usize, total: u64) -> Error {
    Error::inval(format!(
        "{what}: the elements up to [{i}] add up to {total} bytes, more than 4 GiB - 1 (the most one work request carries)"
    ))
}

impl Conn {
    /// The bytes an operation may carry inline on this connection: what the
    /// device granted for [`ConnCfg::set_max_inline_data`](crate::ConnCfg::set_max_inline_data)
    /// (at least that), read when the connection was set up.
    pub fn max_inline_data(&self) -> u32 {
        self.parts.limits.max_inline_data
    }

    /// The scatter/gather elements a send-queue operation may carry on this
    /// connection: what the device granted for
    /// [`ConnCfg::set_max_send_sge`](crate::ConnCfg::set_max_send_sge) (at
    /// least that), at most [`MAX_SGL`](crate::conn_cfg::MAX_SGL).
    pub fn max_send_sge(&self) -> u32 {
        self.parts.limits.max_send_sge
    }

    /// The scatter/gather elements a receive may carry on this connection:
    /// what the device granted for
    /// [`ConnCfg::set_max_recv_sge`](crate::ConnCfg::set_max_recv_sge) (at
    /// least that), at most [`MAX_SGL`](crate::conn_cfg::MAX_SGL).
    pub fn max_recv_sge(&self) -> u32 {
        self.parts.limits.max_recv_sge
    }

    /// Writes the elements of `src`, one after the other, to the remote
    /// region at `dst_offset`: a gathering RDMA WRITE (one work request,
    /// one completion). Every region in `src` is kept alive until the
    /// operation completes; elements of 0 bytes are checked and skipped.
    ///
    /// ```
    /// use rpma::{AlignedBuf, Flags, MrLocal, MrRemote, Sg};
    /// # #[allow(dead_code)]
    /// fn put(conn: &rpma::Conn, hdr: &MrLocal<AlignedBuf>, body: &MrLocal<AlignedBuf>, dst: &MrRemote) -> rpma::Result<()> {
    ///     // 16 header bytes, then 100 body bytes, land at dst[0..116]
    ///     conn.write_sg(dst, 0, &[Sg::new(hdr, 0, 16), Sg::new(body, 0, 100)], Flags::COMPLETION_ALWAYS, 1)?;
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op_context, 1);
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `src` is empty or longer
    /// than [`max_send_sge`](Conn::max_send_sge), an element exceeds its
    /// region, lacks [`Usage::WRITE_SRC`] or is on another peer (the message
    /// names it as `src[i]`), the total exceeds 4 GiB - 1 or the remote
    /// range, or `dst` lacks [`Usage::WRITE_DST`]; [`Error::Again`] when
    /// the send queue is full; [`Error::NoMem`] when the holds of the
    /// regions cannot be allocated; [`Error::Provider`] when posting fails.
    pub fn write_sg<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        src: &[Sg<'_, M>],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = flags.signaled()?;
        let limit = "the connection's max_send_sge";
        let g = gather(src, Usage::WRITE_SRC, "write_sg: src", self.max_send_sge(), limit, &self.parts.peer)?;
        dst.check_range("write_sg: dst", dst_offset, u64::from(g.total))?;
        validate::remote(dst, Usage::WRITE_DST, "write_sg: dst", &self.parts.peer)?;
        self.post_list(SendOp::Write, g, Some((dst, dst_offset)), signaled, flags.fence(), op_context)
    }

    /// Reads from the remote region at `src_offset` into the elements of
    /// `dst`, filled one after the other: a scattering RDMA READ. Every
    /// region in `dst` is kept alive until the operation completes.
    ///
    /// # Errors
    /// As [`write_sg`](Conn::write_sg), with the elements needing
    /// [`Usage::READ_DST`], `src` [`Usage::READ_SRC`], and the count also
    /// bounded by the device's `max_sge_rd`
    /// ([`Capabilities::max_sge_rd`](crate::Capabilities::max_sge_rd)).
    pub fn read_sg<M: RegMemory + Send + Sync + 'static>(
        &self,
        dst: &[Sg<'_, M>],
        src: &MrRemote,
        src_offset: u64,
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = flags.signaled()?;
        let rd = self.parts.peer.capabilities().max_sge_rd;
        let (max, limit) = if rd != 0 && rd < self.max_send_sge() {
            (rd, "the device's max_sge_rd")
        } else {
            (self.max_send_sge(), "the connection's max_send_sge")
        };
        let g = gather(dst, Usage::READ_DST, "read_sg: dst", max, limit, &self.parts.peer)?;
        src.check_range("read_sg: src", src_offset, u64::from(g.total))?;
        validate::remote(src, Usage::READ_SRC, "read_sg: src", &self.parts.peer)?;
        self.post_list(SendOp::Read, g, Some((src, src_offset)), signaled, flags.fence(), op_context)
    }

    /// Sends the elements of `src`, one after the other, as one message to
    /// a receive posted by the other side: a gathering send. Every region in
    /// `src` is kept alive until the operation completes.
    ///
    /// # Errors
    /// As [`write_sg`](Conn::write_sg), with the elements needing
    /// [`Usage::SEND`] and no remote range.
    pub fn send_sg<M: RegMemory + Send + Sync + 'static>(
        &self,
        src: &[Sg<'_, M>],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        let signaled = flags.signaled()?;
        let limit = "the connection's max_send_sge";
        let g = gather(src, Usage::SEND, "send_sg: src", self.max_send_sge(), limit, &self.parts.peer)?;
        self.post_list(SendOp::Send, g, None, signaled, flags.fence(), op_context)
    }

    /// Posts a receive that scatters an incoming message into the elements
    /// of `dst`, filled one after the other. Every region in `dst` is kept
    /// alive until the receive completes; as for [`recv`](Conn::recv), its
    /// completion always arrives.
    ///
    /// # Errors
    /// [`Error::Inval`] when `dst` is empty or longer than
    /// [`max_recv_sge`](Conn::max_recv_sge), an element exceeds its region,
    /// lacks [`Usage::RECV`] or is on another peer (named as `dst[i]`), the
    /// total exceeds 4 GiB - 1, or the connection uses an SRQ;
    /// [`Error::NoMem`] when the holds cannot be allocated;
    /// [`Error::Provider`] when posting fails (`ENOMEM`: the receive queue
    /// is full).
    pub fn recv_sg<M: RegMemory + Send + Sync + 'static>(&self, dst: &[Sg<'_, M>], op_context: u64) -> Result<()> {
        let limit = "the connection's max_recv_sge";
        let mut g = gather(dst, Usage::RECV, "recv_sg: dst", self.max_recv_sge(), limit, &self.parts.peer)?;
        if self.parts.srq.is_some() {
            return Err(Error::inval("recv_sg: the connection receives through its SRQ; post with Srq::recv"));
        }
        let qp = self.parts.qp()?;
        // A list of 0-byte elements only posts no memory: nothing to hold.
        let hold = g.hold.take().unwrap_or_else(|| Arc::new(()));
        self.parts.recv.post_recv_sgl(qp, op_context, hold, g.list())
    }

    /// Writes `data` to the remote region at `dst_offset` as inline data
    /// (`IBV_SEND_INLINE`): the device copies the bytes during the post, so
    /// they may come from any slice, need no registration, and may be
    /// changed as soon as this returns. At most
    /// [`max_inline_data`](Conn::max_inline_data) bytes.
    ///
    /// ```
    /// # #[allow(dead_code)]
    /// fn note(conn: &rpma::Conn, dst: &rpma::MrRemote) -> rpma::Result<()> {
    ///     let mut record = [0u8; 8];
    ///     record.copy_from_slice(&42u64.to_le_bytes());
    ///     conn.write_inline(dst, 64, &record, rpma::Flags::COMPLETION_ALWAYS, 9)?;
    ///     record.fill(0); // copied already
    ///     let wc = conn.cq().next_completion(std::time::Duration::from_secs(1))?;
    ///     assert_eq!(wc.op_context, 9);
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty, `data` is longer than
    /// [`max_inline_data`](Conn::max_inline_data) (the message names both),
    /// the range exceeds the remote region or it lacks
    /// [`Usage::WRITE_DST`]; [`Error::Again`] when the send queue is full;
    /// [`Error::Provider`] when posting fails.
    pub fn write_inline(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        data: &[u8],
        flags: Flags,
        op_context: u64,
    ) -> Result<()> {
        self.write_inline_verb(dst, dst_offset, data, flags, SendOp::Write, op_context)
    }

    /// [`write_inline`](Conn::write_inline) with immediate data, which the
    /// other side gets in the completion of a posted receive, in host order.
    ///
    /// # Errors
    /// As [`write_inline`](Conn::write_inline).
    pub fn write_inline_with_imm(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        data: &[u8],
        flags: Flags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        self.write_inline_verb(dst, dst_offset, data, flags, SendOp::WriteImm(imm), op_context)
    }

    /// Sends `data` as inline data to a receive posted by the other side:
    /// copied by the device during the post, from any slice, at most
    /// [`max_inline_data`](Conn::max_inline_data) bytes; `data` may be
    /// empty.
    ///
    /// # Errors
    /// [`Error::Inval`] when `flags` are empty or `data` is longer than
    /// [`max_inline_data`](Conn::max_inline_data); [`Error::Again`],
    /// [`Error::Provider`] as [`write_inline`](Conn::write_inline).
    pub fn send_inline(&self, data: &[u8], flags: Flags, op_context: u64) -> Result<()> {
        self.post_inline(SendOp::Send, None, data, flags, "send_inline", op_context)
    }

    /// [`send_inline`](Conn::send_inline) with immediate data, delivered in
    /// host order.
    ///
    /// # Errors
    /// As [`send_inline`](Conn::send_inline).
    pub fn send_inline_with_imm(&self, data: &[u8], flags: Flags, imm: u32, op_context: u64) -> Result<()> {
        self.post_inline(SendOp::SendImm(imm), None, data, flags, "send_inline", op_context)
    }

    fn write_inline_verb(
        &self,
        dst: &MrRemote,
        dst_offset: u64,
        data: &[u8],
        flags: Flags,
        verb: SendOp,
        op_context: u64,
    ) -> Result<()> {
        dst.check_range("write_inline: dst", dst_offset, data.len() as u64)?;
        validate::remote(dst, Usage::WRITE_DST, "write_inline: dst", &self.parts.peer)?;
        self.post_inline(verb, Some((dst, dst_offset)), data, flags, "write_inline", op_context)
    }

    /// Posts `data` inline: nothing to hold, the device copies it during
    /// the call.
    fn post_inline(
        &self,
        verb: SendOp,
        remote: Option<(&MrRemote, u64)>,
        data: &[u8],
        flags: Flags,
        what: &str,
        op_context: u64,
    ) -> Result<()> {
        let signaled = flags.signaled()?;
        let max = self.max_inline_data();
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
            fence: flags.fence(),
            inline: true,
        };
        self.parts.post(kind_of(verb), op_context, NO_HOLD, wr)
    }

    /// Posts a checked list through the send tracker, which keeps its hold
    /// until the operation completes.
    fn post_list(
        &self,
        verb: SendOp,
        mut g: Gathered,
        remote: Option<(&MrRemote, u64)>,
        signaled: bool,
        fence: bool,
        op_context: u64,
    ) -> Result<()> {
        let qp = self.parts.qp()?;
        let (remote_addr, rkey) = remote.map_or((0, 0), |(r, o)| (r.addr().wrapping_add(o), r.rkey()));
        let wr = SendWr { wr_id: 0, op: verb, sge: None, remote_addr, rkey, signaled, fence, inline: false };
        let rec = SendOpRec { ctx: op_context, kind: kind_of(verb), signaled, hold: g.hold.take(), confirm: None };
        self.parts.send.post_send_sgl(qp, rec, wr, g.list())
    }
}

#[cold]
#[inline(never)]
fn too_much_inline(what: &str, len: usize, max: u32) -> Error {
    Error::inval(format!(
        "{what}: {len} bytes exceed the connection's max_inline_data {max} (granted for ConnCfg::set_max_inline_data)"
    ))
}
