//! Message buffers: typed send and receive slots on a connection's protection
//! domain, in the spirit of librdmacm's `rdma_reg_msgs`, `rdma_reg_read` and
//! `rdma_reg_write`.

use crate::conn::Conn;
use crate::conn_req::ConnReq;
use crate::cq::Completion;
use crate::error::{Error, Result};
use crate::memory::AlignedBuf;
use crate::mr::{MrLocal, Usage};
use crate::ops::Flags;
use crate::peer::Peer;

/// The access of the slots, as librdmacm's registration helpers grant it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgAccess {
    /// `rdma_reg_msgs`: local write only, for sends and receives.
    Msgs,
    /// `rdma_reg_read`: also the target of the peer's RDMA reads.
    Read,
    /// `rdma_reg_write`: also the target of the peer's RDMA writes.
    Write,
}

impl MsgAccess {
    fn usage(self) -> Usage {
        match self {
            MsgAccess::Msgs => Usage::SEND | Usage::RECV,
            MsgAccess::Read => Usage::SEND | Usage::RECV | Usage::READ_SRC,
            MsgAccess::Write => Usage::SEND | Usage::RECV | Usage::WRITE_DST,
        }
    }
}

/// Which slot a completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Send slot `n`.
    Send(usize),
    /// Receive slot `n`.
    Recv(usize),
}

const TAG: u64 = 0x4d53_4700_0000_0000; // "MSG"
const RECV: u64 = 1 << 32;
const TAG_MASK: u64 = 0xffff_ff00_0000_0000;

/// Fixed-size message slots: `send` slots to send from and `recv` slots to
/// receive into, each slot its own registration, so filling a send slot is
/// never held up by a receive pending in another slot. Completions map back
/// to slots with [`Messages::slot`].
///
/// ```no_run
/// use rpma::messages::{Messages, MsgAccess, Slot};
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn) -> rpma::Result<()> {
/// let mut msgs = Messages::new(conn.peer(), 64, 1, 4, MsgAccess::Msgs)?;
/// msgs.post_recv_all(conn)?;
/// msgs.send(conn, 0, b"ping", rpma::Flags::COMPLETION_ALWAYS)?;
/// let wc = conn.cq().next_completion(std::time::Duration::from_secs(5))?;
/// if let Some(Slot::Recv(n)) = msgs.slot(&wc) {
///     println!("got {:?}", msgs.received(n, wc.byte_len as usize)?);
///     msgs.post_recv(conn, n)?;
/// }
/// # Ok(()) }
/// ```
pub struct Messages {
    send: Vec<MrLocal<AlignedBuf>>,
    recv: Vec<MrLocal<AlignedBuf>>,
    slot_size: usize,
}

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Messages")
            .field("slot_size", &self.slot_size)
            .field("send_slots", &self.send.len())
            .field("recv_slots", &self.recv.len())
            .finish()
    }
}

impl Messages {
    /// Registers `send` + `recv` slots of `slot_size` bytes on `peer` (use
    /// the connection's: [`Conn::peer`]).
    ///
    /// # Errors
    /// [`Error::Inval`] for a slot size of 0, over 4 GiB - 1 or over the
    /// device's `max_mr_size`, more than 2^32 slots, or more slots than the
    /// device's `max_mr` registrations; the errors of [`MrLocal::reg`].
    pub fn new(peer: &Peer, slot_size: usize, send: usize, recv: usize, access: MsgAccess) -> Result<Messages> {
        if slot_size == 0 || u32::try_from(slot_size).is_err() {
            return Err(Error::inval(format!("slot size {slot_size} is not in 1 ..= 4 GiB - 1")));
        }
        if send.max(recv) as u64 > u32::MAX as u64 {
            return Err(Error::inval("at most 2^32 - 1 slots of each kind"));
        }
        // Each slot is a registration: checked before allocating any, so a
        // huge count is an error, not millions of registrations first.
        let caps = peer.capabilities();
        let slots = send as u64 + recv as u64;
        if caps.max_mr != 0 && slots > u64::from(caps.max_mr) {
            return Err(Error::inval(format!(
                "{slots} slots need as many registrations; the device's max_mr is {}",
                caps.max_mr
            )));
        }
        crate::mr::check_len(peer, slot_size)?;
        let reg = |n: usize| -> Result<Vec<MrLocal<AlignedBuf>>> {
            (0..n).map(|_| MrLocal::reg(peer, AlignedBuf::new(slot_size)?, access.usage())).collect()
        };
        Ok(Messages { send: reg(send)?, recv: reg(recv)?, slot_size })
    }

    fn recv_slot(&self, n: usize) -> Result<&MrLocal<AlignedBuf>> {
        self.recv
            .get(n)
            .ok_or_else(|| Error::inval(format!("receive slot {n} does not exist (there are {})", self.recv.len())))
    }

    /// Posts a receive into slot `n` on `conn`.
    ///
    /// # Errors
    /// [`Error::Inval`] for a slot that does not exist; as [`Conn::recv`].
    pub fn post_recv(&self, conn: &Conn, n: usize) -> Result<()> {
        conn.recv(self.recv_slot(n)?, 0, self.slot_size, TAG | RECV | n as u64)
    }

    /// Posts a receive into slot `n` before connecting.
    ///
    /// # Errors
    /// As [`Messages::post_recv`].
    pub fn post_recv_req(&self, req: &ConnReq, n: usize) -> Result<()> {
        req.recv(self.recv_slot(n)?, 0, self.slot_size, TAG | RECV | n as u64)
    }

    /// Posts receives into every slot.
    ///
    /// # Errors
    /// As [`Messages::post_recv`].
    pub fn post_recv_all(&self, conn: &Conn) -> Result<()> {
        (0..self.recv.len()).try_for_each(|n| self.post_recv(conn, n))
    }

    /// Copies `msg` into send slot `n` and sends it.
    ///
    /// # Errors
    /// [`Error::Inval`] for a slot that does not exist or a message longer
    /// than the slot; [`Error::Again`] while the slot's previous send is in
    /// flight; as [`Conn::send`].
    pub fn send(&mut self, conn: &Conn, n: usize, msg: &[u8], flags: Flags) -> Result<()> {
        let count = self.send.len();
        let slot = self
            .send
            .get_mut(n)
            .ok_or_else(|| Error::inval(format!("send slot {n} does not exist (there are {count})")))?;
        if msg.len() > self.slot_size {
            return Err(Error::too_long(
                crate::error::Arg::Message,
                msg.len() as u64,
                self.slot_size as u64,
                format!("message of {} bytes exceeds the slot size {}", msg.len(), self.slot_size),
            ));
        }
        slot.write_at(0, msg)?;
        conn.send(slot, 0, msg.len(), flags, TAG | n as u64)
    }

    /// The slot a completion is for, or `None` for completions of other
    /// operations.
    pub fn slot(&self, wc: &Completion) -> Option<Slot> {
        if wc.op_context & TAG_MASK != TAG {
            return None;
        }
        let n = (wc.op_context & 0xffff_ffff) as usize;
        if wc.op_context & RECV != 0 {
            (n < self.recv.len()).then_some(Slot::Recv(n))
        } else {
            (n < self.send.len()).then_some(Slot::Send(n))
        }
    }

    /// The first `len` bytes received in slot `n`.
    ///
    /// # Errors
    /// [`Error::Inval`] for a slot that does not exist or `len` over the
    /// slot size.
    pub fn received(&self, n: usize, len: usize) -> Result<Vec<u8>> {
        // Checked before allocating: `len` comes from the caller (often a
        // completion's byte_len), and a huge one must be an error, not a
        // capacity-overflow panic or an allocation-failure abort.
        let slot = self.recv_slot(n)?;
        if len > self.slot_size {
            return Err(Error::inval(format!("received: length {len} exceeds the slot size {}", self.slot_size)));
        }
        let mut out = vec![0u8; len];
        slot.read_at(0, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::{CompletionOp, WcStatus};

    #[test]
    fn contexts_map_back_to_slots() {
        let m = Messages { send: Vec::new(), recv: Vec::new(), slot_size: 8 };
        let wc = |ctx| Completion {
            op_context: ctx,
            op: CompletionOp::Recv,
            status: WcStatus::SUCCESS,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            wc_opcode: 0,
            qp_num: 0,
        };
        assert_eq!(m.slot(&wc(7)), None, "not a message completion");
        assert_eq!(m.slot(&wc(TAG | RECV | 3)), None, "slot out of range");
        assert_eq!(MsgAccess::Write.usage(), Usage::SEND | Usage::RECV | Usage::WRITE_DST);
    }
}
