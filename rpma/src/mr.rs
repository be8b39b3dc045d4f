//! Memory regions: local registrations ([`MrLocal`]), their descriptors, and
//! regions of the remote side ([`MrRemote`]).

use crate::error::{Error, Result};
use crate::log::{rpma_log, LogLevel};
use crate::memory::RegMemory;
use crate::peer::Peer;
use crate::wire::{self, MrDesc};
use bitflags::bitflags;
use rpma_sys::mr::Mr;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

bitflags! {
    /// How a region will be used (librpma's `RPMA_MR_USAGE_*`, same bits).
    /// Registration translates it into `IBV_ACCESS_*` flags, see
    /// [`Peer::usage_to_access`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Usage: u16 {
        /// Source of RDMA reads issued by the remote side.
        const READ_SRC = 1 << 0;
        /// Destination of RDMA reads issued by this side.
        const READ_DST = 1 << 1;
        /// Source of RDMA writes issued by this side.
        const WRITE_SRC = 1 << 2;
        /// Destination of RDMA writes issued by the remote side.
        const WRITE_DST = 1 << 3;
        /// Target of flushes to global visibility.
        const FLUSH_TYPE_VISIBILITY = 1 << 4;
        /// Target of flushes to persistence.
        const FLUSH_TYPE_PERSISTENT = 1 << 5;
        /// Source of sends.
        const SEND = 1 << 6;
        /// Destination of receives.
        const RECV = 1 << 7;
        /// Memory windows may be bound over the region (rpma extension,
        /// `IBV_ACCESS_MW_BIND`; local only: not carried in descriptors).
        const MW_BIND = 1 << 8;
    }
}

bitflags! {
    /// `IBV_ACCESS_*` flags, as passed to `ibv_reg_mr`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`.
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`.
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ`.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC`.
        const REMOTE_ATOMIC = 1 << 3;
        /// `IBV_ACCESS_MW_BIND`.
        const MW_BIND = 1 << 4;
        /// `IBV_ACCESS_ZERO_BASED`.
        const ZERO_BASED = 1 << 5;
        /// `IBV_ACCESS_ON_DEMAND`.
        const ON_DEMAND = 1 << 6;
        /// `IBV_ACCESS_HUGETLB`.
        const HUGETLB = 1 << 7;
        /// `IBV_ACCESS_FLUSH_GLOBAL`.
        const FLUSH_GLOBAL = 1 << 8;
        /// `IBV_ACCESS_FLUSH_PERSISTENT`.
        const FLUSH_PERSISTENT = 1 << 9;
        /// `IBV_ACCESS_RELAXED_ORDERING`.
        const RELAXED_ORDERING = 1 << 20;
    }
}

/// librpma's usage → access translation (`rpma_peer_usage2access`).
///
/// * `READ_SRC` → `REMOTE_READ`
/// * `FLUSH_TYPE_*` → `REMOTE_READ` (APM flush is an RDMA READ), or with
///   `native_flush` `FLUSH_GLOBAL` / `FLUSH_PERSISTENT` respectively
/// * `READ_DST` → `LOCAL_WRITE`, plus `REMOTE_WRITE` on iWARP (which carries
///   a READ as a WRITE in the other direction)
/// * `WRITE_SRC` → `LOCAL_WRITE`
/// * `WRITE_DST` → `REMOTE_WRITE | LOCAL_WRITE`
/// * `RECV` → `LOCAL_WRITE`
/// * `SEND` → nothing (a send-only region has access 0)
/// * `MW_BIND` (rpma) → `MW_BIND`
///
/// ```
/// use rpma::{mr::usage_to_access, Access, Usage};
/// assert_eq!(usage_to_access(Usage::WRITE_DST, false, false), Access::REMOTE_WRITE | Access::LOCAL_WRITE);
/// assert_eq!(usage_to_access(Usage::READ_DST, true, false), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
/// assert_eq!(usage_to_access(Usage::FLUSH_TYPE_PERSISTENT, false, true), Access::FLUSH_PERSISTENT);
/// assert_eq!(usage_to_access(Usage::SEND, false, false), Access::empty());
/// ```
pub fn usage_to_access(usage: Usage, iwarp: bool, native_flush: bool) -> Access {
    let mut a = Access::empty();
    if usage.contains(Usage::READ_SRC) {
        a |= Access::REMOTE_READ;
    }
    let flush = Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT;
    if native_flush {
        if usage.contains(Usage::FLUSH_TYPE_VISIBILITY) {
            a |= Access::FLUSH_GLOBAL;
        }
        if usage.contains(Usage::FLUSH_TYPE_PERSISTENT) {
            a |= Access::FLUSH_PERSISTENT;
        }
    } else if usage.intersects(flush) {
        a |= Access::REMOTE_READ;
    }
    if usage.contains(Usage::READ_DST) {
        a |= Access::LOCAL_WRITE;
        if iwarp {
            a |= Access::REMOTE_WRITE;
        }
    }
    if usage.contains(Usage::WRITE_SRC) {
        a |= Access::LOCAL_WRITE;
    }
    if usage.contains(Usage::WRITE_DST) {
        a |= Access::REMOTE_WRITE | Access::LOCAL_WRITE;
    }
    if usage.contains(Usage::RECV) {
        a |= Access::LOCAL_WRITE;
    }
    if usage.contains(Usage::MW_BIND) {
        a |= Access::MW_BIND;
    }
    a
}

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
/// let mut mr = MrLocal::reg(peer, AlignedBuf::new(4096)?, Usage::READ_SRC | Usage::WRITE_DST)?;
/// mr.write_at(0, b"hello")?;
/// let desc = mr.descriptor();       // 21 bytes for the other side
/// # let _ = desc;
/// let buf = mr.dereg().map_err(|e| e.error)?; // the memory comes back
/// # let _ = buf; Ok(()) }
/// ```
///
/// # Thread safety
/// `MrLocal<M>` is `Send`/`Sync` when `M` is. Reading the memory
/// ([`read_at`](Self::read_at)) takes `&self`; writing it takes `&mut self`.
pub struct MrLocal<M: RegMemory = Vec<u8>> {
    inner: Arc<MrInner<M>>,
}

/// The registration and its memory, shared with in-flight operations and
/// bound memory windows.
///
/// Dropping it deregisters and frees the memory only once `ibv_dereg_mr`
/// succeeded; when it fails the device may still reach the memory, so the
/// memory (and the registration) are leaked and the failure logged.
pub(crate) struct MrInner<M: RegMemory> {
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
        }
    }

    fn into_parts(self) -> MrParts<M> {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so each field is moved out exactly
        // once and the Drop below does not run.
        #[allow(unsafe_code)]
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
}

impl<M: RegMemory> Drop for MrInner<M> {
    fn drop(&mut self) {
        // SAFETY: `mr` is taken once, here (into_parts skips this Drop).
        #[allow(unsafe_code)]
        let mr = unsafe { ManuallyDrop::take(&mut self.mr) };
        match mr.dereg() {
            // SAFETY: the registration is gone, so the device can no longer
            // reach the memory; `mem` is dropped once, here.
            #[allow(unsafe_code)]
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
#[allow(unsafe_code)]
unsafe impl<M: RegMemory + Send> Send for MrInner<M> {}
// SAFETY: shared access only reads the memory (read_at) or immutable fields;
// writes need `&mut MrLocal` and no operation in flight.
#[allow(unsafe_code)]
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
        write!(f, "deregistering the memory region failed: {}", self.error)
    }
}

impl<M: RegMemory> std::error::Error for DeregError<M> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Validates and registers `len` bytes at `ptr` (at `iova` when given), with
/// librpma's ODP fallback; shared by registration and re-registration.
pub(crate) fn register(peer: &Peer, ptr: *mut u8, len: usize, usage: Usage, iova: Option<u64>) -> Result<(Mr, bool)> {
    if len == 0 {
        return Err(Error::inval("memory to register is 0 bytes long; it must be at least 1 byte"));
    }
    let max = peer.capabilities().max_mr_size;
    if max != 0 && len as u64 > max {
        return Err(Error::inval(format!("memory to register is {len} bytes long; the device's max_mr_size is {max}")));
    }
    check_usage(usage)?;
    let access = peer.usage_to_access(usage);
    let reg = |access: Access| {
        // SAFETY: the caller keeps (ptr, len), the memory of a RegMemory
        // value, alive and unmoved until the returned Mr is deregistered
        // successfully, and leaks it otherwise (MrInner's Drop, dereg and
        // rereg release it only after `Mr::dereg` returned Ok).
        #[allow(unsafe_code)]
        unsafe {
            match iova {
                None => Mr::reg(peer.pd(), ptr, len, access.bits()),
                Some(iova) => Mr::reg_iova(peer.pd(), ptr, len, iova, access.bits()),
            }
        }
    };
    let (mr, odp) = match reg(access) {
        Ok(mr) => (mr, false),
        Err(e) => match odp_fallback(e.raw_os_error(), peer.is_odp_capable()) {
            OdpFallback::Fail => {
                // rxe (and the IBA 1.5 rule it follows) grants persistent
                // flush only on memory the kernel knows as persistent.
                let hint = if access.contains(Access::FLUSH_PERSISTENT) && e.raw_os_error() == Some(libc::EINVAL) {
                    " (the device refuses IBV_ACCESS_FLUSH_PERSISTENT on memory that is not persistent memory; \
                     with native RDMA FLUSH, register DRAM without Usage::FLUSH_TYPE_PERSISTENT)"
                } else {
                    ""
                };
                return Err(Error::provider_raw(format!("ibv_reg_mr({len} bytes, access {access:?}){hint}"), e));
            }
            OdpFallback::Refuse => {
                rpma_log!(LogLevel::Error, "ibv_reg_mr: {e}; peer does not support On-Demand Paging");
                return Err(Error::provider_raw(
                    format!(
                        "ibv_reg_mr({len} bytes, access {access:?}) (the memory cannot be pinned and the peer does not support On-Demand Paging)"
                    ),
                    e,
                ));
            }
            OdpFallback::Retry => {
                let odp_access = access | Access::ON_DEMAND;
                let mr = reg(odp_access).map_err(|e| {
                    Error::provider_raw(
                        format!("ibv_reg_mr with On-Demand Paging (maybe FSDAX?) ({len} bytes, access {odp_access:?})"),
                        e,
                    )
                })?;
                (mr, true)
            }
        },
    };
    rpma_log!(LogLevel::Debug, "registered {len} bytes at {ptr:p} usage {usage:?} access {:#x}", mr.access());
    Ok((mr, odp))
}

/// `offset + len` must not overflow nor exceed `size`; the error names all three.
#[inline]
fn check_within(what: &str, side: &str, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(out_of_range(what, side, offset, len, size)),
    }
}

#[cold]
#[inline(never)]
fn out_of_range(what: &str, side: &str, offset: u64, len: u64, size: u64) -> Error {
    Error::inval(format!("{what}: offset {offset} + length {len} exceeds the {side} region's size {size}"))
}

pub(crate) fn check_usage(usage: Usage) -> Result<()> {
    if usage.is_empty() {
        return Err(Error::inval("usage is empty; give at least one Usage flag"));
    }
    let unknown = usage.bits() & !Usage::all().bits();
    if unknown != 0 {
        return Err(Error::inval(format!("usage {:#x} has undefined bits {unknown:#x}", usage.bits())));
    }
    Ok(())
}

impl<M: RegMemory> MrLocal<M> {
    /// Size of a descriptor in bytes (21, librpma's `rpma_mr_get_descriptor_size`).
    pub const DESCRIPTOR_SIZE: usize = wire::MR_DESCRIPTOR_SIZE;

    /// Registers `mem` on `peer` for `usage` (`rpma_mr_reg`).
    ///
    /// The access flags are [`Peer::usage_to_access`]. If the device cannot
    /// pin the memory (`EOPNOTSUPP`, e.g. FS-DAX) and the peer supports
    /// On-Demand Paging, registration is retried with `IBV_ACCESS_ON_DEMAND`
    /// (see [`is_odp`](Self::is_odp)).
    ///
    /// # Errors
    /// * [`Error::Inval`]: the memory is 0 bytes long or larger than the
    ///   device's `max_mr_size`; `usage` is empty or has bits no
    ///   `RPMA_MR_USAGE_*` flag defines.
    /// * [`Error::Provider`] with the errno of `ibv_reg_mr`; for `EOPNOTSUPP`
    ///   the message says whether the ODP retry was refused (peer not ODP
    ///   capable) or failed.
    pub fn reg(peer: &Peer, mut mem: M, usage: Usage) -> Result<MrLocal<M>> {
        let (ptr, len) = mem.as_mut_ptr_len();
        let (mr, odp) = register(peer, ptr, len, usage, None)?;
        Ok(MrLocal::from_parts(MrParts { mr, peer: peer.clone(), usage, ptr, len, odp, mem }))
    }

    /// Registers `mem` as [`reg`](Self::reg) does, but zero-based: the
    /// device addresses the region from (about) 0 instead of its virtual
    /// address (`ibv_reg_mr_iova`), so descriptors do not reveal where the
    /// memory lives in this process. The kernel requires the start to keep
    /// its offset within a page: page-aligned memory ([`AlignedBuf`](crate::AlignedBuf))
    /// starts exactly at 0. Remote operations on the region work unchanged.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
    /// let mr = rpma::MrLocal::reg_zero_based(peer, rpma::AlignedBuf::new(4096)?, rpma::Usage::READ_SRC)?;
    /// assert_eq!(rpma::MrRemote::from_descriptor(&mr.descriptor())?.addr(), 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`reg`](Self::reg).
    pub fn reg_zero_based(peer: &Peer, mut mem: M, usage: Usage) -> Result<MrLocal<M>> {
        let (ptr, len) = mem.as_mut_ptr_len();
        let iova = ptr as u64 & (rpma_sys::page_size() as u64 - 1);
        let (mr, odp) = register(peer, ptr, len, usage, Some(iova))?;
        Ok(MrLocal::from_parts(MrParts { mr, peer: peer.clone(), usage, ptr, len, odp, mem }))
    }

    /// Whether the region was registered zero-based.
    pub fn is_zero_based(&self) -> bool {
        self.inner.mr.device_addr() != self.inner.ptr as u64
    }

    /// Start of the registered memory (`rpma_mr_get_ptr`).
    pub fn ptr(&self) -> *const u8 {
        self.inner.ptr
    }

    /// Size of the registered memory in bytes (`rpma_mr_get_size`).
    pub fn size(&self) -> usize {
        self.inner.len
    }

    /// The usage it was registered for.
    pub fn usage(&self) -> Usage {
        self.inner.usage
    }

    /// The access flags actually passed to `ibv_reg_mr` (including
    /// `ON_DEMAND` after the ODP fallback).
    pub fn access(&self) -> Access {
        Access::from_bits_retain(self.inner.mr.access())
    }

    /// Whether the region was registered with On-Demand Paging.
    pub fn is_odp(&self) -> bool {
        self.inner.odp
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.inner.mr.lkey()
    }

    /// Remote key: a capability granting the access in
    /// [`access`](Self::access) to whoever holds it.
    pub fn rkey(&self) -> u32 {
        self.inner.mr.rkey()
    }

    /// The peer the region is registered on.
    pub fn peer(&self) -> &Peer {
        &self.inner.peer
    }

    /// The 21-byte descriptor for the remote side
    /// (`rpma_mr_get_descriptor`): address, size, rkey, usage, little-endian.
    ///
    /// # Security
    /// The descriptor carries a virtual address of this process and an rkey,
    /// which lets its holder access the region as `usage` allows. Send it
    /// only to the intended peer.
    pub fn descriptor(&self) -> [u8; wire::MR_DESCRIPTOR_SIZE] {
        wire::encode_mr(&MrDesc {
            addr: self.inner.mr.device_addr(),
            size: self.inner.len as u64,
            rkey: self.inner.mr.rkey(),
            usage: (self.inner.usage.bits() & 0xff) as u8,
        })
    }

    #[inline]
    pub(crate) fn check_range(&self, what: &str, offset: usize, len: usize) -> Result<()> {
        check_within(what, "local", offset as u64, len as u64, self.inner.len as u64)
    }

    pub(crate) fn sys(&self) -> &Mr {
        &self.inner.mr
    }

    /// The registration and memory, when nothing holds them; else the
    /// region back with the error saying what holds it.
    pub(crate) fn into_parts(self, what: &str) -> std::result::Result<MrParts<M>, (MrLocal<M>, Error)> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Ok(inner.into_parts()),
            Err(inner) => {
                let mr = MrLocal { inner };
                let e = mr.held_error(what);
                Err((mr, e))
            }
        }
    }

    pub(crate) fn from_parts(parts: MrParts<M>) -> MrLocal<M> {
        MrLocal { inner: Arc::new(MrInner::new(parts)) }
    }

    /// Number of posted operations using this region that have not completed
    /// yet (0 when it is idle).
    pub fn in_flight(&self) -> usize {
        (Arc::strong_count(&self.inner) - 1).saturating_sub(self.bound_windows())
    }

    /// Number of memory windows bound over this region (as far as this side
    /// knows: a window's hold ends when the device confirmed its
    /// invalidation, or when it was deallocated).
    pub fn bound_windows(&self) -> usize {
        self.inner.windows.load(Ordering::Relaxed)
    }

    /// `Error::Again` naming what holds the region: operations in flight
    /// and/or bound windows, and how to release each.
    #[cold]
    #[inline(never)]
    fn held_error(&self, what: &str) -> Error {
        let ops = self.in_flight();
        let mws = self.bound_windows();
        let mut parts = Vec::new();
        if ops > 0 {
            parts.push(format!("{ops} operation(s) using it are in flight (reap their completions)"));
        }
        if mws > 0 {
            parts.push(format!(
                "{mws} memory window(s) are bound over it (invalidate them with Conn::invalidate_mw and reap the \
                 completion, or drop them)"
            ));
        }
        if parts.is_empty() {
            parts.push("another reference holds it; retry".into());
        }
        Error::Again(format!("{what}: the region is busy: {}", parts.join("; ")).into())
    }

    /// The device address of `offset` in the region, for an SGE.
    pub(crate) fn sge(&self, offset: usize, len: u32) -> rpma_sys::wr::Sge {
        rpma_sys::wr::Sge { addr: self.inner.mr.device_addr() + offset as u64, length: len, lkey: self.inner.mr.lkey() }
    }

    /// Copies `dst.len()` bytes from `offset` in the region into `dst`.
    ///
    /// While an operation writing into the region (a read's destination, a
    /// receive) is in flight, the bytes read are unspecified.
    ///
    /// # Errors
    /// [`Error::Inval`] when `offset + dst.len()` exceeds [`size`](Self::size).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range("read_at", offset, dst.len())?;
        // SAFETY: the range is inside the owned, live memory (checked above);
        // raw copies create no reference to memory the device may write.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(self.inner.ptr.add(offset), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// [`read_at`](Self::read_at) with volatile loads: every call reads the
    /// memory again, so a loop can poll for bytes the remote side writes into
    /// the region (an RDMA write, as in perftest's `ib_write_lat`), which a
    /// plain copy in a loop does not guarantee. The device gives no order
    /// among the bytes of one write: poll the last byte, or a flag written by
    /// a later operation, then read the rest.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(mr: &rpma::MrLocal<rpma::AlignedBuf>) -> rpma::Result<()> {
    /// let mut flag = [0u8];
    /// while flag[0] == 0 {
    ///     mr.read_volatile_at(63, &mut flag)?; // the last byte of a 64-byte record
    ///     std::hint::spin_loop();
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `offset + dst.len()` exceeds [`size`](Self::size).
    pub fn read_volatile_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range("read_volatile_at", offset, dst.len())?;
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: inside the owned, live memory (checked above); a raw
            // volatile load creates no reference to memory the device may write.
            #[allow(unsafe_code)]
            {
                *d = unsafe { std::ptr::read_volatile(self.inner.ptr.add(offset + i)) };
            }
        }
        Ok(())
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Errors
    /// [`Error::Inval`] when `offset + src.len()` exceeds [`size`](Self::size);
    /// [`Error::Again`] while an operation using the region is in flight (the
    /// device may be reading or writing it).
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range("write_at", offset, src.len())?;
        if Arc::strong_count(&self.inner) > 1 {
            return Err(self.held_error("write_at"));
        }
        // SAFETY: as in read_at; `&mut self` excludes local concurrent access.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.inner.ptr.add(offset), src.len())
        };
        Ok(())
    }

    /// Advises the device about a range (`rpma_mr_advise`, `ibv_advise_mr`),
    /// e.g. to prefetch an ODP region.
    ///
    /// # Errors
    /// * [`Error::Inval`] when the range exceeds the region (checked here,
    ///   librpma leaves it to the provider), is longer than 4 GiB - 1, or the
    ///   provider reports `EINVAL`/`EFAULT`;
    /// * [`Error::NoSupp`] when the provider does not implement advice
    ///   (`EOPNOTSUPP`, e.g. Soft-RoCE);
    /// * [`Error::Provider`] for any other errno.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice, flags: AdviseFlags) -> Result<()> {
        self.check_range("advise", offset, len)?;
        let len32 = u32::try_from(len).map_err(|_| Error::inval(format!("advise: length {len} exceeds u32::MAX")))?;
        let adv = match advice {
            Advice::Prefetch => 0,
            Advice::PrefetchWrite => 1,
            Advice::PrefetchNoFault => 2,
        };
        self.inner.mr.advise(self.inner.mr.addr(), offset as u64, len32, adv, flags.bits()).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => {
                    Error::nosupp(format!("ibv_advise_mr is not supported by {}", self.inner.peer.device_name()))
                }
                Some(libc::EINVAL) | Some(libc::EFAULT) => {
                    Error::inval(format!("ibv_advise_mr rejected the range or advice: {e}"))
                }
                _ => Error::provider_raw("ibv_advise_mr", e),
            }
        })
    }

    /// Deregisters the region (`rpma_mr_dereg`) and returns the memory.
    ///
    /// Dropping an `MrLocal` deregisters too (logging failures), once no
    /// operation using it is in flight any more; `dereg` reports failures.
    ///
    /// # Errors
    /// [`DeregError`] holding the region, still registered and usable:
    /// [`Error::Again`] while operations using it are in flight;
    /// [`Error::Provider`] when `ibv_dereg_mr` fails (e.g. `EBUSY` while a
    /// memory window is bound).
    pub fn dereg(self) -> std::result::Result<M, DeregError<M>> {
        let parts = self.into_parts("dereg").map_err(|(mr, error)| DeregError { mr, error })?;
        let MrParts { mr, peer, usage, ptr, len, odp, mem } = parts;
        match mr.dereg() {
            Ok(()) => Ok(mem),
            Err((mr, e)) => Err(DeregError {
                error: Error::provider_raw("ibv_dereg_mr", e),
                mr: MrLocal::from_parts(MrParts { mr, peer, usage, ptr, len, odp, mem }),
            }),
        }
    }
}

/// A registration kept alive by a memory window bound over it.
pub(crate) trait RegionHold: Send + Sync {
    fn mr(&self) -> &Mr;
    /// The count of windows bound over the region.
    fn windows(&self) -> &AtomicUsize;
}

impl<M: RegMemory + Send + Sync> RegionHold for MrInner<M> {
    fn mr(&self) -> &Mr {
        &self.mr
    }
    fn windows(&self) -> &AtomicUsize {
        &self.windows
    }
}

impl<M: RegMemory + Send + Sync + 'static> MrLocal<M> {
    /// A reference that keeps the registration and memory alive while an
    /// operation is in flight.
    pub(crate) fn hold(&self) -> crate::inflight::Hold {
        self.inner.clone()
    }

    /// The same, with access to the registration.
    pub(crate) fn region_hold(&self) -> Arc<dyn RegionHold> {
        self.inner.clone()
    }
}

impl MrLocal<crate::memory::MappedFile> {
    /// Makes the mapped file's contents durable (`msync`), e.g. after the
    /// remote side wrote into it (GPSPM).
    ///
    /// # Errors
    /// [`Error::Provider`] with the errno of `msync`.
    pub fn persist(&self) -> Result<()> {
        self.inner.mem.persist()
    }
}

/// A memory region of the remote side (librpma's `rpma_mr_remote`), decoded
/// from its descriptor.
///
/// ```
/// let desc = [7, 6, 5, 4, 3, 2, 1, 0, 0xf, 0xe, 0xd, 0xc, 0xb, 0xa, 9, 8, 0x13, 0x12, 0x11, 0x10, 0x21];
/// let mr = rpma::MrRemote::from_descriptor(&desc)?;
/// assert_eq!(mr.size(), 0x08090a0b0c0d0e0f);
/// assert_eq!(mr.rkey(), 0x10111213);
/// assert_eq!(mr.flush_type(), rpma::Usage::FLUSH_TYPE_PERSISTENT);
/// # Ok::<(), rpma::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrRemote {
    addr: u64,
    size: u64,
    rkey: u32,
    usage: Usage,
}

impl MrRemote {
    /// Decodes a descriptor received from the remote side
    /// (`rpma_mr_remote_from_descriptor`). Bytes after the first 21 are
    /// ignored, as librpma does.
    ///
    /// # Errors
    /// [`Error::Inval`] when `desc` is shorter than 21 bytes or its usage
    /// byte is 0.
    pub fn from_descriptor(desc: &[u8]) -> Result<MrRemote> {
        let d = wire::decode_mr(desc)?;
        Ok(MrRemote { addr: d.addr, size: d.size, rkey: d.rkey, usage: Usage::from_bits_retain(d.usage as u16) })
    }

    /// Size of the remote region in bytes (`rpma_mr_remote_get_size`).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The remote address of the region's start.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The usage the remote side registered it for.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    #[inline]
    pub(crate) fn check_range(&self, what: &str, offset: u64, len: u64) -> Result<()> {
        check_within(what, "remote", offset, len, self.size)
    }

    /// The flush types the region supports, as `Usage` bits
    /// (`rpma_mr_remote_get_flush_type`).
    pub fn flush_type(&self) -> Usage {
        self.usage & (Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librpma's table (`tests/unit/peer/peer-mr_reg.c`), each flag alone,
    /// without native flush: (usage, IB access, iWARP access).
    #[test]
    fn usage_table_single_flags() {
        let lw = Access::LOCAL_WRITE;
        let rw = Access::REMOTE_WRITE;
        let rr = Access::REMOTE_READ;
        let table = [
            (Usage::READ_SRC, rr, rr),
            (Usage::READ_DST, lw, lw | rw),
            (Usage::WRITE_SRC, lw, lw),
            (Usage::WRITE_DST, rw | lw, rw | lw),
            (Usage::FLUSH_TYPE_VISIBILITY, rr, rr),
            (Usage::FLUSH_TYPE_PERSISTENT, rr, rr),
            (Usage::SEND, Access::empty(), Access::empty()),
            (Usage::RECV, lw, lw),
        ];
        for (u, ib, iwarp) in table {
            assert_eq!(usage_to_access(u, false, false), ib, "{u:?} on IB");
            assert_eq!(usage_to_access(u, true, false), iwarp, "{u:?} on iWARP");
        }
    }

    #[test]
    fn usage_table_native_flush() {
        assert_eq!(usage_to_access(Usage::FLUSH_TYPE_VISIBILITY, false, true), Access::FLUSH_GLOBAL);
        assert_eq!(usage_to_access(Usage::FLUSH_TYPE_PERSISTENT, false, true), Access::FLUSH_PERSISTENT);
        assert_eq!(
            usage_to_access(Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT, false, true),
            Access::FLUSH_GLOBAL | Access::FLUSH_PERSISTENT
        );
        assert_eq!(
            usage_to_access(Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT, false, true),
            Access::REMOTE_READ | Access::FLUSH_PERSISTENT
        );
        // Everything else is unaffected by native flush.
        for u in [Usage::READ_SRC, Usage::READ_DST, Usage::WRITE_SRC, Usage::WRITE_DST, Usage::SEND, Usage::RECV] {
            assert_eq!(usage_to_access(u, false, true), usage_to_access(u, false, false));
        }
    }

    #[test]
    fn usage_table_combinations() {
        let librpma_all = Usage::all() - Usage::MW_BIND;
        assert_eq!(
            usage_to_access(librpma_all, false, false),
            Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
        );
        assert_eq!(
            usage_to_access(Usage::MW_BIND | Usage::READ_SRC, false, false),
            Access::MW_BIND | Access::REMOTE_READ
        );
        assert_eq!(usage_to_access(Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT, false, false), Access::REMOTE_READ);
        assert_eq!(usage_to_access(Usage::SEND | Usage::RECV, false, false), Access::LOCAL_WRITE);
        assert_eq!(
            usage_to_access(Usage::READ_SRC | Usage::WRITE_DST, false, false),
            Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
        );
        assert_eq!((Usage::all() - Usage::MW_BIND).bits(), 0xff, "librpma's 8 flags, same bits");
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
