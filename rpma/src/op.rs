//! The description of one data-path operation: what every librpma-named
//! call on a connection builds in a line, and the one place that turns it
//! into a checked work request.

use crate::access::Usage;
use crate::error::{Error, Result};
use crate::memory::RegMemory;
use crate::mr::{MrLocal, MrRemote};
use crate::peer::Peer;
use crate::validate;
use crate::wrid::CompletionOp;
use bitflags::bitflags;
use rpma_sys::wr::{SendOp, SendWr};

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
    if flags.is_empty() {
        Error::inval("flags are empty: pass Flags::COMPLETION_ON_ERROR or Flags::COMPLETION_ALWAYS")
    } else if !flags.intersects(Flags::COMPLETION_ON_ERROR) {
        Error::inval(
            "flags have no completion mode (FENCE alone is not enough): add Flags::COMPLETION_ON_ERROR or Flags::COMPLETION_ALWAYS",
        )
    } else {
        Error::inval(format!("flags {:#x} have undefined bits", flags.bits()))
    }
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

/// The local side of an operation: a range of a region, the usage it needs
/// and its name in error messages.
pub(crate) struct Local<'a, M: RegMemory> {
    mr: &'a MrLocal<M>,
    offset: usize,
    need: Usage,
    what: &'static str,
}

/// The remote side of an RDMA operation.
pub(crate) struct Remote<'a> {
    mr: &'a MrRemote,
    offset: u64,
    need: Usage,
    what: &'static str,
}

/// One operation with a local range (and for RDMA operations a remote
/// one), before it is checked and posted.
pub(crate) struct Op<'a, M: RegMemory> {
    verb: SendOp,
    local: Local<'a, M>,
    remote: Option<Remote<'a>>,
    len: usize,
    flags: Flags,
    /// The user's op_context.
    pub(crate) ctx: u64,
}

impl<'a, M: RegMemory> Op<'a, M> {
    /// `rpma_read`: `len` bytes at `src_offset` of `src` into `dst` at `dst_offset`.
    #[inline]
    pub(crate) fn read(dst: &'a MrLocal<M>, dst_offset: usize, src: &'a MrRemote, src_offset: u64, len: usize) -> Self {
        Op {
            verb: SendOp::Read,
            local: Local { mr: dst, offset: dst_offset, need: Usage::READ_DST, what: "read: dst" },
            remote: Some(Remote { mr: src, offset: src_offset, need: Usage::READ_SRC, what: "read: src" }),
            len,
            flags: Flags::empty(),
            ctx: 0,
        }
    }

    /// `rpma_write` (with `imm`: `rpma_write_with_imm`).
    #[inline]
    pub(crate) fn write(
        dst: &'a MrRemote,
        dst_offset: u64,
        src: &'a MrLocal<M>,
        src_offset: usize,
        len: usize,
        imm: Option<u32>,
    ) -> Self {
        Op {
            verb: imm.map_or(SendOp::Write, SendOp::WriteImm),
            local: Local { mr: src, offset: src_offset, need: Usage::WRITE_SRC, what: "write: src" },
            remote: Some(Remote { mr: dst, offset: dst_offset, need: Usage::WRITE_DST, what: "write: dst" }),
            len,
            flags: Flags::empty(),
            ctx: 0,
        }
    }

    /// A remote atomic (`verb` [`SendOp::CompareSwap`] or
    /// [`SendOp::FetchAdd`]) on the 8 bytes at `src_offset` of `src`, the
    /// previous value landing in `dst` at `dst_offset`.
    #[inline]
    pub(crate) fn atomic(
        verb: SendOp,
        dst: &'a MrLocal<M>,
        dst_offset: usize,
        src: &'a MrRemote,
        src_offset: u64,
    ) -> Self {
        let (l, r) = match verb {
            SendOp::CompareSwap { .. } => ("compare_and_swap: dst", "compare_and_swap: src"),
            _ => ("fetch_and_add: dst", "fetch_and_add: src"),
        };
        Op {
            verb,
            local: Local { mr: dst, offset: dst_offset, need: Usage::READ_DST, what: l },
            remote: Some(Remote { mr: src, offset: src_offset, need: Usage::REMOTE_ATOMIC, what: r }),
            len: 8,
            flags: Flags::empty(),
            ctx: 0,
        }
    }

    /// A send of `len` bytes of `src` at `offset`: `verb` is one of
    /// [`SendOp::Send`], [`SendOp::SendImm`], [`SendOp::SendInv`].
    #[inline]
    pub(crate) fn send(src: &'a MrLocal<M>, offset: usize, len: usize, verb: SendOp) -> Self {
        let what = if let SendOp::SendInv(_) = verb { "send_with_inv: src" } else { "send: src" };
        Op {
            verb,
            local: Local { mr: src, offset, need: Usage::SEND, what },
            remote: None,
            len,
            flags: Flags::empty(),
            ctx: 0,
        }
    }

    /// With the caller's `flags` and `op_context`.
    #[inline(always)]
    pub(crate) fn with(self, flags: Flags, ctx: u64) -> Self {
        Op { flags, ctx, ..self }
    }

    /// What its completion reports.
    #[inline]
    pub(crate) fn kind(&self) -> CompletionOp {
        kind_of(self.verb)
    }

    /// The work request (its ID left 0), after the checks: flags, length,
    /// the local range, for an atomic the device's support; with `checked`
    /// also the usages, the peer, the remote range and an atomic's remote
    /// alignment (the `*_unchecked` paths leave those to the devices).
    ///
    /// # Errors
    /// [`Error::Inval`] naming the broken bound.
    #[inline(always)]
    pub(crate) fn work_request(&self, peer: &Peer, checked: bool) -> Result<SendWr> {
        let signaled = self.flags.signaled()?;
        let (local, len) = (&self.local, self.len);
        let len32 = validate::len32(local.what, len)?;
        local.mr.check_range(local.what, local.offset, len)?;
        let atomic = matches!(self.verb, SendOp::CompareSwap { .. } | SendOp::FetchAdd(_));
        if atomic && !peer.capabilities().atomics {
            return Err(no_atomics(local.what, peer));
        }
        if checked {
            validate::local(local.mr, local.need, local.what, peer)?;
        }
        let (remote_addr, rkey) = match &self.remote {
            Some(r) => {
                let addr = r.mr.addr().wrapping_add(r.offset);
                if checked {
                    r.mr.check_range(r.what, r.offset, len as u64)?;
                    validate::remote(r.mr, r.need, r.what, peer)?;
                    if atomic && !addr.is_multiple_of(ATOMIC_ALIGNMENT) {
                        return Err(misaligned(r.what, r.mr.addr(), r.offset));
                    }
                }
                (addr, r.mr.rkey())
            }
            None => (0, 0),
        };
        Ok(SendWr {
            wr_id: 0,
            op: self.verb,
            sge: Some(local.mr.sge(local.offset, len32)),
            remote_addr,
            rkey,
            signaled,
            fence: self.flags.fence(),
            inline: false,
        })
    }
}

#[cold]
#[inline(never)]
fn no_atomics(what: &str, peer: &Peer) -> Error {
    Error::nosupp(format!(
        "{}: {} does not support remote atomics (atomic_cap is IBV_ATOMIC_NONE)",
        what.split(':').next().unwrap_or(what),
        peer.device_name()
    ))
}

#[cold]
#[inline(never)]
fn misaligned(what: &str, region: u64, offset: u64) -> Error {
    Error::inval(format!(
        "{what}: the remote address {:#x} (region start {region:#x} + offset {offset}) is not a multiple of \
         {ATOMIC_ALIGNMENT}: remote atomics need 8-aligned addresses",
        region.wrapping_add(offset)
    ))
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
