//! Per-connection exports: a range of a region that one connection only
//! can reach ([`Conn::export`], [`Export`]).
//!
//! In librpma's model a server has one protection domain, and every
//! connection it accepts shares it: a region registered with remote access
//! is reachable from every connection whose peer holds (or guesses) its
//! rkey, since the device checks the rkey against the protection domain,
//! not against the connection. An export is a type 2 memory window bound
//! on one connection's queue pair over a region registered without remote
//! access: the device accepts its rkey on that queue pair only, and the
//! region's own rkey opens nothing. docs/security.md has the threat model
//! and what was measured on rxe.
//!
//! On an `rpma::aio::AsyncConn` (feature `tokio`), export
//! through its connection (`async_conn.conn().export(..)`): an unexport's
//! completion, and a failed bind's, arrive through its
//! `next_completion`.

use crate::access::Usage;
use crate::conn::Conn;
use crate::conn::EndWithConn;
use crate::error::{Detail, Error, Msg, Result};
use crate::inflight::lock;
use crate::memory::RegMemory;
use crate::mr::{Access, MrLocal};
use crate::mw::{Mw, MwAccess, MwType};
use crate::ops::Flags;
use crate::wire;
use std::sync::{Arc, Mutex};

/// The op context of an export's bind: its completion is reported only
/// when the bind fails (the connection then fails too).
pub const EXPORT_BIND_CONTEXT: u64 = u64::MAX - 0x4558;

/// A range of a region that one connection only can reach: a type 2 memory
/// window bound on that connection's queue pair ([`Conn::export`]).
///
/// Send its [`descriptor`](Export::descriptor) to that connection's peer,
/// which uses it as any [`MrRemote`](crate::MrRemote) (librpma's 21-byte
/// format). Another connection that presents the same rkey, or guesses
/// another, is refused by the device (a remote access error, which also
/// ends that connection).
///
/// The export ends when it is dropped or when its connection is
/// (`ibv_dealloc_mw`, whichever comes first: the device stops accepting the
/// rkey, and the region is released once that succeeds; if it fails, the
/// window and its region are leaked, never freed), or with
/// [`Conn::unexport`]. The region cannot be deregistered while an export is
/// bound over it.
#[derive(Debug)]
#[must_use = "dropping an export revokes the access it gives at once"]
pub struct Export {
    /// The window, until the export or its connection ends it.
    mw: Arc<Window>,
    /// What its descriptors offer.
    usage: Usage,
}

/// The window of an export: its connection deallocates it when it goes.
#[derive(Debug)]
struct Window(Mutex<Option<Mw>>);

impl EndWithConn for Window {
    /// The `Mw`'s drop: a failed deallocation leaks the window and its
    /// region.
    fn end(&self, _qp_num: u32, _peer: &crate::Peer) {
        let mw = lock(&self.0).take();
        drop(mw); // after the lock
    }
}

fn ended() -> Error {
    Error::inval("the export has ended: its connection is gone")
}

impl Export {
    /// The descriptor to send to the connection's peer (21 bytes, librpma's
    /// format): the window's address, length, rkey and [`usage`](Export::usage)
    /// (its first byte: remote atomics need
    /// [`descriptor_ext`](Export::descriptor_ext)).
    ///
    /// # Errors
    /// [`Error::Inval`] when the export has ended ([`Conn::unexport`]'s
    /// completion was reaped, or its connection is gone).
    pub fn descriptor(&self) -> Result<[u8; wire::MR_DESCRIPTOR_SIZE]> {
        Ok(wire::encode_mr(&self.desc()?))
    }

    /// [`descriptor`](Export::descriptor) with rpma's 2-byte extension (23
    /// bytes; as [`MrLocal::descriptor_ext`]: librpma ignores the
    /// extension), which carries the grant of remote atomics and the mark
    /// of a window ([`MrRemote::is_window`](crate::MrRemote::is_window)): a
    /// flush through it is the read, where the 21-byte form would post a
    /// native flush on a device that has one, which the window refuses
    /// (measured on rxe with rdma-core 56). Send this one to rpma peers.
    ///
    /// # Errors
    /// As [`descriptor`](Export::descriptor).
    pub fn descriptor_ext(&self) -> Result<Vec<u8>> {
        Ok(wire::encode_mr_ext(&self.desc()?, (self.usage.bits() >> 8) as u8 | wire::MR_EXT_WINDOW))
    }

    /// What the descriptors offer, from the export's access: remote read
    /// gives [`Usage::READ_SRC`] and the flush types (a flush is a read on
    /// this connection: [`Usage::FLUSH_TYPE_VISIBILITY`], and
    /// [`Usage::FLUSH_TYPE_PERSISTENT`] when the region is persistent memory,
    /// [`MrLocal::is_pmem`]); remote write gives [`Usage::WRITE_DST`];
    /// remote atomics give [`Usage::WRITE_DST`] and [`Usage::REMOTE_ATOMIC`].
    pub fn usage(&self) -> Usage {
        self.usage
    }

    fn desc(&self) -> Result<wire::MrDesc> {
        let (mut d, _) = lock(&self.mw.0).as_ref().ok_or_else(ended)?.bound_desc()?;
        d.usage = self.usage.bits() as u8;
        Ok(d)
    }

    /// The rkey the connection's peer uses (0 once the connection ended the
    /// export).
    pub fn rkey(&self) -> u32 {
        lock(&self.mw.0).as_ref().map_or(0, Mw::rkey)
    }

    /// Whether the window is still bound (as far as this side knows):
    /// false once unexported or once the connection is gone.
    pub fn is_live(&self) -> bool {
        lock(&self.mw.0).as_ref().is_some_and(Mw::is_bound)
    }
}

impl Conn {
    /// Exports `len` bytes at `offset` of `mr` to this connection only,
    /// with `access` ([`MwAccess::REMOTE_READ`], `REMOTE_WRITE`,
    /// `REMOTE_ATOMIC`; `ZERO_BASED` makes the remote addresses offsets
    /// from the range's start): allocates a type 2 memory window and posts
    /// its bind on this connection's send queue, unsignaled. Returns at
    /// once; the bind runs before anything posted on this connection after
    /// it (the send queue runs in order), so a descriptor sent afterwards on
    /// this connection reaches the peer after the window is usable.
    ///
    /// `mr` must be registered with [`Usage::MW_BIND`](crate::Usage::MW_BIND)
    /// and without remote access (else its own rkey would reach it from
    /// every connection); a writable export needs local write access on it
    /// too (e.g. `Usage::MW_BIND | Usage::WRITE_SRC`).
    ///
    /// A failed bind completes with an error status on this connection's
    /// CQ, with op context [`EXPORT_BIND_CONTEXT`], and leaves the
    /// connection in error.
    ///
    /// ```no_run
    /// use rpma::{AlignedBuf, MrLocal, MwAccess, Usage};
    /// # #[allow(dead_code)]
    /// # fn f(conn: &rpma::Conn) -> rpma::Result<()> {
    /// let mr = MrLocal::reg(conn.peer(), AlignedBuf::new(1 << 20)?, Usage::MW_BIND | Usage::WRITE_SRC)?;
    /// let export = conn.export(&mr, 0, 4096, MwAccess::REMOTE_READ | MwAccess::REMOTE_WRITE)?;
    /// let desc = export.descriptor()?; // send it to this connection's peer
    /// # let _ = desc; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// * [`Error::Inval`] with [`Detail::Exposed`]: `mr` has remote access.
    /// * [`Error::NoSupp`] with [`Detail::Unsupported`]: the device has no
    ///   type 2 memory windows (rpma does not fall back to a protection
    ///   domain per connection: regions and connections are tied to the
    ///   peer's one).
    /// * As [`Mw::alloc`] and [`Conn::bind_mw`] (a range beyond `mr`, no
    ///   `MW_BIND` usage, remote write without local write, a full send
    ///   queue, a closed connection).
    pub fn export<M: RegMemory + Send + Sync + 'static>(
        &self,
        mr: &MrLocal<M>,
        offset: usize,
        len: usize,
        access: MwAccess,
    ) -> Result<Export> {
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        if mr.access().intersects(remote) {
            let text = format!(
                "export: the region is registered with remote access ({:?}): its own rkey reaches it from every \
                 connection; register it with Usage::MW_BIND and no remote usage",
                mr.access()
            );
            return Err(Error::Inval(Msg::detailed(Detail::Exposed { access: mr.access().bits() }, text)));
        }
        if !self.peer().capabilities().mw_type2 {
            return Err(Error::unsupported(format!(
                "export: {} has no type 2 memory windows, which tie a window to one connection",
                self.peer().device_name()
            )));
        }
        // A window's usage, plus what an export adds: the flush types (a
        // flush is a read on this connection) and the atomics' grant.
        let mut usage = crate::mw::remote_usage(access);
        if access.contains(MwAccess::REMOTE_READ) {
            usage |= Usage::FLUSH_TYPE_VISIBILITY;
            if mr.is_pmem() {
                usage |= Usage::FLUSH_TYPE_PERSISTENT;
            }
        }
        if access.contains(MwAccess::REMOTE_ATOMIC) {
            usage |= Usage::REMOTE_ATOMIC;
        }
        let mut mw = Mw::alloc(self.peer(), MwType::Type2)?;
        self.bind_mw(&mut mw, mr, offset, len, access, Flags::COMPLETION_ON_ERROR, EXPORT_BIND_CONTEXT)?;
        let mw = Arc::new(Window(Mutex::new(Some(mw))));
        let weak: std::sync::Weak<dyn EndWithConn> = Arc::downgrade(&mw) as _;
        self.parts().ends.add(weak);
        Ok(Export { mw, usage })
    }

    /// Ends `export` now: posts its window's invalidation on this
    /// connection (signaled, with `op_context`); the device refuses the
    /// rkey from then on, and the region is released when that completion
    /// is reaped successfully. Dropping the export instead deallocates the
    /// window, which also ends it.
    ///
    /// # Errors
    /// As [`Conn::invalidate_mw`] ([`Error::Inval`] with
    /// [`Detail::Foreign`] when the export is another connection's);
    /// [`Error::Inval`] when its connection already ended it.
    pub fn unexport(&self, export: &mut Export, op_context: u64) -> Result<()> {
        let mut mw = lock(&export.mw.0);
        self.invalidate_mw(mw.as_mut().ok_or_else(ended)?, Flags::COMPLETION_ALWAYS, op_context)
    }
}
