//! The operations on a local registration: registering, descriptors,
//! bounds-checked copies, deregistration and the holds in-flight operations
//! keep.

use super::ranges::range_busy;
use super::*;
use crate::error::RangeUse;
use crate::inflight::book::Book;
use crate::inflight::{Held, Hold, Holding};
use std::mem::MaybeUninit;
use std::ptr::NonNull;

impl<M: RegMemory> MrLocal<M> {
    /// Whether the registered memory is persistent memory
    /// ([`RegMemory::is_pmem`]: a file mapped with `MAP_SYNC`,
    /// [`MappedFile::is_pmem`](crate::MappedFile::is_pmem)): only then may a
    /// server tell its writers
    /// [`set_direct_write_to_pmem`](crate::PeerCfg::set_direct_write_to_pmem).
    pub fn is_pmem(&self) -> bool {
        self.inner.mem.is_pmem()
    }

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
    pub fn reg(peer: &Peer, mem: M, usage: Usage) -> Result<MrLocal<M>> {
        Self::reg_new(peer, mem, usage, false)
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
    pub fn reg_zero_based(peer: &Peer, mem: M, usage: Usage) -> Result<MrLocal<M>> {
        Self::reg_new(peer, mem, usage, true)
    }

    /// [`reg`](Self::reg) and [`reg_zero_based`](Self::reg_zero_based).
    /// The region's `Arc` is allocated before the verbs call and, on
    /// success, its parts are written straight into it; a failed call goes
    /// to [`reg_retry`](Self::reg_retry), out of line.
    #[inline(always)]
    fn reg_new(peer: &Peer, mut mem: M, usage: Usage, zero_based: bool) -> Result<MrLocal<M>> {
        let (ptr, len) = mem.as_mut_ptr_len();
        let iova = zero_based.then(|| ptr as u64 & (rpma_sys::page_size() as u64 - 1));
        let access = check_register(peer, len, usage)?;
        let slot = Arc::new(MaybeUninit::uninit());
        // SAFETY: the region keeps `mem` alive and unmoved until `Mr::dereg`
        // succeeded, and leaks it otherwise (see `register_checked`).
        let mr = match unsafe { reg_mr(peer, ptr, len, iova, access) } {
            Ok(mr) => mr,
            Err(e) => return Self::reg_retry(slot, peer, mem, usage, access, iova, e),
        };
        let region = MrLocal::fill(slot, MrParts { mr, peer: peer.clone(), usage, ptr, len, odp: false, mem });
        log_registered(region.sys(), len, ptr, usage);
        Ok(region)
    }

    /// [`reg_new`](Self::reg_new)'s failed verbs call: the ODP retry, or
    /// the error.
    #[cold]
    #[inline(never)]
    fn reg_retry(
        slot: Arc<MaybeUninit<MrInner<M>>>,
        peer: &Peer,
        mut mem: M,
        usage: Usage,
        access: Access,
        iova: Option<u64>,
        e: std::io::Error,
    ) -> Result<MrLocal<M>> {
        let (ptr, len) = mem.as_mut_ptr_len();
        let (mr, odp) = reg_failed(peer, ptr, len, iova, access, e)?;
        log_registered(&mr, len, ptr, usage);
        Ok(MrLocal::fill(slot, MrParts { mr, peer: peer.clone(), usage, ptr, len, odp, mem }))
    }

    /// Whether the region was registered zero-based
    /// ([`reg_zero_based`](MrLocal::reg_zero_based)): its descriptor then
    /// offers offsets from 0, not virtual addresses; for checks and logs.
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

    /// Whether the region was registered with On-Demand Paging (asked
    /// for, or the fallback `MrLocal::reg` takes when pinning fails): its
    /// pages are faulted in by the device, so the first operations on it
    /// are slower; for reports and tuning.
    pub fn is_odp(&self) -> bool {
        self.inner.odp
    }

    /// The registration's local key (`ibv_mr.lkey`): for work requests
    /// built outside rpma over the same registration (raw verbs code that
    /// shares the peer's protection domain), and for logs.
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
    /// The usage byte holds librpma's eight flags only ([`Usage::LIBRPMA`]):
    /// for a region with [`Usage::REMOTE_ATOMIC`] send
    /// [`descriptor_ext`](Self::descriptor_ext) instead, or the remote side
    /// will not know it may use atomics.
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

    /// The descriptor for an rpma peer: [`descriptor`](Self::descriptor)'s
    /// 21 bytes, followed, only when the region has a usage librpma's byte
    /// cannot hold ([`Usage::REMOTE_ATOMIC`]), by rpma's 2-byte extension:
    /// the tag `0xE1` and the usage's second byte (`0x02` for
    /// `REMOTE_ATOMIC`), [`MR_DESCRIPTOR_EXT_SIZE`](crate::MR_DESCRIPTOR_EXT_SIZE)
    /// bytes in all. For every librpma-compatible usage it is the 21 bytes
    /// of `descriptor`, byte for byte.
    ///
    /// A C librpma peer accepts the extended form (it reads the first 21
    /// bytes and ignores the rest) and sees the region's librpma usages; it
    /// refuses it when `REMOTE_ATOMIC` is the only usage (usage byte 0).
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(peer: &rpma::Peer) -> rpma::Result<()> {
    /// use rpma::{AlignedBuf, MrLocal, MrRemote, Usage};
    /// let counter = MrLocal::reg(peer, AlignedBuf::new(4096)?, Usage::READ_SRC | Usage::REMOTE_ATOMIC)?;
    /// let desc = counter.descriptor_ext(); // 23 bytes
    /// assert_eq!(&desc[..21], &counter.descriptor()[..]);
    /// assert!(MrRemote::from_descriptor(&desc)?.usage().contains(Usage::REMOTE_ATOMIC));
    /// # Ok(()) }
    /// ```
    ///
    /// # Security
    /// As [`descriptor`](Self::descriptor).
    pub fn descriptor_ext(&self) -> Vec<u8> {
        let [lo, hi] = self.inner.usage.bits().to_le_bytes();
        wire::encode_mr_ext(
            &MrDesc {
                addr: self.inner.mr.device_addr(),
                size: self.inner.len as u64,
                rkey: self.inner.mr.rkey(),
                usage: lo,
            },
            hi,
        )
    }

    #[inline]
    pub(crate) fn check_range(&self, what: &Named, offset: usize, len: usize) -> Result<()> {
        check_within::<false>(what, offset as u64, len as u64, self.inner.len as u64)
    }

    pub(crate) fn sys(&self) -> &Mr {
        &self.inner.mr
    }

    /// The registration and memory, when nothing holds them; else the
    /// region back with the error saying what holds it.
    pub(crate) fn into_parts(self, what: &str) -> std::result::Result<MrParts<M>, (MrLocal<M>, Error)> {
        if self.inner.book.ops() != 0 {
            let e = self.held_error(what);
            return Err((self, e));
        }
        match Arc::try_unwrap(self.inner.into_arc()) {
            Ok(inner) => Ok(inner.into_parts()),
            Err(inner) => {
                let mr = MrLocal { inner: Owner::new(inner) };
                let e = mr.held_error(what);
                Err((mr, e))
            }
        }
    }

    /// The region in `slot`, a new allocation nothing else refers to,
    /// written in place (`Arc::new` of a built value copies it from the
    /// stack; `Arc::get_mut`'s atomics would keep the stores behind them).
    #[inline(always)]
    fn fill(slot: Arc<MaybeUninit<MrInner<M>>>, p: MrParts<M>) -> MrLocal<M> {
        let inner = Arc::into_raw(slot).cast_mut().cast::<MrInner<M>>();
        // SAFETY: `slot` came from `Arc::new` in `reg_new` (directly or
        // through `reg_retry`) and was never cloned, so `inner` is the only
        // pointer to its value: writing through it races with nothing. The
        // whole value is written, then `from_raw` takes the allocation back
        // as an `Arc<MrInner<M>>`, which `Arc::from_raw` allows for a type
        // of the same size and alignment (`MaybeUninit<T>` has `T`'s).
        unsafe {
            inner.write(MrInner::new(p));
            MrLocal { inner: Owner::new(Arc::from_raw(inner)) }
        }
    }

    pub(crate) fn from_parts(parts: MrParts<M>) -> MrLocal<M> {
        MrLocal { inner: Owner::new(Arc::new(MrInner::new(parts))) }
    }

    /// Number of posted operations using this region that have not completed
    /// yet (0 when it is idle).
    pub fn in_flight(&self) -> usize {
        self.inner.book.ops().saturating_sub(self.bound_windows())
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
        Error::region_busy(ops as u64, mws as u64, format!("{what}: the region is busy: {}", parts.join("; ")))
    }

    /// The device address of `offset` in the region, for an SGE.
    pub(crate) fn sge(&self, offset: usize, len: u32) -> rpma_sys::wr::Sge {
        rpma_sys::wr::Sge { addr: self.inner.mr.device_addr() + offset as u64, length: len, lkey: self.inner.mr.lkey() }
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
        self.check_range(&Named::new(Arg::Range, "advise"), offset, len)?;
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
        let mut region = self;
        // Deregistered in place, so a failure hands the region back as it
        // is, and success frees the allocation reading only the memory and
        // the peer out of it.
        let idle = region.inner.book.ops() == 0;
        let Some(inner) = Arc::get_mut(region.inner.arc_mut()).filter(|_| idle) else {
            let error = region.held_error("dereg");
            return Err(DeregError { mr: region, error });
        };
        // SAFETY: after Ok, `inner.mr` is never touched again: the region is
        // only unwrapped by `into_mem` (which skips MrInner's Drop) or leaked.
        if let Err(e) = unsafe { inner.mr.dereg_in_place() } {
            return Err(DeregError { error: Error::provider_raw("ibv_dereg_mr", e), mr: region });
        }
        // `get_mut` proved this the only reference (rpma makes no `Weak`
        // to a region) and `self` is owned, so this unwraps; were it shared
        // after all, the region is leaked, not dropped (its Drop would
        // deregister again).
        match Arc::try_unwrap(region.inner.into_arc()) {
            Ok(inner) => Ok(inner.into_mem()),
            Err(shared) => {
                std::mem::forget(shared);
                unreachable!("dereg: a region Arc::get_mut found unique was shared")
            }
        }
    }
}

/// A registration kept alive by a memory window bound over it.
pub(crate) trait RegionHold: Held {
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
    /// A hold on the region for an operation that uses `len` bytes at
    /// `offset` (checked by the caller) as `by` says: the range in use, and
    /// the registration and memory alive (the book counts the operation),
    /// until the hold ends.
    ///
    /// # Errors
    /// [`Error::Again`] with [`Detail::RangeBusy`] while the CPU uses the
    /// range (`what` names the operation's side).
    #[inline(always)]
    pub(crate) fn hold_range(&self, what: &Named, offset: usize, len: usize, by: RangeUse) -> Holding {
        let book = NonNull::new(Arc::as_ptr(&self.inner).cast_mut()).map(NonNull::cast::<Book>);
        let Some(book) = book else { return Err(Box::new(range_busy(what, offset, len, by))) };
        // SAFETY: the book is the first field of this region (`repr(C)`),
        // reached with the provenance of `Arc::as_ptr`; the region lives
        // while this owner does, and when the owner is dropped with
        // operations in flight it leaves its reference to the book, whose
        // release of the last one drops it (`Owner`'s drop).
        match unsafe { Book::hold(book, offset, len, by.into()) } {
            Ok(range) => Ok(Hold::Range(range)),
            Err(found) => Err(Box::new(range_busy(what, offset, len, found))),
        }
    }

    /// A hold on the region without a range (its operation counted, 0
    /// bytes in use): for a connection's own region, whose bytes no caller
    /// stages or reads, and the region of a memory window's bind.
    #[inline(always)]
    pub(crate) fn keep(&self) -> Holding {
        const KEEP: Named = Named::new(Arg::Region, "the operation's region");
        self.hold_range(&KEEP, 0, 0, RangeUse::DeviceReads)
    }

    /// The same, with access to the registration.
    pub(crate) fn region_hold(&self) -> Arc<dyn RegionHold> {
        (*self.inner).clone()
    }
}

impl<M: crate::memory::Persist> MrLocal<M> {
    /// Makes the region's contents durable, e.g. after the remote side
    /// wrote into it (GPSPM): for a mapping as
    /// [`MappedFile::persist`](crate::MappedFile::persist), a CPU cache
    /// flush on persistent memory, `msync` elsewhere; for
    /// [`Memory`](crate::Memory)'s DRAM a range check.
    ///
    /// # Errors
    /// As [`Persist::persist_range`](crate::memory::Persist::persist_range).
    pub fn persist(&self) -> Result<()> {
        self.inner.mem.persist_range(0, self.size())
    }

    /// [`persist`](Self::persist) of `len` bytes at `offset` only, e.g. the
    /// range a GPSPM flush request names.
    ///
    /// # Errors
    /// [`Error::Inval`] when the range exceeds the region; as
    /// [`Persist::persist_range`](crate::memory::Persist::persist_range).
    pub fn persist_range(&self, offset: usize, len: usize) -> Result<()> {
        self.inner.mem.persist_range(offset, len)
    }
}

/// The owner's reference to its region: dropped as any `Arc`, unless
/// operations are still in flight (which hold no reference count: the
/// region's book counts them); then left to the book, whose release of the
/// last one drops it ([`free_region`]).
pub(super) struct Owner<M: RegMemory>(ManuallyDrop<Arc<MrInner<M>>>);

impl<M: RegMemory> Owner<M> {
    pub(super) fn new(region: Arc<MrInner<M>>) -> Owner<M> {
        Owner(ManuallyDrop::new(region))
    }

    /// The reference, without this value's drop.
    pub(super) fn into_arc(self) -> Arc<MrInner<M>> {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so the reference is taken once.
        unsafe { ManuallyDrop::take(&mut me.0) }
    }

    pub(super) fn arc_mut(&mut self) -> &mut Arc<MrInner<M>> {
        &mut self.0
    }
}

impl<M: RegMemory> std::ops::Deref for Owner<M> {
    type Target = Arc<MrInner<M>>;
    fn deref(&self) -> &Arc<MrInner<M>> {
        &self.0
    }
}

impl<M: RegMemory> Drop for Owner<M> {
    fn drop(&mut self) {
        // SAFETY: taken once, here (`into_arc` skips this drop).
        let region = unsafe { ManuallyDrop::take(&mut self.0) };
        if region.book.orphan() {
            // Operations in flight: the release of the last one drops this
            // reference (the book's `free`, `free_region`).
            let _ = Arc::into_raw(region);
        }
    }
}

/// A region's book's `free`: drops the reference its owner left when it
/// was dropped with operations in flight ([`Owner`]'s drop).
///
/// # Safety
/// `book` is the book of an `MrInner<M>`, with the provenance of
/// `Arc::as_ptr` (the `RangeHold`s take it so), whose owner left its
/// reference with `Arc::into_raw`; called once.
pub(super) unsafe fn free_region<M: RegMemory>(book: NonNull<Book>) {
    // SAFETY: `MrInner` is `repr(C)` with its book first, so the book's
    // address is the region's, the pointer `Arc::into_raw` returned.
    drop(unsafe { Arc::from_raw(book.as_ptr().cast_const().cast::<MrInner<M>>()) });
}
