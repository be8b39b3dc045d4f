//! Memory regions: local registrations ([`MrLocal`]), their descriptors, and
//! regions of the remote side ([`MrRemote`]). This file holds the
//! registration's parts, its release and the checks; `local.rs` the
//! operations on a local region, `remote.rs` the remote region.

mod local;
use local::{free_region, Owner};
mod ranges;
mod remote;
pub mod rereg;

pub(crate) use local::RegionHold;
pub use remote::MrRemote;

pub use crate::access::{usage_to_access, Access, Usage};
use crate::error::{Arg, Detail, Error, Misuse, Msg, Named, Result};
use crate::inflight::book::Book;
use crate::logging::{rpma_log, LogLevel};
use crate::memory::RegMemory;
use crate::peer::Peer;
use crate::wire::{self, MrDesc};
use bitflags::bitflags;
use rpma_sys::mr::Mr;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What to do when `ibv_reg_mr` failed (librpma's ODP fallback).
#[derive(Debug, PartialEq, Eq)]
enum OdpFallback {
    /// Retry with `IBV_ACCESS_ON_DEMAND`.
    Retry,
    /// `EOPNOTSUPP` but the peer cannot do ODP.
    Refuse,
    /// Any other failure.
    Fail,
}

fn odp_fallback(errno: Option<i32>, odp_capable: bool) -> OdpFallback {
    match errno {
        Some(libc::EOPNOTSUPP) if odp_capable => OdpFallback::Retry,
        Some(libc::EOPNOTSUPP) => OdpFallback::Refuse,
        _ => OdpFallback::Fail,
    }
}

/// `ibv_advise_mr` advice (`IBV_ADVISE_MR_ADVICE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Prefetch for reading.
    Prefetch,
    /// Prefetch for writing.
    PrefetchWrite,
    /// Prefetch without faulting pages in.
    PrefetchNoFault,
}

bitflags! {
    /// `ibv_advise_mr` flags.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct AdviseFlags: u32 {
        /// `IBV_ADVISE_MR_FLAG_FLUSH`: complete the advice before returning.
        const FLUSH = 1;
    }
}

/// A local memory registration (librpma's `rpma_mr_local`) that owns the
/// memory it covers.
///
/// `M` is the memory: `Vec<u8>`, `Box<[u8]>`, [`AlignedBuf`](crate::AlignedBuf),
/// a borrowed `&mut [u8]`, or any [`RegMemory`]. The region keeps the memory
/// and the [`Peer`] (its protection domain) alive, and gives the memory back
/// only through [`MrLocal::dereg`], once the device can no longer touch it.
///
/// ```no_run
/// use rpma::{AlignedBuf, MrLocal, Usage};
/// # #[allow(dead_code)]
/// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
/// let mr = MrLocal::reg(peer, AlignedBuf::new(4096)?, Usage::READ_SRC | Usage::WRITE_DST)?;
/// mr.write_at(0, b"hello")?;
/// let desc = mr.descriptor();       // 21 bytes for the other side
/// # let _ = desc;
/// let buf = mr.dereg()?; // the memory comes back
/// # let _ = buf; Ok(()) }
/// ```
///
/// # Ranges in use
/// An operation in flight holds the range of the region it uses, as the
/// device uses it: a write's or send's source is read (the CPU may read
/// it, not write it), a read's or atomic's destination and a receive's
/// buffer are written (the CPU may do neither). The CPU's accesses
/// ([`read_at`](Self::read_at), [`write_at`](Self::write_at), and in place
/// [`view_at`](Self::view_at), [`update_at`](Self::update_at)) succeed on
/// ranges nothing uses in a conflicting way and are refused with
/// [`Detail::RangeBusy`] otherwise; so are posts naming a range the CPU is
/// writing. Several threads may stage into disjoint ranges while others
/// post. Ranges are tracked in stripes of [`granule`](Self::granule)
/// bytes: ranges in one stripe count as overlapping.
///
/// ```no_run
/// use rpma::{AlignedBuf, Flags, MrLocal, Usage};
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn, dst: &rpma::MrRemote) -> rpma::Result<()> {
/// let ring = MrLocal::reg(conn.peer(), AlignedBuf::new(16 * 4096)?, Usage::WRITE_SRC)?;
/// ring.write_at(0, b"record 0")?;
/// conn.write(dst, 0, &ring, 0, 8, Flags::COMPLETION_ALWAYS, 0)?;
/// ring.write_at(4096, b"record 1")?;                 // staged beside record 0 in flight
/// assert!(ring.write_at(0, b"record 2").is_err());   // record 0's range: refused until reaped
/// # Ok(()) }
/// ```
///
/// # Thread safety
/// `MrLocal<M>` is `Send`/`Sync` when `M` is; every access takes `&self`.
pub struct MrLocal<M: RegMemory = Vec<u8>> {
    inner: Owner<M>,
}

/// The registration and its memory, shared with in-flight operations and
/// bound memory windows.
///
/// Dropping it deregisters and frees the memory only once `ibv_dereg_mr`
/// succeeded; when it fails the device may still reach the memory, so the
/// memory (and the registration) are leaked and the failure logged.
#[repr(C)]
pub(crate) struct MrInner<M: RegMemory> {
    /// The ranges the device and the CPU use, and the operations in
    /// flight; first, so that its address is the region's
    /// ([`free_region`]).
    book: Book,
    mr: ManuallyDrop<Mr>,
    mem: ManuallyDrop<M>,
    pub(crate) peer: Peer,
    pub(crate) usage: Usage,
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) odp: bool,
    /// Memory windows bound over the region (each also holds a reference).
    windows: AtomicUsize,
}

/// The parts of a region, for deregistration and re-registration.
pub(crate) struct MrParts<M: RegMemory> {
    pub(crate) mr: Mr,
    pub(crate) peer: Peer,
    pub(crate) usage: Usage,
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) odp: bool,
    pub(crate) mem: M,
}

impl<M: RegMemory> MrInner<M> {
    #[inline(always)]
    fn new(p: MrParts<M>) -> MrInner<M> {
        MrInner {
            mr: ManuallyDrop::new(p.mr),
            mem: ManuallyDrop::new(p.mem),
            peer: p.peer,
            usage: p.usage,
            ptr: p.ptr,
            len: p.len,
            odp: p.odp,
            windows: AtomicUsize::new(0),
            book: Book::new(p.len, free_region::<M>),
        }
    }

    fn into_parts(self) -> MrParts<M> {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so each field is moved out exactly
        // once and the Drop below does not run (the book owns nothing).
        unsafe {
            MrParts {
                mr: ManuallyDrop::take(&mut me.mr),
                mem: ManuallyDrop::take(&mut me.mem),
                peer: std::ptr::read(&me.peer),
                usage: me.usage,
                ptr: me.ptr,
                len: me.len,
                odp: me.odp,
            }
        }
    }

    /// The memory of a region whose registration `MrLocal::dereg` ended
    /// in place (`Mr::dereg_in_place`); the peer is dropped, `mr` not
    /// touched again.
    #[inline(always)]
    fn into_mem(self) -> M {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so `mem` and `peer` are moved out
        // exactly once and the Drop below (which would deregister `mr`
        // again) does not run.
        unsafe {
            drop(std::ptr::read(&me.peer));
            ManuallyDrop::take(&mut me.mem)
        }
    }
}

impl<M: RegMemory> Drop for MrInner<M> {
    /// Deregisters and drops the memory value, after this thread's rpma
    /// locks when it holds one (the region's last hold ended under a lock:
    /// the value's `Drop` is the caller's code).
    fn drop(&mut self) {
        // SAFETY: `mr` and `mem` are taken once, here (into_parts and
        // into_mem skip this Drop).
        let (mr, mem) = unsafe { (ManuallyDrop::take(&mut self.mr), ManuallyDrop::take(&mut self.mem)) };
        let end = End { mr: Some(mr), mem: ManuallyDrop::new(mem), len: self.len, ptr: self.ptr };
        if crate::unlocked::locked() {
            crate::unlocked::later(end);
        }
    }
}

/// A region's end: deregistered when dropped, then its memory value
/// dropped; leaked both when the deregistration fails.
struct End<M: RegMemory> {
    /// Always `Some` until `drop` moves it out (an `Option` rather than a
    /// `ManuallyDrop`, so that moving it out needs no `unsafe`).
    mr: Option<Mr>,
    mem: ManuallyDrop<M>,
    len: usize,
    ptr: *mut u8,
}

impl<M: RegMemory> Drop for End<M> {
    fn drop(&mut self) {
        let Some(mr) = self.mr.take() else { return };
        match mr.dereg() {
            // SAFETY: the registration is gone, so the device can no longer
            // reach the memory; `mem` is dropped once, here.
            Ok(()) => unsafe { ManuallyDrop::drop(&mut self.mem) },
            Err((mr, e)) => {
                rpma_log!(
                    LogLevel::Error,
                    "ibv_dereg_mr: {e}; the device may still reach the region's {} bytes at {:p}: \
                     leaking them (and the registration) instead of freeing",
                    self.len,
                    self.ptr
                );
                std::mem::forget(mr);
            }
        }
    }
}

// SAFETY: the raw pointer only refers to `mem`, which the region owns; moving
// the region to another thread moves that ownership with it.
unsafe impl<M: RegMemory + Send> Send for MrInner<M> {}
// SAFETY: shared access reads and writes the memory only through ranges its
// book hands out (a range the CPU writes is used by nobody else; one the CPU
// reads is written by nobody else), or copies from raw pointers (`read_at`,
// `read_volatile_at` of memory a remote peer may write); the other fields
// are immutable or atomic.
unsafe impl<M: RegMemory + Sync> Sync for MrInner<M> {}

impl<M: RegMemory> std::fmt::Debug for MrLocal<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MrLocal")
            .field("ptr", &self.inner.ptr)
            .field("size", &self.inner.len)
            .field("in_flight", &self.in_flight())
            .field("usage", &self.inner.usage)
            .field("access", &self.access())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

/// The failure of [`MrLocal::dereg`]: the region is handed back, still
/// registered and usable.
#[non_exhaustive]
pub struct DeregError<M: RegMemory> {
    /// The region, unchanged.
    pub mr: MrLocal<M>,
    /// Why deregistration failed.
    pub error: Error,
}

impl<M: RegMemory> std::fmt::Debug for DeregError<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeregError").field("mr", &self.mr).field("error", &self.error).finish()
    }
}

impl<M: RegMemory> std::fmt::Display for DeregError<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deregistering the memory region failed; the region is handed back")
    }
}

/// The error alone: the region is dropped (its drop deregisters it, or
/// leaks it when that fails again), as `?` in a function returning
/// [`crate::Result`] wants.
impl<M: RegMemory> From<DeregError<M>> for Error {
    fn from(e: DeregError<M>) -> Error {
        e.error
    }
}

impl<M: RegMemory> std::error::Error for DeregError<M> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Validates and registers `len` bytes at `ptr` (at `iova` when given), with
/// librpma's ODP fallback; shared by registration and re-registration.
#[inline(always)]
pub(crate) fn register(peer: &Peer, ptr: *mut u8, len: usize, usage: Usage, iova: Option<u64>) -> Result<(Mr, bool)> {
    let access = check_register(peer, len, usage)?;
    register_checked(peer, ptr, len, usage, access, iova)
}

/// [`register`]'s validation: the length against 0 and the device's
/// `max_mr_size`, the usage, atomics support; the access flags for `usage`.
#[inline(always)]
fn check_register(peer: &Peer, len: usize, usage: Usage) -> Result<Access> {
    if !len_fits(len, peer.mr_len_limit()) {
        return Err(bad_length(len, peer.capabilities().max_mr_size));
    }
    check_usage(usage)?;
    if usage.contains(Usage::REMOTE_ATOMIC) && !peer.capabilities().atomics {
        return Err(Error::nosupp(format!(
            "usage REMOTE_ATOMIC: {} does not support remote atomics (atomic_cap is IBV_ATOMIC_NONE)",
            peer.device_name()
        )));
    }
    Ok(peer.usage_to_access(usage))
}

/// `1 <= len <= limit` in one test: `0 - 1` wraps above any limit.
#[inline(always)]
/// `len` bytes may be registered on `peer` (the device's `max_mr_size`).
pub(crate) fn check_len(peer: &Peer, len: usize) -> Result<()> {
    if !len_fits(len, peer.mr_len_limit()) {
        return Err(bad_length(len, peer.capabilities().max_mr_size));
    }
    Ok(())
}

fn len_fits(len: usize, limit: u64) -> bool {
    (len as u64).wrapping_sub(1) < limit
}

/// A length of 0, or above the device's `max_mr_size`.
#[cold]
#[inline(never)]
fn bad_length(len: usize, max: u64) -> Error {
    if len == 0 {
        return Error::empty(Arg::Memory, "memory to register is 0 bytes long; it must be at least 1 byte");
    }
    Error::inval(format!("memory to register is {len} bytes long; the device's max_mr_size is {max}"))
}

/// [`register`]'s verbs call, after [`check_register`] gave `access`.
#[inline(always)]
fn register_checked(
    peer: &Peer,
    ptr: *mut u8,
    len: usize,
    usage: Usage,
    access: Access,
    iova: Option<u64>,
) -> Result<(Mr, bool)> {
    // SAFETY: the caller keeps (ptr, len), the memory of a RegMemory value,
    // alive and unmoved until the returned Mr is deregistered successfully,
    // and leaks it otherwise (MrInner's Drop, dereg and rereg release it
    // only after `Mr::dereg` returned Ok).
    let (mr, odp) = match unsafe { reg_mr(peer, ptr, len, iova, access) } {
        Ok(mr) => (mr, false),
        Err(e) => reg_failed(peer, ptr, len, iova, access, e)?,
    };
    log_registered(&mr, len, ptr, usage);
    Ok((mr, odp))
}

/// `ibv_reg_mr`, or `ibv_reg_mr_iova` with `iova`: the one call of
/// [`register`] and its retry.
///
/// # Safety
/// As `rpma_sys::mr::Mr::reg`: `(ptr, len)` stays valid and unmoved until
/// the returned `Mr` is deregistered successfully, and is leaked otherwise.
#[inline(always)]
unsafe fn reg_mr(peer: &Peer, ptr: *mut u8, len: usize, iova: Option<u64>, access: Access) -> std::io::Result<Mr> {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match iova {
            None => Mr::reg(peer.pd(), ptr, len, access.bits()),
            Some(iova) => Mr::reg_iova(peer.pd(), ptr, len, iova, access.bits()),
        }
    }
}

/// The debug line of a registration: the threshold test inline, the line
/// out of line.
#[inline(always)]
fn log_registered(mr: &Mr, len: usize, ptr: *mut u8, usage: Usage) {
    if crate::logging::enabled(LogLevel::Debug) {
        log_registered_line(len, ptr, usage, mr.access());
    }
}

#[cold]
#[inline(never)]
fn log_registered_line(len: usize, ptr: *mut u8, usage: Usage, access: u32) {
    rpma_log!(LogLevel::Debug, "registered {len} bytes at {ptr:p} usage {usage:?} access {access:#x}");
}

/// A failed `ibv_reg_mr`: librpma's On-Demand Paging retry when the memory
/// cannot be pinned and the peer is ODP capable, else the error. Kept out of
/// [`register`] (cold) so the registration path itself stays short.
#[cold]
#[inline(never)]
fn reg_failed(
    peer: &Peer,
    ptr: *mut u8,
    len: usize,
    iova: Option<u64>,
    access: Access,
    e: std::io::Error,
) -> Result<(Mr, bool)> {
    match odp_fallback(e.raw_os_error(), peer.is_odp_capable()) {
        OdpFallback::Fail => {
            // rxe (and the IBA 1.5 rule it follows) grants persistent
            // flush only on memory the kernel knows as persistent.
            let op = format!("ibv_reg_mr({len} bytes, access {access:?})");
            if access.contains(Access::FLUSH_PERSISTENT) && e.raw_os_error() == Some(libc::EINVAL) {
                let text = format!(
                    "{op} (the device refuses IBV_ACCESS_FLUSH_PERSISTENT on memory that is not persistent \
                     memory; with native RDMA FLUSH, register DRAM without Usage::FLUSH_TYPE_PERSISTENT)"
                );
                return Err(Error::Provider { op: Msg::detailed(Detail::NeedsPmem, text), source: e });
            }
            // Pinning counts against the memlock limit (without CAP_IPC_LOCK).
            if let Some(limit) = memlock_limit().filter(|_| e.raw_os_error() == Some(libc::ENOMEM)) {
                let text = format!(
                    "{op} (pinned memory counts against the memlock limit, {limit} bytes for this process: \
                     raise it with `ulimit -l`, systemd's LimitMEMLOCK= or /etc/security/limits.conf, \
                     or register less)"
                );
                return Err(Error::Provider { op: Msg::detailed(Detail::MemlockLimit { limit }, text), source: e });
            }
            Err(Error::provider_raw(op, e))
        }
        OdpFallback::Refuse => {
            rpma_log!(LogLevel::Error, "ibv_reg_mr: {e}; peer does not support On-Demand Paging");
            let text = format!(
                "ibv_reg_mr({len} bytes, access {access:?}) (the memory cannot be pinned and the peer does not \
                 support On-Demand Paging)"
            );
            Err(Error::Provider { op: Msg::detailed(Detail::NoOdp, text), source: e })
        }
        OdpFallback::Retry => {
            let odp_access = access | Access::ON_DEMAND;
            // SAFETY: `register`'s caller's contract, as for the first try.
            let mr = unsafe { reg_mr(peer, ptr, len, iova, odp_access) }.map_err(|e| {
                Error::provider_raw(
                    format!("ibv_reg_mr with On-Demand Paging (maybe FSDAX?) ({len} bytes, access {odp_access:?})"),
                    e,
                )
            })?;
            Ok((mr, true))
        }
    }
}

/// This process's memlock limit in bytes (`Max locked memory` of
/// /proc/self/limits), `None` when unlimited or unknown.
fn memlock_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max locked memory"))?;
    line["Max locked memory".len()..].split_whitespace().next()?.parse().ok()
}

/// `offset + len` must not overflow nor exceed `size`; the error names all
/// three and the side (`REMOTE`: the remote region's, else the local
/// one's). The side is a constant, not an argument: the hot path then
/// loads nothing for the error it does not take.
#[inline]
fn check_within<const REMOTE: bool>(what: &Named, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(out_of_range::<REMOTE>(what, offset, len, size)),
    }
}

#[cold]
#[inline(never)]
fn out_of_range<const REMOTE: bool>(what: &Named, offset: u64, len: u64, size: u64) -> Error {
    let side = if REMOTE { "remote" } else { "local" };
    let text = format!("{what}: offset {offset} + length {len} exceeds the {side} region's size {size}");
    Error::out_of_range(what.arg, offset, len, size, text)
}

/// A usage with at least one flag and no undefined bit: the test inline,
/// the error out of line.
#[inline]
pub(crate) fn check_usage(usage: Usage) -> Result<()> {
    if usage.is_empty() || usage.bits() & !Usage::all().bits() != 0 {
        return Err(bad_usage(usage));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_usage(usage: Usage) -> Error {
    let text = if usage.is_empty() {
        "usage is empty; give at least one Usage flag".to_string()
    } else {
        let unknown = usage.bits() & !Usage::all().bits();
        format!("usage {:#x} has undefined bits {unknown:#x}", usage.bits())
    };
    Error::Inval(crate::error::Msg::detailed(crate::error::Detail::BadUsage { bits: usage.bits() as u32 }, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn len_fits_between_1_and_the_limit() {
        assert!(!len_fits(0, 100) && !len_fits(0, u64::MAX));
        assert!(len_fits(1, 100) && len_fits(100, 100) && !len_fits(101, 100));
        assert!(len_fits(usize::MAX, u64::MAX)); // no limit reported
        assert!(!len_fits(1, 0)); // a limit of 0 admits nothing (Peer maps max 0 to u64::MAX)
    }

    #[test]
    fn odp_fallback_decision() {
        assert_eq!(odp_fallback(Some(libc::EOPNOTSUPP), true), OdpFallback::Retry);
        assert_eq!(odp_fallback(Some(libc::EOPNOTSUPP), false), OdpFallback::Refuse);
        assert_eq!(odp_fallback(Some(libc::EFAULT), true), OdpFallback::Fail);
        assert_eq!(odp_fallback(Some(libc::ENOMEM), true), OdpFallback::Fail);
        assert_eq!(odp_fallback(None, true), OdpFallback::Fail);
    }

    #[test]
    fn remote_flush_type_is_usage_bits() {
        let mut d = [0u8; 21];
        d[20] = (Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY).bits() as u8;
        let r = MrRemote::from_descriptor(&d).unwrap();
        assert_eq!(r.flush_type(), Usage::FLUSH_TYPE_VISIBILITY);
        assert_eq!(r.usage(), Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY);
    }
}
